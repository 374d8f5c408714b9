"""How often an archive steps along its append dimension, and how many steps make a month
or a year.

A chunk along the append dimension chosen from bytes alone grows without bound as the grid
shrinks: a 10 x 10 cut of IMERG would get chunks of 262,144 half-hours (15 years), one file
that every append rewrites. The archive's cadence sets it instead: by default a chunk holds a
calendar month of steps, kept within 10-100 MiB (``ingest/layout.py``'s ``cadence_steps``),
so yearly data is not cut one step a chunk and a daily archive's open chunk (read raw while it
fills, outside its accumulations' coverage) is about a month, not a year. The cadence is read
from the times themselves (the median step between them) or, for a single step, from its CF
bounds.
"""

from __future__ import annotations

import re

import numpy as np

YEAR_SECONDS = 365.2425 * 86400  # a mean Gregorian year
MONTH_SECONDS = YEAR_SECONDS / 12
_UNIT_SECONDS = {
    "microsecond": 1e-6,
    "millisecond": 1e-3,
    "second": 1.0,
    "sec": 1.0,
    "s": 1.0,
    "minute": 60.0,
    "min": 60.0,
    "hour": 3600.0,
    "hr": 3600.0,
    "h": 3600.0,
    "day": 86400.0,
    "d": 86400.0,
}
_SINCE = re.compile(r"^\s*(\w+?)s?\s+since\s+", re.IGNORECASE)


def unit_seconds(units: str | None) -> float | None:
    """Seconds in one unit of CF time ``units`` ("minutes since ..." -> 60), or None."""
    match = _SINCE.match(units or "")
    if match is None:
        return None
    return _UNIT_SECONDS.get(match.group(1).lower())


def step_seconds(
    coordinate: np.ndarray, units: str | None, bounds: np.ndarray | None = None
) -> float | None:
    """The archive's step in seconds: the median difference between successive times, or
    the width of the bounds of a single step; None when neither is known."""
    scale = unit_seconds(units)
    if scale is None:
        return None
    values = np.unique(np.asarray(coordinate, dtype="f8"))
    if len(values) > 1:
        return float(np.median(np.diff(values))) * scale
    if bounds is not None and np.size(bounds) >= 2:
        widths = np.abs(np.diff(np.asarray(bounds, dtype="f8").reshape(-1, 2), axis=1))
        if widths.size and widths.max() > 0:
            return float(widths.max()) * scale
    return None


def steps_per_year(step: float | None) -> int | None:
    """How many steps of ``step`` seconds make a calendar year (at least 1)."""
    if step is None or step <= 0:
        return None
    return max(1, round(YEAR_SECONDS / step))


def steps_per_month(step: float | None) -> int | None:
    """How many steps of ``step`` seconds make a calendar month (at least 1)."""
    if step is None or step <= 0:
        return None
    return max(1, round(MONTH_SECONDS / step))
