"""Chunks of a local store are read in the calling thread (``chunk_reader``), those of any
other store through zarr's event loop: both ways give the same bits and read the same
chunks, whether a plan is read in one run or in runs side by side."""

from __future__ import annotations

import os
import shutil
import threading

import numpy as np
import pytest
import zarr
from zarr.storage import MemoryStore, WrapperStore

import accumulus
from accumulus import chunk_reader
from accumulus.stores.base import reads_synchronously
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 60, "lat": 18, "lon": 24}
CHUNKS = {"time": 10, "lat": 6, "lon": 8}
QUESTIONS = [
    (("time",), {"time": ("2001-01-11", "2001-02-09")}),  # aligned: accumulations only
    (("time",), {"time": ("2001-01-04", "2001-02-23")}),  # unaligned ends: raw chunks too
    (("lat", "lon"), {"lat": (-50.0, 40.0), "lon": (5.0, 100.0)}),  # unaligned box
]


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("in-thread") / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=11)
    write_cube(ds, path, CHUNKS)
    accumulus.accumulate(str(path), VAR, minimal=True)  # chunk ends: unaligned reads raw
    return path, ds


class _Guard(WrapperStore):
    """A wrapper that does not say it passes synchronous reads through (like the service's
    guard): its requests must go through its own ``get``."""


def test_which_stores_are_read_in_the_calling_thread(cube_path):
    path, _ = cube_path
    local = open_store(str(path))
    assert reads_synchronously(local)
    assert reads_synchronously(MemoryStore())
    assert not reads_synchronously(CountingStore(local))
    assert not reads_synchronously(_Guard(local))


@pytest.mark.parametrize(("over", "ranges"), QUESTIONS)
def test_both_ways_give_the_same_bits_and_chunks(cube_path, over, ranges, monkeypatch):
    path, ds = cube_path
    in_thread = accumulus.open(str(path)).query(VAR, over, ranges)
    through_loop = accumulus.open(CountingStore(open_store(str(path)))).query(VAR, over, ranges)
    monkeypatch.setattr(chunk_reader, "IN_THREAD_BYTES", 1)  # every plan in runs
    monkeypatch.setattr(chunk_reader, "SIDE_BY_SIDE_CHUNK", 0)
    in_runs = accumulus.open(str(path)).query(VAR, over, ranges)
    for other in (through_loop, in_runs):
        np.testing.assert_array_equal(in_thread.data.values, other.data.values)
        assert other.stats.raw_chunks_read == in_thread.stats.raw_chunks_read
        assert other.stats.accumulation_chunks_read == in_thread.stats.accumulation_chunks_read
        assert other.stats.requests == in_thread.stats.requests
        assert other.stats.bytes_read == in_thread.stats.bytes_read
    expected = xarray_reference(
        ds[VAR].sel({d: slice(*r) for d, r in ranges.items()}), list(over), "area", "mean"
    )
    np.testing.assert_allclose(in_thread.data.values, expected.values, rtol=1e-9)


def test_a_missing_chunk_read_in_the_calling_thread_is_refused(cube_path, tmp_path):
    path, _ = cube_path
    copy = tmp_path / "cube.zarr"
    shutil.copytree(path, copy)
    handle = accumulus.open(str(copy))
    over, ranges = QUESTIONS[0]
    handle.query(VAR, over, ranges)
    for chunk in (copy / f"{VAR}_accumulation_group").glob("*time*/[0-9]*"):
        chunk.unlink()  # the chunks, not the arrays' metadata
    with pytest.raises(accumulus.AccumulusError, match="missing chunk"):
        handle.query(VAR, over, ranges)


@pytest.mark.parametrize("in_thread", [True, False])
def test_a_chunk_larger_than_the_memory_allowed_is_refused_before_any_read(
    cube_path, in_thread, monkeypatch
):
    """A chunk declaring more bytes decoded than the memory allowed is refused before any
    chunk of the batch is read, read in the calling thread or through the event loop."""
    path, _ = cube_path
    store = open_store(str(path)) if in_thread else CountingStore(open_store(str(path)))
    array = zarr.open_array(store, path=VAR, mode="r")
    requests = [chunk_reader.ChunkRequest(array, (0, 0, c)) for c in range(3)]
    read_here = []
    read_now = chunk_reader._read_now
    monkeypatch.setattr(chunk_reader, "_read_now", lambda *a: read_here.append(a) or read_now(*a))
    if isinstance(store, CountingStore):
        store.reset()
    one_chunk = requests[0].nbytes
    with pytest.raises(chunk_reader.ChunkReadError, match="give it more memory") as refused:
        chunk_reader.read_chunks(requests, lambda r, c: None, one_chunk - 1)
    assert isinstance(refused.value.cause, chunk_reader.ChunkTooLarge)
    assert read_here == []
    if isinstance(store, CountingStore):
        assert store.counts.read_requests == 0
    consumed = []
    done = chunk_reader.read_chunks(requests, lambda r, c: consumed.append(r), one_chunk)
    assert done.requests == 3 and len(consumed) == 3
    assert len(read_here) == (3 if in_thread else 0)


def test_runs_side_by_side_leave_the_main_thread_waiting(cube_path, monkeypatch):
    """Runs side by side are read by the reader's workers and the calling thread, except the
    main thread, which waits (Blosc decodes with threads of its own there, which competed
    with the workers); another thread (the service's) reads its share."""
    path, _ = cube_path
    monkeypatch.setattr(chunk_reader, "IN_THREAD_BYTES", 1)
    monkeypatch.setattr(chunk_reader, "SIDE_BY_SIDE_CHUNK", 0)
    readers = []
    read_run = chunk_reader._read_run

    def recorded(*args):
        readers.append(threading.current_thread())
        return read_run(*args)

    monkeypatch.setattr(chunk_reader, "_read_run", recorded)
    over, ranges = QUESTIONS[2]
    cube = accumulus.open(str(path))
    cube.query(VAR, over, ranges)
    assert len(readers) >= 2
    assert threading.main_thread() not in readers

    readers.clear()
    caller = threading.Thread(target=cube.query, args=(VAR, over, ranges))
    caller.start()
    caller.join()
    assert len(readers) >= 2
    assert caller in readers


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.parametrize("through_loop", [False, True])
def test_chunks_are_read_at_the_priority_of_the_thread_asking(cube_path, monkeypatch, through_loop):
    """A thread below the others' priority (a service's scan) has its chunks read by workers
    at its priority, and a thread at the usual priority by workers at that one, whichever
    asked first: runs side by side (a local store) and the consumers of chunks fetched
    through zarr's event loop (any other store), whose workers that loop starts."""
    path, _ = cube_path
    monkeypatch.setattr(chunk_reader, "IN_THREAD_BYTES", 1)
    monkeypatch.setattr(chunk_reader, "SIDE_BY_SIDE_CHUNK", 0)
    worker = "_consume_all" if through_loop else "_read_run"
    work = getattr(chunk_reader, worker)
    priorities: list[int] = []

    def recorded(*args):
        priorities.append(_nice())
        return work(*args)

    monkeypatch.setattr(chunk_reader, worker, recorded)
    over, ranges = QUESTIONS[2]
    store = CountingStore(open_store(str(path))) if through_loop else str(path)
    cube = accumulus.open(store)
    usual = _nice()
    seen: dict[str, set[int]] = {}

    def ask(name: str, lower_by: int) -> None:
        if lower_by:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), usual + lower_by)
        priorities.clear()
        cube.query(VAR, over, ranges)
        assert len(priorities) >= (1 if through_loop else 2)
        seen[name] = set(priorities)

    for name, lower_by in (("scan", 5), ("light", 0), ("scan again", 5)):
        caller = threading.Thread(target=ask, args=(name, lower_by))
        caller.start()
        caller.join()
    assert seen == {"scan": {usual + 5}, "light": {usual}, "scan again": {usual + 5}}
