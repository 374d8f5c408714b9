"""`accumulus serve`: starts on loopback, answers, refuses stores it cannot read, and holds
what a query holds by default."""

from __future__ import annotations

import inspect
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import psutil
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.cli.serve import serve
from accumulus.shared_chunks import DIRECTORY_PREFIX, MEMORY_FILES, shared_directory

SOURCES = str(Path(accumulus.__file__).parents[1])


def accumulus_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "accumulus", *args]


def environment() -> dict[str, str]:
    paths = [SOURCES, os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(process: subprocess.Popen, base: str, seconds: float = 120) -> httpx.Response:
    """The first answer of ``/api/health`` once the service listens."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            return httpx.get(f"{base}/api/health")
        except httpx.TransportError:
            assert process.poll() is None, process.stdout.read()
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)


def test_serve_answers_on_loopback(cube: Path):
    port = free_port()
    process = subprocess.Popen(
        accumulus_command(
            "serve",
            str(cube),
            "--port",
            str(port),
            "--max-cells",
            "50",
            "--allowed-host",
            "data.example.org",
        ),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        health = start(process, base)
        assert health.json()["status"] == "ok"
        assert health.json()["process"] == process.pid  # one process: the command itself
        series = httpx.get(f"{base}/api/datasets/surface/tas/average?over=lat,lon")
        assert series.status_code == 200 and len(series.json()["values"]) == 40
        too_big = httpx.get(f"{base}/api/datasets/surface/tas/average?over=time")
        assert too_big.status_code == 422 and "limit of 50" in too_big.json()["error"]
        # Its own names and the one allowed are answered, any other Host is refused.
        for host, status in [("localhost", 200), ("data.example.org", 200), ("evil.test", 400)]:
            assert httpx.get(f"{base}/", headers={"Host": host}).status_code == status
        assert httpx.head(f"{base}/api/health").status_code == 200
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    assert f"Uvicorn running on http://127.0.0.1:{port}" in output


@pytest.mark.slow
def test_serve_workers_answer_from_each_process(cube: Path):
    """``serve --workers 2``: two processes under the command answer on one loopback port,
    each with its own limits (--max-cells holds in both), sharing one store of decoded
    chunks (files in memory), removed when the service stops."""
    port = free_port()
    process = subprocess.Popen(
        accumulus_command(
            "serve", str(cube), "--port", str(port), "--workers", "2", "--max-cells", "50"
        ),
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        start(process, base, seconds=180)
        workers = {  # uvicorn spawns them (its other child is multiprocessing's resource tracker)
            child.pid
            for child in psutil.Process(process.pid).children()
            if "spawn_main" in " ".join(child.cmdline())
        }
        answered: set[int] = set()
        deadline = time.monotonic() + 120
        while answered != workers and time.monotonic() < deadline:
            health = httpx.get(f"{base}/api/health")  # a new connection each time
            assert health.status_code == 200 and health.json()["status"] == "ok"
            answered.add(health.json()["process"])
            series = httpx.get(f"{base}/api/datasets/surface/tas/average?over=lat,lon")
            assert series.status_code == 200 and len(series.json()["values"]) == 40
            too_big = httpx.get(f"{base}/api/datasets/surface/tas/average?over=time")
            assert too_big.status_code == 422 and "limit of 50" in too_big.json()["error"]
        assert process.pid not in answered
        assert len(workers) == 2 and answered == workers, (answered, workers)
        kept = httpx.get(f"{base}/api/health").json()["decoded_chunks"]
        assert kept["shared"] and kept["shared_errors"] == 0
        (shared,) = MEMORY_FILES.glob(f"{DIRECTORY_PREFIX}{process.pid}-*")
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=60)
    assert f"Uvicorn running on http://127.0.0.1:{port}" in output
    assert output.count("Application startup complete") == 2
    assert not shared.exists()


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_refuses_a_store_it_cannot_read(tmp_path: Path, workers: str):
    result = subprocess.run(
        accumulus_command("serve", str(tmp_path / "missing.zarr"), "--workers", workers),
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert "store not found" in result.stderr
    assert "Started" not in result.stderr  # no process was started for it


def test_serve_memory_default_is_the_query_default():
    """The command line names its --memory-mb default as a number (importing the budget
    would import zarr for every command): it must be the one a query uses."""
    default = inspect.signature(serve).parameters["memory_mb"].default
    assert default * 2**20 == DEFAULT_MEMORY_BYTES


def _accumulation_arrays_bytes(cube: Path) -> int:
    """The decoded bytes of every array under the cube's accumulation groups, by zarr; the
    counts of the sums that keep rows of latitude (lat+lon at every cell, ``*_lat_lon_*``) at
    8 bytes a value: a cache keeps their chunks as float64 prefix sums along the rows."""
    found = 0
    pending = [
        g for name, g in zarr.open_group(str(cube), mode="r").groups() if "accumulation" in name
    ]
    while pending:
        group = pending.pop()
        for name, array in group.arrays():
            rows = array.dtype.kind in "iu" and "_lat_lon_" in name
            found += array.size * 8 if rows else array.nbytes
        pending.extend(g for _, g in group.groups())
    return found


def test_serve_chunk_cache_default_holds_the_served_accumulations(cube: Path, monkeypatch):
    """Without --chunk-cache-mb, the application a worker makes keeps room for every
    accumulation chunk of what it serves decoded (a sixteenth more for the entries' own
    bytes), at most a share of the machine's memory; a size given is kept as given."""
    from accumulus.decoded_chunks import DECODED
    from accumulus.service import app

    assert inspect.signature(serve).parameters["chunk_cache_mb"].default is None
    decoded = _accumulation_arrays_bytes(cube)
    assert decoded > 0
    previous = DECODED.limit
    try:
        app.create_app([str(cube)], chunk_cache_bytes=3 * 2**20)
        assert DECODED.limit == 3 * 2**20
        app.create_app([str(cube)])
        assert DECODED.limit == decoded + decoded // 16
        app.create_app([str(cube)], chunk_cache_bytes=None)
        assert DECODED.limit == decoded + decoded // 16
        memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        monkeypatch.setattr(app, "CHUNK_CACHE_MEMORY_SHARE", decoded / 2 / memory)
        app.create_app([str(cube)])
        assert DECODED.limit == int(memory * (decoded / 2 / memory))
        # Kept by each of three workers (no room to share): a third each.
        served = app.catalog([str(cube)], {})
        assert app.default_chunk_cache_bytes(served, 3) == int(memory * (decoded / 2 / memory)) // 3
    finally:
        DECODED.set_limit(previous)


def test_serve_chunk_cache_default_follows_the_archive_as_it_grows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """The default's size is worked out again when a dataset's snapshot changes: days
    appended and accumulated make more accumulation chunks to keep, and the next request
    finds the cache sized for them (once per change); a size given stays as given. A new
    snapshot also lets the next full collection walk the objects frozen (``memory.thaw``),
    once per change."""
    from service_cubes import CHUNKS, append_days, dataset, write_cube

    from accumulus.decoded_chunks import DECODED
    from accumulus.service import app, state

    thawed: list[int] = []
    monkeypatch.setattr(state, "thaw", lambda: thawed.append(1))

    path = write_cube(tmp_path / "growing.zarr", dataset("2001-01-01", 40, 12, 16), CHUNKS)

    def grown(days: int, seed: int) -> int:
        start = str(xr.open_zarr(path).time.values[-1] + np.timedelta64(1, "D"))[:10]
        append_days(path, dataset(start, days, 12, 16, seed=seed))
        accumulus.accumulate(str(path), "tas")
        return _accumulation_arrays_bytes(path)

    previous = DECODED.limit
    try:
        service = app.create_app([str(path)]).state.service
        before = _accumulation_arrays_bytes(path)
        assert DECODED.limit == before + before // 16
        service.snapshot_of(service.dataset("growing"))
        assert not thawed
        after = grown(30, 1)
        assert after > before
        service.snapshot_of(service.dataset("growing"))
        assert DECODED.limit == after + after // 16
        service.snapshot_of(service.dataset("growing"))
        assert len(thawed) == 1
        DECODED.set_limit(5)
        service.snapshot_of(service.dataset("growing"))
        assert DECODED.limit == 5
        fixed = app.create_app([str(path)], chunk_cache_bytes=3 * 2**20).state.service
        grown(20, 2)
        fixed.snapshot_of(fixed.dataset("growing"))
        assert DECODED.limit == 3 * 2**20
        # Another dataset that cannot be read now: the size stays, the request is answered.
        other = write_cube(tmp_path / "other.zarr", dataset("2001-01-01", 10, 12, 16), CHUNKS)
        service = app.create_app([str(path), str(other)]).state.service
        limit = DECODED.limit
        (other / "zarr.json").write_text("not JSON")
        grown(10, 3)
        assert service.snapshot_of(service.dataset("growing")).token
        assert DECODED.limit == limit
    finally:
        DECODED.set_limit(previous)


@pytest.mark.parametrize(
    ("options", "computations"),
    [({}, 2), ({"workers": 2}, 1), ({"workers": 3}, 1), ({"workers": 2, "computations": 2}, 2)],
)
def test_serve_computes_one_answer_per_worker_process_by_default(
    monkeypatch: pytest.MonkeyPatch, options: dict, computations: int
):
    """One process computes two answers at once; each of ``--workers N`` one (two threads
    computing in one process wait for each other's interpreter lock: docs/benchmarks.md),
    unless ``--computations`` says otherwise."""
    given = {}
    monkeypatch.setattr("accumulus.service.serve", lambda stores, **kwargs: given.update(kwargs))
    serve(["cube.zarr"], **options)
    assert given["limits"].computations == computations


def test_serve_of_several_workers_gives_each_one_computation(
    cube: Path, monkeypatch: pytest.MonkeyPatch
):
    """``service.serve(..., workers=N)`` without limits hands its workers one computation each
    (the settings they are made from); limits given are theirs."""
    from accumulus.service import server
    from accumulus.service.guard import ServiceLimits

    monkeypatch.setenv(server.SETTINGS_VARIABLE, "")
    monkeypatch.setattr(server.uvicorn, "run", lambda *args, **kwargs: None)
    server.serve([str(cube)], workers=2)
    assert json.loads(os.environ[server.SETTINGS_VARIABLE])["limits"]["computations"] == 1
    server.serve([str(cube)], workers=2, limits=ServiceLimits(computations=3))
    assert json.loads(os.environ[server.SETTINGS_VARIABLE])["limits"]["computations"] == 3


def test_serve_of_several_workers_shares_their_decoded_chunks(
    cube: Path, monkeypatch: pytest.MonkeyPatch
):
    """``service.serve(..., workers=N)`` gives its workers one directory of shared chunks,
    there while they run and removed after; none when asked not to share, for no cache
    or for one worker.
    A worker's application keeps its chunks there, under the limit given."""
    from accumulus.decoded_chunks import DECODED
    from accumulus.service import server
    from accumulus.service.app import create_app

    seen: list[str | None] = []

    def run(*args, **kwargs) -> None:
        shared = json.loads(os.environ[server.SETTINGS_VARIABLE]).get("shared_chunks")
        assert shared is None or Path(shared).is_dir()
        seen.append(shared)

    monkeypatch.setattr(server.uvicorn, "run", run)
    server.serve([str(cube)], workers=2, chunk_cache_bytes=2**20)
    server.serve([str(cube)], workers=2, share_chunks=False)
    server.serve([str(cube)], workers=2, chunk_cache_bytes=0)
    server.serve([str(cube)], workers=1, chunk_cache_bytes=2**20)
    assert seen[0] is not None and not Path(seen[0]).exists() and seen[1:] == [None] * 3
    # Without a size, each worker sizes its cache by the default's rule (and again as the
    # datasets change), for all of them when shared, for itself alone when not.
    for share, holders in ((True, 1), (False, 2)):
        server.serve([str(cube)], workers=2, share_chunks=share)
        given = json.loads(os.environ[server.SETTINGS_VARIABLE])
        assert given.get("chunk_cache_bytes") is None
        assert given["chunk_cache_holders"] == holders
        assert (given.get("shared_chunks") is not None) == share
    limit = DECODED.limit
    with shared_directory(2**20) as directory:
        try:
            create_app([str(cube)], chunk_cache_bytes=2**20, shared_chunks=str(directory))
            assert DECODED.shared is not None and DECODED.shared.directory == directory
            assert DECODED.limit == 2**20
        finally:
            DECODED.share(None)
            DECODED.set_limit(limit)
