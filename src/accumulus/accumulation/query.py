"""Answering an average (or sum, or count) over label ranges, from a plan.

``run_query`` turns label ranges into index ranges the way ``DataArray.sel(dim=slice(a, b))``
does, plans the reads (``plan.plan_query``), performs them through a counting store, and
combines the sums into the answer: Σw·x / Σw for a mean, Σw·x for a sum, Σw for a count
(Σx and the number of valid values when unweighted). The counts of chunks and bytes read are
measured on the store, not estimated.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from math import prod
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr

from accumulus.accumulation import spec, statistics
from accumulus.accumulation.budget import DEFAULT_MEMORY_BYTES, ReadBudget, read_budget, slabs
from accumulus.accumulation.chunk_check import chunk_problem_text, failing_chunks
from accumulus.accumulation.plan import AccumulationLayout, QueryPlan, Read, plan_query
from accumulus.accumulation.selection import Extent, selection
from accumulus.accumulation.sums import reduce_terms
from accumulus.accumulation.weights import resolve_weights, weight_values
from accumulus.cube import Cube, VariableInfo
from accumulus.errors import AccumulationReadError, AccumulusError
from accumulus.numeric import check_numeric
from accumulus.storage import CountingStore, is_metadata_key

STATS = tuple(statistics.STATISTICS)


@dataclass(frozen=True)
class Query:
    """What a user asks: ``stat`` of ``variable`` over the dimensions ``over`` within label
    ``ranges`` (inclusive, like ``sel(dim=slice(a, b))``; None for an open end)."""

    variable: str
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[Any, Any]] = field(default_factory=dict)
    stat: str = "mean"
    weights: str | None = None  # None: the accumulation group's weights, else the default
    use_accumulation: bool = True


@dataclass(frozen=True)
class QueryStats:
    accumulation_chunks_read: int
    raw_chunks_read: int
    bytes_read: int
    requests: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "accumulation_chunks_read": self.accumulation_chunks_read,
            "raw_chunks_read": self.raw_chunks_read,
            "bytes_read": self.bytes_read,
            "requests": self.requests,
            "seconds": round(self.seconds, 6),
        }


@dataclass(frozen=True)
class QueryResult:
    query: Query
    data: xr.DataArray
    plan: QueryPlan
    stats: QueryStats
    weights: str
    note: str = ""  # why accumulations were not (fully) used, when they were not
    selection: Mapping[str, Extent] = field(default_factory=dict)  # what was averaged, by dim


def run_query(
    cube: Cube,
    query: Query,
    *,
    latency: float = 0.0,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> QueryResult:
    """Answer ``query`` on ``cube``; ``latency`` adds seconds per store request (benchmarks).
    Raw reads stream within about ``memory_bytes`` (see ``budget``)."""
    started = time.perf_counter()
    var = cube.variable(query.variable)
    check_numeric(cube.raw, cube.decoded, var.name, "a variable to average")
    over = _check_over(var, query.over)
    if query.stat not in statistics.STATISTICS:
        known = ", ".join(statistics.STATISTICS)
        raise AccumulusError(f"unknown stat {query.stat!r}: use one of {known}")
    stat = statistics.STATISTICS[query.stat]
    ranges = {d: (0, n) for d, n in zip(var.dims, var.shape, strict=True)}
    for dim, (start, stop) in query.ranges.items():
        if dim not in var.dims:
            raise AccumulusError(
                f"range given for {dim!r}, which is not a dimension of {var.name!r} "
                f"{list(var.dims)}"
            )
        ranges[dim] = index_range(cube.index(dim), dim, start, stop)

    group = cube.accumulation_group(var.name)
    weights = query.weights
    if weights is None:
        # The weights the accumulations were built with, so both ways agree by default.
        weights = group.weights if group is not None and group.weights != "unknown" else None
    weights = resolve_weights(cube.decoded, var.name, weights)
    terms = stat.sums_for(weighted=weights != "none")
    if query.use_accumulation:
        layouts, note = _usable_layouts(cube, var, group, weights, terms)
    else:
        layouts, note = [], "accumulation not used (full scan requested)"

    plan = plan_query(var.dims, ranges, over, layouts)
    chunk_bytes = prod(max(b.sizes, default=1) for b in var.bounds) * var.array.dtype.itemsize
    budget = read_budget(memory_bytes, chunk_bytes)
    counting = CountingStore(cube.store, latency=latency, cache_bytes=budget.cache_bytes)
    sums = _execute(cube, var, group, plan, terms, weights, counting, budget)
    values = stat.finish(list(sums), weights != "none")

    kept = [d for d in var.dims if d not in over]
    coords = {d: (d, cube.coordinate(d, *ranges[d])) for d in kept}
    data = xr.DataArray(values, dims=kept, coords=coords, name=var.name)
    units = cube.raw[var.name].attrs.get("units")
    if units is not None and stat.has_units:
        data.attrs["units"] = units
    if "long_name" in cube.raw[var.name].attrs:
        data.attrs["long_name"] = cube.raw[var.name].attrs["long_name"]
    stats = _stats(counting, var.name, time.perf_counter() - started)
    data.attrs.update(
        {"stat": query.stat, "weights": weights, "over": ",".join(over)} | stats.to_dict()
    )
    extents = selection(cube, var.dims, ranges)
    return QueryResult(query, data, plan, stats, weights, note, extents)


# --------------------------------------------------------------------------------------------
# Label ranges


def index_range(index: pd.Index, dim: str, start: Any, stop: Any) -> tuple[int, int]:
    """Half-open index range selected by inclusive labels, as ``sel(dim=slice(start, stop))``
    selects on an ascending coordinate; descending coordinates take the same bounds."""
    if len(index) > 1 and not (index.is_monotonic_increasing or index.is_monotonic_decreasing):
        raise AccumulusError(f"coordinate {dim!r} is not monotonic; cannot select a range on it")
    start, stop = _coerce(index, dim, start), _coerce(index, dim, stop)
    descending = len(index) > 1 and not index.is_monotonic_increasing

    def positions(a: Any, b: Any) -> tuple[int, int]:
        try:
            sl = index.slice_indexer(b, a) if descending else index.slice_indexer(a, b)
        except (KeyError, ValueError, TypeError) as exc:
            raise AccumulusError(f"range {dim}={a}/{b}: {exc}") from None
        lo, hi, _ = sl.indices(len(index))
        return lo, max(lo, hi)

    lo, hi = positions(start, stop)
    if hi > lo:
        return lo, hi
    if start is not None and stop is not None:
        rlo, rhi = positions(stop, start)
        if rhi > rlo:
            raise AccumulusError(
                f"range {dim}={start}/{stop} is reversed: its start comes after its end"
            )
    first, last = index[0], index[-1]
    raise AccumulusError(
        f"range {dim}={start}/{stop} selects nothing: the coordinate runs from {first} to {last}"
    )


def _coerce(index: pd.Index, dim: str, bound: Any) -> Any:
    if bound is None or (isinstance(bound, str) and not bound.strip()):
        return None
    if isinstance(index, pd.DatetimeIndex) and isinstance(bound, str):
        try:
            pd.Timestamp(bound)
        except ValueError:
            raise AccumulusError(
                f"range bound {bound!r} for {dim!r} is not a date (use ISO 8601, e.g. 2001-12-31)"
            ) from None
        return bound
    if pd.api.types.is_numeric_dtype(index.dtype) and isinstance(bound, str):
        if not bound.isascii():  # float() reads other scripts' digits too: ١٠ is 10
            raise AccumulusError(f"range bound {bound!r} for {dim!r} is not a number")
        try:
            return float(bound)
        except ValueError:
            raise AccumulusError(f"range bound {bound!r} for {dim!r} is not a number") from None
    return bound


# --------------------------------------------------------------------------------------------
# Choosing accumulations


def _check_over(var: VariableInfo, over: Sequence[str]) -> tuple[str, ...]:
    unknown = [d for d in over if d not in var.dims]
    if unknown:
        raise AccumulusError(
            f"cannot average {var.name!r} over {unknown}: its dimensions are {list(var.dims)}"
        )
    if not over:
        raise AccumulusError("name at least one dimension to average over")
    return tuple(d for d in var.dims if d in over)


def _usable_layouts(
    cube: Cube,
    var: VariableInfo,
    group: spec.AccumulationGroup | None,
    weights: str,
    terms: Sequence[str],
) -> tuple[list[AccumulationLayout], str]:
    if group is None:
        return [], "no accumulation group"
    if not group.complete:
        return [], "accumulation group incomplete (build interrupted); ignored"
    if weights != "none" and group.weights != weights:
        return [], f"accumulations hold weights {group.weights!r}, query asks {weights!r}"
    layouts = []
    for acc in group.accumulations:
        if acc.placement is not None or not all(t in acc.arrays for t in terms):
            continue
        positions = {}
        for dim in acc.dims:
            bounds = var.bounds[var.axis(dim)]
            stored = cube.accumulation_array(var.name, acc.arrays[terms[0]])
            entries = stored.shape[acc.array_dims.index(dim)]
            edges = bounds.strided_edges(acc.stride(dim))[:entries]
            positions[dim] = tuple(e for e in edges if e <= group.coverage.get(dim, 0))
        layouts.append(AccumulationLayout(acc.dims, positions, dict(group.coverage)))
    return layouts, "" if layouts else "no accumulation holds the sums this query needs"


# --------------------------------------------------------------------------------------------
# Executing a plan


def _execute(
    cube: Cube,
    var: VariableInfo,
    group: spec.AccumulationGroup | None,
    plan: QueryPlan,
    terms: Sequence[str],
    weights: str,
    store: CountingStore,
    budget: ReadBudget,
) -> np.ndarray:
    """Σ over the plan's reads of sign x sums: shape (len(terms), *kept range shape)."""
    kept = [d for d in var.dims if d not in plan.over]
    out_shape = [plan.ranges[d][1] - plan.ranges[d][0] for d in kept]
    total = np.zeros((len(terms), *out_shape), dtype="f8")
    raw_array = cube.bind(var.array, store)
    tasks = []
    for read in plan.reads:
        if read.is_raw:
            piece_values = budget.piece_bytes // var.array.dtype.itemsize
            for piece in split_box(read.box, var, piece_values):
                tasks.append((read.sign, piece, None))
        else:
            tasks.append((read.sign, read.box, read))

    def one(task: tuple[int, Mapping[str, tuple[int, int]], Read | None]) -> tuple:
        sign, box, read = task
        if read is None:
            part = _raw_sums(cube, var, raw_array, box, plan.over, terms, weights, budget)
        else:
            assert group is not None
            part = _accumulation_sums(cube, var, group, read, plan.over, terms, store)
        return sign, box, part

    with ThreadPoolExecutor(budget.threads) as pool:
        for sign, box, part in pool.map(one, tasks):
            where = tuple(
                slice(box[d][0] - plan.ranges[d][0], box[d][1] - plan.ranges[d][0]) for d in kept
            )
            total[(slice(None), *where)] += sign * part
    return total


def split_box(
    box: Mapping[str, tuple[int, int]], var: VariableInfo, max_elements: int
) -> list[dict[str, tuple[int, int]]]:
    """Cut a box at chunk boundaries into pieces of at most ``max_elements`` values (a piece
    is never smaller than one chunk's part of the box)."""
    pieces = [dict(box)]
    done = []
    while pieces:
        piece = pieces.pop()
        size = prod(b - a for a, b in piece.values())
        cuts = {}
        for dim, bounds in zip(var.dims, var.bounds, strict=True):
            lo, hi = piece[dim]
            inner = [e for e in bounds.edges if lo < e < hi]
            if inner:
                cuts[dim] = inner
        if size <= max_elements or not cuts:
            done.append(piece)
            continue
        dim = max(cuts, key=lambda d: len(cuts[d]))
        middle = cuts[dim][len(cuts[dim]) // 2]
        pieces.append({**piece, dim: (piece[dim][0], middle)})
        pieces.append({**piece, dim: (middle, piece[dim][1])})
    return done


def _raw_sums(
    cube: Cube,
    var: VariableInfo,
    array: zarr.Array,
    box: Mapping[str, tuple[int, int]],
    over: Sequence[str],
    terms: Sequence[str],
    weights: str,
    budget: ReadBudget,
) -> np.ndarray:
    """The sums of one piece, decoded and summed slab by slab so that the float64 working
    arrays stay within the budget whatever the piece's size."""
    index = tuple(slice(*box[d]) for d in var.dims)
    try:
        stored = array[index]
    except Exception as exc:
        raise AccumulusError(
            f"{cube.label}: cannot read {var.name!r} at {_box_text(box)}: {exc}"
        ) from None
    w = weight_values(cube.decoded, weights, var.dims, {d: slice(*box[d]) for d in var.dims})
    axes = [var.axis(d) for d in over]
    kept = [a for a in range(stored.ndim) if a not in axes]
    part = np.zeros((len(terms), *(stored.shape[a] for a in kept)), dtype="f8")
    for slab in slabs(stored.shape, budget.slab_values):
        w_slab = w
        if isinstance(w, np.ndarray):  # size-1 axes broadcast: slice only the others
            w_slab = w[
                tuple(s if n > 1 else slice(None) for s, n in zip(slab, w.shape, strict=True))
            ]
        sums = reduce_terms(var.decoder(stored[slab]), w_slab, terms, axes)
        part[(slice(None), *(slab[a] for a in kept))] += sums
    return part


def _accumulation_sums(
    cube: Cube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    read: Read,
    over: Sequence[str],
    terms: Sequence[str],
    store: CountingStore,
) -> np.ndarray:
    acc = group.find(read.source)
    assert acc is not None
    parts = []
    for term in terms:
        name = acc.arrays[term]
        array = cube.bind(cube.accumulation_array(var.name, name), store)
        index = tuple(
            read.entries[d] if d in read.entries else slice(*read.box[d]) for d in acc.array_dims
        )
        try:
            slab = np.asarray(array[index], dtype="f8")
        except Exception as exc:
            failing = chunk_problem_text(failing_chunks(array, index)) or str(exc)
            raise AccumulationReadError(
                f"{cube.label}: cannot read accumulation array {group.path}/{name}: {failing}"
            ) from None
        if np.isnan(slab).any() or (statistics.SUMS[term].is_count and (slab < 0).any()):
            raise AccumulationReadError(
                f"{cube.label}: accumulation array {group.path}/{name} has a missing chunk "
                f"at {_entry_text(read)}; run `accumulus verify` or rebuild"
            )
        remaining = [d for d in acc.array_dims if d not in read.entries]
        summed = [remaining.index(d) for d in over if d not in read.entries]
        slab = slab.sum(axis=tuple(summed)) if summed else slab
        kept_order = [d for d in remaining if d not in over]
        slab = xr.DataArray(slab, dims=kept_order).transpose(
            *[d for d in var.dims if d in kept_order]
        )
        parts.append(slab.values)
    return np.stack(parts)


def _stats(store: CountingStore, variable: str, seconds: float) -> QueryStats:
    counts = store.counts
    chunks = [k for k in counts.reads if not is_metadata_key(k)]
    acc_prefix = spec.group_name(variable) + "/"
    return QueryStats(
        accumulation_chunks_read=sum(k.startswith(acc_prefix) for k in chunks),
        raw_chunks_read=sum(k.startswith(variable + "/") for k in chunks),
        bytes_read=counts.read_bytes,
        requests=counts.read_requests,
        seconds=seconds,
    )


def _box_text(box: Mapping[str, tuple[int, int]]) -> str:
    return ", ".join(f"{d}[{a}:{b}]" for d, (a, b) in box.items())


def _entry_text(read: Read) -> str:
    return ", ".join(f"{d} entry {k}" for d, k in read.entries.items())
