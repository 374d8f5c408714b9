"""Checking the parameters of an average request, each error naming its parameter.

The checks that need the data (does the variable exist, does each range select something,
how many cells will the answer have) run on the request's snapshot before any chunk is read,
so a wrong or oversized request costs only metadata. The query itself is then the library's
(``accumulus.api.query``), which reads ranges exactly as checked here.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from math import prod

import pandas as pd
import xarray as xr

from accumulus.accumulation.query import STATS, index_range
from accumulus.accumulation.weights import resolve_weights
from accumulus.cube import Cube, VariableInfo
from accumulus.errors import AccumulusError
from accumulus.numeric import numeric_problem

FORMATS = ("json", "csv", "png")
# Query parameters that are not dimension ranges.
OPTIONS = ("over", "stat", "weights", "format", "accumulation")

# What a range bound looks like, by coordinate type (the OpenAPI document gives the same
# patterns). Dates may be partial, as pandas reads labels: time=2001/2001 is the year 2001.
# ASCII digits only: \d (and float()) would take other scripts' digits, such as ١٠.
_NUMBER = r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?"
_DATE = r"[0-9]{4}(-[0-9]{2}(-[0-9]{2}([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?)?)?)?"
_LABEL = r"[^/]*"


def range_pattern(index: pd.Index) -> str:
    """The pattern of ``start/end`` for a dimension with coordinate ``index`` (either side
    may be empty: an open end)."""
    if isinstance(index, pd.DatetimeIndex | xr.CFTimeIndex):
        bound = _DATE
    elif pd.api.types.is_numeric_dtype(index.dtype):
        bound = _NUMBER
    else:
        bound = _LABEL
    return rf"^\s*({bound})?\s*/\s*({bound})?\s*$"


class ParameterError(AccumulusError):
    """A request parameter is wrong; answered with ``status`` and a JSON body naming it."""

    def __init__(self, parameter: str | None, message: str, status: int = 422) -> None:
        super().__init__(message)
        self.parameter = parameter
        self.status = status


@dataclass(frozen=True)
class AverageRequest:
    """An average request whose parameters have been checked against one snapshot."""

    variable: str
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[str | None, str | None]]  # inclusive labels, None: open end
    stat: str
    weights: str | None
    use_accumulation: bool
    format: str
    cells: int  # values in the answer
    extent: Mapping[str, tuple[int, int]]  # the index range each label range selects

    @property
    def key(self) -> tuple:
        """Identifies the answer within a snapshot (for the cache): by the index ranges the
        labels select, so that every spelling of a range (30,000 digits or 3) is one entry."""
        return (
            self.variable,
            tuple(sorted(self.over)),
            tuple(sorted(self.extent.items())),
            self.stat,
            self.weights,
            self.use_accumulation,
            self.format,
        )


def check_average_request(
    cube: Cube,
    variable: str,
    *,
    over: str,
    stat: str,
    weights: str | None,
    output_format: str,
    use_accumulation: bool,
    query: Iterable[tuple[str, str]],
    max_cells: int,
) -> AverageRequest:
    """Check a request against ``cube``; ``query`` is every query parameter as sent, so that
    dimension ranges are found and misspelt or repeated parameters refused."""
    if variable not in cube.data_variables:
        raise ParameterError(
            "variable",
            f"no variable {variable!r} in this dataset; its variables are {cube.data_variables}",
            status=404,
        )
    problem = numeric_problem(cube.raw, cube.decoded, variable)
    if problem is not None:
        raise ParameterError("variable", f"cannot average {problem}")
    var = cube.variable(variable)
    over_dims = _over(var, over)
    if stat not in STATS:
        raise ParameterError("stat", f"unknown stat {stat!r}: use one of {', '.join(STATS)}")
    if output_format not in FORMATS:
        raise ParameterError(
            "format", f"unknown format {output_format!r}: use one of {', '.join(FORMATS)}"
        )
    ranges = _ranges(cube, var, list(query))
    extent = {d: (0, n) for d, n in zip(var.dims, var.shape, strict=True)}
    for dim, (start, end) in ranges.items():
        try:
            extent[dim] = index_range(cube.index(dim), dim, start, end)
        except AccumulusError as exc:
            raise ParameterError(dim, str(exc)) from None
    kept = [d for d in var.dims if d not in over_dims]
    cells = prod(extent[d][1] - extent[d][0] for d in kept)
    if cells > max_cells:
        shape = " x ".join(f"{extent[d][1] - extent[d][0]} {d}" for d in kept)
        raise ParameterError(
            "over",
            f"the answer would have {cells} values ({shape}), more than this service's limit "
            f"of {max_cells}: average over more dimensions or narrow the ranges of {kept}",
        )
    if output_format == "png" and len(kept) not in (1, 2):
        raise ParameterError(
            "format",
            f"a png draws a series or a map, but this answer has {len(kept)} dimensions "
            f"{kept}: average over more dimensions, or ask for json or csv",
        )
    if weights is not None:
        try:
            resolve_weights(cube.decoded, variable, weights)
        except AccumulusError as exc:
            raise ParameterError("weights", str(exc)) from None
    return AverageRequest(
        variable=variable,
        over=over_dims,
        ranges=ranges,
        stat=stat,
        weights=weights,
        use_accumulation=use_accumulation,
        format=output_format,
        cells=cells,
        extent=extent,
    )


def _over(var: VariableInfo, over: str) -> tuple[str, ...]:
    names = [d.strip() for d in over.split(",") if d.strip()]
    if not names:
        raise ParameterError("over", "name at least one dimension to average over")
    unknown = [d for d in names if d not in var.dims]
    if unknown:
        raise ParameterError(
            "over",
            f"cannot average {var.name!r} over {unknown}: its dimensions are {list(var.dims)}",
        )
    return tuple(d for d in var.dims if d in names)


def _ranges(
    cube: Cube, var: VariableInfo, query: list[tuple[str, str]]
) -> dict[str, tuple[str | None, str | None]]:
    repeated = [name for name, n in Counter(name for name, _ in query).items() if n > 1]
    if repeated:
        raise ParameterError(repeated[0], f"parameter {repeated[0]!r} is given more than once")
    ranges = {}
    for name, text in query:
        if name in OPTIONS:
            continue
        if name not in var.dims:
            raise ParameterError(
                name,
                f"unknown parameter {name!r}: ranges are named by the dimensions of "
                f"{var.name!r} {list(var.dims)}; the other parameters are {', '.join(OPTIONS)}",
            )
        if not re.fullmatch(range_pattern(cube.index(name)), text):
            raise ParameterError(
                name,
                f"range {name}={text!r}: write start/end with inclusive coordinate labels, "
                "e.g. time=2001-01-01/2001-12-31 or lat=-10/10.5 (leave a side empty for an "
                "open end)",
            )
        start, _, end = text.partition("/")
        ranges[name] = (start.strip() or None, end.strip() or None)
    return ranges
