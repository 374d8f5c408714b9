"""Reading a set of chunks, of any arrays, in one batch.

A query plan names every chunk it needs before any is read, so all of them are requested at
once: one call into zarr's event loop issues every store request concurrently, decodes each
chunk with its array's own codec pipeline as it arrives, and hands it to the caller's
``consume`` in a worker thread, where it is reduced and dropped. On object storage the whole
plan costs one round trip (up to ``MAX_IN_FLIGHT`` requests at a time), and memory holds only
the chunks in flight, whatever the number of chunks read.

Requests are counted here, at the store: the keys read and the bytes the store returned.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from math import prod

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.sync import sync

# Store requests in flight at once: enough for a plan's reads to go out together, few enough
# that a full scan holds a bounded number of chunks in memory.
MAX_IN_FLIGHT = 128


@dataclass(frozen=True)
class ChunkRequest:
    """One stored chunk: ``array`` (whose store it is read from) and its grid coordinates."""

    array: zarr.Array
    coords: tuple[int, ...]

    @property
    def key(self) -> str:
        path = self.array.store_path.path
        chunk = self.array.metadata.encode_chunk_key(self.coords)
        return f"{path}/{chunk}" if path else chunk


@dataclass
class ReadCounts:
    """What a batch asked the store for: one request per key."""

    keys: dict[str, int] = field(default_factory=dict)  # key -> bytes returned (0: missing)

    @property
    def requests(self) -> int:
        return len(self.keys)

    @property
    def bytes(self) -> int:
        return sum(self.keys.values())


class ChunkReadError(Exception):
    """Reading or decoding ``request``'s chunk failed with ``cause``."""

    def __init__(self, request: ChunkRequest, cause: BaseException) -> None:
        super().__init__(f"chunk {request.key}: {cause}")
        self.request = request
        self.cause = cause


def read_chunks(
    requests: Iterable[ChunkRequest],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    memory_bytes: int | None = None,
    store: Store | None = None,
) -> ReadCounts:
    """Fetch and decode every requested chunk concurrently and call ``consume(request,
    chunk)`` for each (from worker threads, several at a time: ``consume`` must guard what
    it shares). A chunk that is not stored arrives filled with its array's fill value; the
    chunk of a partial edge has its declared shape. Each key is read once, even when
    requested twice. Raises ``ChunkReadError`` naming the first chunk that failed.

    ``memory_bytes`` bounds the chunks held at once (fetched, decoded or being consumed) by
    twice their decoded size: many small chunks go out together, large ones a few at a time
    (one at least, whatever its size). ``store``: read every key (``ChunkRequest.key``)
    through it instead of the arrays' own store (a wrapper of it, such as the service's
    guard)."""
    unique = {r.key: r for r in requests}
    counts = ReadCounts()
    if unique:
        sync(_read_all(list(unique.values()), consume, counts, memory_bytes, store))
    return counts


class _Held:
    """Bytes held by chunks in flight, at most ``limit`` (one chunk may exceed it alone)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.ready = asyncio.Condition()

    async def take(self, nbytes: int) -> None:
        if self.limit is None:
            return
        async with self.ready:
            await self.ready.wait_for(lambda: self.used == 0 or self.used + nbytes <= self.limit)
            self.used += nbytes

    async def give_back(self, nbytes: int) -> None:
        if self.limit is None:
            return
        async with self.ready:
            self.used -= nbytes
            self.ready.notify_all()


async def _read_all(
    requests: Sequence[ChunkRequest],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    counts: ReadCounts,
    memory_bytes: int | None,
    store: Store | None,
) -> None:
    limit = asyncio.Semaphore(MAX_IN_FLIGHT)
    held = _Held(memory_bytes)
    lock = threading.Lock()

    async def one(request: ChunkRequest) -> None:
        # The stored bytes and the decoded chunk, held until it is consumed.
        cost = 2 * _decoded_bytes(request)
        try:
            await held.take(cost)
            try:
                async with limit:
                    chunk, nbytes = await _fetch_decode(request, store)
                with lock:
                    counts.keys[request.key] = nbytes
                await asyncio.to_thread(consume, request, chunk)
                del chunk
            finally:
                await held.give_back(cost)
        except ChunkReadError:
            raise
        except Exception as exc:
            raise ChunkReadError(request, exc) from exc

    tasks = [asyncio.ensure_future(one(r)) for r in requests]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _fetch_decode(request: ChunkRequest, store: Store | None) -> tuple[np.ndarray, int]:
    array = request.array.async_array
    spec = _chunk_spec(array.metadata, request.coords)
    if store is None:
        path = array.store_path / array.metadata.encode_chunk_key(request.coords)
        buffer = await path.get(prototype=spec.prototype)
    else:
        buffer = await store.get(request.key, spec.prototype)
    if buffer is None:
        fill = spec.fill_value if spec.fill_value is not None else spec.dtype.default_scalar()
        return np.full(spec.shape, fill, dtype=spec.dtype.to_native_dtype()), 0
    (decoded,) = await array.codec_pipeline.decode([(buffer, spec)])
    assert decoded is not None
    return decoded.as_numpy_array().reshape(spec.shape), len(buffer)


def _decoded_bytes(request: ChunkRequest) -> int:
    metadata = request.array.metadata
    chunk = _grid(metadata)[request.coords]
    shape = chunk.codec_shape if chunk is not None else ()
    return prod(shape) * metadata.dtype.to_native_dtype().itemsize


def _chunk_spec(metadata, coords: tuple[int, ...]) -> ArraySpec:
    """How zarr decodes the chunk at ``coords``: its declared shape, dtype, fill value and
    memory order."""
    grid = _grid(metadata)
    chunk = grid[coords]
    if chunk is None:
        raise IndexError(f"chunk {coords} is outside the grid {grid.grid_shape}")
    order = metadata.order if metadata.zarr_format == 2 else "C"
    return ArraySpec(
        shape=chunk.codec_shape,
        dtype=metadata.dtype,
        fill_value=metadata.fill_value,
        config=ArrayConfig.from_dict({"order": order}),
        prototype=default_buffer_prototype(),
    )


@cache
def _grid(metadata) -> ChunkGrid:
    return ChunkGrid.from_metadata(metadata)
