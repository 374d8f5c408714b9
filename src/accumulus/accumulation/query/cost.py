"""What a query plan will read, known before anything is read: requests and bytes.

Every stored chunk a plan touches is fetched once and decoded whole, however little of it
the plan needs (zarr decodes whole chunks), so a plan costs its distinct chunks and their
decoded sizes: a raw chunk a box only grazes costs as much as one it covers. Each request
also costs a fixed amount, counted as ``REQUEST_BYTES`` more bytes: asking the store for an
object and handling it (an object store's round trip, a local read and zarr's work per
chunk). The query compares the plan its accumulations allow with the plain scan of the same
cells and runs the cheaper, so an accumulation never makes a question slower than a scan.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import prod

from accumulus.chunk_reader import ChunkRequest
from accumulus.grid import array_bounds
from accumulus.raw_cube import VariableInfo

# About what decoding and summing this many bytes takes, on local disk; an object store's
# round trip is worth more, but its requests are issued concurrently.
REQUEST_BYTES = 256 * 2**10


@dataclass(frozen=True)
class PlanCost:
    requests: int
    bytes: int  # decoded bytes of every chunk read

    @property
    def score(self) -> int:
        return self.bytes + REQUEST_BYTES * self.requests

    def to_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "decoded_bytes": self.bytes}

    def __str__(self) -> str:
        return f"{self.requests} chunks, {self.bytes / 2**20:.1f} MiB"


def chunks_cost(requests: Iterable[ChunkRequest]) -> PlanCost:
    """The cost of reading these chunks (distinct ones, as a plan's batch reads them)."""
    bounds = {}
    count = total = 0
    for request in requests:
        array = request.array
        path = array.store_path.path
        if path not in bounds:
            bounds[path] = array_bounds(array)
        sizes = (b.sizes[c] for b, c in zip(bounds[path], request.coords, strict=True))
        count += 1
        total += prod(sizes) * array.dtype.itemsize
    return PlanCost(count, total)


def raw_cost(var: VariableInfo, boxes: Sequence[Mapping[str, tuple[int, int]]]) -> PlanCost:
    """The cost of reading every raw chunk that holds part of any of ``boxes`` (index
    ranges), each chunk once: the cost of a plan that reads raw data only."""
    itemsize = var.array.dtype.itemsize
    per_box = [
        [
            bounds.chunks_overlapping(*box[dim])
            for dim, bounds in zip(var.dims, var.bounds, strict=True)
        ]
        for box in boxes
    ]
    if len(per_box) == 1:  # one box: no chunk is shared, count without listing them
        chunks = per_box[0]
        extents = (sum(b.sizes[c] for c in cs) for b, cs in zip(var.bounds, chunks, strict=True))
        return PlanCost(prod(len(cs) for cs in chunks), prod(extents) * itemsize)
    distinct = {coords for chunks in per_box for coords in itertools.product(*chunks)}
    total = sum(
        prod(b.sizes[c] for b, c in zip(var.bounds, coords, strict=True)) for coords in distinct
    )
    return PlanCost(len(distinct), total * itemsize)
