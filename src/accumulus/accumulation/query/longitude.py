"""Longitudes compared modulo 360: a box in any convention, across 0° or the date line.

A longitude box ``west/east`` holds the cells whose centre lies east of ``west`` by at most
the box's width: ``east - west`` when ``west <= east`` (the whole circle from 360 on), and
``(east - west) mod 360`` when ``west > east``, a box across the date line (``170/-170``).
Labels are compared modulo 360, so a box written in -180..180 selects the same cells on a
0..360 grid and the other way round.

On a grid whose longitudes run monotonically over less than 360 degrees, those cells are
one run of indices in circular order. It is written as a half-open range ``(lo, hi)`` whose
``hi`` passes the end of the axis when the run crosses the grid's seam (from its last cell
back to its first): ``(lo, hi)`` then stands for ``[lo, size)`` followed by
``[0, hi - size)`` (``pieces``), in that order in the answer.

A grid whose last longitude repeats its first a turn later (``-0.5..359.5`` as FERRET writes
it, ``0..360``, ``30..390``: a cyclic point added for plotting) holds one column twice. Its
circle is its first ``period`` columns, every other one once: ranges are runs within them,
``size`` above is ``period``, and the repeated column is never selected (it would count
twice in the whole circle, and once too often wherever its twin is inside a box).
"""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

import numpy as np

from accumulus.errors import AccumulusError

# Labels this close (in degrees) are the same longitude: -0.1 + 360 need not round to the
# float nearest 359.9.
TOLERANCE = 1e-9


def period(values: np.ndarray) -> int:
    """How many distinct longitudes the grid holds around the circle: its size, or one
    fewer when its last longitude repeats its first a turn later (within 1% of a step, as
    float32 labels are rounded)."""
    if values.dtype.kind not in "iuf" or values.size < 3 or not np.isfinite(values).all():
        return values.size
    lons = values.astype("f8")
    step = float(np.abs(np.diff(lons)).min())
    repeats = abs(abs(lons[-1] - lons[0]) - 360) <= step * 0.01
    return values.size - 1 if repeats and _monotonic(lons) else values.size


def is_circular(values: np.ndarray) -> bool:
    """Whether a longitude coordinate can be compared modulo 360: numbers, monotonic, over
    less than a full turn once a repeated last column is left out (``period``)."""
    if values.dtype.kind not in "iuf" or values.size == 0 or not np.isfinite(values).all():
        return False
    lons = values[: period(values)].astype("f8")
    return _monotonic(lons) and float(lons.max()) - float(lons.min()) < 360 - TOLERANCE


def _monotonic(lons: np.ndarray) -> bool:
    steps = np.diff(lons)
    return bool((steps > 0).all() or (steps < 0).all())


def longitude_range(
    values: np.ndarray, west: float | None, east: float | None, known: _Circle | None = None
) -> tuple[tuple[int, int], bool]:
    """The cells of the box ``west/east`` as ``(lo, hi)`` (``hi`` past the grid's ``period``
    when the run crosses its seam), and whether the box reaches past a regional grid's
    cells (so the answer must say that it was clipped). An open end is the grid's own first
    or last longitude. Raises ``AccumulusError`` when no cell is inside. ``known``: the
    grid's ``circle_of``, when kept."""
    circle = circle_of(values) if known is None else known
    lons = circle.lons
    west = circle.first if west is None else float(west)
    east = circle.last if east is None else float(east)
    if west <= east and east - west >= 360 - TOLERANCE:
        return (0, lons.size), False  # the whole circle
    width = east - west if west <= east else (east - west) % 360
    offset = _east_of(lons, west)
    inside = offset <= width + TOLERANCE
    inside |= offset >= 360 - TOLERANCE
    count = int(np.count_nonzero(inside))
    if count == 0:
        raise AccumulusError("selects nothing")
    clipped = _reaches_past(circle, west, width)
    if count == lons.size:
        return (0, lons.size), clipped
    # The cells inside are one run in circular order (the grid is monotonic over less than
    # a turn): it starts at the first cell inside, or past the last cell outside when it
    # runs across the grid's seam.
    if not inside[0]:
        lo = int(inside.argmax())
    elif not inside[-1]:
        lo = 0
    else:
        lo = lons.size - int(inside[::-1].argmin())
    return (lo, lo + count), clipped


def circle_of(values: np.ndarray) -> _Circle:
    """What every range on the longitude grid ``values`` asks of it (``_Circle``)."""
    return _circle(values.dtype.str, values.tobytes())


class _Circle(NamedTuple):
    """What every range on one longitude grid asks of it: its distinct longitudes (float64),
    the least and greatest, and its smallest step (0 with fewer than two)."""

    lons: np.ndarray
    first: float
    last: float
    step: float


@lru_cache(maxsize=16)
def _circle(dtype: str, labels: bytes) -> _Circle:
    """The ``_Circle`` of the longitudes ``labels`` (bytes of an array of ``dtype``), worked
    out once per grid: every query with a longitude range asks again."""
    values = np.frombuffer(labels, dtype=dtype)
    lons = values[: period(values)].astype("f8")
    step = float(np.abs(np.diff(lons)).min()) if lons.size > 1 else 0.0
    return _Circle(lons, float(lons.min()), float(lons.max()), step)


def pieces(lo: int, hi: int, size: int) -> list[tuple[int, int]]:
    """``(lo, hi)`` as index ranges within the axis, in the order of the answer."""
    if hi <= size:
        return [(lo, hi)]
    return [(lo, size), (0, hi - size)]


def labels(values: np.ndarray, lo: int, hi: int, west: float | None) -> np.ndarray:
    """The longitudes of the answer: the grid's own, or for a run across the seam, written
    from the box's west edge on so that they keep running the grid's way (170..190 for
    ``170/-170`` on a -180..180 grid, -20..50 for ``-20/50`` on a 0..360 grid)."""
    size = period(values)
    taken = np.concatenate([values[a:b] for a, b in pieces(lo, hi, size)])
    if hi <= size:
        return taken
    start = float(values[lo]) if west is None else float(west)
    return start + _east_of(taken.astype("f8"), start)


def _east_of(lons: np.ndarray, west: float) -> np.ndarray:
    """How far east of ``west`` each longitude lies, in [0, 360)."""
    offset: np.ndarray = np.subtract(lons, west)
    np.remainder(offset, 360, out=offset)
    return offset


def _reaches_past(circle: _Circle, west: float, width: float) -> bool:
    """Whether the box [west, west + width] (modulo 360) holds longitudes outside the grid's
    cells, each reaching half a step beyond its centre (and 1% of a step more: labels
    stored as float32 are rounded)."""
    lons, step = circle.lons, circle.step
    if lons.size < 2:
        return width > TOLERANCE or not (_east_of(lons, west) < TOLERANCE).all()
    start = circle.first - step * 0.51
    extent = circle.last - circle.first + step * 1.02
    if extent >= 360 - step / 2:
        return False  # a global grid: every longitude is in some cell
    offset = (west - start) % 360
    if offset >= 360 - TOLERANCE:
        offset = 0.0  # the west edge is the grid's (to within rounding)
    return offset + width > extent + TOLERANCE
