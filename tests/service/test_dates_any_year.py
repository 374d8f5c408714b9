"""The service selects what a range of dates of any year from -9999 to 9999, at any
resolution, says (the same property as tests/core/test_dates_any_year.py, over HTTP):
clipped to the data with a note, or a 422 naming the range, never a wrapped-around date."""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from accumulus import api
from accumulus.service import create_app
from dates import TIMES, as_cftime, dates, expected_positions, reaches_past, timed_cube


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    directory = tmp_path_factory.mktemp("dates")
    cubes = {name: timed_cube(directory, name) for name in TIMES}
    labels = {name: api.open_cube(str(cube.path)).index("time") for name, cube in cubes.items()}
    return cubes, labels, TestClient(create_app([str(c.path) for c in cubes.values()]))


@pytest.mark.parametrize("name", list(TIMES))
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_ranges_of_any_year_select_what_they_say(served, name, data):
    cubes, labels, client = served
    years = cubes[name].years
    start, stop = data.draw(dates(years)), data.draw(dates(years))
    text = f"{start.text if start else ''}/{stop.text if stop else ''}"
    response = client.get(
        f"/api/datasets/{name}/tas/average", params={"over": "lat,lon", "time": text}
    )
    index = labels[name]
    known = as_cftime(index)
    lo, hi = expected_positions(known, start, stop)
    if hi == lo:
        assert response.status_code == 422, response.text
        body = response.json()
        assert body["parameter"] == "time"
        assert "selects nothing" in body["error"] or "is reversed" in body["error"]
        return
    assert response.status_code == 200, response.text
    answer = response.json()
    assert answer["coords"]["time"] == [t.isoformat() for t in index[lo:hi]]
    if reaches_past(known, start, stop):
        assert f"time={text} reaches past the coordinate" in answer["note"]


@pytest.mark.parametrize(
    ("time", "first", "steps"),
    [("1417/2002", "2001-01-01", 730), ("2001/2300", "2001-01-01", 730),
     ("2002-12-25/9999-12-31", "2002-12-25", 7)],
)  # fmt: skip
def test_the_issue_ranges_are_clipped_with_a_note(served, time, first, steps):
    *_, client = served
    response = client.get(
        "/api/datasets/issue/tas/average", params={"over": "lat,lon", "time": time}
    )
    assert response.status_code == 200, response.text
    answer = response.json()
    assert len(answer["coords"]["time"]) == steps and answer["coords"]["time"][0].startswith(first)
    assert f"time={time} reaches past the coordinate" in answer["note"]
