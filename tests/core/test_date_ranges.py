"""Date ranges resolved by binary search (``request.date_positions``) select what pandas'
``slice_indexer`` selects (what ``DataArray.sel(time=slice(a, b))`` selects), for partial
ISO dates of every resolution on indexes of several steps and units."""

from __future__ import annotations

import datetime
import re
from unittest.mock import patch

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query import request
from accumulus.accumulation.query.request import date_positions, index_range
from accumulus.errors import AccumulusError

STEPS = ["6h", "D", "7D", "MS", "YS", "17min"]
UNITS = ["s", "ms", "us", "ns"]
# Dates of every resolution, a year to a second.
FORMATS = ["%Y", "%Y-%m", "%Y-%m-%d", "%Y-%m-%dT%H", "%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S",
           "%Y-%m-%d %H", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"]  # fmt: skip


@st.composite
def bounds(draw) -> str | None:
    if draw(st.integers(0, 9)) == 0:
        return None  # an open end
    seconds = draw(st.integers(0, 40 * 365 * 86400))
    stamp = pd.Timestamp("1990-01-01") + pd.Timedelta(seconds=seconds)
    return stamp.strftime(draw(st.sampled_from(FORMATS)))


# An index of a drawn step, unit and length, and a range of bounds() on it.
on_date_indexes = given(
    step=st.sampled_from(STEPS),
    unit=st.sampled_from(UNITS),
    size=st.integers(1, 400),
    first=st.integers(0, 20 * 365),
    start=bounds(),
    stop=bounds(),
)


@settings(max_examples=400, deadline=None)
@on_date_indexes
def test_date_positions_match_pandas(step, unit, size, first, start, stop):
    start_at = pd.Timestamp("1995-03-01") + pd.Timedelta(days=first)
    periods = min(size, 200)  # yearly steps stay before 2262 (the end of nanoseconds)
    index = pd.date_range(start_at, periods=periods, freq=step, unit=unit)
    found = date_positions(index, start, stop)
    assert found is not None
    lo, hi, _ = index.slice_indexer(start, stop).indices(len(index))
    assert found == (lo, max(lo, hi))


@settings(max_examples=300, deadline=None)
@on_date_indexes
def test_quick_ranges_are_the_general_answers(step, unit, size, first, start, stop):
    """``index_range``'s quick path (``_quick_range``) gives what its general one gives,
    whether the range reaches past the coordinate included, and is taken whenever the
    range selects something."""
    start_at = pd.Timestamp("1995-03-01") + pd.Timedelta(days=first)
    index = pd.date_range(start_at, periods=min(size, 200), freq=step, unit=unit)
    index = pd.DatetimeIndex(index.values, name="time")  # as read from a store: no freq
    outcomes = []
    for quick in (request._quick_range, lambda *_: None):
        with patch.object(request, "_quick_range", quick):
            try:
                outcomes.append(index_range(index, "time", start, stop))
            except AccumulusError as exc:
                outcomes.append(str(exc))
    assert outcomes[0] == outcomes[1]
    if not isinstance(outcomes[0], str):
        assert request._quick_range(index, start, stop) == outcomes[0]


def test_other_bounds_are_left_to_pandas():
    index = pd.date_range("2000-01-01", periods=10, freq="D")
    assert date_positions(index, "20000103", None) is None
    assert date_positions(index, "2000-01-03T12:00:00.5", None) is None
    assert date_positions(index.tz_localize("UTC"), "2000-01-03", None) is None
    # Still resolved as pandas resolves them.
    assert index_range(index, "time", "20000103", "2000-01-05")[0] == (2, 5)


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize(
    ("start", "stop", "selected"),
    [
        ("2000-01-03", "2300-01-01", (2, 10)),  # past 2262, the end of nanoseconds
        ("2000-01-03", "2300", (2, 10)),  # a year: NumPy wraps it around in nanoseconds
        ("1417", "2000-01-02", (0, 2)),  # 1417 was 2001-07-22 in nanoseconds
        ("1677-09", "2000-01-02", (0, 2)),  # a month that begins before nanoseconds do
        ("-9999", "9999-12-31T23:59:59", (0, 10)),
        ("0000-01", "2000-01-01 12", (0, 1)),  # year 0 (1 BC)
    ],
)
def test_dates_beyond_the_index_unit_lie_before_or_after_it(unit, start, stop, selected):
    index = pd.date_range("2000-01-01", periods=10, freq="D").as_unit(unit)
    assert date_positions(index, start, stop) == selected
    assert index_range(index, "time", start, stop) == (selected, True)  # clipped


@pytest.mark.parametrize("date", ["0001-20", "2001-02-30", "2001-01-01T25"])
def test_dates_written_as_iso_but_not_dates_are_a_clear_error(date):
    # Found by the service's fuzzing: "0001-20" (month 20 for NumPy, 20 January of year 1
    # for pandas) was a server error.
    index = pd.date_range("2001-01-01", periods=40, freq="D")
    assert date_positions(index, None, date) is None
    with pytest.raises(AccumulusError, match=re.escape(date)):
        index_range(index, "time", None, date)


def test_python_dates_beyond_nanoseconds_are_clipped_with_a_note():
    """Bounds given as Python or NumPy dates select as pandas does, and say they were
    clipped (a ``datetime.date`` compared with no datetime64 before)."""
    index = pd.date_range("2001-01-01", periods=730, freq="D")
    for start in (datetime.date(1417, 1, 1), np.datetime64("1417"), pd.Timestamp("1417-01-01")):
        assert index_range(index, "time", start, datetime.date(2001, 1, 3)) == ((0, 3), True)
    stop = datetime.datetime(2300, 1, 1)
    assert index_range(index, "time", np.datetime64("2002-12-25"), stop) == ((723, 730), True)


@pytest.mark.parametrize("calendar", ["Y", "M", "D", "h", "m", "s"])
@pytest.mark.parametrize("unit", UNITS)
def test_dates_take_the_range_check_of_their_unit(calendar, unit):
    """Every ISO date's unit has its span in an index's unit (``_unit_span``; NumPy 2
    refuses to convert the extremes to days, hours, minutes or seconds, which once left
    all but years and months to the slower conversion), and a moment put in the index's
    unit through it is what the checked conversion gives, at the span's ends and past them."""
    dtype = np.dtype(f"M8[{calendar}]")
    span = request._unit_span(dtype, unit)
    assert span is not None
    for end in span[:2]:
        for count in (end - 2, end - 1, end, end + 1, end + 2, 0, 12345):
            if not -(2**63) < count < 2**63:  # (seconds in seconds: all of int64 but NaT)
                continue
            moment = np.array(count, dtype="i8").view(dtype)[()]
            with patch.object(request, "_unit_span", lambda *_: None):
                checked = request.in_unit(moment, unit)
            assert request.in_unit(moment, unit) == checked
