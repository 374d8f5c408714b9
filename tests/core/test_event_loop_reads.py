"""Chunks read through zarr's event loop (object storage, counting or guarding wrappers):
every chunk requested at once, consumed once, in batches of those that arrived together, with
no more chunks held than the memory allowed, and a failure named by its chunk."""

from __future__ import annotations

import os
import threading
import time
from itertools import product

import numpy as np
import pytest
import zarr

from accumulus.chunk_reader import ChunkReadError, ChunkRequest, read_chunks
from accumulus.errors import AccumulusError
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store

SHAPE, CHUNKS = (40, 30, 24), (4, 5, 6)  # 10 x 6 x 4 = 240 chunks of 120 values


@pytest.fixture
def stored(tmp_path):
    values = np.random.default_rng(5).random(SHAPE).astype("f4")
    array = zarr.create_array(
        str(tmp_path / "a.zarr"), shape=SHAPE, chunks=CHUNKS, dtype="f4", zarr_format=2
    )
    array[...] = values
    store = CountingStore(open_store(str(tmp_path / "a.zarr")))  # through the event loop
    opened = zarr.open_array(store, mode="r")
    store.reset()  # its metadata read: only chunk reads are counted
    return opened, store, values


def _requests(array: zarr.Array) -> list[ChunkRequest]:
    grid = [range(-(-n // c)) for n, c in zip(SHAPE, CHUNKS, strict=True)]
    return [ChunkRequest(array, coords) for coords in product(*grid)]


def _where(coords: tuple[int, ...]) -> tuple[slice, ...]:
    return tuple(slice(i * c, (i + 1) * c) for i, c in zip(coords, CHUNKS, strict=True))


def test_every_chunk_is_consumed_once_with_its_values(stored):
    array, store, values = stored
    seen: dict[tuple[int, ...], np.ndarray] = {}
    threads, lock = set(), threading.Lock()

    def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
        with lock:
            assert request.coords not in seen
            seen[request.coords] = chunk.copy()
            threads.add(threading.get_ident())

    counts = read_chunks(_requests(array), consume)
    assert len(seen) == 240 and counts.requests == 240
    for coords, chunk in seen.items():
        np.testing.assert_array_equal(chunk, values[_where(coords)])
    assert threading.get_ident() not in threads  # consumed in worker threads
    assert store.counts.round_trips == 1  # all requested at once


def test_the_memory_allowed_bounds_the_chunks_held(stored):
    array, store, _ = stored
    chunk_bytes = int(np.prod(CHUNKS)) * 4
    held, most, lock = [0], [0], threading.Lock()

    def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
        with lock:
            held[0] += 1
            most[0] = max(most[0], held[0])
        time.sleep(0.001)  # held a while: others arrive meanwhile
        with lock:
            held[0] -= 1

    read_chunks(_requests(array), consume, memory_bytes=3 * chunk_bytes)
    assert store.counts.max_in_flight <= 3
    assert most[0] <= 3
    assert store.counts.read_requests == 240


def test_a_chunk_that_cannot_be_summed_is_named(stored):
    array, _, _ = stored

    def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
        if request.coords == (7, 2, 3):
            raise ValueError("not a number")

    with pytest.raises(ChunkReadError, match=r"chunk 7\.2\.3: not a number"):
        read_chunks(_requests(array), consume)


def test_consumers_may_wait_on_zarr_reads_whatever_their_number(stored, tmp_path):
    """Each consume reads another zarr array (as a query reads its weights array), in more
    concurrent batches than zarr's I/O pool has threads: consumers run on threads of their
    own, so the reads they wait for always find a thread of zarr's (issue 35: they once took
    all of them and waited forever)."""
    array, _, values = stored
    weights = zarr.open_array(str(tmp_path / "a.zarr"), mode="r")  # a local store's reads
    zarr_threads = zarr.config.get("threading.max_workers") or min(32, (os.cpu_count() or 1) + 4)
    batches = zarr_threads + 1  # each with a consumer at least, waiting on a read
    sums, lock = [0.0] * batches, threading.Lock()

    def read_weighted(k: int) -> None:
        def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
            time.sleep(0.01)  # the other consumers start meanwhile
            w = weights[_where(request.coords)]
            with lock:
                sums[k] += float((chunk * w).sum(dtype="f8"))

        read_chunks(_requests(array), consume)

    threads = [
        threading.Thread(target=read_weighted, args=(k,), daemon=True) for k in range(batches)
    ]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    for thread in threads:
        thread.join(max(0, deadline - time.monotonic()))
    assert not any(thread.is_alive() for thread in threads), "reads never ended"
    expected = float((values.astype("f8") * values).sum())
    np.testing.assert_allclose(sums, [expected] * batches, rtol=1e-9)


def test_a_consumer_fault_is_told_apart_from_the_datas(stored):
    """A consumer failing on a chunk read whole is a fault of the program (raised as it is
    by the callers, not told to the user as theirs); one refusing it (``AccumulusError``)
    says the data is at fault, as a chunk that cannot be read does."""
    array, _, _ = stored

    def buggy(request: ChunkRequest, chunk: np.ndarray) -> None:
        raise TypeError("a bug")

    def refusing(request: ChunkRequest, chunk: np.ndarray) -> None:
        raise AccumulusError("not a value the cube may hold")

    with pytest.raises(ChunkReadError) as bug:
        read_chunks(_requests(array), buggy)
    assert not bug.value.reading and not bug.value.of_the_data
    with pytest.raises(ChunkReadError) as refused:
        read_chunks(_requests(array), refusing)
    assert not refused.value.reading and refused.value.of_the_data
