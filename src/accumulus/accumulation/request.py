"""One checked query: what a user asks, and the same question resolved against a snapshot.

``Query`` is what the API, the command line and the service are given: a statistic of a
variable over some dimensions, within inclusive label ranges. ``resolve`` checks it against
a cube's metadata snapshot before any chunk is read and turns it into a ``ResolvedQuery``:
the variable as stored, the dimensions averaged away (in the variable's order), index ranges
selected exactly as ``DataArray.sel(dim=slice(start, end))`` selects them, and the weights to
use. Every mistake is a ``ParameterError`` naming its parameter, so the command line prints
it on one line and the service answers it as a 4xx naming the parameter.

Text as users type it (``"lat,lon"``, ``"2001-01-01/2001-12-31"``) is split here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

import pandas as pd

from accumulus.accumulation import statistics
from accumulus.accumulation.groups import AccumulationGroups
from accumulus.accumulation.weights import resolve_weights
from accumulus.cube import Cube, VariableInfo
from accumulus.errors import AccumulusError, ParameterError
from accumulus.numeric import check_numeric

STATS = tuple(statistics.STATISTICS)

Bound = Any  # a coordinate label (str, number, date), or None for an open end


@dataclass(frozen=True)
class Query:
    """What a user asks: ``stat`` of ``variable`` over the dimensions ``over`` within label
    ``ranges`` (inclusive, like ``sel(dim=slice(a, b))``; None for an open end)."""

    variable: str
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[Bound, Bound]] = field(default_factory=dict)
    stat: str = "mean"
    weights: str | None = None  # None: the accumulation group's weights, else the default
    use_accumulation: bool = True


@dataclass(frozen=True)
class ResolvedQuery:
    """A ``Query`` checked against one snapshot: index ranges for every dimension of the
    variable (half-open), the reduced dimensions in the variable's order, and the weights."""

    query: Query
    variable: VariableInfo
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[int, int]]
    weights: str

    @property
    def stat(self) -> str:
        return self.query.stat

    @property
    def use_accumulation(self) -> bool:
        return self.query.use_accumulation

    def without_accumulation(self) -> ResolvedQuery:
        """The same question, answered from the raw data alone."""
        return replace(self, query=replace(self.query, use_accumulation=False))

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


def resolve(cube: Cube, query: Query, groups: AccumulationGroups | None = None) -> ResolvedQuery:
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
        check_numeric(cube.raw, cube.decoded, var.name, "a variable to average")
    except AccumulusError as exc:
        raise ParameterError("variable", str(exc)) from None
    over = _check_over(var, query.over)
    if query.stat not in statistics.STATISTICS:
        known = ", ".join(statistics.STATISTICS)
        raise ParameterError("stat", f"unknown stat {query.stat!r}: use one of {known}")
    ranges = {d: (0, n) for d, n in zip(var.dims, var.shape, strict=True)}
    for dim, (start, stop) in query.ranges.items():
        if dim not in var.dims:
            raise ParameterError(
                dim,
                f"range given for {dim!r}, which is not a dimension of {var.name!r} "
                f"{list(var.dims)}",
            )
        try:
            ranges[dim] = index_range(cube.index(dim), dim, start, stop)
        except AccumulusError as exc:
            raise ParameterError(dim, str(exc)) from None
    weights = query.weights
    if weights is None:
        # The weights the accumulations were built with, so both ways agree by default.
        group = (groups or AccumulationGroups(cube)).group(var.name)
        weights = group.weights if group is not None and group.weights != "unknown" else None
    try:
        weights = resolve_weights(cube.decoded, var.name, weights)
    except AccumulusError as exc:
        raise ParameterError("weights", str(exc)) from None
    return ResolvedQuery(query, var, over, ranges, weights)


def _check_over(var: VariableInfo, over: Iterable[str]) -> tuple[str, ...]:
    names = split_list(over)
    if not names:
        raise ParameterError("over", "name at least one dimension to average over")
    unknown = [d for d in names if d not in var.dims]
    if unknown:
        raise ParameterError(
            "over",
            f"cannot average {var.name!r} over {unknown}: its dimensions are {list(var.dims)}",
        )
    return tuple(d for d in var.dims if d in names)


# --------------------------------------------------------------------------------------------
# Label ranges


def index_range(index: pd.Index, dim: str, start: Bound, stop: Bound) -> tuple[int, int]:
    """Half-open index range selected by inclusive labels, as ``sel(dim=slice(start, stop))``
    selects on an ascending coordinate; descending coordinates take the same bounds."""
    if len(index) > 1 and not (index.is_monotonic_increasing or index.is_monotonic_decreasing):
        raise AccumulusError(f"coordinate {dim!r} is not monotonic; cannot select a range on it")
    start, stop = _coerce(index, dim, start), _coerce(index, dim, stop)
    descending = len(index) > 1 and not index.is_monotonic_increasing

    def positions(a: Bound, b: Bound) -> tuple[int, int]:
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


def _coerce(index: pd.Index, dim: str, bound: Bound) -> Bound:
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
