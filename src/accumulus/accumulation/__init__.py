"""ZEP 5 chunk-level accumulations: the model (``model``), building them (``build``) and
answering queries from them (``query``). ``build`` and ``query`` use the model and never each
other."""
