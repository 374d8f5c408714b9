"""Chunk grids and chunk rules: where the chunk edges of an array fall along each dimension.

A dimension of size N cut into chunks is described by its edges
``b[0] = 0 < b[1] < ... < b[n] = N``: chunk ``i`` holds indices ``[b[i], b[i+1])``. A regular
grid with a partial last chunk is the special case ``b[i] = min(i * c, N)``.

ZEP 3 writes a grid as one entry per dimension, an integer (regular) or a list of chunk
sizes adding up to the dimension's length: ``[[5, 5, 5, 15, 15, 20, 35], 10]`` on a 100 x 100
array has edges ``[0, 5, 10, 15, 30, 45, 65, 100]`` and ``[0, 10, ..., 100]``, and index
(17, 17) is in chunk (3, 1) at (2, 7) (``locate``). Zarr v3 stores such a grid as its
``rectilinear`` chunk grid.

A chunk *rule* is what a user writes after ``--chunks dim=``:

- an integer ``n``: regular chunks of ``n`` (the last one may be partial);
- a list ``31,28,31,...``: explicit chunk sizes adding up to the dimension's length;
- ``month`` or ``year``: one chunk per calendar month or year of the dimension's CF-decoded
  time coordinate, in whatever calendar it uses (``standard``, ``noleap``, ``360_day``...);
- ``per-granule`` (appends only): each appended granule is its own chunk.

The sections below: chunk bounds (``ChunkBounds``); the grid of a zarr array, read from its
metadata or given new chunk sizes (metadata only: storing it is ``stores.arrays.store_metadata``'s
job); rules over a whole dimension (``chunk_sizes``, for ``rechunk``); and appends
(``append_chunk_sizes``, and the grids ``RegularGrid`` and ``VariableGrid`` that say where
chunk edges fall as granules arrive). Calendar arithmetic is xarray's and cftime's (``.dt``
accessors, ``infer_freq``, ``date_range``), never our own.
"""

from __future__ import annotations

import bisect
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from itertools import accumulate
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.codecs import ShardingCodec
from zarr.core.chunk_grids import ChunkGrid, DimensionGrid, FixedDimension
from zarr.core.metadata import ArrayMetadata, ArrayV3Metadata
from zarr.core.metadata.v3 import RectilinearChunkGridMetadata

from accumulus.errors import AccumulusError

MONTH = "month"
YEAR = "year"
PER_GRANULE = "per-granule"
CALENDAR_RULES = (MONTH, YEAR)
NAMED_RULES = (MONTH, YEAR, PER_GRANULE)

# An integer (regular chunks), a tuple of chunk sizes, or one of NAMED_RULES.
ChunkRule = int | tuple[int, ...] | str

# The chunks of one axis: a chunk size (a regular grid there) or the size of each chunk.
AxisChunks = int | tuple[int, ...]


# --------------------------------------------------------------------------------------------
# Chunk bounds along one dimension


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

    @cached_property
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


def locate(
    bounds: Sequence[ChunkBounds], index: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(chunk coordinates, offset inside that chunk) of an N-dimensional raw index."""
    pairs = [b.chunk_of(i) for b, i in zip(bounds, index, strict=True)]
    return tuple(c for c, _ in pairs), tuple(o for _, o in pairs)


def axis_bounds(size: int, chunks: AxisChunks) -> ChunkBounds:
    """The bounds of an axis of length ``size`` cut into ``chunks``."""
    if isinstance(chunks, int):
        return ChunkBounds.regular(size, chunks)
    return ChunkBounds.from_sizes(chunks)


# --------------------------------------------------------------------------------------------
# The grid of a zarr array (its metadata)


def sharding_of(metadata: ArrayMetadata) -> ShardingCodec | None:
    """The sharding codec of an array whose inner chunks zarr reads one by one, as byte
    ranges of their shard (sharding is the array's only codec), or None."""
    codecs = metadata.codecs if isinstance(metadata, ArrayV3Metadata) else ()
    if len(codecs) == 1 and isinstance(codecs[0], ShardingCodec):
        return codecs[0]
    return None


def read_grid(metadata: ArrayMetadata) -> ChunkGrid:
    """The grid of the chunks a reader fetches one at a time: the inner chunks of a sharded
    array (``sharding_of``), whose shards hold whole inner chunks, so that their edges are
    every inner chunk size whatever the shard grid; the stored chunks otherwise."""
    sharding = sharding_of(metadata)
    if sharding is not None:
        return ChunkGrid.from_sizes(metadata.shape, tuple(sharding.chunk_shape))
    return ChunkGrid.from_metadata(metadata)


def array_bounds(array: zarr.Array) -> tuple[ChunkBounds, ...]:
    """Chunk bounds of every dimension of a zarr array (regular or rectilinear); the inner
    chunks of a sharded array (``read_grid``). Kept for the last arrays asked about (by
    their metadata, which zarr never changes in place): a query asks for the bounds of the
    arrays it reads several times, and an accumulation at every element has as many chunks
    along time as the raw data has days."""
    metadata = array.metadata
    cached = _BOUNDS.get(id(metadata))
    if cached is not None and cached[0] is metadata:
        return cached[1]
    bounds = tuple(_dimension_bounds(d) for d in read_grid(metadata).dimensions)
    if len(_BOUNDS) >= _BOUNDS_KEPT:
        _BOUNDS.pop(next(iter(_BOUNDS)), None)
    _BOUNDS[id(metadata)] = (metadata, bounds)  # holding it keeps its id from being reused
    return bounds


_BOUNDS: dict[int, tuple[ArrayMetadata, tuple[ChunkBounds, ...]]] = {}
_BOUNDS_KEPT = 256


def _dimension_bounds(dimension: DimensionGrid) -> ChunkBounds:
    if isinstance(dimension, FixedDimension):
        return ChunkBounds.regular(dimension.extent, dimension.size)
    return ChunkBounds.from_sizes([dimension.data_size(i) for i in range(dimension.nchunks)])


def regular_chunk_size(array: zarr.Array, axis: int) -> int | None:
    """The nominal chunk size along ``axis`` when the grid is regular there, else None.

    Unlike the bounds, this tells a partial last chunk (5 of 40) from a full small one."""
    dimension = _grid_dimension(array, axis)
    return dimension.size if isinstance(dimension, FixedDimension) else None


def last_chunk_is_partial(array: zarr.Array, axis: int) -> bool:
    """True when the last chunk along ``axis`` is declared larger than the data it holds.

    Regular grids have such a chunk when the length is not a multiple of the chunk size;
    rectilinear grids when the last chunk size reaches past the array's length (zarr allows
    it, and an append that fills a calendar month declares the whole month this way). The
    next append along ``axis`` then writes into that chunk. For a sharded array, the chunk
    is its last inner chunk (``read_grid``)."""
    dimension = read_grid(array.metadata).dimensions[axis]
    n = dimension.nchunks
    return n > 0 and dimension.chunk_size(n - 1) > dimension.data_size(n - 1)


def declared_chunk_sizes(array: zarr.Array, axis: int) -> tuple[int, ...]:
    """The sizes of the chunks along ``axis`` as the grid declares them: ``array_bounds``'
    sizes, except that a partial last chunk keeps its declared size (what an append along
    ``axis`` starts from, see ``append_chunk_sizes``)."""
    dimension = _grid_dimension(array, axis)
    return tuple(dimension.chunk_size(i) for i in range(dimension.nchunks))


def _grid_dimension(array: zarr.Array, axis: int) -> DimensionGrid:
    """zarr's description of the array's chunk grid along ``axis``."""
    return ChunkGrid.from_metadata(array.metadata).dimensions[axis]


def array_axis_chunks(array: zarr.Array, axis: int) -> AxisChunks:
    """An axis's chunks as ``array`` has them (a regular chunk size kept as it is, so an
    array that grows along it later fills its last chunk as before)."""
    nominal = regular_chunk_size(array, axis)
    return nominal if nominal is not None else array_bounds(array)[axis].sizes


def with_chunk_sizes(
    metadata: ArrayMetadata, axis: int, length: int, sizes: Sequence[int]
) -> ArrayV3Metadata:
    """An array's ``metadata`` (Zarr v3) resized to ``length`` along ``axis``, with the
    declared chunk sizes ``sizes`` there (``AppendChunks.sizes``).

    Values written through an array with this metadata (``stores.arrays.array_with``) land in
    chunks of the new grid while readers of the store keep the old array: chunks past the
    old extent stay invisible to them until ``stores.arrays.store_metadata`` publishes the new grid
    (write data first, metadata last). A chunk whose size changed (``AppendChunks.rewrite``)
    has no such order: read its values under the old grid and write them under the new."""
    if not isinstance(metadata, ArrayV3Metadata):
        raise AccumulusError("variable chunk sizes need Zarr v3; this array is Zarr v2")
    if sum(sizes) < length or any(s <= 0 for s in sizes):
        raise ValueError(f"chunk sizes {tuple(sizes)} do not cover a length of {length}")
    grid = metadata.chunk_grid
    if isinstance(grid, RectilinearChunkGridMetadata):
        chunk_shapes = list(grid.chunk_shapes)
    else:
        chunk_shapes = list(grid.chunk_shape)
    chunk_shapes[axis] = tuple(int(s) for s in sizes)
    return replace(
        metadata,
        shape=_with_length(metadata.shape, axis, length),
        chunk_grid=RectilinearChunkGridMetadata(chunk_shapes=tuple(chunk_shapes)),
    )


def _with_length(shape: Sequence[int], axis: int, length: int) -> tuple[int, ...]:
    return tuple(length if a == axis else n for a, n in enumerate(shape))


# --------------------------------------------------------------------------------------------
# Chunk rules


def parse_chunk_rules(spec: str | Sequence[str] | Mapping[str, Any]) -> dict[str, ChunkRule]:
    """Rules per dimension from ``--chunks`` text or a mapping.

    Text is ``dim=rule`` items separated by commas, where a list's sizes continue after the
    comma: ``time=month,lat=90`` or ``time=31,28,31,lat=90``. Several texts (repeated
    ``--chunks`` options) are merged. A mapping is ``{"time": "month", "lat": 90}`` or
    ``{"time": [31, 28, 31]}``.
    """
    if isinstance(spec, Mapping):
        return {str(dim): as_rule(value, str(dim)) for dim, value in spec.items()}
    values = dim_items(spec, "--chunks", "time=month or lat=90")
    return {
        dim: as_rule(parts[0] if len(parts) == 1 else parts, dim) for dim, parts in values.items()
    }


def dim_items(spec: str | Sequence[str], option: str, example: str) -> dict[str, list[str]]:
    """``dim=value`` items separated by commas, a list's values continuing after a comma
    (``time=31,28,31,lat=90``), from one text or several (a repeated option): the values
    of each dimension, as text. ``option`` and ``example`` name the option in errors."""
    texts = [spec] if isinstance(spec, str) else list(spec)
    values: dict[str, list[str]] = {}
    for text in texts:
        current: list[str] | None = None
        for token in (t.strip() for t in text.split(",")):
            dim, sep, value = token.partition("=")
            if sep:
                dim = dim.strip()
                if not dim:
                    raise AccumulusError(f"{option} {text!r}: a rule has no dimension name")
                if dim in values:
                    raise AccumulusError(f"{option}: dimension {dim!r} is given twice")
                current = values[dim] = [value.strip()]
            elif current is None:
                raise AccumulusError(f"{option} {text!r}: expected dim=rule, e.g. {example}")
            else:
                current.append(token)
    if not values:
        raise AccumulusError(f"{option}: no rule given; write e.g. {example}")
    return values


def as_rule(value: Any, dim: str) -> ChunkRule:
    """One dimension's rule, checked: a positive integer, a list of positive integers, or
    one of ``month``, ``year``, ``per-granule``."""
    if isinstance(value, str) and value.strip().lower() in NAMED_RULES:
        return value.strip().lower()
    if isinstance(value, str | int | np.integer):
        return _positive(value, dim)
    if isinstance(value, Sequence) and value:
        return tuple(_positive(v, dim) for v in value)
    raise AccumulusError(
        f"--chunks {dim}={value!r}: expected a chunk size, a list of sizes, "
        f"or one of {', '.join(NAMED_RULES)}"
    )


def _positive(value: Any, dim: str) -> int:
    try:
        number = int(str(value).strip()) if not isinstance(value, int | np.integer) else value
    except ValueError:
        raise AccumulusError(
            f"--chunks {dim}={value}: expected a chunk size, a list of sizes, "
            f"or one of {', '.join(NAMED_RULES)}"
        ) from None
    if isinstance(value, bool) or number <= 0:
        raise AccumulusError(f"--chunks {dim}: chunk sizes must be positive integers, got {value}")
    return int(number)


def rule_text(rule: ChunkRule) -> str:
    """A rule as a user writes it."""
    return ",".join(map(str, rule)) if isinstance(rule, tuple) else str(rule)


def period_keys(times: Any, rule: str) -> np.ndarray:
    """One integer per time value naming its calendar month or year (equal keys, same
    period), read by xarray's ``.dt`` accessor, so any CF calendar works."""
    values = xr.DataArray(np.asarray(times), dims="time")
    try:
        dates = values.dt
    except (AttributeError, TypeError):  # xarray's verdict: neither datetime64 nor cftime
        raise ValueError(f"values of type {values.dtype}, not dates") from None
    years = dates.year.values.astype("i8")
    return years * 12 + dates.month.values - 1 if rule == MONTH else years


def calendar_chunk_sizes(times: Any, rule: str) -> tuple[int, ...]:
    """Chunk sizes with one chunk per run of consecutive values in the same calendar month
    (or year): for daily data, the number of days each month has in the data."""
    keys = period_keys(times, rule)
    if not len(keys):
        return ()
    edges = [0, *(np.flatnonzero(np.diff(keys)) + 1).tolist(), len(keys)]
    return tuple(b - a for a, b in itertools.pairwise(edges))


def _expected_period_length(times: Any, context: Any, rule: str) -> int:
    """How many values the calendar period that starts the run ``times`` will hold when
    complete, at the sampling frequency xarray infers from ``context`` (recent values). When
    no regular frequency shows, the run is taken as complete (its own length)."""
    try:
        freq = xr.infer_freq(xr.DataArray(np.asarray(context), dims="time"))
    except (ValueError, TypeError):  # fewer than 3 values, or not dates
        freq = None
    if freq is None:
        return len(times)
    first = np.asarray(times)[0]
    first_stamp = pd.Timestamp(first) if isinstance(first, np.datetime64) else first
    year, month = first_stamp.year, first_stamp.month
    if rule == MONTH:
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    else:
        year, month = year + 1, 1
    calendar = getattr(first_stamp, "calendar", "standard") or "standard"
    period = xr.date_range(
        start=first_stamp,
        end=f"{year:04d}-{month:02d}-01",
        freq=freq,
        calendar=calendar,
        use_cftime=not isinstance(first_stamp, pd.Timestamp),
        inclusive="left",
    )
    return max(len(period), len(times))


def chunk_sizes(rule: ChunkRule, size: int, *, dim: str, times: Any = None) -> tuple[int, ...]:
    """The chunk sizes of a whole dimension of length ``size`` under ``rule``; ``times`` are
    the dimension's CF-decoded coordinate values (needed by ``month`` and ``year``)."""
    if isinstance(rule, int):
        return tuple(min(rule, size - start) for start in range(0, size, rule))
    if isinstance(rule, tuple):
        if sum(rule) != size:
            raise AccumulusError(
                f"--chunks {dim}: chunk sizes add up to {sum(rule)}, but dimension {dim!r} has "
                f"length {size}"
            )
        return rule
    if rule == PER_GRANULE:
        raise AccumulusError(
            f"--chunks {dim}=per-granule applies to appends; here give a chunk size, "
            "a list of sizes, month or year"
        )
    if times is None:
        raise AccumulusError(f"--chunks {dim}={rule}: dimension {dim!r} has no time coordinate")
    try:
        sizes = calendar_chunk_sizes(times, rule)
    except ValueError as exc:
        raise AccumulusError(
            f"--chunks {dim}={rule} needs a CF time coordinate, but {dim!r} holds {exc}"
        ) from None
    if sum(sizes) != size:  # a coordinate of another length than the dimension
        raise AccumulusError(f"--chunks {dim}={rule}: coordinate length differs from {size}")
    return sizes


def axis_chunks(rule: ChunkRule, size: int, *, dim: str, times: Any = None) -> AxisChunks:
    """An axis's chunks under ``rule``: a chunk size where they are regular (an integer
    rule, but also equal months of a 360-day calendar or a list like 10,10,10,5, which every
    Zarr format and reader understands), else the size of each chunk."""
    if isinstance(rule, int):
        return rule
    sizes = chunk_sizes(rule, size, dim=dim, times=times)
    return max(sizes) if sizes and ChunkBounds.from_sizes(sizes).is_regular else sizes


# --------------------------------------------------------------------------------------------
# Appends: where chunks fall as values arrive


@dataclass(frozen=True)
class AppendChunks:
    """Where chunks fall along the append dimension after an append.

    ``sizes`` are the declared chunk sizes of the whole dimension: every existing chunk keeps
    its size except possibly the last one (``rewrite``), and the new last chunk may be
    declared larger than the data it holds (a calendar period still being filled; zarr
    stores it like a regular grid's partial last chunk, and the next append writes into it
    without changing the grid). ``rewrite`` is the index of the one existing chunk whose
    declared size changed (it grew to take the appended values of its period, or shrank
    because a new period started before it was full): its stored values must be read under
    the old grid and written again under the new one. None when no existing chunk changes.
    """

    sizes: tuple[int, ...]
    rewrite: int | None = None


def append_chunk_sizes(
    sizes: Sequence[int],
    existing: Sequence[Any],
    appended: Sequence[Any],
    rule: ChunkRule,
    *,
    published: bool = False,
) -> AppendChunks:
    """Chunk sizes along a dimension after appending ``appended`` to ``existing``.

    ``sizes``: the declared chunk sizes so far (their sum may pass ``len(existing)`` in the
    last chunk); ``existing`` and ``appended``: the CF-decoded coordinate values (only their
    lengths matter for integer, list and per-granule rules). Call once per granule for
    ``per-granule``; an explicit list gives the sizes of the appended values.

    - integer ``n``: fill the last chunk up to its declared size, then chunks of ``n``;
    - ``month``/``year``: the appended values continue the last chunk while they are in its
      period (when all its values are), and each new period starts a new chunk; the last
      chunk is declared as long as its period will be at the frequency the data shows;
    - ``per-granule`` and lists: the last chunk is closed at its data, then new chunks.

    ``published``: the existing chunks are in a store that readers use, and a reader decodes
    each chunk at the size its grid declares, so none may change size (``rewrite`` is always
    None). The appended values fill the last chunk up to its declared size, whatever their
    period, and the rule cuts what follows into new chunks: a period that goes on after its
    chunk was closed continues in a new chunk, and one that ends early (missing values at its
    end) leaves the rest of its chunk to the values that follow.
    """
    sizes = tuple(int(s) for s in sizes)
    length, added = len(existing), len(appended)
    last_start = sum(sizes[:-1])
    if any(s <= 0 for s in sizes) or (sizes and not last_start < length <= sum(sizes)):
        raise ValueError(f"chunk sizes {sizes} do not fit an existing length of {length}")
    if not sizes and length:
        raise ValueError(f"no chunk sizes for an existing length of {length}")
    if not added:
        return AppendChunks(sizes)
    held = length - last_start  # values in the last chunk (0 when nothing exists)
    if published and sizes and held < sizes[-1]:
        fill = min(sizes[-1] - held, added)
        if fill == added:
            return AppendChunks(sizes)
        filled = joined(np.asarray(existing), np.asarray(appended)[:fill])
        rest = list(np.asarray(appended)[fill:])
        return append_chunk_sizes(sizes, list(filled), rest, rule, published=True)

    if isinstance(rule, int):
        room = sizes[-1] - held if sizes else 0
        new = [rule] * math.ceil(max(added - room, 0) / rule)
        return AppendChunks((*sizes, *new))

    if rule in CALENDAR_RULES:
        before, new_values = np.asarray(existing), np.asarray(appended)
        keys = period_keys(new_values, rule)
        last_values = before[last_start:length]
        continues = False
        if held and not published:
            continues = bool((period_keys(last_values, rule) == keys[0]).all())
        if continues:
            kept, values = sizes[:-1], joined(last_values, new_values)
        else:
            kept, values = _closed(sizes, held), new_values
        runs = list(calendar_chunk_sizes(values, rule))
        # The frequency shows in the appended values, or with the last existing ones when
        # fewer than three are appended (a gap before the append does not hide it).
        recent = new_values if len(new_values) >= 3 else joined(before[-3:], new_values)
        runs[-1] = _expected_period_length(values[len(values) - runs[-1] :], recent, rule)
        return _with_rewrite(sizes, (*kept, *runs))

    if rule == PER_GRANULE:
        return _with_rewrite(sizes, (*_closed(sizes, held), added))
    if isinstance(rule, tuple):
        if sum(rule) != added:
            raise AccumulusError(
                f"--chunks: chunk sizes {rule_text(rule)} add up to {sum(rule)}, but {added} "
                "values are appended"
            )
        return _with_rewrite(sizes, (*_closed(sizes, held), *rule))
    raise AccumulusError(f"unknown chunk rule {rule!r}: use an integer, a list, {NAMED_RULES}")


def joined(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """Two runs of coordinate values as one (an empty run has no dtype to agree with)."""
    return np.concatenate([first, second]) if len(first) else second


def _closed(sizes: tuple[int, ...], held: int) -> tuple[int, ...]:
    """The sizes with the last chunk ending at its data."""
    return (*sizes[:-1], held) if sizes else ()


def _with_rewrite(old: tuple[int, ...], new: tuple[int, ...]) -> AppendChunks:
    last = len(old) - 1
    changed = last >= 0 and new[last] != old[last]
    return AppendChunks(new, last if changed else None)


@dataclass(frozen=True)
class RegularGrid:
    """Chunks of ``chunk`` steps along the append dimension (a regular grid, Zarr v2 or v3)."""

    chunk: int

    def complete_end(self, size: int) -> int:
        """Where the complete chunks end once the dimension holds ``size`` steps.

        New data is written in whole chunks up to here; what follows is the partial last
        chunk, rewritten by the next append (and provisional for accumulations,
        ``final_coverage``)."""
        return size // self.chunk * self.chunk

    def metadata_at(self, metadata: ArrayMetadata, axis: int, length: int) -> ArrayMetadata:
        """An array's ``metadata`` once it is ``length`` long along ``axis``."""
        return metadata.update_shape(_with_length(metadata.shape, axis, length))


class VariableGrid:
    """Variable chunks along the append dimension, cut by ``rule`` (month, year, per-granule)
    as granules arrive: a rectilinear chunk grid (ZEP 3, Zarr v3).

    ``sizes`` are the declared chunk sizes so far; the last one may reach past the data (a
    month declared whole while it fills). A chunk once declared keeps its size
    (``append_chunk_sizes(..., published=True)``): readers decode a chunk at the size their
    metadata declares, and the chunks of one run are those of any other run on the same
    granules, wherever a run was interrupted. ``coordinate`` holds the dimension's values so
    far, CF-decoded when the rule reads dates.
    """

    def __init__(self, rule: str, sizes: Sequence[int], coordinate: np.ndarray) -> None:
        self.rule = rule
        self.sizes = tuple(sizes)
        self.coordinate = coordinate

    def extend(self, values: np.ndarray) -> None:
        """Declare the chunks of one more granule's coordinate ``values``."""
        plan = append_chunk_sizes(
            self.sizes, list(self.coordinate), list(values), self.rule, published=True
        )
        self.sizes = plan.sizes
        self.coordinate = joined(self.coordinate, values)

    def complete_end(self, size: int) -> int:
        """Where the complete chunks end once the dimension holds ``size`` steps: the last
        declared edge at or before ``size``."""
        edges = list(accumulate(self.sizes, initial=0))
        return edges[bisect.bisect_right(edges, size) - 1]

    def metadata_at(self, metadata: ArrayMetadata, axis: int, length: int) -> ArrayMetadata:
        """An array's ``metadata`` once it is ``length`` long along ``axis``, with the
        declared chunks there."""
        return with_chunk_sizes(metadata, axis, length, self.sizes)


GROW = "grow"


def growing_rule(cap: int) -> str:
    """The rule of a cube whose chunks along the append dimension grow to ``cap`` steps, as
    recorded in its root attributes (``GrowingGrid``)."""
    return f"{GROW}:{int(cap)}"


def growing_cap(rule: str | None) -> int | None:
    """The ``cap`` of a ``growing_rule``, or None for any other rule."""
    name, _, cap = (rule or "").partition(":")
    return int(cap) if name == GROW and cap.isdigit() and int(cap) > 0 else None


class GrowingGrid(VariableGrid):
    """Chunks along the append dimension that grow with the archive up to ``cap`` steps
    (ZEP 3, Zarr v3): a chunk that starts when the dimension holds ``n`` steps is declared
    ``min(cap, max(n, appended))`` long, where ``appended`` is what arrives with it.

    A cube of 31 steps appended in granules of 8 gets chunks 8, 8, 16 rather than one of
    ``cap`` (1017) steps mostly fill, so a query decodes what the cube holds and not what it
    may hold one day; the declared but empty part of the last chunk is never larger than
    what precedes it, so a query decodes at most twice what it asks for while the archive is
    young, then chunks of ``cap`` steps. A chunk once declared keeps its size, as under
    ``VariableGrid``: appends write into the last chunk until it is full (rewriting it whole,
    as with a regular grid's partial last chunk) and never change a chunk a reader knows."""

    def __init__(self, cap: int, sizes: Sequence[int], length: int) -> None:
        super().__init__(growing_rule(cap), sizes, np.arange(length))
        self.cap = cap
        self.length = length

    def extend(self, values: np.ndarray) -> None:
        """Declare the chunks of one more granule of ``len(values)`` steps."""
        self.sizes = growing_sizes(self.sizes, self.length, len(values), self.cap)
        self.length += len(values)


def growing_sizes(sizes: Sequence[int], length: int, added: int, cap: int) -> tuple[int, ...]:
    """Declared chunk sizes after appending ``added`` steps to ``length`` held in chunks
    ``sizes`` under ``GrowingGrid``'s rule: fill the last chunk, then new chunks."""
    sizes = tuple(sizes)
    added -= min(added, sum(sizes) - length)
    length = sum(sizes) if added else length
    while added > 0:
        size = min(cap, max(length, added))
        sizes += (size,)
        length += size
        added -= size
    return sizes


AppendGrid = RegularGrid | VariableGrid
