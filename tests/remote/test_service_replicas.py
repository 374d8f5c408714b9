"""Scale-out: the service is stateless over object storage, so N replicas behind a load
balancer answer alike. Two `accumulus serve` processes over one S3 endpoint (moto on
127.0.0.1) answer from the same snapshot with the same numbers (equal to xarray's); after an
update of the store (days appended, accumulations extended), both answer from the new
snapshot, none holding on to the old one."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import boto3
import httpx
import numpy as np
import pytest
import xarray as xr

import accumulus
from cubes import VAR, synthetic_dataset, write_cube
from servers import S3_CREDENTIALS, s3_server

SERIES = f"/api/datasets/cube/{VAR}/average?over=lat,lon&lat=-40/40&lon=5/30"
MAP = f"/api/datasets/cube/{VAR}/average?over=time&time=2001-01-05/2001-02-20"
START_SECONDS = 120


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_replica(url: str, endpoint: str) -> tuple[subprocess.Popen, str]:
    """`accumulus serve URL` in a process of its own; its base URL once it answers."""
    port = free_port()
    sources = str(Path(accumulus.__file__).parents[1])
    env = {**os.environ, **S3_CREDENTIALS, "PYTHONPATH": sources}
    command = [sys.executable, "-m", "accumulus", "serve", url, "--endpoint-url", endpoint]
    process = subprocess.Popen(
        [*command, "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_SECONDS
    while True:
        try:
            if httpx.get(f"{base}/api/health").status_code == 200:
                return process, base
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise AssertionError(f"a replica did not start: {process.stderr.read().decode()}")
        time.sleep(0.2)


def expected(ds: xr.Dataset, path: str) -> np.ndarray:
    """The answer of ``path`` by xarray on the raw data (area weights, cos latitude)."""
    data = ds[VAR].astype("f8")
    weights = np.cos(np.deg2rad(data.lat))
    if path == SERIES:
        box = data.sel(lat=slice(-40, 40), lon=slice(5, 30))
        return box.weighted(weights).mean(["lat", "lon"]).values
    return data.sel(time=slice("2001-01-05", "2001-02-20")).mean("time").values


def upload(s3, bucket: str, folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            key = f"{folder.name}/{path.relative_to(folder)}"
            s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())


@pytest.fixture
def endpoint(monkeypatch):
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    with s3_server() as url:
        yield url


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_two_replicas_over_one_bucket_answer_the_same_snapshot(tmp_path, endpoint):
    ds = synthetic_dataset({"time": 90, "lat": 12, "lon": 16}, seed=39)
    first, later = ds.isel(time=slice(0, 60)), ds.isel(time=slice(60, None))
    folder = tmp_path / "cube.zarr"
    write_cube(first, folder, {"time": 10, "lat": 6, "lon": 8}, fill_value=None)
    accumulus.accumulate(str(folder), VAR)
    s3 = boto3.client("s3", endpoint_url=endpoint)
    bucket = f"replicas-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    upload(s3, bucket, folder)
    url = f"s3://{bucket}/cube.zarr"

    replicas = [start_replica(url, endpoint) for _ in range(2)]
    try:
        bases = [base for _, base in replicas]

        def settled(path: str, other_than: str | None) -> tuple[str, list[httpx.Response]]:
            """Both replicas' answers to ``path`` from one snapshot (not ``other_than``): a
            replica looks for a newer snapshot as requests come, so one may move on between
            the health check and the answer; asked again until both answered alike."""
            for _ in range(60):
                health = [httpx.get(f"{b}/api/health").json() for b in bases]
                tokens = {h["datasets"]["cube"] for h in health}
                if len(tokens) == 1 and other_than not in tokens:
                    got = [httpx.get(b + path, timeout=60) for b in bases]
                    assert [r.status_code for r in got] == [200, 200], [r.text for r in got]
                    if {r.headers["X-Accumulus-Snapshot"] for r in got} == tokens:
                        return tokens.pop(), got
                time.sleep(0.5)
            raise AssertionError(f"the replicas never answered from one snapshot: {tokens}")

        def answers(data: xr.Dataset, other_than: str | None = None) -> str:
            """Both replicas' answers to both questions from one snapshot, checked against
            xarray's on ``data``; that snapshot. (A replica still on the snapshot between the
            append and the accumulations may move on between the two questions: asked
            again then.)"""
            for _ in range(10):
                (series, got_series), (map_, got_map) = (
                    settled(path, other_than) for path in (SERIES, MAP)
                )
                if series == map_:
                    break
            assert series == map_, (series, map_)
            for path, got in ((SERIES, got_series), (MAP, got_map)):
                bodies = [r.json() for r in got]
                assert bodies[0]["values"] == bodies[1]["values"]
                assert bodies[0]["coords"] == bodies[1]["coords"]
                values = np.array(bodies[0]["values"], dtype="f8")
                np.testing.assert_allclose(values, expected(data, path), rtol=1e-9)
            return series

        before = answers(first)
        # An update through the library, as a producer runs it: days appended by xarray,
        # then the accumulations extended, on the bucket itself.
        options = {"endpoint_url": endpoint}
        later.to_zarr(url, append_dim="time", storage_options=options)
        built = accumulus.accumulate(url, VAR, storage_options=options)
        assert built.action != "up to date"
        after = answers(ds, other_than=before)
        assert after != before
    finally:
        for process, _ in replicas:
            process.terminate()
            process.wait(timeout=30)
