"""Position rules (``--at``): parsing, where entries end, which are final, and the storage
form of a positioned accumulation. Pure: no store is written."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from accumulus.accumulation.model.positions import (
    entry_positions,
    final_entries,
    label_position,
    parse_at,
)
from accumulus.accumulation.model.spec import storage_form
from accumulus.errors import AccumulusError
from accumulus.grid import ChunkBounds


@pytest.mark.parametrize(
    ("spec", "rules"),
    [
        ("time=month", {"time": "month"}),
        ("time=YEAR", {"time": "year"}),
        ("time=Month+4", {"time": "month+4"}),
        ("time=year+30", {"time": "year+30"}),
        ("time=chunk", {"time": "chunk"}),
        ("lat=1,lon=1", {"lat": 1, "lon": 1}),
        (["time=10", "lat=2"], {"time": 10, "lat": 2}),
        ("time=2001-01-01,2006-01-01", {"time": ("2001-01-01", "2006-01-01")}),
        ("lat=-30,0,30,lon=5", {"lat": ("-30", "0", "30"), "lon": 5}),
        ("lat=0.0", {"lat": ("0.0",)}),
        ({"time": "month", "lat": 1, "lon": ["-30", 0]}, {"time": "month", "lat": 1,
                                                          "lon": ("-30", "0")}),
    ],
)  # fmt: skip
def test_parse_at(spec, rules):
    assert parse_at(spec) == rules


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("time=0", "a step must be a positive integer"),
        ("time=-3", "a step must be a positive integer"),
        ("time=month+0", "a step must be a positive integer"),
        ("time=", "give chunk, month, year"),
        ("month", "expected dim=rule"),
        ("time=month,time=1", "given twice"),
        ({"time": True}, "expected chunk, month, year"),
        ({"lat": [1, ""]}, "an empty label"),
    ],
)
def test_parse_at_refuses(spec, message):
    with pytest.raises(AccumulusError, match=message):
        parse_at(spec)


def test_steps_end_at_the_data_end():
    assert entry_positions(1, 4, dim="x") == (1, 2, 3, 4)
    assert entry_positions(3, 10, dim="x") == (3, 6, 9, 10)
    assert entry_positions(5, 10, dim="x") == (5, 10)
    assert entry_positions(20, 10, dim="x") == (10,)


def test_chunk_positions_are_zep5s():
    bounds = ChunkBounds.from_sizes([3, 3, 3, 1])
    assert entry_positions("chunk", 10, dim="x", bounds=bounds) == (3, 6, 9, 10)
    assert entry_positions("chunk", 10, dim="x", bounds=bounds, stride=3) == (9,)


@pytest.mark.parametrize("calendar", ["standard", "noleap", "360_day", "julian"])
def test_month_positions_in_any_calendar(calendar):
    cftime = calendar != "standard"
    times = xr.date_range("2001-01-01", periods=400, freq="D", calendar=calendar, use_cftime=cftime)
    index = pd.Index(times)
    got = entry_positions("month", 400, dim="time", index=index)
    expected = [i for i in range(1, 400) if times[i].month != times[i - 1].month] + [400]
    assert got == tuple(expected)
    days = np.diff([0, *got])
    assert days[0] == 31 if calendar != "360_day" else days[0] == 30
    years = entry_positions("year", 400, dim="time", index=index)
    assert years == ({"360_day": 360, "noleap": 365}.get(calendar, 365), 400)


@pytest.mark.parametrize("calendar", ["standard", "360_day"])
def test_month_steps_restart_at_every_month(calendar):
    cftime = calendar != "standard"
    times = xr.date_range("2001-01-01", periods=75, freq="D", calendar=calendar, use_cftime=cftime)
    got = entry_positions("month+4", 75, dim="time", index=pd.Index(times))
    months = entry_positions("month", 75, dim="time", index=pd.Index(times))
    assert set(months) <= set(got)  # whole months stay two entries
    starts = (0, *months[:-1])
    within = [p for p in got if p not in months]
    # Every other entry is a whole number of 4-day steps from its month's start.
    assert all((p - max(s for s in starts if s < p)) % 4 == 0 for p in within)
    assert max(np.diff([0, *got])) == 4  # no day is more than 2 from an entry
    if calendar == "standard":
        assert got == (4, 8, 12, 16, 20, 24, 28, 31, 35, 39, 43, 47, 51, 55, 59,
                       63, 67, 71, 75)  # fmt: skip
    # The data's end a whole step from the entry before: final, however the data grow; a
    # step left short is not, appended or not.
    for size in (74, 75):
        ends = entry_positions("month+4", size, dim="time", index=pd.Index(times[:size]))
        whole = size - ends[-2] == 4
        for appended in (True, False):
            assert final_entries("month+4", ends, size, appended) == len(ends) - (not whole)


def test_label_positions_follow_the_coordinate_order():
    ascending = pd.Index(np.arange(-90.0, 90.0, 10.0))  # -90 ... 80
    assert label_position(ascending, "lat", "-30") == 6
    assert label_position(ascending, "lat", "-25") == 7  # the first value past the label
    descending = pd.Index(ascending[::-1])  # 80 ... -90
    assert label_position(descending, "lat", "30") == 5  # values above 30 come first
    got = entry_positions(("0", "-30", "500"), 18, dim="lat", index=ascending)
    assert got == (6, 9, 18)  # sorted; a label past the data ends at the data's end
    dates = pd.DatetimeIndex(pd.date_range("2001-01-01", periods=10))
    assert entry_positions(("2001-01-04",), 10, dim="time", index=dates) == (3, 10)
    with pytest.raises(AccumulusError, match="not a date"):
        label_position(dates, "time", "soon")
    with pytest.raises(AccumulusError, match="not a number"):
        label_position(ascending, "lat", "north")


def test_calendar_rule_needs_dates():
    with pytest.raises(AccumulusError, match="needs a CF time coordinate"):
        entry_positions("month", 3, dim="lat", index=pd.Index([1.0, 2.0, 3.0]))


def test_last_entry_is_provisional_only_when_appended_and_not_fixed():
    assert final_entries("month", (31, 59, 70), 70, appended=False) == 3
    assert final_entries("month", (31, 59, 70), 70, appended=True) == 2  # an open month
    assert final_entries(10, (10, 20), 20, appended=True) == 2  # a whole step
    assert final_entries(10, (10, 20, 25), 25, appended=True) == 2
    assert final_entries(("a",), (4, 9), 9, appended=True) == 1


def test_storage_form():
    # Area weights vary along latitude: a latitude+longitude accumulation at every element
    # keeps latitude rows and stores Σx and counts along longitude.
    assert storage_form(("lat", "lon"), {"lat": 1, "lon": 1}, ("lat",)) == (("lon",), True)
    # Along time the weights factor out; along latitude at a coarser step they do not.
    assert storage_form(("time",), {"time": 1}, ("lat",)) == (("time",), True)
    assert storage_form(("lat", "lon"), {"lat": 2, "lon": 1}, ("lat",)) == (("lat", "lon"), False)
    assert storage_form(("lat",), {"lat": 1}, ("lat",)) == (("lat",), False)
    # Unit weights: nothing to factor.
    assert storage_form(("lat", "lon"), {"lat": 1, "lon": 1}, ()) == (("lat", "lon"), False)
