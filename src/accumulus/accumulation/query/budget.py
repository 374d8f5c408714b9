"""How much memory one query may use, and how its reads are cut to stay within it.

A query's chunks are fetched and decoded concurrently (``chunk_reader``): each holds its
stored bytes until it is decoded, then its values until they are summed. Raw chunks are
summed slab by slab, in float64 working arrays. The budget gives three quarters of one
number to the chunks in flight (their decoded size each, which bounds their stored bytes
too; a chunk larger than that share alone is refused before it is read) and a quarter to
the slabs of the threads summing them, so that a full scan of any cube stays near that
number whatever the cube's size. Chunks in flight get the larger share because on object
storage they are what hides the latency: the more a query has in flight, the fewer its
sequential round trips.

The default is 512 MiB, the least with which a series over 200 raw chunks of 2.4 MB goes out
in 2 round trips, in the same time where there is no latency, as its chunks are decoded at
the same pace either way (docs/benchmarks.md, "Figures behind the code").
"""

from __future__ import annotations

from dataclasses import dataclass

from accumulus.chunk_reader import CONSUMERS

DEFAULT_MEMORY_BYTES = 512 * 2**20  # the command line's --memory-mb default too
# Threads summing chunks at once (``chunk_reader``).
SUMMING_THREADS = CONSUMERS
# Working memory per value while a slab is decoded and summed: the float64 values, the
# validity mask, the cleaned values and one float64 summand per sum (two for a mean) plus
# NumPy's temporaries. Measured with tracemalloc on a weighted mean (about 40 B).
WORK_BYTES_PER_VALUE = 48
_MIN_SLAB_VALUES = 4096


@dataclass(frozen=True)
class ReadBudget:
    """How a query reads: chunks in flight hold at most ``in_flight_bytes`` (their decoded
    size each), and raw chunks are summed ``slab_values`` values at a time."""

    in_flight_bytes: int
    slab_values: int


def read_budget(memory_bytes: int) -> ReadBudget:
    """The read plan for a query allowed about ``memory_bytes``."""
    quarter = max(1, memory_bytes) // 4
    return ReadBudget(
        in_flight_bytes=max(1, memory_bytes - quarter),
        slab_values=max(_MIN_SLAB_VALUES, quarter // SUMMING_THREADS // WORK_BYTES_PER_VALUE),
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
