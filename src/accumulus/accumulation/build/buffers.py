"""Large arrays a build fills again and again, kept for the next slab once done with.

A build at every element makes per slab arrays of hundreds of megabytes: each block's sums
and the slab's sums put together (``stream``). Memory new to the process costs the system a
zeroed page at its first touch (huge pages for NumPy's large arrays): a large share of the
CPU of a build at every element (measured with perf on the bench cube: docs/benchmarks.md),
for arrays whose like was freed a moment before. Large arrays given back here are handed out
again for the same shape (smaller ones are left to the allocator, which reuses them itself);
what is kept is bounded (``most_bytes``), so memory held idle stays small beside what a
build holds anyway.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np


class Buffers:
    """A bounded store of arrays nothing refers to any more, by shape and type; safe to use
    from several threads."""

    def __init__(self, most_bytes: int, least_bytes: int = 0) -> None:
        self.most_bytes = most_bytes
        self.least_bytes = least_bytes  # smaller arrays are not kept
        self._kept: list[np.ndarray] = []
        self._lock = threading.Lock()

    def __dask_tokenize__(self) -> tuple[str, int]:
        # Passed to Dask tasks, which name them by their arguments: by identity, not by
        # the arrays kept (which Dask would otherwise pickle to name every task).
        return ("accumulus.Buffers", id(self))

    def empty(self, shape: int | Sequence[int], dtype: np.dtype | str = "f8") -> np.ndarray:
        """An array of ``shape`` and ``dtype``, its values undefined: one given back, or new."""
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        dtype = np.dtype(dtype)
        with self._lock:
            for i, kept in enumerate(self._kept):
                if kept.shape == shape and kept.dtype == dtype:
                    return self._kept.pop(i)
        return np.empty(shape, dtype)

    def give(self, arrays: Sequence[np.ndarray]) -> None:
        """Keep ``arrays`` for reuse (the caller holds no other reference to them, nor to any
        view of them); beyond ``most_bytes`` kept, the oldest are let go."""
        with self._lock:
            for array in arrays:
                if (
                    array.flags.c_contiguous
                    and array.flags.owndata
                    and array.nbytes >= self.least_bytes
                ):
                    self._kept.append(array)
            while sum(a.nbytes for a in self._kept) > self.most_bytes:
                self._kept.pop(0)
