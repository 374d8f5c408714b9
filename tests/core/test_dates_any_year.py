"""Ranges of dates of any year from -9999 to 9999 and any resolution select what they say,
from Python and the command line, on cubes whose times lie within what nanoseconds hold,
at its edges and beyond it (cftime labels): clipped to the data with a note, or refused in
one line naming the range, never a wrapped-around date (issue 35: ``time=1417/2002`` started
at 2001-07-22, ``2001/2300`` was called reversed)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.errors import ParameterError
from command_line import run
from dates import TIMES, Date, as_cftime, dates, expected_positions, reaches_past, timed_cube


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dates")
    return {name: timed_cube(directory, name) for name in TIMES}


def check_answer(cube, start: Date | None, stop: Date | None) -> None:
    """The Python answer to ``time=start/stop`` is the expected selection, its values
    xarray's area-weighted means of it, with a note where a bound lies past the data; or a
    ParameterError naming the range when it selects nothing."""
    opened = accumulus.open(str(cube.path))
    labels = opened.cube.index("time")
    known = as_cftime(labels)
    lo, hi = expected_positions(known, start, stop)
    bounds = (start and start.text, stop and stop.text)
    if hi == lo:
        with pytest.raises(ParameterError) as refused:
            opened.query("tas", "lat,lon", {"time": bounds})
        assert refused.value.parameter == "time"
        message = str(refused.value)
        assert "selects nothing" in message or "is reversed" in message
        assert "\n" not in message
        return
    result = opened.query("tas", "lat,lon", {"time": bounds})
    assert list(result.data.indexes["time"]) == list(labels[lo:hi])
    ds = opened.cube.decoded.isel(time=slice(lo, hi))
    expected = ds.tas.astype("f8").weighted(np.cos(np.deg2rad(ds.lat))).mean(["lat", "lon"])
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-12)
    if reaches_past(known, start, stop):
        assert "reaches past the coordinate" in result.note


@pytest.mark.parametrize("name", list(TIMES))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_ranges_of_any_year_select_what_they_say(cubes, name, data):
    cube = cubes[name]
    check_answer(cube, data.draw(dates(cube.years)), data.draw(dates(cube.years)))


@pytest.mark.parametrize(
    ("name", "start", "stop", "first", "steps"),
    [
        # The three ranges on its cube.
        ("issue", "1417", "2002", "2001-01-01", 730),
        ("issue", "2001", "2300", "2001-01-01", 730),
        ("issue", "2002-12-25", "9999-12-31", "2002-12-25", 7),
        ("issue", "-9999", "9999-12-31T23:59:59", "2001-01-01", 730),
        ("early", "1677-09", "1677-09-23 06", "1677-09-22", 6),
        ("late", "2262-04", "9999", "2262-04-01", 10),
        ("paleo", "-0500", "0850-02", "0850-01-01", 2),
        ("future", "2999-12-30", "3000-01-03", "3000-01-01", 3),
    ],
)
def test_the_command_line_clips_with_a_note(
    cubes, capsys, monkeypatch, name, start, stop, first, steps
):
    cube = cubes[name]
    code, out, err = run(capsys, monkeypatch, "average", str(cube.path), "tas", "--over",
                         "lat,lon", "--range", f"time={start}/{stop}", "--json")  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert len(answer["coords"]["time"]) == steps
    assert answer["coords"]["time"][0].startswith(first)
    assert f"time={start}/{stop} reaches past the coordinate" in answer["note"]


@pytest.mark.parametrize(
    ("name", "start", "stop", "says"),
    [
        ("issue", "1417", "1500", "selects nothing"),
        ("issue", "2300", "2001", "is reversed"),
        ("issue", "9999-12-31", "-9999", "is reversed"),
        ("paleo", "2001", "2002", "selects nothing"),
        ("issue", "2001-02-30", None, "2001-02-30"),  # no such day
    ],
)
def test_the_command_line_refuses_in_one_line(cubes, capsys, monkeypatch, name, start, stop, says):
    cube = cubes[name]
    text = f"time={start}/{stop or ''}"
    code, _, err = run(capsys, monkeypatch, "average", str(cube.path), "tas", "--over", "lat,lon",
                       "--range", text)  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert says in lines[0]
