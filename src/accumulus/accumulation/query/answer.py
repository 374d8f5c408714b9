"""Answering an average (or sum, or count) over label ranges, from a plan.

``run_query`` resolves a query (``request.resolve``: label ranges to index ranges the way
``DataArray.sel(dim=slice(a, b))`` does), plans the reads (``plan.plan_query``), reads every
chunk of the plan in one batch (``execute``), and combines the sums into the answer: Σw·x /
Σw for a mean, Σw·x for a sum, Σw for a count (Σx and the number of valid values when
unweighted). The counts of chunks and bytes read are measured at the store, not estimated.
"""

from __future__ import annotations

import bisect
import itertools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from math import prod
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
import zarr
from xarray.indexes import PandasIndex

from accumulus.accumulation.model import pairs, spec, statistics
from accumulus.accumulation.model.groups import AccumulationGroups, stride_unit_problem
from accumulus.accumulation.model.spec import Weights
from accumulus.accumulation.model.years import along, time_dimension, years
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.query.cost import (
    PlanCost,
    Storage,
    plan_cost,
    scan_bound,
    scan_cost,
    storage_of,
)
from accumulus.accumulation.query.execute import (
    ExecutedPlan,
    InfiniteEntriesError,
    Work,
    _scratch,
    chunk_work,
    execute,
    noise_floor,
    weights_vary_along,
)
from accumulus.accumulation.query.plan import (
    AccumulationLayout,
    QueryPlan,
    Read,
    plan_query,
    plan_runs,
    scan_boxes,
)
from accumulus.accumulation.query.request import (
    SEASONS,
    Query,
    ResolvedQuery,
    answer_index,
    resolve,
    whole_labels,
    within_axis,
)
from accumulus.accumulation.query.selection import Extent, selection
from accumulus.accumulation.query.shapes import kept_cells, shape_plans
from accumulus.chunk_reader import ChunkRequest, ReadCounts, overlap, read_chunks, read_region
from accumulus.errors import AccumulationReadError, ParameterError
from accumulus.grid import array_bounds
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import array_with


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
    """An answer: its values and labels (what a JSON answer writes), the plan that ran and
    what it read. ``data``, the answer as a ``DataArray``, is made from them when first
    asked for: the service and ``--json`` never ask, and making it was a part of their
    answers' time worth saving (docs/benchmarks.md, "From a question's sums to the
    client")."""

    query: Query
    values: np.ndarray  # the answer's values, along ``dims``
    dims: tuple[str, ...]
    coords: Mapping[str, Labels]  # the labels along each of ``dims``
    name: str
    attrs: Mapping[str, Any]  # the DataArray's attributes: units, stat, what was read...
    plan: QueryPlan
    stats: QueryStats
    weights: Weights
    # What a reader of the answer must know: ranges clipped to a coordinate's cells, why
    # accumulations were not (fully) used.
    note: str = ""
    selection: Mapping[str, Extent] = field(default_factory=dict)  # what was averaged, by dim
    # What the planner estimated its candidate plans would read (``cost``), when it chose.
    costs: Mapping[str, PlanCost] = field(default_factory=dict)
    # The dimensions averaged over that the weights vary along: where they change the answer
    # (latitude for area weights; both axes of a curvilinear grid).
    weighted_over: tuple[str, ...] = ()
    # What the planner estimated the plan that ran would cost (``cost``), to set beside
    # what it measured (``stats``).
    estimate: PlanCost | None = None

    @cached_property
    def data(self) -> xr.DataArray:
        """The answer as a ``DataArray`` named ``name``, with ``attrs`` (made once)."""
        return _data_array(self.values, self.dims, self.coords, self.name, self.attrs)

    def labels(self, dim: str) -> np.ndarray:
        """The labels along ``dim``: the values of ``data[dim]``, without making ``data``."""
        index = self.coords[dim]
        if isinstance(index, Coordinate):
            return index.values
        if isinstance(index, AxisPart):
            return index.coordinate.values[index.start : index.stop]
        if type(index) in _PLAIN_INDEXES and isinstance(index.dtype, np.dtype):
            return np.asarray(index.values, dtype=index.dtype)  # (as xarray's adapter reads it)
        return _pandas_index(index, dim).create_variables()[dim].values


def run_query(
    cube: RawCube,
    query: Query | ResolvedQuery,
    *,
    groups: AccumulationGroups | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> QueryResult:
    """Answer ``query`` on ``cube``. ``groups``: the snapshot's accumulation groups, when
    already read (an open ``Datacube`` keeps them). Chunks are read and reduced within about
    ``memory_bytes`` (see ``budget``)."""
    started = time.perf_counter()
    groups = groups or AccumulationGroups(cube)
    resolved = query if isinstance(query, ResolvedQuery) else resolve(cube, query, groups)
    if resolved.query.season is not None:
        return _seasonal(cube, groups, resolved, started, memory_bytes)
    if resolved.query.with_ is not None:
        return _correlation(cube, groups, resolved, started)
    var, weights = resolved.variable, resolved.weights
    stat, read_with, terms, layouts, note = _sums_for(cube, groups, resolved)
    if read_with != weights:
        resolved = replace(resolved, weights=read_with)
    storage = _storage(cube, groups)
    plan, work, costs = _fastest_plan(groups, var, resolved, layouts, terms, storage, memory_bytes)
    if costs:
        estimate = costs["accumulation" if plan.accumulation_reads else "scan"]
    else:
        estimate = _estimate(var, resolved, terms, storage, memory_bytes, work)
    if costs and not plan.accumulation_reads:
        note = (
            f"a full scan is estimated faster ({costs['scan']}) than the accumulations "
            f"({costs['accumulation']})"
        )
    try:
        values, done = read_answer(cube, groups, resolved, plan, work, memory_bytes)
    except InfiniteEntriesError as problem:
        # A group built before infinities were tallied apart holds them in its sums: the
        # raw data answers instead.
        (plan,) = _plans(var, resolved, [])
        work, costs = chunk_work(groups, var, plan, terms), {}
        estimate = _estimate(var, resolved, terms, storage, memory_bytes, work)
        values, done = read_answer(cube, groups, resolved, plan, work, memory_bytes)
        note = f"{problem}; answered from the raw data"
    attributes = cube.raw.variables[var.name].attrs
    attrs = {} if (units := _units_of(attributes, stat)) is None else {"units": units}
    if "long_name" in attributes:
        attrs["long_name"] = attributes["long_name"]
    stats = QueryStats(
        accumulation_chunks_read=done.accumulation_chunks,
        raw_chunks_read=done.raw_chunks,
        bytes_read=done.counts.bytes,
        requests=done.counts.requests,
        seconds=time.perf_counter() - started,
    )
    attrs |= {"stat": resolved.stat, "weights": weights, "over": ",".join(resolved.over)}
    attrs |= stats.to_dict()
    kept = resolved.kept
    if stat.centred and not plan.accumulation_reads:
        note = "; ".join(
            [*([note] if note else []), f"{resolved.stat} read from the raw chunks (exact)"]
        )
    extents = selection(cube, var.dims, resolved.ranges, resolved.sizes)
    note = "; ".join([*resolved.notes, *([note] if note else [])])
    varying = () if weights == "none" else weights_vary_along(cube, weights, var)
    weighted_over = tuple(d for d in varying if d in resolved.over)
    return QueryResult(
        resolved.query, values, tuple(kept), _coordinates(cube, resolved, kept), var.name, attrs,
        plan, stats, weights, note, extents, costs, weighted_over, estimate,
    )  # fmt: skip


def _seasonal(
    cube: RawCube,
    groups: AccumulationGroups,
    resolved: ResolvedQuery,
    started: float,
    memory_bytes: int,
) -> QueryResult:
    """A query counting one season's days only (``Query.season``): the time range cut into
    the season's runs of days, each planned on its own, all their reads one plan whose
    chunks are read in one batch (a chunk holding entries of several runs is read once).
    A map (time among ``over``) adds every run's sums; a series (dimension ``year``) keeps
    each run's apart, in a slot of its own (``QueryPlan.slots``), finished all at once."""
    var, weights = resolved.variable, resolved.weights
    season = str(resolved.query.season).upper()
    tdim = cube.remembered(
        ("time dimension", var.name), lambda: time_dimension(cube.decoded, var.dims)
    )
    if tdim is None:
        raise ParameterError("season", f"--season needs a time dimension among {list(var.dims)}")
    months = SEASONS[season]
    # The season's runs of days over the whole record, worked out once per snapshot; a
    # range's are those it overlaps, cut at its ends.
    record = cube.remembered(
        ("season runs", tdim, months),
        lambda: _record_runs(cube.decoded[tdim].values, tuple(months)),
    )
    runs, first = _runs_within(record, *resolved.ranges[tdim])
    over = tuple(d for d in var.dims if d in resolved.over or d == tdim)
    series = tdim not in resolved.over
    kept = tuple(d for d in resolved.kept if d != tdim)
    whole = replace(resolved, over=over)  # every run's days: time among ``over``
    stat, read_with, terms, layouts, note = _sums_for(cube, groups, whole)
    whole = replace(whole, weights=read_with)
    storage = _storage(cube, groups)
    reads: list[Read] = []
    scans: list[Read] = []
    scan: QueryPlan | None = None  # a box's scan, planned once: each run's is its time range
    # A box's runs planned together (``plan_runs``: the same plans, the spans along the box's
    # other dimensions found once).
    planned = iter(
        plan_runs(var.dims, resolved.ranges, over, layouts, resolved.sizes, tdim,
                  [(lo, hi) for _, lo, hi in runs])
        if whole.mask is None else ()
    )  # fmt: skip
    for slot, (_, lo, hi) in enumerate(runs):
        at = slot if series else 0
        ranges = {**resolved.ranges, tdim: (lo, hi)}
        if whole.mask is None:
            plan = next(planned)
            if scan is None:
                scan = plan_query(var.dims, ranges, over, (), resolved.sizes)
            scans += [_moved(read, tdim, lo, hi, at) for read in scan.reads]
        else:  # of a shape's ways, the one estimated fastest
            part = replace(whole, ranges=ranges)
            plan = _fastest_plan(groups, var, part, layouts, terms, storage, memory_bytes)[0]
            scans += [_moved(read, tdim, None, None, at) for read in _plans(var, part, [])[0].reads]
        reads += [_moved(read, tdim, None, None, at) for read in plan.reads]
    merged = QueryPlan(
        var.dims, over, dict(resolved.ranges), tuple(reads), whole.mask, dict(resolved.sizes),
        slots=len(runs) if series else None,
    )  # fmt: skip
    plan, work, costs = _fastest_plan(
        groups, var, whole, layouts, terms, storage, memory_bytes,
        plans=[merged], scan=replace(merged, reads=tuple(scans)),
    )  # fmt: skip
    # var, std and trend: their sums are additive over the runs as a mean's are, about one
    # reference and against one clock for all of them.
    values, done = read_answer(cube, groups, whole, plan, work, memory_bytes)
    indexes = _coordinates(cube, resolved, kept)
    dims = kept
    if series:
        dims = ("year", *kept)
        # The record's years, made once per snapshot (making an index costs more than
        # slicing one): the runs in the range are consecutive runs of the record; all of
        # them, its coordinate made once too.
        if first == 0 and len(runs) == len(record.runs):
            indexes["year"] = record.coordinate
        else:
            last = first + len(runs)
            indexes["year"] = AxisPart(record.years, record.coordinate, first, last)
    units = _units_of(cube.raw.variables[var.name].attrs, stat)
    attrs: dict[str, Any] = {} if units is None else {"units": units}
    stats = QueryStats(
        done.accumulation_chunks, done.raw_chunks, done.counts.bytes, done.counts.requests,
        time.perf_counter() - started,
    )  # fmt: skip
    attrs |= {
        "stat": resolved.stat, "weights": weights, "over": ",".join(resolved.over),
        "season": season,
    } | stats.to_dict()  # fmt: skip
    if costs and not plan.accumulation_reads:
        note = "; ".join(
            [*([note] if note else []), f"a full scan is estimated faster ({costs['scan']}) "
             f"than the accumulations ({costs['accumulation']})"]
        )  # fmt: skip
    described = f"{season}: {len(runs)} period(s) of its days in the range"
    note = "; ".join([*resolved.notes, *([note] if note else []), described])
    extents = selection(cube, var.dims, resolved.ranges, resolved.sizes)
    estimate = costs.get("accumulation" if plan.accumulation_reads else "scan")
    return QueryResult(
        resolved.query, values, tuple(dims), indexes, var.name, attrs, plan, stats, weights,
        note, extents, costs, estimate=estimate,
    )  # fmt: skip


def _sums_for(
    cube: RawCube, groups: AccumulationGroups, resolved: ResolvedQuery
) -> tuple[statistics.Statistic, Weights, tuple[str, ...], list[AccumulationLayout], str]:
    """The statistic ``resolved`` asks, the weights its sums are read with, those sums and
    the accumulations that hold them (none, and why, for a full scan). Without weights
    where they divide out (``_weights_cancel``) and would be multiplied in as the sums are
    read (raw values; the entries of accumulations whose weights factor out): the same
    accumulations give the sums without weights. The same for every box of a snapshot:
    worked out once per kind of question (a shape's, each time)."""
    if resolved.mask is not None:
        return _sums_now(cube, groups, resolved)
    key = (
        "sums for", resolved.variable.name, resolved.stat, resolved.weights,
        resolved.use_accumulation, tuple(resolved.over),
    )  # fmt: skip
    stat, read_with, terms, layouts, note = groups.remembered(
        key, lambda: _sums_now(cube, groups, resolved)
    )
    return stat, read_with, terms, list(layouts), note


def _sums_now(
    cube: RawCube, groups: AccumulationGroups, resolved: ResolvedQuery
) -> tuple[statistics.Statistic, Weights, tuple[str, ...], list[AccumulationLayout], str]:
    var, weights = resolved.variable, resolved.weights
    stat, infinite, terms, layouts, note = _sums_and_layouts(groups, resolved)
    if _weights_cancel(cube, resolved) and _weights_applied(groups, var, layouts):
        plain = stat.sums_for(weighted=False, infinite=infinite)
        plain_layouts = usable_layouts(groups, var, "none", plain)[0] if layouts else []
        if [layout.key for layout in plain_layouts] == [layout.key for layout in layouts]:
            return stat, "none", plain, plain_layouts, note
    return stat, weights, terms, layouts, note


def _units_of(attributes: Mapping[str, Any], stat: statistics.Statistic) -> str | None:
    """The answer's units, from the variable's: squared for a variance, per year for a
    trend; None without."""
    if attributes.get("units") is None or not stat.has_units:
        return None
    units = str(attributes["units"])
    if stat.units_power != 1:
        units = f"({units})^{stat.units_power}"
    return f"({units}) per year" if stat.per_year else units


def _correlation(
    cube: RawCube, groups: AccumulationGroups, resolved: ResolvedQuery, started: float
) -> QueryResult:
    """Pearson's r of two variables over ``over`` (``stat="corr"``) from their pair sums
    (``statistics.pair_sums``): two entries of the stored prefix sums per whole-chunk period
    along time where ``accumulate --stats corr:VAR2`` kept them (``model.pairs``), and the
    raw chunks of both variables for the rest, slab by slab along the first dimension (a row
    of raw chunks at a time), about the stored references (or each variable's first
    selected values' mean)."""
    var = resolved.variable
    other_name = str(resolved.query.with_)
    if other_name not in cube.data_variables:
        raise ParameterError("with", f"--with {other_name!r}: no such data variable")
    other = cube.variable(other_name)
    if (other.dims, other.shape) != (var.dims, var.shape):
        raise ParameterError(
            "with",
            f"--with {other_name!r}: dimensions {dict(zip(other.dims, other.shape, strict=True))}"
            f" differ from {var.name!r}'s {dict(zip(var.dims, var.shape, strict=True))}",
        )
    if resolved.mask is not None:
        raise ParameterError("with", "corr over a shape is not supported: give ranges")
    if any(hi > n for (_, hi), n in zip(resolved.ranges.values(), var.shape, strict=False)):
        raise ParameterError("with", "corr over a range across the longitude seam is not supported")
    stat = statistics.STATISTICS["corr"]
    kept = resolved.kept
    shape = tuple(resolved.ranges[d][1] - resolved.ranges[d][0] for d in kept)
    stored = _stored_pairs(cube, resolved, other_name)
    layouts = []
    references: tuple[float, float] | None = None
    if stored is not None:
        described, _ = stored
        usable = described.usable_positions()
        coverage = dict(zip(var.dims, var.shape, strict=True))
        coverage[described.dim] = usable[-1] if usable else 0
        layouts = [AccumulationLayout((described.dim,), {described.dim: usable}, coverage)]
        references = described.references
    plan = plan_query(var.dims, resolved.ranges, resolved.over, layouts, resolved.sizes)
    # The 8 sums of the answer's shape: this thread's working space (``execute._scratch``;
    # a map's are 4 MB, fresh memory to page in at every question otherwise), each read's
    # added in place, an entry's chunk by chunk as it arrives.
    total = _scratch((8, *shape), 2)
    written = False  # whether the total holds values yet (its space is uninitialised)
    entries = raw = 0
    counts = ReadCounts()
    for read in plan.reads:
        box = {d: read.box.get(d, resolved.ranges[d]) for d in var.dims}
        out = tuple(slice(box[d][0] - resolved.ranges[d][0], box[d][1] - resolved.ranges[d][0])
                    for d in kept)  # fmt: skip
        # The first read, when it covers the whole answer, is written (with its sign), not
        # added to zeros: the same bits, one pass fewer.
        first = not written and all(box[d] == resolved.ranges[d] for d in kept)
        if not written and not first:
            total.fill(0.0)
        written = True
        into = total[(slice(None), *out)]
        if read.is_raw:
            sums, references, chunks = _raw_pairs(cube, var, other_name, box, resolved, references)
            _add_signed(into, sums, read.sign, first)
            raw += chunks
        else:
            assert stored is not None
            _add_entry_pairs(stored, var, read, box, resolved, counts, into, first)
            entries += 1
    if not written:
        total.fill(0.0)
    values = stat.answer(list(total), False)
    if np.may_share_memory(values, total):  # (the total is working space)
        values = np.array(values)
    # (The raw chunks' requests and bytes are not counted: they are read through xarray.)
    stats = QueryStats(entries, raw, counts.bytes, counts.requests, time.perf_counter() - started)
    attrs = {
        "stat": "corr", "with": other_name, "weights": "none", "over": ",".join(resolved.over)
    } | stats.to_dict()  # fmt: skip
    how = "from its pair sums" if entries else "from the raw chunks of both (exact)"
    if entries and raw:
        how = "from its pair sums and the raw chunks of both at the ends"
    note = "; ".join([*resolved.notes, f"corr with {other_name} read {how}"])
    extents = selection(cube, var.dims, resolved.ranges, resolved.sizes)
    return QueryResult(
        resolved.query, np.asarray(values), tuple(kept), _coordinates(cube, resolved, kept),
        var.name, attrs, plan, stats, "none", note, extents,
    )  # fmt: skip


def _stored_pairs(
    cube: RawCube, resolved: ResolvedQuery, other: str
) -> tuple[pairs.PairSums, zarr.Array[Any]] | None:
    """The pair sums kept for this correlation, when the query may and can use them: over
    time, by a cube that keeps them (they are read through the reader's store)."""
    if not resolved.use_accumulation:
        return None
    name = resolved.variable.name
    # Their array, opened once per snapshot (opening it reads no chunk: its metadata is the
    # snapshot's).
    found = cube.remembered(
        ("pair sums", name, other), lambda: pairs.read_pairs(cube.root, name, other)
    )
    if found is None or found[0].dim not in resolved.over:
        return None
    described, array = found
    if array.store_path.store is not cube.store:
        array = array_with(array, store=cube.store)
    return described, array


def _add_entry_pairs(
    stored: tuple[pairs.PairSums, zarr.Array[Any]],
    var: VariableInfo,
    read: Read,
    box: Mapping[str, tuple[int, int]],
    resolved: ResolvedQuery,
    counts: ReadCounts,
    into: np.ndarray,
    first: bool,
) -> None:
    """One entry of the stored pair sums over ``box`` (the dimensions other than time),
    summed over those of ``over``, added with the read's sign into ``into`` (``(8, *kept
    part)``; ``first``: written into it instead, its space not set yet). The chunks are read
    in one batch, their requests and bytes added to ``counts``; where nothing is summed
    (a map), each is added where it lands as it arrives, never assembled into an entry of
    its own (a map's is 4 MB to copy, in fresh memory)."""
    described, array = stored
    rest = [d for d in var.dims if d != described.dim]
    entry = read.entries[described.dim]
    region = (slice(entry, entry + 1), slice(None, None), *(slice(*box[d]) for d in rest))
    region = tuple(slice(*s.indices(n)[:2]) for s, n in zip(region, array.shape, strict=True))
    summed = tuple(1 + rest.index(d) for d in rest if d in resolved.over)
    if summed:  # summed across chunks in one call
        values = read_region(array, region, counts)[0].astype("f8", copy=False)
        _add_signed(into, np.sum(values, axis=summed), read.sign, first)
        return
    bounds = array_bounds(array)

    def place(request: ChunkRequest, chunk: np.ndarray) -> None:
        inside, at = overlap(bounds, region, request.coords)
        # (Each chunk lands in a part of ``into`` of its own: no lock.)
        _add_signed(into[at[1:]], chunk[inside][0], read.sign, first)

    overlapping = [
        b.chunks_overlapping(s.start, s.stop) for b, s in zip(bounds, region, strict=True)
    ]
    requests = (ChunkRequest(array, coords) for coords in itertools.product(*overlapping))
    done = read_chunks(requests, place)
    counts.requests += done.requests
    counts.bytes += done.bytes


def _add_signed(into: np.ndarray, sums: np.ndarray, sign: int, first: bool) -> None:
    """``into`` ± ``sums`` in place, or ± ``sums`` written into it when ``first``."""
    if first:
        if sign > 0:
            np.copyto(into, sums)
        else:
            np.negative(sums, out=into)
    else:
        (np.add if sign > 0 else np.subtract)(into, sums, out=into)


def _raw_pairs(
    cube: RawCube,
    var: VariableInfo,
    other: str,
    box: Mapping[str, tuple[int, int]],
    resolved: ResolvedQuery,
    references: tuple[float, float] | None,
) -> tuple[np.ndarray, tuple[float, float], int]:
    """The pair sums of ``box`` from the raw chunks of both variables, a row of chunks along
    the first dimension at a time; the references (the first values' means when none is
    given) and the chunks read."""
    axes = tuple(var.axis(d) for d in resolved.over)
    first = var.dims[0]
    lo, hi = box[first]
    cuts = [lo, *(e for e in var.bounds[0].edges if lo < e < hi), hi]
    kept_shape = [box[d][1] - box[d][0] for d in resolved.kept]
    total = np.zeros((8, *kept_shape))
    for a, b in itertools.pairwise(cuts):
        part = {**{d: slice(*box[d]) for d in var.dims}, first: slice(a, b)}
        x = cube.decoded_values(var.name, part)
        y = cube.decoded_values(other, part)
        if references is None:
            references = (_finite_mean(x), _finite_mean(y))
        sums = statistics.pair_sums(x, y, axes, references)
        if first in resolved.over:
            total += sums
        else:
            total[:, a - lo : b - lo] += sums
    chunks = 2 * prod(
        len(bounds.chunks_overlapping(*box[d]))
        for d, bounds in zip(var.dims, var.bounds, strict=True)
    )
    return total, references or (0.0, 0.0), chunks


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


def _season_days(times: np.ndarray, months: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """Of each step of ``times``: whether its month is among ``months``, and the year of
    the season it belongs to (December's is the next year's when the season wraps)."""
    index = pd.DatetimeIndex(times) if np.issubdtype(times.dtype, np.datetime64) else None
    month = np.array(index.month if index is not None else [t.month for t in times])
    year = np.array(index.year if index is not None else [t.year for t in times])
    wraps = 12 in months and 1 in months
    return np.isin(month, months), np.where(wraps & (month == 12), year + 1, year)


def _runs(inside: np.ndarray, season_year: np.ndarray, lo: int) -> list[tuple[int, int, int]]:
    """The runs of consecutive steps ``inside`` of one season year, from step ``lo``."""
    steps = np.flatnonzero(inside)
    if not steps.size:
        return []
    # A run ends where the next step inside is not the next step, or of another year.
    ends = (np.diff(steps) != 1) | (np.diff(season_year[steps]) != 0)
    starts = np.concatenate([[0], np.flatnonzero(ends) + 1])
    stops = np.concatenate([np.flatnonzero(ends), [steps.size - 1]])
    return [
        (int(season_year[steps[a]]), lo + int(steps[a]), lo + int(steps[b]) + 1)
        for a, b in zip(starts, stops, strict=True)
    ]


@dataclass(frozen=True)
class _Record:
    """The runs of a season's days over a whole record (season year, start, stop), their
    stops (for ``_runs_within``) and their years (an index, sliced for a series' years)."""

    runs: list[tuple[int, int, int]]
    stops: list[int]
    years: pd.Index
    coordinate: Coordinate  # of all the years: a series over the whole record's


def _record_runs(times: np.ndarray, months: tuple[int, ...]) -> _Record:
    """The runs of the season's days over all of ``times``."""
    runs = _runs(*_season_days(times, months), 0)
    years = pd.Index(np.fromiter((year for year, _, _ in runs), np.int64, len(runs)), name="year")
    return _Record(runs, [stop for _, _, stop in runs], years, Coordinate.of(years, "year"))


def _runs_within(record: _Record, lo: int, hi: int) -> tuple[list[tuple[int, int, int]], int]:
    """The runs of ``record`` that steps ``[lo, hi)`` overlap, cut at ``lo`` and ``hi``:
    the runs of the season's days in that range (the same as found in its steps alone),
    and where the first of them is among the record's."""
    first = bisect.bisect_right(record.stops, lo)
    within = []
    for year, start, stop in record.runs[first:]:
        if start >= hi:
            break
        within.append((year, max(start, lo), min(stop, hi)))
    return within, first


def _moved(read: Read, tdim: str, lo: int | None, hi: int | None, slot: int) -> Read:
    """``read`` adding into ``slot``, over steps ``[lo, hi)`` of ``tdim`` when given (a
    scan's read of another run: the same box at other times)."""
    if lo is None or hi is None:
        if slot == read.slot:  # (a map's reads: as planned)
            return read
        return Read(read.source, read.sign, read.entries, read.box, read.key, slot)
    return Read(read.source, read.sign, read.entries, {**read.box, tdim: (lo, hi)}, read.key, slot)


def _weights_cancel(cube: RawCube, resolved: ResolvedQuery) -> bool:
    """Whether ``resolved`` is a weighted statistic whose weights divide out (a mean,
    variance or standard deviation: ``Statistic.scale_free``) and vary only along
    dimensions its answer keeps (area weights, along latitude, in a map over time): each of
    its cells then weighs all its values alike, and its answer from the sums without
    weights multiplies nothing, with answers equal to rounding (docs/benchmarks.md).
    Shapes are left as they are."""
    if resolved.weights == "none" or resolved.mask is not None:
        return False
    if not statistics.STATISTICS[resolved.stat].scale_free:
        return False
    varying = weights_vary_along(cube, resolved.weights, resolved.variable)
    return not set(varying) & set(resolved.over)


def _weights_applied(
    groups: AccumulationGroups, var: VariableInfo, layouts: Sequence[AccumulationLayout]
) -> bool:
    """Whether every accumulation of ``layouts`` stores its sums without weights (they
    factor out): its entries are multiplied by the weights as they are read. Where the
    weighted sums are stored, they are read as they are (reading the default group's map
    from its unweighted arrays instead was no faster: docs/benchmarks.md)."""
    group = groups.group(var.name)
    return all(group is not None and group.by_key(layout.key).factored for layout in layouts)


def read_answer(
    cube: RawCube,
    groups: AccumulationGroups,
    resolved: ResolvedQuery,
    plan: QueryPlan,
    work: Work | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
) -> tuple[np.ndarray, ExecutedPlan]:
    """The statistic ``resolved`` asks for, read through ``plan`` (``work``: its chunks,
    when already listed): the answer's values (kept dimensions in the variable's order;
    missing where a kept latitude or longitude holds no cell of a shape) and what was read."""
    var, weights = resolved.variable, resolved.weights
    stat = statistics.STATISTICS[resolved.stat]
    infinite = statistics.can_be_infinite(var.array.dtype)
    terms = stat.sums_for(weighted=weights != "none", infinite=infinite)
    times = None
    if stat.timed:
        # Worked out once per snapshot: every trend asked again (docs/benchmarks.md,
        # "Per-question cost").
        dim, steps = cube.remembered(
            ("years", tuple(var.dims)),
            lambda: _fixed(years(cube.decoded, var.dims, f"stat {resolved.stat!r}")),
        )
        times = along(steps, var.axis(dim), len(var.dims))
    reference = _reference(cube, groups, resolved) if stat.centred else 0.0
    done = execute(
        cube, groups, var, plan, terms, weights, memory_bytes, work,
        reference=reference, times=times,
    )  # fmt: skip
    sums = _weights_without_noise(done.terms, done.sums, done.entry_magnitude)
    # (terms, ...): one array per term, as a sequence of them is indexed.
    values = stat.answer(sums, weights != "none", reference)  # type: ignore[arg-type]
    if np.may_share_memory(values, sums):  # the sums are working space (``execute``)
        values = np.array(values)
    if resolved.mask is not None:
        inside = kept_cells(resolved.mask, var.dims, resolved.over)
        values = values if inside is None else np.where(inside, values, np.nan)
    return values, done


def _fixed(found: tuple[str, np.ndarray]) -> tuple[str, np.ndarray]:
    """``years``' answer, its steps read-only: shared by the snapshot's questions."""
    found[1].flags.writeable = False
    return found


def _reference(cube: RawCube, groups: AccumulationGroups, resolved: ResolvedQuery) -> float:
    """What a centred statistic's sums are taken about: the group's reference value when it
    has one (raw chunks must then match its entries), otherwise the mean of the finite
    values of the first raw chunk the selection holds (near the data's mean: the squares
    then cancel little; one chunk read, as the build does)."""
    var = resolved.variable
    group = groups.group(var.name)
    if group is not None and group.reference is not None:
        return group.reference
    region = []
    for dim, bounds, size in zip(var.dims, var.bounds, var.shape, strict=True):
        lo = resolved.ranges[dim][0] % max(size, 1)  # (a range across a longitude seam)
        stop = next((e for e in bounds.edges if e > lo), size)
        region.append(slice(lo, min(resolved.ranges[dim][1], stop, size)))
    # Through the reader's store (the service's guard), as every other read of a query.
    values = cube.decoded_values(var.name, dict(zip(var.dims, region, strict=True)))
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


# --------------------------------------------------------------------------------------------
# Choosing the plan


def _plans(
    var: VariableInfo, resolved: ResolvedQuery, layouts: Sequence[AccumulationLayout]
) -> list[QueryPlan]:
    """The plans of ``resolved`` from ``layouts`` (none: the plain scan of its cells): one
    for a box, a few for a shape (``shapes.shape_plans``)."""
    if resolved.mask is None:
        return [plan_query(var.dims, resolved.ranges, resolved.over, layouts, resolved.sizes)]
    edges = {d: b.edges for d, b in zip(var.dims, var.bounds, strict=True)}
    return shape_plans(var.dims, resolved.ranges, resolved.over, layouts, resolved.mask, edges)


def _storage(cube: RawCube, groups: AccumulationGroups) -> Storage:
    """How the plan's chunks are read: the slower of the cube's store and a sidecar's."""
    raw = storage_of(cube.store)
    if groups.store is None:
        return raw
    side = storage_of(groups.store)
    return Storage(max(raw.latency, side.latency), raw.in_thread and side.in_thread)


def _estimate(
    var: VariableInfo,
    resolved: ResolvedQuery,
    terms: Sequence[str],
    storage: Storage,
    memory_bytes: int,
    work: Work,
) -> PlanCost:
    """The estimated cost of reading the chunks of ``work``."""
    requests = (request for request, _ in work.values())
    return plan_cost(requests, var, storage, terms, resolved.over, memory_bytes)


def _fastest_plan(
    groups: AccumulationGroups,
    var: VariableInfo,
    resolved: ResolvedQuery,
    layouts: Sequence[AccumulationLayout],
    terms: Sequence[str],
    storage: Storage,
    memory_bytes: int,
    plans: Sequence[QueryPlan] | None = None,
    scan: QueryPlan | None = None,
) -> tuple[QueryPlan, Work, dict[str, PlanCost]]:
    """The plan the accumulations allow or the plain scan of the same cells, whichever is
    estimated faster (``cost``), with the chunks it reads and both estimates (none when the
    plan reads no accumulation: there is nothing to choose). A query asking for the
    accumulations' plan gets it, with both estimates. Of several ways the accumulations
    answer (a shape's), the one estimated fastest is theirs. ``plans`` and ``scan``: those
    ways and the scan, when made already (a season's, of all its runs)."""

    def estimate(work: Work) -> PlanCost:
        return _estimate(var, resolved, terms, storage, memory_bytes, work)

    if plans is None:
        plans = _plans(var, resolved, layouts)
    candidates = [(plan, chunk_work(groups, var, plan, terms)) for plan in plans]
    accumulation = None
    if len(candidates) > 1:
        estimates = [estimate(work) for _, work in candidates]
        fastest = min(range(len(estimates)), key=lambda k: estimates[k].seconds)
        candidates, accumulation = [candidates[fastest]], estimates[fastest]
    plan, work = candidates[0]
    if not plan.accumulation_reads:
        return plan, work, {}
    if scan is None and resolved.mask is None:  # its boxes, without the plan (made if chosen)
        boxes: Sequence[Mapping[str, tuple[int, int]]] = scan_boxes(
            var.dims, resolved.ranges, resolved.sizes
        )
    else:
        scan = scan or _plans(var, resolved, [])[0]
        boxes = [read.box for read in scan.reads]
    accumulation = accumulation or estimate(work)
    scan_estimate = None
    if resolved.mask is None:  # (a shape's scan boxes may overlap)
        # Where even a bound of the scan exceeds the accumulations' estimate, the scan
        # cannot be chosen: the bound is reported (``PlanCost.at_least``), not estimated in
        # full (tens of µs of a question's planning).
        bound = scan_bound(var, boxes, storage, terms, resolved.over, memory_bytes)
        scan_estimate = bound if bound.seconds >= accumulation.seconds else None
    if scan_estimate is None:
        scan_estimate = scan_cost(var, boxes, storage, terms, resolved.over, memory_bytes)
    costs = {"accumulation": accumulation, "scan": scan_estimate}
    if resolved.query.plan == "cheaper" and costs["scan"].seconds < costs["accumulation"].seconds:
        scan = scan or _plans(var, resolved, [])[0]
        return scan, chunk_work(groups, var, scan, terms), costs
    return plan, work, costs


# --------------------------------------------------------------------------------------------
# Choosing accumulations


def _sums_and_layouts(
    groups: AccumulationGroups, resolved: ResolvedQuery
) -> tuple[statistics.Statistic, bool, tuple[str, ...], list[AccumulationLayout], str]:
    """The statistic ``resolved`` asks, whether its values can be infinite, the sums it
    needs, and the accumulations that hold them (none, and why, for a full scan)."""
    var, weights = resolved.variable, resolved.weights
    stat = statistics.STATISTICS[resolved.stat]
    infinite = statistics.can_be_infinite(var.array.dtype)
    terms = stat.sums_for(weighted=weights != "none", infinite=infinite)
    if not resolved.use_accumulation:
        return stat, infinite, terms, [], "accumulation not used (full scan requested)"
    layouts, note = usable_layouts(groups, var, weights, terms)
    return stat, infinite, terms, layouts, note


def usable_layouts(
    groups: AccumulationGroups, var: VariableInfo, weights: Weights, terms: Sequence[str]
) -> tuple[list[AccumulationLayout], str]:
    """Where the entries of every accumulation of ``var`` that holds ``terms`` with
    ``weights`` end (``AccumulationLayout``), within the extent they cover; none, and why,
    when the group cannot answer. Worked out once per snapshot's groups."""
    key = ("usable layouts", var.name, weights, tuple(terms))
    layouts, note = groups.remembered(key, lambda: _usable_layouts(groups, var, weights, terms))
    return list(layouts), note


def _usable_layouts(
    groups: AccumulationGroups, var: VariableInfo, weights: Weights, terms: Sequence[str]
) -> tuple[list[AccumulationLayout], str]:
    group = groups.group(var.name)
    if group is None:
        return [], "no accumulation group"
    if not group.complete:
        return [], "accumulation group incomplete (build interrupted); ignored"
    if weights != "none" and group.weights != weights:
        return [], f"accumulations hold weights {group.weights!r}, query asks {weights!r}"
    unit_problem = stride_unit_problem(var, group)
    if unit_problem:
        return [], unit_problem
    layouts = []
    for acc in group.accumulations:
        # A group built before tallies were kept is read without them (its entries must
        # then be finite: ``execute``).
        if not all(statistics.held_term(acc, t) for t in terms if t not in spec.TALLIES):
            continue
        covered = group.coverage
        if acc.placement is None:
            positions = {}
            for dim in acc.dims:
                bounds = var.bounds[var.axis(dim)]
                stored = groups.array(var.name, acc.arrays[terms[0]])
                entries = stored.shape[acc.array_dims.index(dim)]
                edges = bounds.strided_edges(acc.stride(dim))[:entries]
                positions[dim] = tuple(e for e in edges if e <= covered.get(dim, 0))
        else:
            # Entries at the positions the group's ``accumulus`` attribute lists, the final
            # ones only (an open month is provisional), within the final extent.
            placed = acc.placement
            positions = {
                d: _final_within(placed.positions[d], placed.final[d], covered[d])
                for d in placed.accumulated
            }
        layouts.append(
            AccumulationLayout(
                acc.prefix_dims, positions, dict(covered), acc.key, reach=not acc.is_zep5
            )
        )
    return layouts, "" if layouts else "no accumulation holds the sums this query needs"


def accumulations_answer(groups: AccumulationGroups, resolved: ResolvedQuery) -> bool:
    """Whether some accumulation of ``groups`` can take part in answering ``resolved``
    (before any plan is made: otherwise every value is read from the raw data, a scan)."""
    if resolved.query.with_ is not None:  # a correlation's pair sums, when kept
        other = str(resolved.query.with_)
        return resolved.use_accumulation and (
            pairs.read_pairs(groups.cube.root, resolved.variable.name, other) is not None
        )
    if not resolved.use_accumulation:
        return False
    try:
        return bool(_sums_and_layouts(groups, resolved)[3])
    except AccumulationReadError:  # a group that cannot be used: the raw data answers
        return False


def _final_within(positions: Sequence[int], final: int, covered: int) -> tuple[int, ...]:
    """The first ``final`` of ``positions`` (increasing) that end within ``covered``."""
    return tuple(positions[: min(final, bisect.bisect_right(positions, covered))])


def _data_array(
    values: np.ndarray,
    dims: Sequence[str],
    indexes: Mapping[str, Labels],
    name: str,
    attrs: Mapping[str, Any] | None = None,
) -> xr.DataArray:
    """The answer as a DataArray with ``attrs``, from NumPy values wrapped as an xarray
    variable first (given bare arrays, xarray asks whether each is a Dask array, which
    imports ``dask.array``, and SciPy with it, at a command's start when Dask is installed)
    and coordinates from the labels' pandas indexes (not built again), or from a whole
    axis' coordinate made once (``_whole_axis``)."""
    variable = xr.Variable(tuple(dims), values, attrs, fastpath=True)
    xindexes = {}
    variables = {}
    for d in dims:
        index = indexes[d]
        if isinstance(index, AxisPart):
            index = index.labels
        if isinstance(index, Coordinate):
            xindexes[d] = index.index
            # Its own variable (a user may set its attributes), over the same labels.
            variables[d] = index.variable.copy(deep=False)
        else:
            xindexes[d] = _pandas_index(index, d)
            variables.update(xindexes[d].create_variables())
    # Variables and indexes made here, for this answer alone: xarray's direct construction
    # (without it, xarray deep-copies every coordinate of every answer).
    return xr.DataArray(
        variable,
        coords=variables,
        name=name,
        indexes=xindexes,  # type: ignore[arg-type]  # str keys: Hashable ones, to xarray
        fastpath=True,
    )


@dataclass(frozen=True)
class Coordinate:
    """An answer's coordinate along a whole axis, made once (per snapshot, or per season's
    record) for every answer that keeps the axis whole: xarray's index (immutable, shared
    as xarray shares indexes) and its variable (copied into each answer). Making them
    walks through pandas and xarray, code that the decoding between two questions evicts
    from the caches: a map's two cost 0.1-0.2 ms in a query (docs/benchmarks.md,
    "Statistics, session stats47")."""

    index: PandasIndex
    variable: xr.Variable
    values: np.ndarray  # the variable's values (``QueryResult.labels``), read-only

    @classmethod
    def of(cls, labels: pd.Index, dim: str) -> Coordinate:
        index = _pandas_index(labels, dim)
        variable = index.create_variables()[dim]
        values = np.array(variable.values)  # (its own copy: no answer may change it)
        values.flags.writeable = False
        return cls(index, variable, values)


@dataclass(frozen=True)
class AxisPart:
    """An answer's labels that are steps ``start`` to ``stop`` of a whole axis (a series'
    days, a map's latitudes): that axis' labels (pandas') and ``Coordinate``, which their
    values are a view of (and whose written forms, made once, outputs slice)."""

    whole: pd.Index
    coordinate: Coordinate
    start: int
    stop: int

    @cached_property
    def labels(self) -> pd.Index:
        """The labels themselves (pandas'), sliced when first asked for: only a
        ``DataArray`` of the answer needs them."""
        return self.whole[self.start : self.stop]


def _coordinates(cube: RawCube, resolved: ResolvedQuery, dims: Sequence[str]) -> dict[str, Labels]:
    """The labels of the answer's kept ``dims`` (``answer_index``): each whole axis'
    ``Coordinate``, made once per snapshot; a part of one, as an ``AxisPart`` of it; others
    (continuing past a longitude's seam) as they are."""
    found: dict[str, Labels] = {}
    for d in dims:
        whole = whole_labels(cube, d)
        coordinate = cube.remembered(("answer coordinate", d), partial(Coordinate.of, whole, d))
        lo, hi = resolved.ranges[d]
        if not within_axis(resolved, d):
            labels = answer_index(cube, resolved, d)
            part = _labels_from(coordinate, labels, lo, hi)  # (the axis' own labels)
            found[d] = AxisPart(whole, coordinate, lo, hi) if part else labels
        elif lo == 0 and hi == len(whole):
            found[d] = coordinate
        elif _of_whole(coordinate, whole):  # its steps lo to hi (``answer_index``)
            found[d] = AxisPart(whole, coordinate, lo, hi)
        else:
            found[d] = whole[lo:hi]
    return found


def _of_whole(coordinate: Coordinate, whole: pd.Index) -> bool:
    """Whether every part of ``whole`` is the same part of ``coordinate``, made from it
    (``_labels_from`` of each, without comparing them): numbers or times of its type."""
    values = coordinate.values
    alike = whole.dtype == values.dtype and len(whole) == len(values)
    return values.dtype.kind in "iufmM" and alike


def _labels_from(coordinate: Coordinate, labels: pd.Index, lo: int, hi: int) -> bool:
    """Whether ``labels`` are ``coordinate``'s from step ``lo`` to ``hi``: numbers or times
    of the same type and values (compared at once, not label by label)."""
    whole = coordinate.values
    return (
        0 <= lo <= hi <= len(whole)
        and len(labels) == hi - lo
        and whole.dtype.kind in "iufmM"
        and labels.dtype == whole.dtype
        and np.array_equal(np.asarray(labels.values), whole[lo:hi])
    )


def _pandas_index(index: pd.Index, dim: str) -> PandasIndex:
    """xarray's index of an answer's coordinate. Labels of a NumPy type (numbers, dates)
    are taken as they are, with their own dtype: what xarray's checks and casts would find
    (docs/benchmarks.md, "Per-question Python"); other indexes go through them."""
    if type(index) in _PLAIN_INDEXES and isinstance(index.dtype, np.dtype):
        return PandasIndex(index, dim, index.dtype, fastpath=True)
    return PandasIndex(index, dim)


# Indexes whose dtype is a NumPy dtype xarray keeps as it is (``_pandas_index``).
_PLAIN_INDEXES = (pd.Index, pd.DatetimeIndex)

# An answer's labels along one dimension (``_coordinates``).
type Labels = pd.Index | Coordinate | AxisPart


def _weights_without_noise(
    terms: Sequence[str], sums: np.ndarray, magnitude: np.ndarray | None
) -> np.ndarray:
    """The sums, those of weights (Σw, Σ1) within the noise of 0 (``noise_floor`` of the
    ``magnitude`` of the entries added into them) set to 0 in place: prefix-sum differences
    over no valid value, which would otherwise make a mean of 0/1e-17 instead of NaN."""
    if magnitude is None:  # no floating-point entry was added: nothing to cancel
        return sums
    for k, name in enumerate(terms):
        if statistics.SUMS[name].is_weight:
            limit, row = noise_floor(magnitude[k]), sums[k, ...]  # a view, also of one value
            row[(row <= limit) & (row >= -limit)] = 0.0
    return sums
