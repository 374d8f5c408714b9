"""Chunk rules: how a dimension is cut into chunks, regular or variable (ZEP 3).

A rule is what a user writes after ``--chunks dim=``:

- an integer ``n``: regular chunks of ``n`` (the last one may be partial);
- a list ``31,28,31,...``: explicit chunk sizes adding up to the dimension's length;
- ``month`` or ``year``: one chunk per calendar month or year of the dimension's CF-decoded
  time coordinate, in whatever calendar it uses (``standard``, ``noleap``, ``360_day``...);
- ``per-granule`` (appends only): each appended granule is its own chunk.

``chunk_sizes`` turns a rule into the chunk sizes of a whole dimension (for ``rechunk``);
``append_chunk_sizes`` decides where the chunks of an append fall after the existing ones,
and ``with_chunk_sizes`` / ``store_metadata`` give an array those chunks.
Calendar arithmetic is xarray's and cftime's (``.dt`` accessors, ``infer_freq``,
``date_range``), never our own.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata.v3 import RectilinearChunkGridMetadata
from zarr.core.sync import sync

from accumulus.errors import AccumulusError

MONTH = "month"
YEAR = "year"
PER_GRANULE = "per-granule"
CALENDAR_RULES = (MONTH, YEAR)
NAMED_RULES = (MONTH, YEAR, PER_GRANULE)

# An integer (regular chunks), a tuple of chunk sizes, or one of NAMED_RULES.
ChunkRule = int | tuple[int, ...] | str


# --------------------------------------------------------------------------------------------
# Parsing


def parse_chunk_rules(spec: str | Sequence[str] | Mapping[str, Any]) -> dict[str, ChunkRule]:
    """Rules per dimension from ``--chunks`` text or a mapping.

    Text is ``dim=rule`` items separated by commas, where a list's sizes continue after the
    comma: ``time=month,lat=90`` or ``time=31,28,31,lat=90``. Several texts (repeated
    ``--chunks`` options) are merged. A mapping is ``{"time": "month", "lat": 90}`` or
    ``{"time": [31, 28, 31]}``.
    """
    if isinstance(spec, Mapping):
        return {str(dim): as_rule(value, str(dim)) for dim, value in spec.items()}
    texts = [spec] if isinstance(spec, str) else list(spec)
    values: dict[str, list[str]] = {}
    for text in texts:
        current: list[str] | None = None
        for token in (t.strip() for t in text.split(",")):
            dim, sep, value = token.partition("=")
            if sep:
                dim = dim.strip()
                if not dim:
                    raise AccumulusError(f"--chunks {text!r}: a rule has no dimension name")
                if dim in values:
                    raise AccumulusError(f"--chunks: dimension {dim!r} is given twice")
                current = values[dim] = [value.strip()]
            elif current is None:
                raise AccumulusError(
                    f"--chunks {text!r}: expected dim=rule, e.g. time=month or lat=90"
                )
            else:
                current.append(token)
    if not values:
        raise AccumulusError("--chunks: no rule given; write e.g. time=month or lat=90")
    return {
        dim: as_rule(parts[0] if len(parts) == 1 else parts, dim) for dim, parts in values.items()
    }


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


# --------------------------------------------------------------------------------------------
# Calendar periods


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


# --------------------------------------------------------------------------------------------
# Whole dimensions


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


# --------------------------------------------------------------------------------------------
# Appends


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
        return append_chunk_sizes(sizes, filled, np.asarray(appended)[fill:], rule, published=True)

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


# --------------------------------------------------------------------------------------------
# Applying chunk sizes to an array


def with_chunk_sizes(array: zarr.Array, axis: int, length: int, sizes: Sequence[int]) -> zarr.Array:
    """``array`` (Zarr v3) resized to ``length`` along ``axis``, with the declared chunk sizes
    ``sizes`` there (``AppendChunks.sizes``), as an array object whose metadata is not stored.

    Values written through it land in chunks of the new grid while readers of the store keep
    the old array: chunks past the old extent stay invisible to them until
    ``store_metadata`` publishes the new grid (write data first, metadata last). A chunk
    whose size changed (``AppendChunks.rewrite``) has no such order: read its values from
    ``array`` and write them through the new one."""
    if array.metadata.zarr_format != 3:
        raise AccumulusError("variable chunk sizes need Zarr v3; this array is Zarr v2")
    if sum(sizes) < length or any(s <= 0 for s in sizes):
        raise ValueError(f"chunk sizes {tuple(sizes)} do not cover a length of {length}")
    grid = array.metadata.chunk_grid
    if isinstance(grid, RectilinearChunkGridMetadata):
        chunk_shapes = list(grid.chunk_shapes)
    else:
        chunk_shapes = list(grid.chunk_shape)
    chunk_shapes[axis] = tuple(int(s) for s in sizes)
    shape = list(array.shape)
    shape[axis] = length
    metadata = replace(
        array.metadata,
        shape=tuple(shape),
        chunk_grid=RectilinearChunkGridMetadata(chunk_shapes=tuple(chunk_shapes)),
    )
    return zarr.Array(AsyncArray(metadata, array.store_path, config=array.async_array.config))


def store_metadata(array: zarr.Array) -> None:
    """Write ``array``'s metadata document to its store, by zarr's own serialization (the
    group's consolidated metadata, if any, is the caller's to refresh)."""

    async def write() -> None:
        documents = array.metadata.to_buffer_dict(default_buffer_prototype())
        for key, buffer in documents.items():
            await (array.store_path / key).set(buffer)

    sync(write())
