"""The HTTP side of an average request: query parameters into one checked query.

Everything a query means is checked by the library (``accumulus.api.Query``, resolved on the
request's snapshot, each error naming its parameter) before any chunk is read. What is left
here is HTTP: which query parameters exist (``AverageParameters``, besides the ranges named
by dimensions), each given once, the pattern of a range in the query string, the output
format, and the service's limit on the size of an answer.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, fields
from functools import cached_property, partial
from typing import Annotated

import pandas as pd
import xarray as xr
from pydantic import BaseModel, Field

from accumulus.api import SEASONS, STATS, Query, ResolvedQuery, malformed_range, split_range
from accumulus.errors import AccumulusError, ParameterError
from accumulus.raw_cube import RawCube
from accumulus.regions import Shape, named_region, shape_from_geojson
from accumulus.service.datasets import DatasetSnapshot

FORMATS = ("json", "csv", "png")


class AverageParameters(BaseModel):
    """The query parameters of an average besides its ranges (which are named by the
    dimensions), as the OpenAPI document describes them; ``query`` makes them the library's
    ``Query``."""

    over: Annotated[
        str, Field(description="Dimensions averaged away, comma-separated: latitude,longitude.")
    ]
    stat: Annotated[
        str,
        Field(
            description="mean, sum, count (Σ weights), var or std (weighted population variance, "
            "standard deviation), trend (least-squares slope per year, per cell, over time), or "
            "corr (Pearson's r with the variable `with`).",
            json_schema_extra={"enum": list(STATS)},
        ),
    ] = "mean"
    weights: Annotated[
        str | None,
        Field(
            description="area (cos latitude), none, or a weights array of the dataset; default: "
            "the accumulations' weights.",
        ),
    ] = None
    output_format: Annotated[
        str,
        Field(
            alias="format",
            description="json, csv or png.",
            json_schema_extra={"enum": list(FORMATS)},
        ),
    ] = "json"
    accumulation: Annotated[
        bool, Field(description="false: scan the raw data (for comparison).")
    ] = True
    shape: Annotated[
        str | None,
        Field(
            description="Average over the cells whose centres lie in a named region, SET:NAME "
            "(see /api/regions), e.g. ar6:WAF. Or POST a GeoJSON geometry, Feature or "
            "FeatureCollection as the body.",
        ),
    ] = None
    season: Annotated[
        str | None,
        Field(
            description="Only this season's days: DJF, MAM, JJA, SON or a month (JAN ... DEC). "
            "With time among over, the map of `stat` over them (mean, sum, count, var, std or "
            "trend); otherwise one value per year (DJF of "
            "year Y: December Y-1, January and February Y), coordinate year.",
            json_schema_extra={"enum": list(SEASONS)},
        ),
    ] = None
    with_: Annotated[
        str | None,
        Field(
            alias="with",
            description="The second variable of stat=corr: Pearson's r over `over` (both on one "
            "grid), as xr.corr.",
        ),
    ] = None

    def query(
        self, variable: str, ranges: dict[str, tuple[str | None, str | None]], shape: Shape | None
    ) -> Query:
        """The question asked of ``variable`` within ``ranges`` (and ``shape``, the named
        region or the posted GeoJSON: ``requested_shape``)."""
        return Query.asked(
            variable,
            self.over,
            ranges,
            stat=self.stat,  # type: ignore[arg-type]  # text: Query refuses an unknown one
            weights=self.weights,
            use_accumulation=self.accumulation,
            shape=shape,
            season=self.season,
            with_=self.with_,
        )


# Query parameters that are not dimension ranges.
OPTIONS = tuple(field.alias or name for name, field in AverageParameters.model_fields.items())

# What a range bound looks like, by coordinate type (the OpenAPI document gives the same
# patterns). Dates may be partial, as pandas reads labels: time=2001/2001 is the year 2001;
# years run from -9999 (0000 is 1 BC).
# ASCII digits only: \d (and float()) would take other scripts' digits, such as ١٠.
_NUMBER = r"[-+]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?"
_DATE = r"-?[0-9]{4}(-[0-9]{2}(-[0-9]{2}([T ][0-9]{2}(:[0-9]{2}(:[0-9]{2}(\.[0-9]+)?)?)?)?)?)?"
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


def http_status(error: ParameterError) -> int:
    return 404 if error.missing else 422


@dataclass(frozen=True)
class AverageRequest:
    """An average request checked against one snapshot, and how to render its answer."""

    query: ResolvedQuery
    format: str

    @cached_property  # (asked by the cache twice per answer)
    def key(self) -> tuple:
        """Identifies the answer within a snapshot (for the cache): by the index ranges the
        labels select, so that every spelling of a range (30,000 digits or 3) is one entry,
        by the notes the answer carries (which quote the range as written when it was
        clipped), so that an answer is never served with another request's note, and by
        every other field of the query (a field added to ``Query`` is keyed too)."""
        resolved = self.query
        shape = resolved.query.shape
        others = tuple(
            getattr(resolved.query, f.name) for f in fields(Query) if f.name not in _RESOLVED
        )
        return (
            resolved.variable.name,
            resolved.over,
            tuple(sorted(resolved.ranges.items())),
            resolved.notes,
            resolved.weights,
            (shape.label, shape.key) if shape is not None else None,
            others,
            self.format,
        )


# The fields of a query the cache keys by their resolved forms.
_RESOLVED = ("variable", "over", "ranges", "weights", "shape")


def check_average_request(
    snapshot: DatasetSnapshot,
    variable: str,
    parameters: AverageParameters,
    *,
    query: Iterable[tuple[str, str]],
    max_cells: int,
    shape: Shape | None = None,
) -> AverageRequest:
    """Check a request against ``snapshot``; ``query`` is every query parameter as sent, so
    that dimension ranges are found and misspelt or repeated parameters refused."""
    if parameters.output_format not in FORMATS:
        raise ParameterError(
            "format",
            f"unknown format {parameters.output_format!r}: use one of {', '.join(FORMATS)}",
        )
    ranges = _ranges(snapshot, list(query))
    resolved = snapshot.current.resolve(parameters.query(variable, ranges, shape))
    kept = resolved.kept
    if resolved.cells > max_cells:
        sizes = " x ".join(f"{n} {d}" for n, d in zip(resolved.shape, kept, strict=True))
        raise ParameterError(
            "over",
            f"the answer would have {resolved.cells} values ({sizes}), more than this "
            f"service's limit of {max_cells}: average over more dimensions or narrow the "
            f"ranges of {list(kept)}",
        )
    if parameters.output_format == "png" and len(kept) not in (1, 2):
        raise ParameterError(
            "format",
            f"a png draws a series or a map, but this answer has {len(kept)} dimensions "
            f"{list(kept)}: average over more dimensions, or ask for json or csv",
        )
    return AverageRequest(resolved, parameters.output_format)


def _ranges(
    snapshot: DatasetSnapshot, query: list[tuple[str, str]]
) -> dict[str, tuple[str | None, str | None]]:
    names = [name for name, _ in query]
    if len(set(names)) < len(names):
        repeated = next(name for name in names if names.count(name) > 1)
        raise ParameterError(repeated, f"parameter {repeated!r} is given more than once")
    cube = snapshot.cube
    # (Each dimension's pattern made and compiled once per snapshot.)
    patterns = cube.remembered("range patterns", partial(_compiled_patterns, cube))
    ranges = {}
    for name, text in query:
        if name in OPTIONS:
            continue
        pattern = patterns.get(name)
        if pattern is None:
            raise ParameterError(
                name,
                f"unknown parameter {name!r}: ranges are named by the dimensions of the "
                f"dataset {list(patterns)}; the other parameters are {', '.join(OPTIONS)}",
            )
        if not pattern.fullmatch(text):
            raise malformed_range(name, text)
        ranges[name] = split_range(name, text)
    return ranges


def _compiled_patterns(cube: RawCube) -> dict[str, re.Pattern[str]]:
    """Each dimension's range pattern, compiled, in the dataset's order of dimensions."""
    return {str(d): re.compile(range_pattern(cube.index(str(d)))) for d in cube.raw.dims}


def requested_shape(name: str | None, body: bytes | None) -> Shape | None:
    """The shape of a request: a named region (``shape=SET:NAME``), or the GeoJSON of a POST
    body (at most ``MAX_GEOJSON_BYTES``); an error naming ``shape`` otherwise."""
    if name is not None and body:
        raise ParameterError("shape", "give shape=SET:NAME or a GeoJSON body, not both")
    try:
        if body:
            return shape_from_geojson(body, name="uploaded GeoJSON")
        return named_region(name) if name is not None else None
    except AccumulusError as exc:
        raise ParameterError("shape", str(exc)) from None
