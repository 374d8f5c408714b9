"""Dates of any year from -9999 to 9999, at any resolution from a year to a second, written
as a user writes a range bound, and what a range of them selects on a cube's time labels:
worked out with cftime, which holds every year of every calendar, independently of
accumulus, NumPy and pandas. Cubes whose times lie near the edges of what nanoseconds hold
(1677 and 2262) and beyond them (decoded by xarray as cftime), to try them on."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cftime
import numpy as np
import pandas as pd
import xarray as xr
from hypothesis import strategies as st

from accumulus import api

RESOLUTIONS = ("year", "month", "day", "hour", "minute", "second")


@dataclass(frozen=True)
class Date:
    """A date written down to ``resolution`` (the fields after it are not written)."""

    fields: tuple[int, int, int, int, int, int]  # year (-9999..9999), month, day, h, m, s
    resolution: str
    separator: str = "T"  # between the day and the hour: ISO's T or a space

    @property
    def text(self) -> str:
        year, month, day, hour, minute, second = self.fields
        text = f"-{-year:04d}" if year < 0 else f"{year:04d}"
        parts = (f"-{month:02d}", f"-{day:02d}", f"{self.separator}{hour:02d}", f":{minute:02d}",
                 f":{second:02d}")  # fmt: skip
        return text + "".join(parts[: RESOLUTIONS.index(self.resolution)])

    def period(self, like: cftime.datetime) -> tuple[cftime.datetime, cftime.datetime]:
        """The start of the period the date stands for and the start of the next, as dates
        of ``like``'s calendar (year 0 is 1 BC where the calendar has a year 0)."""
        level = RESOLUTIONS.index(self.resolution)
        kept = [f if i <= level else (1 if i < 3 else 0) for i, f in enumerate(self.fields)]
        start = _date(like, *kept)
        if self.resolution == "year":
            return start, _date(like, kept[0] + 1, 1, 1, 0, 0, 0)
        if self.resolution == "month":
            year, month = divmod(kept[0] * 12 + kept[1], 12)  # the month after
            return start, _date(like, year, month + 1, 1, 0, 0, 0)
        step = {"day": "days", "hour": "hours", "minute": "minutes", "second": "seconds"}
        return start, start + pd.Timedelta(**{step[self.resolution]: 1}).to_pytimedelta()


def _date(like: cftime.datetime, *fields: int) -> cftime.datetime:
    return cftime.datetime(*fields, calendar=like.calendar, has_year_zero=like.has_year_zero)


@st.composite
def dates(draw, years: tuple[int, int]) -> Date | None:
    """A range bound: None (an open end) now and then, else a date of any year from -9999 to
    9999, or half the time of a year within ``years`` (where the cube's times are)."""
    if draw(st.integers(0, 9)) == 0:
        return None
    near = st.integers(years[0] - 1, years[1] + 1)
    year = draw(st.one_of(st.integers(-9999, 9999), near))
    fields = (
        year,
        draw(st.integers(1, 12)),
        draw(st.integers(1, 28)),  # a day every calendar has
        draw(st.integers(0, 23)),
        draw(st.integers(0, 59)),
        draw(st.integers(0, 59)),
    )
    return Date(fields, draw(st.sampled_from(RESOLUTIONS)), draw(st.sampled_from("T ")))


def as_cftime(labels: pd.Index) -> list[cftime.datetime]:
    """A cube's time labels as cftime dates: a ``DatetimeIndex`` as proleptic Gregorian
    dates with a year 0 (as NumPy and ISO 8601 count), cftime labels as they are."""
    if isinstance(labels, xr.CFTimeIndex):
        return list(labels)
    return [
        cftime.datetime(*t.timetuple()[:6], calendar="proleptic_gregorian", has_year_zero=True)
        for t in labels
    ]


def expected_positions(
    labels: list[cftime.datetime], start: Date | None, stop: Date | None
) -> tuple[int, int]:
    """What ``sel(time=slice(start, stop))`` selects: from the first label at or after the
    start's period to the last before the period after the stop's."""
    lo = 0 if start is None else sum(t < start.period(labels[0])[0] for t in labels)
    hi = len(labels) if stop is None else sum(t < stop.period(labels[0])[1] for t in labels)
    return lo, max(lo, hi)


def reaches_past(labels: list[cftime.datetime], start: Date | None, stop: Date | None) -> bool:
    """Whether a bound lies more than a step beyond the labels (then the answer must say the
    range was clipped; within a step, it may or may not)."""
    step = labels[1] - labels[0]
    return (start is not None and start.period(labels[0])[0] < labels[0] - step) or (
        stop is not None and stop.period(labels[0])[0] > labels[-1] + step
    )


@dataclass(frozen=True)
class TimedCube:
    """A small cube of ``tas(time, lat, lon)`` whose times are ``times``."""

    name: str
    path: Path
    years: tuple[int, int]  # of its first and last time


# name: (first time, steps, step, calendar); nanoseconds hold 1677-09-21 to 2262-04-11.
TIMES = {
    "issue": ("2001-01-01", 730, "D", "standard"),  # the cube of issue 35
    "early": ("1677-09-22", 120, "6h", "standard"),  # at the start of nanoseconds
    "late": ("2262-01-01", 100, "D", "standard"),  # at their end
    "paleo": ("0850-01-01", 36, "MS", "noleap"),  # before them: cftime labels
    "future": ("3000-01-01", 200, "D", "360_day"),  # after them
}


def timed_cube(directory: Path, name: str) -> TimedCube:
    """Write (with xarray) and accumulate the cube ``TIMES[name]``."""
    first, steps, step, calendar = TIMES[name]
    use_cftime = calendar != "standard"
    times = xr.date_range(first, periods=steps, freq=step, calendar=calendar, use_cftime=use_cftime)
    rng = np.random.default_rng(len(name))
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), rng.normal(280, 5, (steps, 4, 8)).astype("f4"))},
        coords={
            "time": times,
            "lat": ("lat", [-60.0, -20.0, 20.0, 60.0], {"units": "degrees_north"}),
            "lon": ("lon", np.arange(8) * 45.0 - 157.5, {"units": "degrees_east"}),
        },
    )
    path = directory / f"{name}.zarr"
    ds.to_zarr(path, mode="w", encoding={"tas": {"chunks": (7, 2, 4)}}, consolidated=True)
    api.accumulate(str(path), "tas")
    return TimedCube(name, path, (times[0].year, times[-1].year))
