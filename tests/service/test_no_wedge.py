"""No request can wedge the service: weighted averages read their weights array while their
chunks are being summed, and those reads once waited, on the threads of zarr's I/O pool,
for reads that needed a free thread of that same pool (issue 35). Requests sent together
all end; computation slots come back on every outcome; health says when one does not."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pytest
import xarray as xr

from accumulus import api
from accumulus.service import create_app, state
from accumulus.service.guard import ServiceLimits
from accumulus.service.server import running

AVERAGE = "/api/datasets/{name}/tas/average"
LIGHT = "?over=lat,lon&time=2001-01-01/2001-01-03&lat=-10/10&lon=20/60"
# The two requests of the issue: a time-averaged map weighted by an array, ending one day
# apart, each off the chunk boundaries (raw chunks summed with their weights).
ISSUE_ENDS = ("2002-12-30", "2002-12-29")
# Generous bound of every wait here: an answer takes a few seconds at most when the service
# works, and never comes when it is wedged.
PATIENCE = 120


def weighted_cube(path: Path, shape: tuple[int, int, int], chunks: tuple[int, int, int]) -> Path:
    """Daily ``tas`` and ``precip`` (the weights array, no missing values) from 2001-01-01,
    written by xarray and accumulated with area weights: array-weighted averages read the
    raw chunks and their weights."""
    nt, ny, nx = shape
    rng = np.random.default_rng(35)
    ds = xr.Dataset(
        {
            "tas": (("time", "lat", "lon"), rng.normal(280, 10, shape).astype("f4")),
            "precip": (("time", "lat", "lon"), rng.gamma(0.6, 1, shape).astype("f4")),
        },
        coords={
            "time": pd.date_range("2001-01-01", periods=nt, freq="D"),
            "lat": ("lat", np.linspace(-90, 90, ny + 1)[:-1] + 90 / ny, {"units": "degrees_north"}),
            "lon": (
                "lon",
                np.linspace(-180, 180, nx + 1)[:-1] + 180 / nx,
                {"units": "degrees_east"},
            ),
        },
    )
    encoding = {v: {"chunks": chunks} for v in ("tas", "precip")}
    ds.to_zarr(path, mode="w", encoding=encoding, zarr_format=2, consolidated=True)
    api.accumulate(str(path), "tas")
    return path


def random_weighted(rng: np.random.Generator) -> str:
    """An array-weighted average over a random box and period (a map or a series)."""
    start = pd.Timestamp("2001-01-01") + pd.Timedelta(days=int(rng.integers(0, 400)))
    end = start + pd.Timedelta(days=int(rng.integers(30, 329)))
    south = int(rng.integers(-90, 60))
    west = int(rng.integers(-180, 120))
    over = "time" if rng.random() < 0.5 else "lat,lon"
    return (
        f"?over={over}&weights=precip&time={start:%Y-%m-%d}/{end:%Y-%m-%d}"
        f"&lat={south}/{south + 30}&lon={west}/{west + 60}"
    )


def storm(base: str, name: str, targets: list[str]) -> list[int]:
    """Send every target at once; the status of each."""
    statuses = [0] * len(targets)

    def send(k: int) -> None:
        statuses[k] = httpx.get(base + AVERAGE.format(name=name) + targets[k], timeout=PATIENCE)
        statuses[k] = statuses[k].status_code

    threads = [threading.Thread(target=send, args=(k,), daemon=True) for k in range(len(targets))]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + PATIENCE
    for thread in threads:
        thread.join(max(0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "requests never answered"
    return statuses


def light_answer_after(app, base: str, name: str) -> None:
    """The service answers a light request, its slots are free and its health is ok."""
    deadline = time.monotonic() + PATIENCE
    while app.state.service.busy and time.monotonic() < deadline:
        time.sleep(0.05)
    assert app.state.service.busy == 0, "computation slots never given back"
    light = httpx.get(base + AVERAGE.format(name=name) + LIGHT, timeout=PATIENCE)
    assert light.status_code == 200, light.text
    health = httpx.get(base + "/api/health", timeout=PATIENCE)
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert health.json()["computations"] == 0


def test_weighted_requests_sent_together_all_end(tmp_path):
    """The issue's two requests and ten random array-weighted ones, at once, with a slot
    for each: 48 consumers of chunks, more than zarr's I/O pool has threads on any machine
    of up to 28 cores (its default size is min(32, cores + 4)). Each answers 200 with
    xarray's weighted mean, and a light request is answered afterwards."""
    cube = weighted_cube(tmp_path / "weighted.zarr", (730, 18, 36), (73, 9, 9))
    rng = np.random.default_rng(0)
    targets = [f"?over=time&weights=precip&time=2001-01-01/{end}" for end in ISSUE_ENDS]
    targets += [random_weighted(rng) for _ in range(10)]
    limits = ServiceLimits(computations=len(targets), request_seconds=PATIENCE)
    app = create_app([str(cube)], limits=limits)
    with running(app) as base:
        assert httpx.get(base + AVERAGE.format(name="weighted") + LIGHT).status_code == 200
        assert storm(base, "weighted", targets) == [200] * len(targets)
        light_answer_after(app, base, "weighted")
        # The answers are xarray's weighted means of the raw data.
        ds = xr.open_zarr(cube)
        for end in ISSUE_ENDS:
            answer = httpx.get(
                base + AVERAGE.format(name="weighted") + targets[ISSUE_ENDS.index(end)]
            ).json()
            period = ds.sel(time=slice("2001-01-01", end))
            expected = period.tas.astype("f8").weighted(period.precip.astype("f8")).mean("time")
            np.testing.assert_allclose(answer["values"], expected.values, rtol=1e-10)


@pytest.mark.slow
def test_the_issue_requests_on_the_issue_cube_do_not_wedge_it(tmp_path):
    """The issue's case as reported: a 730 x 180 x 360 cube served with the default limits
    (2 computations; the others queue, then are refused with 503), the two requests and ten
    random array-weighted ones together. None is left unanswered or cut at its time limit,
    and a light request is answered afterwards."""
    cube = weighted_cube(tmp_path / "issue.zarr", (730, 180, 360), (73, 90, 90))
    rng = np.random.default_rng(1)
    targets = [f"?over=time&weights=precip&time=2001-01-01/{end}" for end in ISSUE_ENDS]
    targets += [random_weighted(rng) for _ in range(10)]
    app = create_app([str(cube)], limits=ServiceLimits(queue_seconds=PATIENCE))
    with running(app) as base:
        statuses = storm(base, "issue", targets)
        assert statuses == [200] * len(targets)
        light_answer_after(app, base, "issue")


def test_health_is_unhealthy_while_a_slot_is_held_past_the_limits(cube, monkeypatch):
    """A computation that ignores its stop (here: one waiting on an event the guard does not
    know) holds its slot past the request limit plus one read's: health says "unhealthy"
    with 503 until it ends and gives its slot back."""
    release = threading.Event()

    def stuck(snapshot, request, memory_bytes):
        release.wait(PATIENCE)
        raise RuntimeError("let go")

    monkeypatch.setattr(state, "compute_answer", stuck)
    limits = ServiceLimits(request_seconds=0.2, read_seconds=0.2)
    app = create_app([str(cube)], limits=limits)
    with running(app) as base, httpx.Client(base_url=base, timeout=PATIENCE) as client:
        answer = client.get(AVERAGE.format(name="surface") + "?over=lat,lon")
        assert answer.status_code == 504
        assert client.get("/api/health").json()["computations"] == 1
        deadline = time.monotonic() + PATIENCE
        while (health := client.get("/api/health")).status_code == 200:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        assert health.status_code == 503 and health.json()["status"] == "unhealthy"
        # The body rounds to milliseconds: a slot held 0.4004 s past a 0.4 s limit reads 0.4.
        assert health.json()["longest_computation_seconds"] >= limits.stuck_seconds
        release.set()
        while app.state.service.busy:
            assert time.monotonic() < deadline
            time.sleep(0.05)
        health = client.get("/api/health")
        assert health.status_code == 200 and health.json()["status"] == "ok"


def test_a_computation_that_fails_gives_its_slot_back(cube, monkeypatch):
    """The outcome not covered by tests/service/test_limits.py (answers, timeouts and
    clients gone are): an error raised by the computation is a 503, and the slot is free."""

    def failing(snapshot, request, memory_bytes):
        raise ValueError("a library failed on the store's content")

    monkeypatch.setattr(state, "compute_answer", failing)
    app = create_app([str(cube)])
    with running(app) as base:
        answer = httpx.get(base + AVERAGE.format(name="surface") + "?over=lat,lon")
        assert answer.status_code == 503 and "ValueError" in answer.json()["error"]
        assert app.state.service.busy == 0 and app.state.service.held_longest() == 0
