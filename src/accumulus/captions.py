"""The words around an answer: a title that says what was averaged and how, a subtitle with
the period, the region and the weights, and a caption with what the answer cost.

Pure functions of a ``QueryResult`` (and its ``selection``), shared by the PNG pictures, the
JSON answers and so the web page, so that every picture of an answer is titled alike.
Giovanni's names are used for the usual pictures: a time-averaged map, an area-averaged time
series, a longitude- (or latitude-) averaged Hovmöller diagram.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from accumulus.accumulation.model.spec import Weights
from accumulus.accumulation.query.answer import QueryResult
from accumulus.accumulation.query.selection import Extent

_VERBS = {"mean": "averaged", "sum": "summed"}
# What the other statistics are of the values (count: by the weights, see ``captions``).
_STATISTIC_NAMES = {
    "var": "variance",
    "std": "standard deviation",
    "trend": "trend per year",
    "corr": "correlation",
}
_REGION_KINDS = ("latitude", "longitude")
# What the averaged dimensions are called, by their kinds.
_OVER_NAMES = {
    frozenset({"time"}): "Time",
    frozenset({"latitude", "longitude"}): "Area",
    frozenset({"longitude"}): "Longitude",
    frozenset({"latitude"}): "Latitude",
    frozenset({"latitude", "longitude", "time"}): "Area- and time",
}


@dataclass(frozen=True)
class Captions:
    title: str  # what the picture shows: statistic, variable, units
    subtitle: str  # where and when: period, region or box, weights
    caption: str  # what the answer cost

    def to_dict(self) -> dict[str, str]:
        """Title and subtitle (JSON answers carry the cost as numbers, in ``plan``)."""
        return {"title": self.title, "subtitle": self.subtitle}


def picture_kind(kinds: Mapping[str, str | None]) -> str:
    """ "map", "hovmoller", "series" or "image" for an answer whose dimensions have ``kinds``
    ({dim: kind}, in the answer's order)."""
    present = set(kinds.values())
    if len(kinds) == 1:
        return "series"
    if len(kinds) == 2 and present == {"latitude", "longitude"}:
        return "map"
    if len(kinds) == 2 and "time" in present and present & {"latitude", "longitude"}:
        return "hovmoller"
    return "image"


def kinds_of(result: QueryResult) -> dict[str, str | None]:
    """The kind of each dimension of the answer, in its order."""
    return _kinds(result.selection, result.dims)


def _kinds(extents: Mapping[str, Extent], dims: Iterable[str]) -> dict[str, str | None]:
    return {d: _extent_kind(extents.get(d)) for d in dims}


def captions(result: QueryResult) -> Captions:
    attrs = result.attrs
    name = str(attrs.get("long_name") or result.name)
    units = attrs.get("units")
    what = f"{name} ({units})" if units else name
    # The extents as a dict, looked up at once (a Selection finds each one through the
    # Mapping protocol's Python, per look-up).
    extents = dict(result.selection)
    over = [d for d in result.query.over if d in extents] or list(result.query.over)
    over_kinds = frozenset(_extent_kind(extents.get(d)) or d for d in over)
    over_name = _OVER_NAMES.get(over_kinds, ", ".join(over).capitalize())
    kinds = _kinds(extents, result.dims)
    picture = {
        "map": "map",
        "series": "time series" if "time" in kinds.values() else "series",
        "hovmoller": "Hovmöller diagram",
        "image": "field",
    }.get(picture_kind(kinds), "answer")
    stat = result.query.stat
    if stat in _VERBS:
        title = f"{over_name}-{_VERBS[stat]} {picture} of {what}"
    else:
        if stat in _STATISTIC_NAMES:
            counted = _STATISTIC_NAMES[stat]
        else:
            counted = "number of valid values" if result.weights == "none" else "sum of weights"
        partner = f" with {result.query.with_}" if result.query.with_ else ""
        title = (
            f"{picture.capitalize()} of the {counted} of {name}{partner} over {over_name.lower()}"
        )
    return Captions(title, subtitle(result, extents), cost_caption(result))


def subtitle(result: QueryResult, extents: dict[str, Extent]) -> str:
    """Period · region · other dimensions · weights, from what the query selected
    (``extents``: its selection)."""
    parts = []
    times = [e for e in extents.values() if e.kind == "time"]
    if times:
        parts.append(extent_text(times[0]) + f" ({_plural(times[0].steps, 'step')})")
    region = [extent_text(e) for k in _REGION_KINDS for e in extents.values() if e.kind == k]
    shape = result.query.shape
    if shape is not None:
        cells = result.plan.mask.count if result.plan.mask is not None else 0
        parts.append(f"{shape.label}: {_plural(cells, 'cell')} with their centre inside")
    elif region:
        parts.append(", ".join(region))
    parts += [f"{d} {extent_text(e)}" for d, e in extents.items() if e.kind is None]
    # Weights matter where values of different weights are averaged together: area weights
    # (cos latitude) only across latitudes (across both axes of a curvilinear grid), and
    # their absence there.
    over_latitude = any(extents[d].kind == "latitude" for d in result.query.over if d in extents)
    if result.weights not in ("area", "none") or result.weighted_over or over_latitude:
        parts.append(_weights_text(result.weights))
    return " · ".join(parts)


def cost_caption(result: QueryResult) -> str:
    stats = result.stats
    text = (
        f"accumulus: {stats.accumulation_chunks_read} accumulation + {stats.raw_chunks_read} "
        f"raw chunks, {_bytes_text(stats.bytes_read)} read in {stats.seconds * 1000:.0f} ms"
    )
    return text + (f"; {result.note}" if result.note else "")


# --------------------------------------------------------------------------------------------
# Labels


def extent_text(extent: Extent) -> str:
    """``0.5°N–24.5°N``, ``20°W–40°E``, ``2001-03-01 – 2003-02-28``, ``500–850``."""
    first, last = extent.first, extent.last
    if extent.kind == "time":
        a, b = time_text(first), time_text(last)
        return a if a == b else f"{a} – {b}"
    if extent.across_seam:  # west to east across the date line or 0°: 170°E–170°W
        return _longitudes_text(float(first), float(last), wrap=True)
    if extent.kind == "longitude":
        lo, hi = sorted((float(first), float(last)))
        # A 0..360 range across 180°E reads better in its own numbers (350°E, not 10°W).
        return _longitudes_text(lo, hi, wrap=not lo < 180 < hi)
    if extent.kind == "latitude":
        lo, hi = sorted((float(first), float(last)))
        a, b = degrees_text(lo, "latitude"), degrees_text(hi, "latitude")
        return a if a == b else f"{a}–{b}"
    a, b = _plain(first), _plain(last)
    return a if a == b else f"{a}–{b}"


def _longitudes_text(west: float, east: float, wrap: bool) -> str:
    """From ``west`` eastwards to ``east``: the date line is 180°W at a range's western end
    and 180°E at its eastern end (-180..178 is 180°W–178°E, not 180°–178°E)."""
    a, b = degrees_text(west, "longitude", wrap), degrees_text(east, "longitude", wrap)
    if west == east:
        return a
    return f"{a}{'W' if a == '180°' else ''}–{b}{'E' if b == '180°' else ''}"


def degrees_text(value: float, kind: str, wrap: bool = True) -> str:
    """``10°S``, ``0°``, ``40°E``, ``170°W`` (longitudes wrapped into (-180, 180] unless
    ``wrap`` is false)."""
    if kind == "longitude" and wrap:
        value = (value + 180.0) % 360.0 - 180.0
        value = 180.0 if value == -180.0 else value
    number = _number(abs(value))
    if value == 0 or (kind == "longitude" and abs(value) == 180):
        return f"{number}°"
    hemisphere = ("N", "S") if kind == "latitude" else ("E", "W")
    return f"{number}°{hemisphere[0] if value > 0 else hemisphere[1]}"


def time_text(value: Any) -> str:
    """A date (``2001-03-01``), with the time of day only when it is not midnight."""
    if hasattr(value, "calendar"):  # cftime
        text = value.isoformat()
        return text[:10] if text[11:19] == "00:00:00" else text[:16].replace("T", " ")
    stamp = pd.Timestamp(value)
    if not 1000 <= stamp.year <= 9999:  # (strftime pads other years per platform)
        return stamp.strftime("%Y-%m-%d" if stamp == stamp.normalize() else "%Y-%m-%d %H:%M")
    # The same text from the fields: pandas' strftime and normalize were most of a JSON
    # answer's subtitle (docs/benchmarks.md, session svc59).
    date = f"{stamp.year}-{stamp.month:02}-{stamp.day:02}"
    if stamp.hour == stamp.minute == stamp.second == stamp.microsecond == stamp.nanosecond == 0:
        return date
    return f"{date} {stamp.hour:02}:{stamp.minute:02}"


def _extent_kind(extent: Extent | None) -> str | None:
    return extent.kind if extent is not None else None


def _weights_text(weights: Weights) -> str:
    if weights == "area":
        return "area-weighted (cos latitude)"
    if weights == "none":
        return "unweighted"
    return f"weighted by {weights.removeprefix('array:')}"


def _number(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _plain(value: Any) -> str:
    if isinstance(value, float | np.floating) and math.isfinite(value):
        return _number(float(value)) if value >= 0 else "-" + _number(-float(value))
    return str(value)


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def _bytes_text(count: int) -> str:
    n = float(count)
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"
