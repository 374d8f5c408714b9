"""How much memory one query may use, and how its raw reads are cut to stay within it.

A query reads raw data in pieces of whole chunks, a few pieces at once, and decodes and sums
each piece slab by slab. Its peak memory is then about, per reading thread: the piece's stored
values, the chunks zarr is decoding into them, and one slab's float64 working arrays. The
budget below sets the thread count, piece size and slab size from one number, so that a full
scan of any cube stays near that number whatever the cube's size.

The floor is one chunk: zarr decodes whole chunks, so a piece is never smaller than one chunk,
and a budget smaller than about four chunks reads with one thread.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_MEMORY_BYTES = 256 * 2**20
MAX_READ_THREADS = 8
# Working memory per value while a slab is decoded and summed: the float64 values, the
# validity mask, the cleaned values and one float64 summand per sum (two for a mean) plus
# NumPy's temporaries. Measured with tracemalloc on a weighted mean (about 40 B).
WORK_BYTES_PER_VALUE = 48
_MIN_SLAB_VALUES = 4096


@dataclass(frozen=True)
class ReadBudget:
    """How a query reads raw data: ``threads`` pieces at once, each of at most
    ``piece_bytes`` stored bytes (whole chunks, at least one), summed ``slab_values`` values
    at a time; ``cache_bytes`` of chunks kept so that no chunk is fetched twice."""

    memory_bytes: int
    threads: int
    piece_bytes: int
    slab_values: int
    cache_bytes: int


def read_budget(memory_bytes: int, chunk_bytes: int) -> ReadBudget:
    """The read plan for a query allowed ``memory_bytes`` on an array whose largest chunk holds
    ``chunk_bytes`` stored (uncompressed) bytes."""
    memory_bytes = max(1, memory_bytes)
    cache = memory_bytes // 8
    rest = memory_bytes - cache
    # Each thread holds a piece plus the chunks being decoded into it (about twice the piece)
    # and a slab: a quarter of its share for the piece, half for the slab.
    threads = max(1, min(MAX_READ_THREADS, rest // max(1, 4 * chunk_bytes)))
    share = rest // threads
    return ReadBudget(
        memory_bytes=memory_bytes,
        threads=threads,
        piece_bytes=max(chunk_bytes, share // 4),
        slab_values=max(_MIN_SLAB_VALUES, share // 2 // WORK_BYTES_PER_VALUE),
        cache_bytes=cache,
    )


def slabs(shape: tuple[int, ...], max_values: int) -> list[tuple[slice, ...]]:
    """Index boxes that cut an array of ``shape`` into C-contiguous slabs of at most
    ``max_values`` values (one value at least): single indices along the leading axes, runs
    along one axis, whole trailing axes."""
    ndim = len(shape)
    # The first axis whose trailing block fits: runs along it, whole axes after it.
    axis, inner = ndim - 1, 1
    for a in range(ndim - 1, -1, -1):
        if inner * shape[a] > max_values:
            break
        axis, inner = a - 1, inner * shape[a]
    if axis < 0:
        return [tuple(slice(None) for _ in shape)]
    step = max(1, max_values // inner)
    boxes: list[tuple[slice, ...]] = [()]
    for a in range(axis):
        boxes = [(*b, slice(i, i + 1)) for b in boxes for i in range(shape[a])]
    runs = [slice(i, min(i + step, shape[axis])) for i in range(0, shape[axis], step)]
    boxes = [(*b, r) for b in boxes for r in runs]
    return [(*b, *(slice(None) for _ in range(axis + 1, ndim))) for b in boxes]
