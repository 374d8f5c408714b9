"""The service serves sidecars its operator configured (``serve SIDE``, or a source with
``accumulations``): accumulations read from SIDE and raw boundary chunks from the source,
both through the request's guard (bounded reads, time limit); a stale sidecar is a 409 JSON
body saying how to refresh it, a grown source an exact answer; no request parameter makes the
service open another store or URL."""

from __future__ import annotations

import os
import time
from urllib.parse import quote

import numpy as np
import pytest
import xarray as xr
from fastapi.testclient import TestClient

import accumulus
from accumulus.service import create_app
from accumulus.service.guard import ServiceLimits
from cubes import VAR, synthetic_dataset, write_cube
from servers import http_server

from .test_sidecar import (
    CHUNKS,
    MAP,
    SERIES,
    SIZES,
    cli,
    expected_map,
    expected_series,
    make_cube,
)

AVERAGE = f"/api/datasets/{{name}}/{VAR}/average"
SERIES_PARAMS = {"over": "lat,lon", "time": "/".join(SERIES["time"]), "lat": "-80/-8"}
MAP_PARAMS = {"over": "time", "time": "/".join(MAP["time"])}
ALIGNED_PARAMS = {"over": "lat,lon", "time": "2001-01-11/2001-02-19"}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A cube behind HTTP, its sidecar on disk, and a service of the sidecar; yields
    (client, sidecar path, base URL, server log, the source as xarray reads it)."""
    folder = tmp_path_factory.mktemp("served")
    make_cube(folder / "data")
    write_cube(synthetic_dataset(SIZES, seed=5), folder / "data" / "other.zarr", CHUNKS)
    side = folder / "side.zarr"
    with http_server(folder / "data") as (url, log):
        accumulus.accumulate(f"{url}/cube.zarr", VAR, into=str(side), minimal=True)
        with xr.open_zarr(f"{url}/cube.zarr") as ds:
            source = ds.load()
        with TestClient(create_app([str(side)])) as client:
            yield client, side, url, log, source


def test_a_sidecar_is_served_for_its_source(served):
    client, _, _, log, source = served
    listed = client.get("/api/datasets").json()
    (dataset,) = listed["datasets"]
    assert dataset["name"] == "side"
    (variable,) = [v for v in dataset["variables"] if v["name"] == VAR]
    assert variable["accumulation"]["coverage"]["time"]["covered"] == SIZES["time"]

    log.clear()
    answer = client.get(AVERAGE.format(name="side"), params=MAP_PARAMS)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    np.testing.assert_allclose(
        np.array(body["values"], dtype="f8"), expected_map(source), rtol=1e-9
    )
    # Accumulations from SIDE, the two partial time chunks (2 x 2 spatial chunks) from the
    # source: the HTTP server saw exactly those chunk reads and no accumulation key.
    assert body["plan"]["raw_chunks_read"] == 8 and body["plan"]["accumulation_chunks_read"] > 0
    chunk_gets = [p for m, p, _ in log.requests if m == "GET" and f"/{VAR}/" in p]
    assert len(chunk_gets) == 8
    assert not [p for _, p, _ in log.requests if "accumulation" in p]

    series = client.get(AVERAGE.format(name="side"), params=SERIES_PARAMS).json()
    np.testing.assert_allclose(
        np.array(series["values"], dtype="f8"), expected_series(source), rtol=1e-9
    )
    aligned = client.get(AVERAGE.format(name="side"), params=ALIGNED_PARAMS).json()
    assert aligned["plan"]["raw_chunks_read"] == 0


def test_sidecar_chunks_are_read_through_the_guard(tmp_path):
    """Accumulation chunks of SIDE replaced by FIFOs (a read of one would block forever) are
    refused at once by the guard's bounded reads: a 503 naming the key, not a server path."""
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    group = side / f"{VAR}_accumulation_group"
    for chunk in [p for p in group.rglob("*") if p.is_file() and p.name[0].isdigit()]:
        chunk.unlink()
        os.mkfifo(chunk)
    client = TestClient(create_app([str(side)]))
    started = time.monotonic()
    response = client.get(AVERAGE.format(name="side"), params=ALIGNED_PARAMS)
    assert time.monotonic() - started < 30
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error.startswith("dataset 'side': ") and "it is not a regular file" in error
    assert f"cannot read {VAR}_accumulation_group/" in error
    assert str(tmp_path) not in response.text
    # The raw scan does not touch SIDE.
    scan = client.get(
        AVERAGE.format(name="side"), params={**ALIGNED_PARAMS, "accumulation": "false"}
    )
    assert scan.status_code == 200, scan.text


def test_slow_sidecar_reads_are_bounded_in_time(tmp_path):
    """A sidecar behind a slow server: each of its reads is bounded by the service's read
    time limit, like the source's."""
    source = make_cube(tmp_path / "data")
    (tmp_path / "slow").mkdir()
    accumulus.accumulate(str(source), VAR, into=str(tmp_path / "slow" / "side.zarr"))
    with http_server(tmp_path / "slow", latency=1.0) as (url, log):
        limits = ServiceLimits(read_seconds=0.3)
        client = TestClient(
            create_app([str(source)], limits=limits, accumulations=[f"{url}/side.zarr"])
        )
        log.clear()
        response = client.get(AVERAGE.format(name="cube"), params=ALIGNED_PARAMS)
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert f"reading {VAR}_accumulation_group/" in error and "took more than 0.3 s" in error


def test_a_stale_sidecar_is_a_409_and_a_grown_source_an_exact_answer(tmp_path):
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    client = TestClient(create_app([str(source)], accumulations=[str(side)]))
    assert client.get(AVERAGE.format(name="cube"), params=ALIGNED_PARAMS).status_code == 200

    # Grown by a time chunk: the new part is read raw, the answer exact.
    more = synthetic_dataset({**SIZES, "time": 70}, seed=3).isel(time=slice(60, 70))
    more.to_zarr(source, append_dim="time")
    whole = {"over": "lat,lon", "time": "2001-01-01/2001-03-11"}
    grown = client.get(AVERAGE.format(name="cube"), params=whole)
    assert grown.status_code == 200, grown.text
    with xr.open_zarr(source) as ds:
        expected = expected_series(ds, {"time": ("2001-01-01", "2001-03-11"), "lat": (-90, 90)})
    np.testing.assert_allclose(np.array(grown.json()["values"], dtype="f8"), expected, rtol=1e-9)
    assert grown.json()["plan"]["raw_chunks_read"] == 4

    # Rewritten with other chunks: SIDE's sums no longer hold.
    write_cube(synthetic_dataset(SIZES, seed=9), source, {"time": 15, "lat": 6, "lon": 8})
    stale = client.get(AVERAGE.format(name="cube"), params=ALIGNED_PARAMS)
    assert stale.status_code == 409, stale.text
    error = stale.json()["error"]
    assert "stale" in error and "chunk edges along time" in error and "\n" not in error
    assert f"accumulate <cube> {VAR} --into <cube accumulations>" in error
    assert str(tmp_path) not in stale.text
    # The raw scan still answers, and the listing says which variable is stale.
    scan = client.get(
        AVERAGE.format(name="cube"), params={**ALIGNED_PARAMS, "accumulation": "false"}
    )
    assert scan.status_code == 200, scan.text
    listed = client.get("/api/datasets/cube").json()
    (variable,) = [v for v in listed["variables"] if v["name"] == VAR]
    assert variable["accumulation"] is None and "stale" in variable["stale"]


def test_no_request_parameter_makes_a_sidecar_service_fetch_a_url(served):
    client, side, url, log, _ = served
    elsewhere = f"{url}/other.zarr"
    wrapped = quote(elsewhere, safe="")
    attempts = [
        f"{AVERAGE.format(name='side')}?over=time&accumulations={wrapped}",
        f"{AVERAGE.format(name='side')}?over=time&source={wrapped}",
        f"{AVERAGE.format(name='side')}?over=time&into={wrapped}",
        f"{AVERAGE.format(name=wrapped)}?over=time",
        f"/api/datasets/{wrapped}",
        f"/api/datasets/{quote(str(side), safe='')}",
    ]
    log.clear()
    for attempt in attempts:
        response = client.get(attempt)
        assert response.status_code < 500, (attempt, response.text)
    fetched = {path for _, path, _ in log.requests}
    assert not any("other.zarr" in path for path in fetched), fetched


def test_serve_refuses_accumulations_it_cannot_pair(tmp_path):
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    refused = cli("serve", str(source), str(source), "--accumulations", str(side))
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--accumulations is given 1 time(s) for 2 store(s)" in refused.stderr
    not_a_sidecar = cli("serve", str(source), "--accumulations", str(source))
    assert (
        not_a_sidecar.returncode == 2 and "no accumulus_sidecar attribute" in not_a_sidecar.stderr
    )
