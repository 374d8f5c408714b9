"""Answering a query: the checked request (``request``), the plan of accumulation and raw
reads (``plan``, ``shapes`` for shapes, ``longitude`` for boxes across the date line), what
it costs (``cost``) within the memory allowed (``budget``), its reads performed
(``execute``), the answer (``answer``) and what it selected, in words (``selection``)."""
