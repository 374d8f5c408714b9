"""Writing new values along the append dimension: whole chunks, concurrently, out of sight.

Each array keeps, in memory, the values from its first not-yet-complete chunk on. As soon as
chunks are complete (its ``grid.AppendGrid`` says where chunk edges fall) they are
written in one zarr call, in a thread pool, while the next granule is read; zarr writes the
chunks of one call concurrently too. Writes go through a view of the array whose shape (and,
for variable chunks, whose grid) reaches the new values: the stored metadata keeps the
committed shape, so a reader never sees these chunks before the commit resizes the arrays.
The first write of a run starts inside the old partial last chunk: zarr reads that chunk and
writes it back whole, its old values unchanged (the rewrite is one atomic object replacement
on a local directory and on S3). Every other write covers whole chunks as far as the view
reaches, so zarr never reads a new chunk back: whatever a killed run left there, even under
another grid, is simply replaced. In a transaction (an icechunk session, which refuses chunks
past an array's stored shape) the stored shape grows before each write instead: no reader
sees the session before its commit.

For a sharded array the grid is the shards' (``cube_state.chunk_along``): a shard is written
once it is full, and a partial one is rewritten whole by zarr, which reads it back and keeps
the inner chunks the write does not cover. Those are either committed values (before the
start of the write) or past the view's shape, where no reader looks: what a killed run left
there is replaced when the array grows over it. Writes in flight never share a shard. The
append's store lays a rewritten shard out so that its stored inner chunks keep their offsets
(``stores/stable_shards.py``): a reader holding the old index reads right values.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import zarr
from zarr.core.metadata import ArrayMetadata

from accumulus.grid import AppendGrid
from accumulus.stores.arrays import array_with, dimension_names, store_metadata

WRITE_THREADS = 4
# Bytes of values waiting in the pool before the reader waits for writes to catch up.
PENDING_BYTES = 256 * 2**20
# Bytes of values one write submits (whole chunks, at least one).
WRITE_BYTES = 64 * 2**20


@dataclass
class _Tail:
    """An array's values not yet written as whole chunks, from index ``start`` on."""

    array: zarr.Array
    axis: int
    grid: AppendGrid  # where its chunks fall along the append dimension
    start: int
    parts: list[np.ndarray] = field(default_factory=list)

    def values(self) -> np.ndarray:
        if len(self.parts) > 1:
            self.parts = [np.concatenate(self.parts, axis=self.axis)]
        return self.parts[0]

    def metadata_at(self, length: int) -> ArrayMetadata:
        """The array's metadata once it is ``length`` long along the append dimension."""
        return self.grid.metadata_at(self.array.metadata, self.axis, length)

    def take(self, end: int) -> np.ndarray:
        """Remove and return the values before index ``end``, in an array of their own:
        only the parts that hold them are joined, and a block of a granule is not kept
        alive by a write of some of its steps."""
        pieces, need = [], end - self.start
        while need > 0:
            part = self.parts[0]
            length = part.shape[self.axis]
            if length <= need:
                pieces.append(self.parts.pop(0))
            else:
                pieces.append(_along(part, self.axis, slice(None, need)))
                self.parts[0] = _along(part, self.axis, slice(need, None))
            need -= min(length, need)
        self.start = end
        head = pieces[0] if len(pieces) == 1 else np.concatenate(pieces, axis=self.axis)
        return _own(head)

    def detach(self) -> None:
        """Keep the values not yet written in arrays of their own (less than a chunk), so
        that the block of a granule they came from can be freed."""
        self.parts = [_own(part) for part in self.parts]


def _along(values: np.ndarray, axis: int, part: slice) -> np.ndarray:
    return values[(slice(None),) * axis + (part,)]


def _own(values: np.ndarray) -> np.ndarray:
    """``values``, copied when they are a view of a larger array."""
    return values.copy() if values.base is not None else values


class UnpublishedWriter:
    """Appends values to ``arrays`` along ``dim`` from index ``start``, in chunks that fall
    where ``grids`` (per array) say, unpublished until ``resize`` (a step of the commit)."""

    def __init__(
        self,
        arrays: Mapping[str, zarr.Array],
        dim: str,
        start: int,
        grids: Mapping[str, AppendGrid],
        *,
        grow_first: bool = False,
    ) -> None:
        self.size = start
        # In a transaction (an icechunk session) nothing is seen before the commit, and
        # chunks past an array's stored shape are refused: the shape grows before a write.
        self._grow_first = grow_first
        self._tails: dict[str, _Tail] = {}
        for name, array in arrays.items():
            axis = dimension_names(array).index(dim)
            # Chunks are written even when they hold only fill values, so that every new
            # chunk exists (and write counts say exactly what an append wrote).
            writable = array.with_config({"write_empty_chunks": True})
            self._tails[name] = _Tail(writable, axis, grids[name], start)
        self._pool = ThreadPoolExecutor(WRITE_THREADS, thread_name_prefix="accumulus-write")
        self._pending: deque[tuple[Future, int]] = deque()
        self._pending_bytes = 0

    def add(self, values: Mapping[str, np.ndarray]) -> None:
        """Append a block of steps (every array, equal lengths along the dimension); what
        is held afterwards is the values of incomplete chunks and the writes in flight,
        never ``values`` themselves."""
        lengths = {v.shape[self._tails[n].axis] for n, v in values.items()}
        assert len(lengths) == 1 and set(values) == set(self._tails), "one granule, all arrays"
        self.size += lengths.pop()
        for name, tail in self._tails.items():
            tail.parts.append(values[name])
            self._write_complete(tail, tail.grid.complete_end(self.size))
            tail.detach()

    def _write_complete(self, tail: _Tail, end: int) -> None:
        """Submit the complete chunks before ``end`` in writes of about ``WRITE_BYTES``
        (whole chunks, at least one), so that what waits in the pool stays bounded."""
        step = tail.array.dtype.itemsize * math.prod(
            n for axis, n in enumerate(tail.array.shape) if axis != tail.axis
        )
        reach = max(1, WRITE_BYTES // max(step, 1))
        while tail.start < end:
            stop = tail.grid.complete_end(min(end, tail.start + reach))
            while stop <= tail.start:  # chunks longer than ``reach``: the next edge
                reach *= 2
                stop = tail.grid.complete_end(min(end, tail.start + reach))
            self._submit(tail, tail.start, tail.take(stop))

    def write_partial(self) -> None:
        """Write every array's partial last chunk (values stay buffered: the next complete
        write of that chunk needs no read)."""
        for tail in self._tails.values():
            if tail.parts:
                self._submit(tail, tail.start, tail.values())

    def resize(self) -> None:
        """Store every array's metadata grown to the values written (a step of the commit)."""
        for tail in self._tails.values():
            store_metadata(tail.array, tail.metadata_at(self.size))

    def wait(self) -> None:
        """Wait for every write; raise the first error."""
        while self._pending:
            self._finish_oldest()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def _submit(self, tail: _Tail, start: int, block: np.ndarray) -> None:
        # The view is taken now: a variable grid declares more chunks as granules arrive.
        metadata = tail.metadata_at(start + block.shape[tail.axis])
        if self._grow_first:
            store_metadata(tail.array, metadata)
        view = array_with(tail.array, metadata=metadata)
        future = self._pool.submit(_write, view, tail.axis, start, block)
        self._pending.append((future, block.nbytes))
        self._pending_bytes += block.nbytes
        while self._pending_bytes > PENDING_BYTES and len(self._pending) > 1:
            self._finish_oldest()

    def _finish_oldest(self) -> None:
        future, nbytes = self._pending.popleft()
        self._pending_bytes -= nbytes
        future.result()


def _write(view: zarr.Array, axis: int, start: int, block: np.ndarray) -> None:
    index = [slice(None)] * view.ndim
    index[axis] = slice(start, start + block.shape[axis])
    view[tuple(index)] = block
