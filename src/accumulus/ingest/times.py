"""CF time units as xarray and cftime can decode them, or a one-line refusal.

Some producers write time units that mean something clear but that xarray cannot decode as
written. Two such spellings are read here for what they mean, and the cube stores the
readable form (its ``units`` and ``calendar`` attributes), so that xarray decodes the cube:

- calendar names with an "s", as CCM/CCSM files write them (``365_days``): CF's
  ``365_day``, ``366_day`` and ``360_day``;
- a reference date with month or day 00 (``days since 0000-00-00 00:00:00``, the same
  files): the start of that year, month 01 and day 01. The files' own ``date`` variable
  (YYYYMMDD) confirms it: day 6113 is 0016-10-01 (``date`` 161001) in their 365-day calendar.

Everything else is left to cftime, through xarray (a year 0 in a calendar that has one, any
calendar cftime knows). Units neither can decode are refused in one line naming the variable
and why (``months since`` on a real-world calendar: a month has no fixed length), before
anything is written.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np
from xarray.coding.times import decode_cf_datetime

from accumulus.errors import AccumulusError

_CALENDAR_ALIASES = {"365_days": "365_day", "366_days": "366_day", "360_days": "360_day"}
# "<unit> since <year>-<month>-<day><rest>": the reference date's parts.
_REFERENCE = re.compile(
    r"^(?P<head>\s*\w+\s+since\s+)(?P<year>[+-]?\d+)-(?P<month>\d+)-(?P<day>\d+)(?P<rest>.*)$",
    re.IGNORECASE | re.DOTALL,
)


def readable_time_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """``attrs`` with ``units`` and ``calendar`` in the spelling xarray decodes (the same
    meaning); unchanged when they are readable already or are not time units."""
    units, calendar = attrs.get("units"), attrs.get("calendar")
    out = dict(attrs)
    if isinstance(calendar, str) and calendar.strip().lower() in _CALENDAR_ALIASES:
        out["calendar"] = _CALENDAR_ALIASES[calendar.strip().lower()]
    if isinstance(units, str):
        match = _REFERENCE.match(units)
        if match and (int(match["month"]) == 0 or int(match["day"]) == 0):
            month = max(int(match["month"]), 1)
            day = max(int(match["day"]), 1)
            out["units"] = f"{match['head']}{match['year']}-{month:02d}-{day:02d}{match['rest']}"
    return out


def check_decodable(where: str, name: str, units: str, calendar: str | None) -> None:
    """Raise ``AccumulusError`` (one line) unless xarray decodes times in ``units`` and
    ``calendar``, as it would on opening the cube."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # xarray's notes on cftime and padded years
            decode_cf_datetime(np.zeros(1), units, calendar)
    except Exception as exc:  # xarray, pandas and cftime raise several kinds
        reason = _reason(exc)
        raise AccumulusError(
            f"{where}: variable {name!r} has time units {units!r} (calendar "
            f"{calendar or 'standard'}) that xarray cannot decode: {reason}; nothing was "
            "written (rewrite the units, e.g. with ncatted, and append again)"
        ) from None


def _reason(exc: BaseException) -> str:
    """What xarray (or cftime, whose words it passes on) says, on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__
