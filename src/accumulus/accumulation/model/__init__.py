"""What an accumulation group is: ZEP 5's layout and schemas (``spec``), where entries end
(``positions``), the sums each statistic needs (``statistics``, ``sums``), the group as read
from a snapshot (``groups``), what it was built from (``record``), its weights
(``weights``), a sidecar store holding it (``sidecar``), and which of its chunks cannot be
read (``chunk_check``)."""
