"""One checked query: what a user asks, and the same question resolved against a snapshot.

``Query`` is the one carrier of a question, from the command line, the service and the
Python API (``accumulus.query``/``average``, ``Datacube.query``/``average``, whose keyword
arguments are ``QueryOptions``) to the planner: a statistic of a variable over some
dimensions, within inclusive label ranges. Each front end parses its own text into a
``Query``; ``Query.asked`` takes the forms Python users write. ``resolve`` checks it against
a cube's metadata snapshot before any chunk is read and turns it into a ``ResolvedQuery``:
the variable as stored, the dimensions averaged away (in the variable's order), index ranges
selected exactly as ``DataArray.sel(dim=slice(start, end))`` selects them, and the weights to
use. Every mistake is a ``ParameterError`` naming its parameter, so the command line prints
it on one line and the service answers it as a 4xx naming the parameter.

Adding a query parameter is one field of ``Query`` (with its ``QueryOptions`` key, checked
in ``Query.__post_init__`` or in ``resolve``), then one edit per front end: see
docs/development.md.

Numeric ranges may be written either way round; longitudes are compared modulo 360, and a
longitude range whose west edge is east of its east edge crosses the date line (see
``longitude``). A range reaching past a coordinate's cells is clipped to them, and the
answer says so (``ResolvedQuery.notes``).

Text as users type it (``"lat,lon"``, ``"2001-01-01/2001-12-31"``) is split here, once.
"""

from __future__ import annotations

import datetime
import functools
import math
import operator
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from math import prod
from typing import Any, Literal, TypedDict, Unpack, get_args

import numpy as np
import pandas as pd
import xarray as xr

from accumulus import coordinates
from accumulus.accumulation.model import statistics
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.accumulation.model.spec import Weights
from accumulus.accumulation.model.statistics import Stat
from accumulus.accumulation.model.weights import no_latitude, resolve_weights
from accumulus.accumulation.query import longitude
from accumulus.accumulation.query.shapes import CellMask, shape_cells
from accumulus.errors import AccumulusError, ParameterError
from accumulus.identity_memo import IdentityMemo
from accumulus.numeric import check_numeric
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.regions import Shape, as_shape

STATS = tuple(statistics.STATISTICS)

Bound = Any  # a coordinate label (str, number, date), or None for an open end
Range = tuple[Bound, Bound] | slice  # inclusive, as ``sel(dim=slice(start, end))``

# Which plan runs when accumulations can answer: "cheaper", the accumulations' plan or the
# plain scan, whichever is estimated faster (``cost``); "accumulation", the accumulations'
# plan even when a scan would be faster (to check or time the accumulations).
MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
# The months of each season a query may name (1 = January).
SEASONS: dict[str, tuple[int, ...]] = {
    "DJF": (12, 1, 2),
    "MAM": (3, 4, 5),
    "JJA": (6, 7, 8),
    "SON": (9, 10, 11),
} | {name: (k + 1,) for k, name in enumerate(MONTHS)}
SEASONAL_STATS = ("mean", "sum", "count", "var", "std", "trend")

PlanChoice = Literal["cheaper", "accumulation"]
PLANS: tuple[PlanChoice, ...] = get_args(PlanChoice)


@dataclass(frozen=True)
class Query:
    """What a user asks: ``stat`` of ``variable`` over the dimensions ``over`` within label
    ``ranges`` (inclusive, like ``sel(dim=slice(a, b))``; None for an open end). A statistic
    or a plan that does not exist is refused here, before any store is read."""

    variable: str
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[Bound, Bound]] = field(default_factory=dict)
    stat: Stat = "mean"
    weights: Weights | None = None  # None: the accumulation group's weights, else the default
    use_accumulation: bool = True
    shape: Shape | None = None  # average over the cells whose centres it holds
    plan: PlanChoice = "cheaper"
    # DJF, MAM, JJA, SON or a month (JAN ... DEC): only its days count (``seasons``).
    season: str | None = None
    # The second variable of stat "corr" (on the same grid).
    with_: str | None = None

    def __post_init__(self) -> None:
        if self.stat not in statistics.STATISTICS:
            known = ", ".join(statistics.STATISTICS)
            raise ParameterError("stat", f"unknown stat {self.stat!r}: use one of {known}")
        if self.plan not in PLANS:
            known = ", ".join(PLANS)
            raise ParameterError("plan", f"unknown plan {self.plan!r}: use one of {known}")
        if (self.stat == "corr") != (self.with_ is not None):
            raise ParameterError(
                "with", "stat corr needs --with VAR2 (with_=), and --with needs stat corr"
            )
        if self.season is not None:
            if self.season.upper() not in SEASONS:
                known = ", ".join(SEASONS)
                raise ParameterError("season", f"unknown season {self.season!r}: use {known}")
            if self.stat not in SEASONAL_STATS:
                raise ParameterError(
                    "season",
                    f"--season takes stat {', '.join(SEASONAL_STATS)}, not {self.stat!r}",
                )

    @classmethod
    def asked(
        cls,
        variable: str,
        over: Iterable[str] | str,
        ranges: Mapping[str, Range] | None = None,
        **options: Unpack[QueryOptions],
    ) -> Query:
        """The query as Python users write it: ``over`` as "lat,lon" or names, ``ranges``
        None for none, each a ``(start, end)`` pair or a ``slice(start, end)``, ``shape`` as
        anything ``regions.as_shape`` takes (a region's name, a file, GeoJSON, a geometry)."""
        shape = options.get("shape")
        if shape is not None and not isinstance(shape, Shape):
            try:
                shape = as_shape(shape)
            except AccumulusError as exc:
                raise ParameterError("shape", str(exc)) from None
        options["shape"] = shape
        bounds = {dim: as_bounds(dim, r) for dim, r in (ranges or {}).items()}
        return cls(variable, split_list(over), bounds, **options)


class QueryOptions(TypedDict, total=False):
    """The options of a query as the Python API takes them (keyword arguments of
    ``average``/``query``): the fields of ``Query`` after its variable, dimensions and
    ranges (a test keeps the two alike)."""

    stat: Stat
    weights: Weights | None
    use_accumulation: bool
    shape: Any  # a Shape, or what ``regions.as_shape`` takes
    plan: PlanChoice
    season: str | None
    with_: str | None


# What the Python API's ``average`` and ``query`` say about a query, written once.
QUERY_DOC = """\
The ``stat`` ("mean", "sum" or "count" = Σ weights) of ``variable`` over the dimensions
``over`` ("lat,lon" or a list), within inclusive label ``ranges`` ({dim: (start, end)} or
{dim: slice(start, end)}, as ``sel`` takes them; None for an open end). Equals
``da.sel(...).weighted(w).mean(over)`` on the raw data.

``weights``: "area" (cos latitude), "none", or an array of the dataset; by default the
accumulations' weights. ``shape`` (``"ar6:WAF"``, ``"basins.geojson:Amazon"``, GeoJSON, a
shapely geometry) keeps the cells whose centres it holds, as ``da.where(mask)`` would.
``use_accumulation=False`` scans the raw data. ``plan``: "cheaper" runs the accumulations'
plan when it is estimated faster than a plain scan, "accumulation" always. ``season``
("DJF", "MAM", "JJA", "SON", or a month "JAN" ... "DEC") counts that season's days only:
with time among ``over``, the map of the statistic (mean, sum, count, var, std or trend)
over all of them in the ranges; without, one value per year (coordinate ``year``; DJF of
year Y is December Y-1 with January and February Y), the statistic of that season's days
in that year, pooled over the cells. ``stat="corr"`` with
``with_="VAR2"``: Pearson's r of the two variables' valid pairs over ``over``, as
``xr.corr(a, b, dim=over)``."""


@dataclass(frozen=True)
class ResolvedQuery:
    """A ``Query`` checked against one snapshot: index ranges for every dimension of the
    variable (half-open; along a longitude, ``hi`` past the axis' end for a range across the
    grid's seam, see ``longitude.pieces``), the reduced dimensions in the variable's order,
    the weights, and what the answer must tell its reader (ranges clipped)."""

    query: Query
    variable: VariableInfo
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[int, int]]
    weights: Weights
    notes: tuple[str, ...] = ()
    mask: CellMask | None = None  # the shape's cells; ranges are then its window
    # Longitudes whose last column repeats their first: their distinct columns
    # (``longitude.period``), past which ranges wrap; other dimensions wrap at their size.
    periods: Mapping[str, int] = field(default_factory=dict)

    @property
    def stat(self) -> Stat:
        return self.query.stat

    @property
    def use_accumulation(self) -> bool:
        return self.query.use_accumulation

    def without_accumulation(self) -> ResolvedQuery:
        """The same question, answered from the raw data alone."""
        return replace(self, query=replace(self.query, use_accumulation=False))

    @functools.cached_property
    def sizes(self) -> dict[str, int]:
        """Per dimension, the index past which a range wraps round (``longitude.pieces``);
        worked out once (read, not changed, by the planner and the answer)."""
        sizes = zip(self.variable.dims, self.variable.shape, strict=True)
        return {d: self.periods.get(d, n) for d, n in sizes}

    @property
    def kept(self) -> tuple[str, ...]:
        """The dimensions of the answer."""
        return tuple(d for d in self.variable.dims if d not in self.over)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.ranges[d][1] - self.ranges[d][0] for d in self.kept)

    @property
    def cells(self) -> int:
        """Values in the answer."""
        return prod(self.shape)


def split_list(text: str | Iterable[str]) -> tuple[str, ...]:
    """``"lat, lon"`` (or a list of names) as ``("lat", "lon")``."""
    items = text.split(",") if isinstance(text, str) else text
    return tuple(s for s in (str(i).strip() for i in items) if s)


def as_bounds(dim: str, value: Any) -> tuple[Bound, Bound]:
    """A range as Python users write it: ``(start, end)`` or ``slice(start, end)``."""
    if isinstance(value, slice):
        if value.step is not None:
            raise ParameterError(
                dim, f"range {dim}={value!r}: a step does not average; give slice(start, end)"
            )
        return value.start, value.stop
    if isinstance(value, tuple | list) and len(value) == 2:
        return value[0], value[1]
    raise ParameterError(
        dim,
        f"range {dim}={value!r}: give (start, end) or slice(start, end), inclusive labels "
        "(None for an open end)",
    )


def split_range(dim: str, text: str) -> tuple[str | None, str | None]:
    """``"start/end"`` as ``(start, end)``; an empty side is an open end (None)."""
    start, sep, end = text.partition("/")
    if not sep:
        raise malformed_range(dim, text)
    return start.strip() or None, end.strip() or None


def malformed_range(dim: str, text: str) -> ParameterError:
    """The error for a range that is not written start/end."""
    return ParameterError(
        dim,
        f"range {dim}={text!r}: write start/end with inclusive coordinate labels, e.g. "
        "time=2001-01-01/2001-12-31 or lat=-10/10.5 (leave a side empty for an open end)",
    )


def resolve(cube: RawCube, query: Query, groups: AccumulationGroups | None = None) -> ResolvedQuery:
    """Check ``query`` against ``cube`` (metadata and coordinates only; no chunk is read)."""
    if query.variable not in cube.data_variables:
        raise ParameterError(
            "variable",
            f"{cube.label}: no variable {query.variable!r}; data variables are "
            f"{cube.data_variables}",
            missing=True,
        )
    var = cube.variable(query.variable)
    try:
        cube.remembered(
            ("numeric", var.name),
            lambda: check_numeric(cube.raw, cube.decoded, var.name, "a variable to average"),
        )
    except AccumulusError as exc:
        raise ParameterError("variable", str(exc)) from None
    over = _check_over(cube, var, query.over)
    periods, whole = cube.remembered(("periods", var.name), lambda: _periods(cube, var))
    ranges = dict(whole)
    notes = []
    for dim, (start, stop) in query.ranges.items():
        if dim not in var.dims:
            raise ParameterError(
                dim,
                f"range given for {dim!r}, which is not a dimension of {var.name!r} "
                f"{list(var.dims)}{_coordinate_hint(cube, var, dim)}",
            )
        index, labelled, circular = cube.remembered(("axis", dim), lambda: _axis(cube, dim))  # noqa: B023
        try:
            if labelled:
                ranges[dim], clipped = index_range(index, dim, start, stop, circular=circular)
            else:
                ranges[dim], clipped = position_range(dim, len(index), start, stop), False
                notes.append(_positions_note(dim, ranges[dim]))
        except AccumulusError as exc:
            raise ParameterError(dim, str(exc)) from None
        if clipped:
            notes.append(_clip_note(index, dim, start, stop, ranges[dim], periods.get(dim)))
    for dim, size in periods.items():
        lo, hi = ranges[dim]
        if lo == 0 or hi > size:  # the repeated column's twin is selected
            notes.append(_repeat_note(cube.index(dim), dim))
    weights = query.weights
    if weights is None:
        # The weights the accumulations were built with, so both ways agree by default.
        weights = (groups or AccumulationGroups(cube)).recorded_weights(var.name)
    try:
        chosen = partial(resolve_weights, cube.decoded, var.name, weights)
        weights = cube.remembered(("weights", var.name, weights), chosen)
    except AccumulusError as exc:
        raise ParameterError("weights", str(exc)) from None
    if weights == "none" and query.weights is None:
        notes += _unweighted_note(cube, var, over)
    mask = None
    if query.shape is not None:
        mask = shape_cells(cube, var, _within_axes(ranges, var, periods), query.shape)
        ranges = {**ranges, **mask.ranges()}
    return ResolvedQuery(query, var, over, ranges, weights, tuple(notes), mask, periods)


def _periods(cube: RawCube, var: VariableInfo) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
    """The longitudes of ``var`` whose last column repeats their first, with their distinct
    columns (``_period``), and the whole range of every dimension (those columns along
    them): the same for every query of a snapshot."""
    dims = zip(var.dims, var.shape, strict=True)
    periods = {d: p for d, n in dims if (p := _period(cube, d)) < n}
    whole = {d: (0, periods.get(d, n)) for d, n in zip(var.dims, var.shape, strict=True)}
    return periods, whole


def _axis(cube: RawCube, dim: str) -> tuple[pd.Index, bool, bool]:
    """What a range along ``dim`` is resolved on: its index, whether it holds labels
    (``RawCube.labelled``), whether they are longitudes compared modulo 360."""
    return cube.index(dim), cube.labelled(dim), cube.labelled(dim) and _is_longitude(cube, dim)


def _within_axes(
    ranges: Mapping[str, tuple[int, int]], var: VariableInfo, periods: Mapping[str, int]
) -> Mapping[str, tuple[int, int]]:
    """``ranges``, refused with a shape when one runs across a longitude's seam: the shape
    picks its own cells on either side of the seam, so give it alone."""
    for dim, size in zip(var.dims, var.shape, strict=True):
        if ranges[dim][1] > periods.get(dim, size):
            raise ParameterError(
                "shape",
                f"a shape and a range of {dim!r} across the grid's seam: give the shape "
                "alone (its cells on both sides of the seam are found without a range)",
            )
    return ranges


def _check_over(cube: RawCube, var: VariableInfo, over: Iterable[str]) -> tuple[str, ...]:
    names = split_list(over)
    if not names:
        raise ParameterError("over", "name at least one dimension to average over")
    unknown = [d for d in names if d not in var.dims]
    if unknown:
        raise ParameterError(
            "over",
            f"cannot average {var.name!r} over {unknown}: its dimensions are "
            f"{list(var.dims)}{_coordinate_hint(cube, var, unknown[0])}",
        )
    return tuple(d for d in var.dims if d in names)


# --------------------------------------------------------------------------------------------
# Label ranges


def index_range(
    index: pd.Index, dim: str, start: Bound, stop: Bound, *, circular: bool = False
) -> tuple[tuple[int, int], bool]:
    """The half-open index range selected by inclusive labels, as ``sel(dim=slice(start,
    stop))`` selects on an ascending coordinate (descending coordinates take the same
    bounds, numbers either way round), and whether the range reaches past the coordinate's
    cells (clipped to them). ``circular``: a longitude, compared modulo 360
    (``longitude.longitude_range``)."""
    order = _of_index(index, "order", lambda: _order(index))
    if order is None:
        raise AccumulusError(f"coordinate {dim!r} is not monotonic; cannot select a range on it")
    start, stop = _coerce(index, dim, start), _coerce(index, dim, stop)
    if circular:
        for bound in (start, stop):
            if bound is None or (type(bound) is float and math.isfinite(bound)):
                continue
            if not np.isfinite(bound):
                raise AccumulusError(f"range bound {bound} for {dim!r} is not a finite longitude")
        values = _of_index(index, "values", lambda: np.asarray(index))  # (a view made per call)
        circle = _of_index(index, "circle", lambda: longitude.circle_of(values))
        try:
            return longitude.longitude_range(values, start, stop, circle)
        except AccumulusError:
            raise _selects_nothing(index, dim, start, stop) from None
    if _is_number(start) and _is_number(stop) and start > stop:
        start, stop = stop, start
    descending = order == "descending"
    quick = _quick_range(index, start, stop)
    if quick is not None:
        return quick

    def positions(a: Bound, b: Bound) -> tuple[int, int]:
        if isinstance(index, pd.DatetimeIndex) and not descending:
            found = date_positions(index, a, b)
            if found is not None:
                return found
        found = float_positions(index, a, b, descending)
        if found is not None:
            return found
        try:
            sl = index.slice_indexer(b, a) if descending else index.slice_indexer(a, b)
        except (KeyError, ValueError, TypeError) as exc:
            raise AccumulusError(f"range {dim}={a}/{b}: {exc}") from None
        lo, hi, _ = sl.indices(len(index))
        return lo, max(lo, hi)

    lo, hi = positions(start, stop)
    if hi > lo:
        return (lo, hi), _reaches_past(index, start, stop)
    if start is not None and stop is not None:
        rlo, rhi = positions(stop, start)
        if rhi > rlo:
            raise AccumulusError(
                f"range {dim}={start}/{stop} is reversed: its start comes after its end"
            )
    raise _selects_nothing(index, dim, start, stop)


def _quick_range(index: pd.Index, start: Bound, stop: Bound) -> tuple[tuple[int, int], bool] | None:
    """``index_range``'s answer, for the ranges queries mostly ask, in fewer steps: ISO
    dates (or open ends) on an ascending index of dates without a time zone
    (``date_positions``), finite numbers on a monotonic index of float64 labels
    (``float_positions``), with whether they reach past the coordinate's cells
    (``_reaches_past``) compared as the index's own integers or floats. The same answers, as
    one query resolves two or three ranges (docs/benchmarks.md, "Per-question Python").
    None for anything else, and where nothing is selected (``index_range`` says why)."""
    facts = _of_index(index, "quick range", lambda: _quick_facts(index))
    if facts is None:
        return None
    values, descending, unit, lowest, highest = facts
    size = len(values)
    if unit is None:  # float64 labels
        if not (_finite_number(start) and _finite_number(stop)):
            return None
        if descending:
            lo = 0 if stop is None else size - int(values.searchsorted(stop, "right"))
            hi = size if start is None else size - int(values.searchsorted(start, "left"))
        else:
            lo = 0 if start is None else int(values.searchsorted(start, "left"))
            hi = size if stop is None else int(values.searchsorted(stop, "right"))
        low, high = start, stop
    else:  # dates: each bound the period it names, the stop's ending where the next begins
        first = _period_of(start, unit)
        last = _period_of(stop, unit)
        if (first is None and start is not None) or (last is None and stop is not None):
            return None
        lo = 0 if first is None else int(values.searchsorted(first[0]))
        hi = size if last is None else int(values.searchsorted(last[1]))
        low = None if first is None else first[0]
        high = None if last is None else last[0]
    if hi <= lo:
        return None
    past = (low is not None and low < lowest) or (high is not None and high > highest)
    return (lo, hi), bool(past)


def _period_of(bound: Bound, unit: str) -> tuple[int, int] | None:
    """``period_in_unit`` of an ISO date; None for anything else."""
    return period_in_unit(bound, unit) if isinstance(bound, str) else None


def _quick_facts(index: pd.Index) -> tuple[np.ndarray, bool, str | None, Any, Any] | None:
    """What ``_quick_range`` searches on ``index``: its labels (float64, ascending: a
    descending index's reversed) or its dates (int64 counts of their unit, ascending),
    whether the labels descend, the dates' unit (None for floats), and its cells' outer
    edges (``_outer_edges``) in the same terms; None for other indexes."""
    order = _order(index)
    if order is None or len(index) == 0:
        return None
    descending = order == "descending"
    if type(index) is pd.Index and index.dtype == np.float64:
        lowest, highest = _outer_edges(index)
        values = index.values[::-1] if descending else index.values
        return values, descending, None, lowest, highest
    if type(index) is pd.DatetimeIndex and index.tz is None and not descending:
        unit = np.datetime_data(index.dtype)[0]
        lowest, highest = _outer_edges(index)
        if np.isnat(lowest) or np.isnat(highest):
            return None
        return index.asi8, False, unit, int(lowest.view("i8")), int(highest.view("i8"))
    return None


def _order(index: pd.Index) -> str | None:
    """How the labels run: "ascending" (one label, or all alike, too), "descending", or
    None when they are not monotonic."""
    if len(index) <= 1 or index.is_monotonic_increasing:
        return "ascending"
    return "descending" if index.is_monotonic_decreasing else None


# What ranges ask of a coordinate's index (its order, its cells' outer edges, a longitude's
# circle), worked out once per index object: an open datacube keeps its indexes for the
# snapshot, and every query asks again. Indexes are immutable.
_INDEX_FACTS: IdentityMemo[Any] = IdentityMemo()


def _of_index(index: pd.Index, what: str, compute: Callable[[], Any]) -> Any:
    return _INDEX_FACTS.value(index, compute, what)


def float_positions(
    index: pd.Index, start: Bound, stop: Bound, descending: bool
) -> tuple[int, int] | None:
    """The positions ``index.slice_indexer(start, stop)`` selects on a monotonic index of
    float64 labels (``slice_indexer(stop, start)`` on a descending one) for bounds that are
    finite numbers (or None for an open end), found as pandas finds them: a bound of a
    monotonic index is NumPy's binary search of its values (an exact match, which pandas
    looks up first, is where that search stops), from the other end on a descending one.
    Without pandas' layers around it: one query resolves two or three ranges
    (docs/benchmarks.md, "Per-question cost"). None for anything else (pandas answers;
    float32 labels too, which pandas matches to a bound rounded to float32 first)."""
    if type(index) is not pd.Index or index.dtype != np.float64:
        return None
    if not (_finite_number(start) and _finite_number(stop)):
        return None
    values = index.values
    size = len(values)
    if descending:
        backwards = values[::-1]
        lo = 0 if stop is None else size - int(backwards.searchsorted(stop, "right"))
        hi = size if start is None else size - int(backwards.searchsorted(start, "left"))
    else:
        lo = 0 if start is None else int(values.searchsorted(start, "left"))
        hi = size if stop is None else int(values.searchsorted(stop, "right"))
    return lo, max(lo, hi)


def _finite_number(bound: Bound) -> bool:
    """None, or a real number that float64 holds exactly and that is finite (NaN, an
    infinity, a huge integer are left to pandas)."""
    if bound is None:
        return True
    if isinstance(bound, bool | np.bool_):
        return False
    if isinstance(bound, int | np.integer):
        return abs(int(bound)) <= 2**53
    return isinstance(bound, float | np.floating) and bool(np.isfinite(bound))


# A date as ISO 8601 writes it, down to the second, of a year from -9999 to 9999 (0000 is
# 1 BC, as ISO 8601 and NumPy count): the forms NumPy and pandas read alike.
_ISO_DATE = re.compile(r"-?[0-9]{4}(-[0-9]{2}(-[0-9]{2}([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2})?)?)?)?)?")
# Integer times past every other of their unit (the smallest int64 is NaT).
_EARLIEST, _LATEST = np.iinfo(np.int64).min + 1, np.iinfo(np.int64).max


def date_positions(index: pd.DatetimeIndex, start: Bound, stop: Bound) -> tuple[int, int] | None:
    """The positions ``index.slice_indexer(start, stop)`` selects on an ascending index
    for ISO dates (or None for an open end), each date standing for its whole period (a
    year, a month, a day, …) as pandas reads a partial date: two binary searches, cheaper
    than pandas' own parsing into periods (docs/benchmarks.md). A date the index's unit
    cannot hold (before 1677 or after 2262 in nanoseconds) lies before or after all of it.
    None for anything else (pandas answers)."""
    if index.tz is not None:
        return None
    values = index.asi8
    unit = np.datetime_data(index.dtype)[0]
    found = []
    for bound, after in ((start, False), (stop, True)):
        if bound is None:
            found.append(len(values) if after else 0)
            continue
        period = period_in_unit(bound, unit) if isinstance(bound, str) else None
        if period is None:
            return None
        # The stop's period ends where the next one begins.
        found.append(int(np.searchsorted(values, period[after])))
    lo, hi = found
    return lo, max(lo, hi)


def iso_period(bound: Bound) -> tuple[np.datetime64, np.datetime64] | None:
    """The period an ISO date stands for (a year, a month, a day, …): its start and the start
    of the next, in the unit of the date's last field, which holds any year; None for what
    is not an ISO date (or names none, as "2001-20")."""
    return _iso_period(bound) if isinstance(bound, str) else None


@functools.lru_cache(maxsize=4096)
def _iso_period(bound: str) -> tuple[np.datetime64, np.datetime64] | None:
    if not _ISO_DATE.fullmatch(bound):
        return None
    try:
        start = np.datetime64(bound)
    except ValueError:
        return None
    unit = np.datetime_data(start.dtype)[0]  # the date's own unit, one numpy names
    return start, start + np.timedelta64(1, unit)  # type: ignore[call-overload]


@functools.lru_cache(maxsize=4096)
def period_in_unit(bound: str, unit: str) -> tuple[int, int] | None:
    """``iso_period`` of ``bound`` with both ends ``in_unit``: read once per date and unit
    (a query asks for each of its dates twice, and dates recur from question to question)."""
    period = iso_period(bound)
    if period is None:
        return None
    return in_unit(period[0], unit), in_unit(period[1], unit)


def in_unit(moment: np.datetime64, unit: str) -> int:
    """``moment`` as an integer count of ``unit`` since 1970, saturated: a moment the unit
    cannot hold is earlier (or later) than every one it can. NumPy converts a year or a
    month to nanoseconds with a silent wrap-around (1417 became 2001-07-22)."""
    span = _unit_span(moment.dtype, unit)
    if span is not None:  # a calendar unit to a finer one: exact between the span's ends
        count = int(moment.view("i8"))
        if span[0] <= count <= span[1]:
            return int(moment.astype(span[2]).view("i8"))
        return _LATEST if count > 0 else _EARLIEST
    try:
        converted = moment.astype(f"M8[{unit}]")
        if converted.astype(moment.dtype) == moment:
            return int(converted.astype("i8"))
    except OverflowError:
        pass
    return _LATEST if moment.astype("i8") > 0 else _EARLIEST


# The units of a date's last field (``iso_period``), and those of a pandas index.
_CALENDAR_UNITS = ("Y", "M", "D", "h", "m", "s")
_INDEX_UNITS = ("s", "ms", "us", "ns")


@functools.lru_cache(maxsize=64)
def _unit_span(dtype: np.dtype, unit: str) -> tuple[int, int, np.dtype] | None:
    """For a moment of a calendar unit (``dtype``) asked in an index's ``unit``: the first
    and last moments of ``dtype`` (as its integers) that ``unit`` holds, and ``unit``'s
    dtype, found once per pair; None for other pairs (``in_unit`` then converts and checks
    the conversion each time, several times slower: docs/benchmarks.md)."""
    source = np.datetime_data(dtype)
    if source[0] not in _CALENDAR_UNITS or source[1] != 1 or unit not in _INDEX_UNITS:
        return None
    target = np.dtype(f"M8[{unit}]")
    ends = []
    for extreme, inwards in ((_EARLIEST, 1), (_LATEST, -1)):
        # The target's extreme in the source's unit (truncated: maybe one past it).
        count = _truncated(extreme, target, dtype)
        while not _converts(count, dtype, target):
            count += inwards
        ends.append(count)
    return ends[0], ends[1], target


def _truncated(count: int, unit: np.dtype, into: np.dtype) -> int:
    """``count`` moments of ``unit`` (a datetime64 dtype) as a count of ``into``'s unit.
    NumPy 2 refuses to bring the extremes of a unit to days, hours, minutes or seconds
    (OverflowError, though the result fits), which left every date but a year or a month
    to ``in_unit``'s slower conversion: those hold a fixed number of ``unit``, so the count
    is divided by it instead (toward zero, as NumPy's conversion truncates)."""
    try:
        return int(np.array(count, dtype="i8").view(unit).astype(into).view("i8"))
    except OverflowError:
        step = np.array(1, dtype=f"m8[{np.datetime_data(into)[0]}]")
        per = int(step.astype(f"m8[{np.datetime_data(unit)[0]}]").view("i8"))
        return abs(count) // per * (1 if count > 0 else -1)


def _converts(count: int, dtype: np.dtype, target: np.dtype) -> bool:
    """Whether ``in_unit``'s conversion holds the moment ``count`` of ``dtype`` in
    ``target``: converted there and back unchanged, not NaT, and not refused (NumPy refuses
    some moments near the extremes on the way back, and ``in_unit`` then saturates)."""
    moment = np.array(count, dtype="i8").view(dtype)
    try:
        converted = moment.astype(target)
        return bool(converted.astype(dtype) == moment) and int(converted.view("i8")) >= _EARLIEST
    except OverflowError:
        return False


def answer_index(cube: RawCube, resolved: ResolvedQuery, dim: str) -> pd.Index:
    """The coordinate labels of a kept dimension in the answer: the cube's own (a slice of
    its index), or along a longitude range across the grid's seam, continuing past it
    (``longitude.labels``)."""
    lo, hi = resolved.ranges[dim]
    index = whole_labels(cube, dim)
    if within_axis(resolved, dim):
        return index if lo == 0 and hi == len(index) else index[lo:hi]  # (immutable)
    west = resolved.query.ranges[dim][0]
    labels = longitude.labels(np.asarray(index), lo, hi, None if west is None else float(west))
    return pd.Index(labels, name=dim)


def within_axis(resolved: ResolvedQuery, dim: str) -> bool:
    """Whether ``resolved``'s range along ``dim`` lies within its axis (not across a
    longitude's seam): its labels are then the axis' own, a slice of them."""
    var = resolved.variable
    return resolved.ranges[dim][1] <= resolved.periods.get(dim, var.shape[var.axis(dim)])


def whole_labels(cube: RawCube, dim: str) -> pd.Index:
    """The labels of a whole axis in an answer: a copy of the cube's index, made once per
    snapshot. Resolving ranges searches the cube's own, where pandas then keeps a look-up
    engine that it copies into every slice (twice the cost of a series' time labels:
    docs/benchmarks.md, "Statistics, session stats46")."""
    return cube.remembered(("answer labels", dim), lambda: cube.index(dim).copy(deep=True))


def _is_longitude(cube: RawCube, dim: str) -> bool:
    """A longitude coordinate whose labels can be compared modulo 360."""

    def circular() -> bool:
        name = cube.labels_name(dim)
        if name is None or not coordinates.is_kind(cube.raw, name, "longitude"):
            return False
        return longitude.is_circular(np.asarray(cube.index(dim)))

    return cube.remembered(("circular longitude", dim), circular)


def _period(cube: RawCube, dim: str) -> int:
    """The distinct columns of a longitude around the circle (``longitude.period``); the
    size of any other dimension."""

    def period() -> int:
        index = cube.index(dim)
        return longitude.period(np.asarray(index)) if _is_longitude(cube, dim) else len(index)

    return cube.remembered(("longitude period", dim), period)


def position_range(dim: str, size: int, start: Bound, stop: Bound) -> tuple[int, int]:
    """The half-open index range of inclusive positions ``start``/``stop`` along a dimension
    without labels (``RawCube.labelled``), as if it were labelled 0 .. size-1; a bound that is
    no such position is refused, naming what is missing: ``latitude=-30/30`` on a dimension
    without latitudes must not select rows 0..30."""
    found: list[int | None] = []
    for bound in (start, stop):
        text = str(bound).strip() if bound is not None else ""
        if not text:
            found.append(None)
            continue
        if isinstance(bound, str):  # ASCII digits only: int() reads ١٠ and 1_0 as 10 too
            position = int(text) if re.fullmatch(r"[0-9]+", text) else None
        else:
            try:
                position = operator.index(bound)
            except TypeError:
                position = None
        if position is None or not 0 <= position < size:
            raise AccumulusError(
                f"range {dim}={_text(start, '')}/{_text(stop, '')}: {dim!r} has no coordinate "
                f"values (no variable holds its labels), so a range selects positions 0 to "
                f"{size - 1}, and {text!r} is not one"
            )
        found.append(position)
    lo, hi = (0 if found[0] is None else found[0]), (size - 1 if found[1] is None else found[1])
    lo, hi = min(lo, hi), max(lo, hi)
    return lo, hi + 1


def _positions_note(dim: str, selected: tuple[int, int]) -> str:
    lo, hi = selected
    return f"{dim} has no coordinate values: positions {lo} to {hi - 1} selected"


def _repeat_note(index: pd.Index, dim: str) -> str:
    return (
        f"{dim}: its last longitude ({_text(index[-1])}) repeats its first "
        f"({_text(index[0])}), counted once"
    )


def _unweighted_note(cube: RawCube, var: VariableInfo, over: Iterable[str]) -> list[str]:
    """What an answer unweighted by default must say when it averages over a dimension
    named like a latitude whose latitudes were not found."""
    named = [d for d in over if coordinates.named_like(d, "latitude")]
    return [f"unweighted: {no_latitude(cube.raw, var.name)}"] if named else []


def _coordinate_hint(cube: RawCube, var: VariableInfo, name: str) -> str:
    """For a name given where a dimension belongs: the dimension(s) it is a coordinate of."""
    for kind in coordinates.KINDS:
        found = coordinates.find(cube.raw, var.dims, kind, var.name)
        if found is None or found.name != name:
            continue
        if not found.curvilinear:
            dim = found.dims[0]
            return f"; {name!r} holds the {kind}s of dimension {dim!r}: give {dim!r} instead"
        return (
            f"; {name!r} holds 2-D {kind}s on {list(found.dims)} (a curvilinear grid): "
            "average over and select along those dimensions, or give a shape"
        )
    return ""


def _is_number(bound: Bound) -> bool:
    return isinstance(bound, int | float | np.number) and not isinstance(bound, bool)


def _selects_nothing(index: pd.Index, dim: str, start: Bound, stop: Bound) -> AccumulusError:
    first, last = index[0], index[-1]
    return AccumulusError(
        f"range {dim}={start}/{stop} selects nothing: the coordinate runs from {first} to {last}"
    )


def _reaches_past(index: pd.Index, start: Bound, stop: Bound) -> bool:
    """Whether ``start``/``stop`` lie beyond the coordinate's cells, each reaching half a
    step past its label (so ``lat=-90/90`` does not reach past cells centred on ±89.5), and
    1% of a step more: labels stored as float32 are rounded (-89.95 is -89.94999694...)."""
    try:
        lowest, highest = _of_index(index, "outer edges", lambda: _outer_edges(index))
        low, high = _comparable(index, start), _comparable(index, stop)
        return bool((low is not None and low < lowest) or (high is not None and high > highest))
    except (TypeError, ValueError, OverflowError):
        return False  # labels without a distance (names), or a date pandas cannot hold


def _outer_edges(index: pd.Index) -> tuple[Any, Any]:
    """Half a step and 1% beyond the first and the last labels (``_reaches_past``)."""
    labels = np.asarray(index)  # monotonic (``index_range``): sorted one way or the other
    if len(labels) > 1 and labels[0] > labels[-1]:
        labels = labels[::-1]
    below = (labels[1] - labels[0]) * 0.51 if len(labels) > 1 else labels[0] - labels[0]
    above = (labels[-1] - labels[-2]) * 0.51 if len(labels) > 1 else below
    return labels[0] - below, labels[-1] + above


def _comparable(index: pd.Index, bound: Bound) -> Bound:
    """A bound as something the index's labels compare with (dates as the index's type)."""
    if type(bound) is datetime.date:  # compares with no datetime64: as its midnight does
        return pd.Timestamp(bound)
    if not isinstance(bound, str):
        return bound
    if isinstance(index, pd.DatetimeIndex) and index.tz is None:
        unit = np.datetime_data(index.dtype)[0]
        period = period_in_unit(bound, unit)
        if period is not None:
            return np.datetime64(period[0], unit)  # type: ignore[call-overload]  # index's unit
    stamp = pd.Timestamp(bound)
    if isinstance(index, xr.CFTimeIndex):
        fields = ("year", "month", "day", "hour", "minute", "second", "microsecond")
        return type(index[0])(*(getattr(stamp, f) for f in fields), calendar=index.calendar)
    return stamp


def _clip_note(
    index: pd.Index,
    dim: str,
    start: Bound,
    stop: Bound,
    selected: tuple[int, int],
    period: int | None = None,
) -> str:
    lo, hi = selected
    size = period or len(index)
    span = f"{_text(index.min())} to {_text(index.max())}"
    first, last = index[lo % size], index[(hi - 1) % size]
    if hi <= size and first > last:
        first, last = last, first  # a descending coordinate: name the cells low to high
    return (
        f"{dim}={_text(start, '')}/{_text(stop, '')} reaches past the coordinate ({span}): "
        f"clipped to {_text(first)} to {_text(last)}"
    )


def _text(label: Bound, missing: str = "None") -> str:
    """A label as a reader writes it: 35 rather than np.float32(35.0), dates in ISO 8601."""
    if label is None:
        return missing
    if isinstance(label, pd.Timestamp | np.datetime64):
        return str(pd.Timestamp(label).isoformat())
    if hasattr(label, "isoformat"):
        return str(label.isoformat())
    if isinstance(label, float | np.floating):
        return f"{float(label):g}"
    return str(label)


def _coerce(index: pd.Index, dim: str, bound: Bound) -> Bound:
    if bound is None or (isinstance(bound, str) and not bound.strip()):
        return None
    if isinstance(index, pd.DatetimeIndex) and isinstance(bound, str):
        if iso_period(bound) is not None:
            return bound
        try:
            pd.Timestamp(bound)
        except ValueError:
            raise AccumulusError(
                f"range bound {bound!r} for {dim!r} is not a date (use ISO 8601, e.g. 2001-12-31)"
            ) from None
        return bound
    if isinstance(bound, str) and pd.api.types.is_numeric_dtype(index.dtype):
        if not bound.isascii():  # float() reads other scripts' digits too: ١٠ is 10
            raise AccumulusError(f"range bound {bound!r} for {dim!r} is not a number")
        try:
            return float(bound)
        except ValueError:
            raise AccumulusError(f"range bound {bound!r} for {dim!r} is not a number") from None
    return bound
