"""Chunk boundaries per dimension, for regular and rectilinear (ZEP 3) chunk grids.

A dimension of size N cut into chunks is described by its edges
``b[0] = 0 < b[1] < ... < b[n] = N``: chunk ``i`` holds indices ``[b[i], b[i+1])``. A regular
grid with a partial last chunk is the special case ``b[i] = min(i * c, N)``.

ZEP 3 writes a grid as one entry per dimension, an integer (regular) or a list of chunk
sizes adding up to the dimension's length: ``[[5, 5, 5, 15, 15, 20, 35], 10]`` on a 100 x 100
array has edges ``[0, 5, 10, 15, 30, 45, 65, 100]`` and ``[0, 10, ..., 100]``, and index
(17, 17) is in chunk (3, 1) at (2, 2) (``locate``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

import zarr
from zarr.core.chunk_grids import ChunkGrid, FixedDimension


@dataclass(frozen=True)
class ChunkBounds:
    """The chunk edges along one dimension."""

    edges: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.edges or self.edges[0] != 0:
            raise ValueError(f"chunk edges must start at 0, got {self.edges}")
        if any(b <= a for a, b in zip(self.edges, self.edges[1:], strict=False)):
            raise ValueError(f"chunk edges must increase strictly, got {self.edges}")

    @classmethod
    def regular(cls, size: int, chunk: int) -> ChunkBounds:
        if chunk <= 0:
            raise ValueError(f"chunk size must be positive, got {chunk}")
        return cls((*range(0, size, chunk), size) if size else (0,))

    @classmethod
    def from_sizes(cls, sizes: Sequence[int]) -> ChunkBounds:
        if any(s <= 0 for s in sizes):
            raise ValueError(f"chunk sizes must be positive, got {list(sizes)}")
        return cls((0, *accumulate(sizes)))

    @property
    def size(self) -> int:
        return self.edges[-1]

    @property
    def n_chunks(self) -> int:
        return len(self.edges) - 1

    @property
    def sizes(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.edges, self.edges[1:], strict=False))

    @property
    def is_regular(self) -> bool:
        """True when every chunk but the last has one size and the last is not larger."""
        sizes = self.sizes
        return len(sizes) <= 1 or (len(set(sizes[:-1])) == 1 and sizes[-1] <= sizes[0])

    def chunk_of(self, index: int) -> tuple[int, int]:
        """(chunk number, offset inside the chunk) of a raw index."""
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} outside [0, {self.size})")
        chunk = bisect.bisect_right(self.edges, index) - 1
        return chunk, index - self.edges[chunk]

    def chunks_overlapping(self, start: int, stop: int) -> range:
        """The chunks that hold any index in [start, stop)."""
        if stop <= start:
            return range(0)
        first = bisect.bisect_right(self.edges, start) - 1
        last = bisect.bisect_left(self.edges, stop) - 1
        return range(first, last + 1)

    def strided_edges(self, stride: int) -> tuple[int, ...]:
        """Edges every ``stride`` chunks, after the first: ``b[(k+1)*stride]`` for
        ``0 <= k < n // stride``. These are where ZEP 5 accumulation entries end."""
        if stride <= 0:
            raise ValueError(f"stride must be positive, got {stride}")
        return tuple(self.edges[(k + 1) * stride] for k in range(self.n_chunks // stride))


ChunkShape = Sequence[int | Sequence[int]]


def bounds_from_chunk_shape(
    chunk_shape: ChunkShape, shape: Sequence[int]
) -> tuple[ChunkBounds, ...]:
    """Chunk bounds of an array of ``shape`` from a ZEP 3 ``chunk_shape``: per dimension an
    integer (regular chunks) or a list of positive sizes that add up to the dimension's length.
    Raises ValueError naming the dimension (by position) that is wrong."""
    if len(chunk_shape) != len(shape):
        raise ValueError(
            f"chunk_shape has {len(chunk_shape)} entries for an array of {len(shape)} dimensions"
        )
    bounds = []
    for axis, (chunks, size) in enumerate(zip(chunk_shape, shape, strict=True)):
        if isinstance(chunks, int):
            if chunks <= 0:
                raise ValueError(f"dimension {axis}: chunk size must be positive, got {chunks}")
            bounds.append(ChunkBounds.regular(size, chunks))
            continue
        sizes = list(chunks)
        if any(not isinstance(c, int) or c <= 0 for c in sizes):
            raise ValueError(
                f"dimension {axis}: chunk sizes must be positive integers, got {sizes}"
            )
        if sum(sizes) != size:
            raise ValueError(
                f"dimension {axis}: chunk sizes add up to {sum(sizes)}, but its length is {size}"
            )
        bounds.append(ChunkBounds.from_sizes(sizes))
    return tuple(bounds)


def array_bounds(array: zarr.Array) -> tuple[ChunkBounds, ...]:
    """Chunk bounds of every dimension of a zarr array (regular or rectilinear)."""
    grid = ChunkGrid.from_metadata(array.metadata)
    return tuple(ChunkBounds.from_sizes(sizes) for sizes in grid.chunk_sizes)


def locate(
    bounds: Sequence[ChunkBounds], index: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(chunk coordinates, offset inside that chunk) of an N-dimensional raw index."""
    pairs = [b.chunk_of(i) for b, i in zip(bounds, index, strict=True)]
    return tuple(c for c, _ in pairs), tuple(o for _, o in pairs)


def regular_chunk_size(array: zarr.Array, axis: int) -> int | None:
    """The nominal chunk size along ``axis`` when the grid is regular there, else None.

    Unlike the bounds, this tells a partial last chunk (5 of 40) from a full small one."""
    dimension = ChunkGrid.from_metadata(array.metadata).dimensions[axis]
    return dimension.size if isinstance(dimension, FixedDimension) else None


def last_chunk_is_partial(array: zarr.Array, axis: int) -> bool:
    """True when the last chunk along ``axis`` is declared larger than the data it holds.

    Regular grids have such a chunk when the length is not a multiple of the chunk size;
    rectilinear grids when the last chunk size reaches past the array's length (zarr allows
    it, and an append that fills a calendar month declares the whole month this way). The
    next append along ``axis`` then writes into that chunk."""
    dimension = ChunkGrid.from_metadata(array.metadata).dimensions[axis]
    n = dimension.nchunks
    return n > 0 and dimension.chunk_size(n - 1) > dimension.data_size(n - 1)


def declared_chunk_sizes(array: zarr.Array, axis: int) -> tuple[int, ...]:
    """The sizes of the chunks along ``axis`` as the grid declares them: ``array_bounds``'
    sizes, except that a partial last chunk keeps its declared size (what an append along
    ``axis`` starts from, see ``chunking.append_chunk_sizes``)."""
    dimension = ChunkGrid.from_metadata(array.metadata).dimensions[axis]
    return tuple(dimension.chunk_size(i) for i in range(dimension.nchunks))
