"""A bounded service: computations queue then get 503, stop at their time limit or when their
client leaves, reads cannot hang or leak a path, the cache charges what it holds, access logs
stay short. Servers are real (uvicorn on loopback, from a thread of this process)."""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import threading
import time
import tracemalloc
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from service_cubes import CHUNKS, write_cube

from accumulus.service import answers, create_app, state
from accumulus.service.answers import Answer
from accumulus.service.cache import AnswerCache, entry_bytes
from accumulus.service.guard import ComputeSlots, ServiceLimits
from accumulus.service.server import LOGGED_TARGET_CHARS, ShortTargets, running
from accumulus.stores.base import innermost
from accumulus.stores.guarded import GuardedLocalStore

SCAN = "/api/datasets/{name}/tas/average?over=time,lat,lon&accumulation=false"
# A memory budget whose share for chunks in flight (three quarters) holds one raw chunk of
# the test cube (float32) and not two: a scan reads its chunks one after the other.
ONE_CHUNK = int(np.prod(CHUNKS)) * 4 * 4 // 3


@pytest.fixture
def own_cube(tmp_path: Path, cube_data) -> Path:
    """A cube of its own, for tests that damage it."""
    return write_cube(tmp_path / "own.zarr", cube_data, CHUNKS, zarr_format=2)


class SlowReads:
    """Patches the service's computation so every chunk read takes ``seconds`` longer, and
    counts the reads (to see when abandoned work has really stopped). With a memory budget
    of one chunk, a full scan of the test cube reads its 80 chunks one after the other."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
        self.reads = 0
        real = answers.compute_answer

        def slow_compute(snapshot, request, memory_bytes):
            # The guarded store below the snapshot's views, where the chunks are read.
            guarded = innermost(snapshot.cube.store)
            assert isinstance(guarded, GuardedLocalStore)
            inner_get = guarded.get

            async def get(key, prototype, byte_range=None):
                self.reads += 1
                await asyncio.sleep(seconds)
                return await inner_get(key, prototype, byte_range)

            def read_sync(key, prototype, byte_range=None):  # a local store's reads
                self.reads += 1
                time.sleep(seconds)
                return inner_read_sync(key, prototype, byte_range)

            def read_parts_sync(key, parts):  # its reads by byte ranges
                self.reads += 1
                time.sleep(seconds)
                return inner_read_parts_sync(key, parts)

            inner_read_sync = guarded.read_sync
            inner_read_parts_sync = guarded.read_parts_sync
            guarded.get = get
            guarded.read_sync = read_sync
            guarded.read_parts_sync = read_parts_sync
            return real(snapshot, request, memory_bytes)

        monkeypatch.setattr(state, "compute_answer", slow_compute)


def wait_until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def test_excess_requests_wait_then_get_503_with_retry_after(own_cube, monkeypatch):
    SlowReads(monkeypatch, 0.05)
    limits = ServiceLimits(computations=1, queue_seconds=0.3, memory_bytes=ONE_CHUNK)
    app = create_app([str(own_cube)], limits=limits)
    with running(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        first = threading.Thread(target=client.get, args=(SCAN.format(name="own"),))
        first.start()
        assert wait_until(lambda: app.state.service.busy == 1)
        started = time.monotonic()
        refused = client.get(SCAN.format(name="own") + "&stat=sum")
        waited = time.monotonic() - started
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert "busy" in refused.json()["error"] and refused.json()["parameter"] is None
        assert waited >= 0.3  # it queued first
        # Health is answered at once and says how many computations run.
        started = time.monotonic()
        health = client.get("/api/health")
        assert health.json()["computations"] == 1 and health.json()["status"] == "ok"
        print(f"health while saturated: {(time.monotonic() - started) * 1000:.0f} ms")
        first.join()
    assert app.state.service.busy == 0


def test_scans_queue_apart_and_never_delay_what_the_accumulations_answer(own_cube, monkeypatch):
    """Two scans (no accumulation can answer them) take the one scan slot in turn, while a
    question the accumulations answer takes the one computation slot at once: it is never
    queued behind them. Reads are slowed (50 ms each), so a scan takes seconds."""
    slow = SlowReads(monkeypatch, 0.05)
    limits = ServiceLimits(computations=1, scans=1)
    app = create_app([str(own_cube)], limits=limits)
    service = app.state.service
    with running(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        scans = [
            threading.Thread(target=client.get, args=(SCAN.format(name="own") + f"&stat={s}",))
            for s in ("mean", "sum")
        ]
        for scan in scans:
            scan.start()
        assert wait_until(lambda: service.scan_slots.busy == 1 and slow.reads > 0)
        light = client.get("/api/datasets/own/tas/average?over=lat,lon")
        assert light.status_code == 200, light.text
        assert light.json()["plan"]["raw_chunks_read"] == 0
        # The first scan still runs (80 reads of 50 ms), the second waits behind it.
        assert service.scan_slots.busy == 1 and slow.reads < 80
        for scan in scans:
            scan.join()
    assert service.busy == 0


def test_scans_compute_below_the_priority_of_the_other_questions(own_cube, monkeypatch):
    """A scan computes on a thread ``SCAN_NICENESS`` nice values below the service's, so that
    the questions the accumulations answer get the cores first; those keep the service's."""
    priorities = {}
    real = state.compute_answer

    def noted(snapshot, request, memory_bytes):
        thread = threading.get_native_id()
        priorities[request.query.use_accumulation] = os.getpriority(os.PRIO_PROCESS, thread)
        return real(snapshot, request, memory_bytes)

    monkeypatch.setattr(state, "compute_answer", noted)
    own = os.getpriority(os.PRIO_PROCESS, 0)
    app = create_app([str(own_cube)])
    with running(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        assert client.get(SCAN.format(name="own")).status_code == 200
        assert client.get("/api/datasets/own/tas/average?over=lat,lon").status_code == 200
    assert priorities == {False: min(own + state.SCAN_NICENESS, 19), True: own}


def test_a_computation_past_its_time_is_stopped_with_504(own_cube, monkeypatch):
    slow = SlowReads(monkeypatch, 0.05)
    limits = ServiceLimits(computations=1, request_seconds=0.5, memory_bytes=ONE_CHUNK)
    app = create_app([str(own_cube)], limits=limits)
    with running(app) as base, httpx.Client(base_url=base, timeout=60) as client:
        response = client.get(SCAN.format(name="own"))
        assert response.status_code == 504
        assert response.json()["error"].startswith("no answer within 0.5 s")
        # The work ends at its next read and gives its slot back: nothing runs on.
        assert wait_until(lambda: app.state.service.busy == 0, 5)
        reads = slow.reads
        time.sleep(0.5)
        assert slow.reads == reads
        assert reads < 80  # far from the 80 raw chunks of a full scan


def test_work_is_abandoned_when_the_client_goes_away(own_cube, monkeypatch):
    slow = SlowReads(monkeypatch, 0.05)
    app = create_app([str(own_cube)], limits=ServiceLimits(computations=1, memory_bytes=ONE_CHUNK))
    with running(app) as base:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(base + SCAN.format(name="own"), timeout=0.3)
        assert wait_until(lambda: app.state.service.busy == 0, 5)
        reads = slow.reads
        time.sleep(0.5)
        assert slow.reads == reads < 80


def test_the_slot_queue_is_first_come_first_served_across_threads():
    slots = ComputeSlots(1)
    order: list[int] = []

    async def take(k: int) -> None:
        slot = await slots.acquire(5)
        assert slot is not None
        order.append(k)
        await asyncio.sleep(0.01)
        slot.release()
        slot.release()  # again: nothing more is given back

    async def main() -> None:
        first = await slots.acquire(1)
        assert first is not None
        tasks = [asyncio.create_task(take(k)) for k in range(5)]
        await asyncio.sleep(0.05)
        assert slots.busy == 1 and slots.held_longest() >= 0.05
        first.release()
        await asyncio.gather(*tasks)

    asyncio.run(main())
    assert order == [0, 1, 2, 3, 4] and slots.busy == 0 and slots.held_longest() == 0

    async def refused() -> object:
        assert await slots.acquire(1) is not None
        return await slots.acquire(0.05)  # held: gives up

    assert asyncio.run(refused()) is None
    assert slots.busy == 1


def first_chunk(cube: Path) -> Path:
    return next(p for p in sorted((cube / "tas").iterdir()) if not p.name.startswith("."))


def test_a_chunk_replaced_by_a_fifo_is_refused_at_once(own_cube):
    chunk = first_chunk(own_cube)
    chunk.unlink()
    os.mkfifo(chunk)
    client = TestClient(create_app([str(own_cube)]))
    started = time.monotonic()
    response = client.get(SCAN.format(name="own"))
    assert time.monotonic() - started < 10
    assert response.status_code == 503
    body = response.json()
    assert f"tas/{chunk.name}" in body["error"] and "not a regular file" in body["error"]
    assert str(own_cube.parent) not in response.text


def test_a_symlink_loop_is_reported_without_the_server_path(own_cube):
    chunk = first_chunk(own_cube)
    chunk.unlink()
    chunk.symlink_to(chunk)
    client = TestClient(create_app([str(own_cube)]))
    response = client.get(SCAN.format(name="own"))
    assert response.status_code == 503
    assert "Too many levels of symbolic links" in response.json()["error"]
    assert str(own_cube.parent) not in response.text and "Store(" not in response.text


def test_labels_are_canonical_in_the_cache(client):
    """Different spellings of one range are one cache entry; a long label costs no more."""
    url = "/api/datasets/surface/tas/average?over=lat,lon&lat={lat}"
    spellings = ["-10/10", " -10.0 / 10.00", "-1e1/+10", "-10." + "0" * 30_000 + "/10"]
    answers_ = [client.get(url.format(lat=s)) for s in spellings]
    assert [a.headers["X-Accumulus-Cache"] for a in answers_] == ["miss", "hit", "hit", "hit"]
    assert len({a.content for a in answers_}) == 1


def test_cache_entries_are_charged_at_least_what_they_hold():
    """Charged bytes (body + key + overhead) cover the memory tracemalloc sees them take."""
    from accumulus.datacube import DatacubeSnapshot
    from accumulus.service.datasets import DatasetSnapshot

    current = DatacubeSnapshot("token", 0, cube=None, groups=None)  # type: ignore[arg-type]
    snapshot = DatasetSnapshot("d", current)
    cache = AnswerCache(2**30)
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for k in range(2000):
        key = ("tas", ("lat", "lon"), (("lat", (k, k + 3)),), "mean", None, True, "json")
        cache.put(snapshot, key, Answer(f'{{"values": {k}}}'.encode(), "application/json"))
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    assert len(cache) == 2000
    assert held <= cache.charged_bytes < 4 * held
    # Full: the least recently used go, counted in the same units.
    small = AnswerCache(10 * entry_bytes(key, Answer(b"x" * 20, "a")))
    for k in range(50):
        small.put(snapshot, (k,), Answer(b"x" * 20, "a"))
    assert len(small) <= 11 and small.charged_bytes <= small.max_bytes


def test_access_log_lines_cut_long_targets():
    target = "/api/datasets/x/tas/average?lat=" + "1" * 30_000
    record = logging.LogRecord(
        "uvicorn.access", logging.INFO, __file__, 1, '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", target, "1.1", 200), None,
    )  # fmt: skip
    assert ShortTargets().filter(record)
    line = record.getMessage()
    assert len(line) < LOGGED_TARGET_CHARS + 100 and line.endswith('(+29832) HTTP/1.1" 200')


def test_a_full_scan_stays_within_its_memory_budget(tmp_path):
    """A raw scan of a 24 MiB cube (stored) within an 8 MiB budget: the memory it allocates
    (tracemalloc sees NumPy's arrays and the codecs' buffers) stays near the budget, and the
    answer equals xarray's."""
    import xarray as xr

    from accumulus import api

    rng = np.random.default_rng(0)
    data = rng.normal(280, 10, (96, 128, 512)).astype("f4")
    ds = xr.Dataset({"v": (("t", "y", "x"), data)})  # no latitude: unweighted
    ds.to_zarr(tmp_path / "big.zarr", encoding={"v": {"chunks": (4, 64, 256)}}, zarr_format=2)
    budget = 8 * 2**20
    tracemalloc.start()
    result = api.query(
        str(tmp_path / "big.zarr"), "v", "t,y,x", use_accumulation=False,
        memory_bytes=budget,
    )  # fmt: skip
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 2 * budget, f"peak {peak / 2**20:.1f} MiB for a budget of 8 MiB"
    np.testing.assert_allclose(result.data.item(), data.astype("f8").mean(), rtol=1e-12)


def test_the_removed_store_answers_503_and_the_others_still_answer(tmp_path, cube_data):
    one = write_cube(tmp_path / "one.zarr", cube_data, CHUNKS, accumulate=False)
    two = write_cube(tmp_path / "two.zarr", cube_data, CHUNKS, accumulate=False)
    client = TestClient(create_app([str(one), str(two)]))
    shutil.rmtree(one)
    listing = client.get("/api/datasets").json()
    assert [d["name"] for d in listing["datasets"]] == ["two"]
    assert "one" in listing["unavailable"]
    assert client.get("/api/datasets/one").status_code == 503
    assert client.get(SCAN.format(name="two")).status_code == 200


def test_threads_and_requests_share_the_slot_queue_in_order():
    """A worker thread of the short path (``acquire_here``) waits in the same first come,
    first served queue as a request on the event loop, and gives up after its timeout."""
    slots = ComputeSlots(1)
    order: list[str] = []

    def on_thread(name: str) -> None:
        slot = slots.acquire_here(5)
        assert slot is not None
        order.append(name)
        time.sleep(0.01)
        slot.release()

    async def on_loop(name: str) -> None:
        slot = await slots.acquire(5)
        assert slot is not None
        order.append(name)
        slot.release()

    async def main() -> None:
        first = await slots.acquire(1)
        assert first is not None
        thread = threading.Thread(target=on_thread, args=("thread",))
        thread.start()
        assert await asyncio.to_thread(wait_until, lambda: len(slots._waiters) == 1)
        waiting = asyncio.create_task(on_loop("loop"))
        await asyncio.sleep(0.02)
        assert slots.acquire_here(0.05) is None  # held, and others wait before it
        first.release()
        await waiting
        await asyncio.to_thread(thread.join)

    asyncio.run(main())
    assert order == ["thread", "loop"] and slots.busy == 0 and not slots._waiters


def test_a_local_store_is_guarded_below_its_views_and_stops_every_read(own_cube):
    """A request's guard sits below the snapshot's views of a local store (so its chunks are
    read as unguarded ones are: in the thread, by byte ranges), and once stopped refuses
    every kind of read there; a store of another kind is guarded whole."""
    from zarr.core.buffer import default_buffer_prototype
    from zarr.storage import MemoryStore

    from accumulus.service.datasets import Dataset
    from accumulus.service.guard import RequestGuard, RequestStopped
    from accumulus.stores.base import reader_of
    from accumulus.stores.guarded import GuardedStore, guarded

    snapshot = Dataset("own", str(own_cube)).snapshot()
    guard = RequestGuard(600.0)
    through = snapshot.reading_through(lambda store: guarded(store, guard, 10.0))
    top = through.cube.store
    key = f"tas/{first_chunk(own_cube).name}"
    assert type(top) is type(snapshot.cube.store) and top is not snapshot.cube.store
    below = reader_of(top, key)
    assert isinstance(below, GuardedLocalStore) and innermost(top) is below
    assert innermost(snapshot.cube.store) is below.store  # the original, unguarded
    prototype = default_buffer_prototype()
    whole = below.get_sync(key).to_bytes()
    assert below.read_parts_sync(key, lambda read, version: read(0, version.size)) == whole
    assert asyncio.run(below.get(key, prototype)).to_bytes() == whole
    guard.stop("the client went away")
    reads = [
        lambda: below.get_sync(key),
        lambda: below.read_parts_sync(key, lambda read, version: read(0, version.size)),
        lambda: asyncio.run(below.get(key, prototype)),
        lambda: asyncio.run(below.get_partial_values(prototype, [(key, None)])),
        lambda: asyncio.run(below.getsize(key)),
    ]
    for read in reads:
        with pytest.raises(RequestStopped):
            read()
    assert isinstance(guarded(MemoryStore(), guard, 10.0), GuardedStore)


def test_a_computing_thread_reads_through_its_gate_only_while_it_computes(own_cube):
    """Each computing thread keeps its snapshot read through a gate (made once per thread
    and snapshot, not per request); the gate asks the guard of the request being computed,
    so a stopped request's reads are refused, and between requests every read is."""
    from accumulus.service.guard import RequestGuard, RequestStopped
    from accumulus.stores.base import reader_of

    service = create_app([str(own_cube)]).state.service
    snapshot = service.snapshot_of(service.dataset("own"))
    key = f"tas/{first_chunk(own_cube).name}"

    def read(through) -> bytes:
        return reader_of(through.cube.store, key).get_sync(key).to_bytes()

    first, second = RequestGuard(600.0), RequestGuard(600.0)
    with service.read_guarded(snapshot, first) as through:
        whole = read(through)
        kept = through
    with pytest.raises(RequestStopped):
        read(kept)  # the request has ended
    with service.read_guarded(snapshot, second) as through:
        assert through is kept  # the same snapshot, the next request
        assert read(through) == whole
        second.stop("the client went away")
        with pytest.raises(RequestStopped):
            read(through)
    others = []

    def on_another_thread() -> None:
        with service.read_guarded(snapshot, first) as through:
            others.append(through)

    thread = threading.Thread(target=on_another_thread)
    thread.start()
    thread.join()
    assert others[0] is not kept  # another thread's own
