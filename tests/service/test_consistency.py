"""While appends extend a served store, every answer comes from one snapshot: its time
coordinate, its values and the accumulations used agree with each other and with the data
as it stood at that snapshot."""

from __future__ import annotations

import threading
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import xarray as xr
from service_cubes import CHUNKS, append_days, area_mean, dataset, write_cube

from accumulus import api
from accumulus.service import create_app
from accumulus.service.server import running

APPENDS = 4
DAYS_PER_APPEND = 8  # one time chunk: appends never rewrite a chunk a snapshot can see
SERIES = "/api/datasets/growing/tas/average?over=lat,lon&lat=-80/80&lon=-150/150"
MAP = "/api/datasets/growing/tas/average?over=time&lat=-80/80&lon=-150/150"


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_answers_agree_with_one_snapshot_while_appends_land(tmp_path: Path, cube_data):
    path = write_cube(tmp_path / "growing.zarr", cube_data, CHUNKS)
    parts = [cube_data]
    for k in range(APPENDS):
        start = cube_data.time[-1].values + np.timedelta64(1 + k * DAYS_PER_APPEND, "D")
        parts.append(dataset(str(start), DAYS_PER_APPEND, 12, 16, seed=k + 1))
    everything = xr.concat(parts, "time")

    answers: list[tuple[str, str, httpx.Response]] = []
    writing = threading.Event()
    writing.set()

    def append_all() -> None:
        try:
            for part in parts[1:]:
                # What `accumulus append` will do, by hand: raw data, then accumulations.
                append_days(path, part)
                api.accumulate(str(path), "tas")
        finally:
            writing.clear()

    def ask(base: str) -> None:
        with httpx.Client(base_url=base, timeout=60) as http:
            while writing.is_set():
                for kind, url in (("series", SERIES), ("map", MAP)):
                    answers.append((kind, url, http.get(url)))
            for kind, url in (("series", SERIES), ("map", MAP)):  # after the last append
                answers.append((kind, url, http.get(url)))

    with running(create_app([str(path)], cache_bytes=0)) as base:
        readers = [threading.Thread(target=ask, args=(base,)) for _ in range(2)]
        writer = threading.Thread(target=append_all)
        for thread in [*readers, writer]:
            thread.start()
        for thread in [writer, *readers]:
            thread.join(timeout=300)

    days_of: dict[str, int] = {}  # snapshot token -> days it holds
    box = dict(lat=slice(-80, 80), lon=slice(-150, 150))
    for kind, url, response in answers:
        assert response.status_code == 200, (url, response.text)
        body = response.json()
        token = response.headers["X-Accumulus-Snapshot"]
        if kind == "series":
            days = len(body["coords"]["time"])
            assert len(body["values"]) == days
            assert days in range(40, 40 + APPENDS * DAYS_PER_APPEND + 1, DAYS_PER_APPEND)
            expected_times = pd.date_range("2001-01-01", periods=days, freq="D")
            assert body["coords"]["time"] == [t.isoformat() for t in expected_times]
            truth = area_mean(everything.isel(time=slice(0, days)), ["lat", "lon"], **box)
            np.testing.assert_allclose(body["values"], truth.values, rtol=1e-9)
        else:
            # A map has no time axis: its values must be the mean of exactly one snapshot's
            # days.
            values = np.array(body["values"], dtype="f8")
            matches = [
                days
                for days in range(40, 40 + APPENDS * DAYS_PER_APPEND + 1, DAYS_PER_APPEND)
                if np.allclose(
                    values,
                    area_mean(everything.isel(time=slice(0, days)), ["time"], **box).values,
                    rtol=1e-9,
                    equal_nan=True,
                )
            ]
            assert len(matches) == 1, (token, matches)
            days = matches[0]
        assert days_of.setdefault(token, days) == days  # one token, one extent
    # The readers saw the store grow, and the last answers saw all of it.
    assert len(days_of) >= 2
    assert max(days_of.values()) == 40 + APPENDS * DAYS_PER_APPEND
