"""Counting what a store is asked for: the benchmarks' and tests' window on requests.

``CountingStore`` counts requests and bytes (and sequential round trips), can add a latency
to every request to imitate object storage, and can keep whole-key reads so that one query
does not fetch a chunk twice.
"""

from __future__ import annotations

import asyncio
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from accumulus.stores.base import DelegatingStore

T = TypeVar("T")


@dataclass
class RequestCounts:
    """What a store was asked for: requests and bytes, per key."""

    reads: dict[str, int] = field(default_factory=dict)  # key -> bytes returned (last read)
    read_requests: int = 0
    read_bytes: int = 0
    writes: dict[str, int] = field(default_factory=dict)  # key -> bytes written (last write)
    write_requests: int = 0
    write_bytes: int = 0
    conditional_writes: int = 0  # set_if_not_exists: writes only when the key is absent
    deletes: list[str] = field(default_factory=list)
    list_requests: int = 0
    # Sequential round trips: a request is in wave k + 1 when the last wave completed before
    # it started is k. With a latency per request, waves are what a query waits for.
    round_trips: int = 0
    max_in_flight: int = 0


@dataclass
class _CountingState:
    """Totals and cache, shared by a CountingStore and the views zarr derives from it."""

    counts: RequestCounts = field(default_factory=RequestCounts)
    cache: OrderedDict[str, Buffer] = field(default_factory=OrderedDict)
    cached: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    inflight: dict[str, asyncio.Future] = field(default_factory=dict)
    completed_wave: int = 0
    in_flight: int = 0


class CountingStore(DelegatingStore):
    """A store wrapper that counts requests and bytes, optionally adds latency per request
    and a time per byte read (``bandwidth``), and optionally keeps up to ``cache_bytes`` of
    whole-key reads (least recently used go first), so that one query does not fetch a
    chunk twice.

    Neither its synchronous reads nor its writes pass through (``DelegatingStore``'s
    flags): every request goes through the async methods here, where it is counted and
    delayed. Views zarr derives from it count into the same totals.
    """

    def __init__(
        self, store: Store, *, latency: float = 0.0, bandwidth: float = 0.0, cache_bytes: int = 0
    ) -> None:
        super().__init__(store)
        self.latency = latency
        # Bytes per second each read arrives at (0: at once), as one stream of an object
        # store does: its bytes take that long after the latency.
        self.bandwidth = bandwidth
        self.cache_bytes = cache_bytes
        self._state = _CountingState()

    @property
    def counts(self) -> RequestCounts:
        return self._state.counts

    @property
    def _cache(self) -> OrderedDict[str, Buffer]:
        return self._state.cache

    @property
    def _lock(self) -> threading.Lock:
        return self._state.lock

    def reset(self) -> None:
        with self._lock:
            self._state.counts = RequestCounts()
            self._state.completed_wave = 0
            self._cache.clear()
            self._state.cached = 0

    def _cache_get(self, key: str) -> Buffer | None:
        with self._lock:
            value = self._cache.get(key)
            if value is not None:
                self._cache.move_to_end(key)
            return value

    def _cache_put(self, key: str, value: Buffer) -> None:
        if len(value) > self.cache_bytes:
            return
        with self._lock:
            if key in self._cache:
                return
            self._cache[key] = value
            self._state.cached += len(value)
            while self._state.cached > self.cache_bytes:
                _, old = self._cache.popitem(last=False)
                self._state.cached -= len(old)

    def _cache_drop(self, key: str) -> None:
        with self._lock:
            old = self._cache.pop(key, None)
            if old is not None:
                self._state.cached -= len(old)

    async def _request(self, call: Awaitable[T]) -> T:
        """One store request: counted in its wave, delayed by the latency."""
        state = self._state
        with self._lock:
            wave = state.completed_wave + 1
            state.counts.round_trips = max(state.counts.round_trips, wave)
            state.in_flight += 1
            state.counts.max_in_flight = max(state.counts.max_in_flight, state.in_flight)
        try:
            if self.latency > 0:
                await asyncio.sleep(self.latency)
            return await call
        finally:
            with self._lock:
                state.in_flight -= 1
                state.completed_wave = max(state.completed_wave, wave)

    def _count_read(self, key: str, value: Buffer | None) -> None:
        nbytes = len(value) if value is not None else 0
        with self._lock:
            self.counts.read_requests += 1
            self.counts.read_bytes += nbytes
            self.counts.reads[key] = nbytes

    def _count_write(self, key: str, value: Buffer) -> None:
        with self._lock:
            self.counts.write_requests += 1
            self.counts.write_bytes += len(value)
            self.counts.writes[key] = len(value)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if byte_range is not None or not self.cache_bytes:
            return await self._fetch(key, prototype, byte_range)
        cached = self._cache_get(key)
        if cached is not None:
            return cached
        # Concurrent reads of one key (threads of one query) share a single request, so the
        # counts do not depend on timing. zarr runs all store I/O on one event loop.
        loop = asyncio.get_running_loop()
        pending = self._state.inflight.get(key)
        if pending is not None and pending.get_loop() is loop:
            return await asyncio.shield(pending)
        future = loop.create_future()
        self._state.inflight[key] = future
        try:
            value = await self._fetch(key, prototype, None)
            if value is not None:
                self._cache_put(key, value)
            future.set_result(value)
            return value
        except BaseException as exc:  # handed to the readers waiting on this key, re-raised
            future.set_exception(exc)
            future.exception()  # mark retrieved: nobody may be waiting
            raise
        finally:
            self._state.inflight.pop(key, None)

    async def _fetch(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        value = await self._request(self._store.get(key, prototype, byte_range))
        self._count_read(key, value)
        if self.bandwidth > 0 and value is not None:
            await asyncio.sleep(len(value) / self.bandwidth)
        return value

    async def exists(self, key: str) -> bool:
        with self._lock:
            self.counts.read_requests += 1
        return await self._request(self._store.exists(key))

    async def getsize(self, key: str) -> int:
        # A size request (HEAD), not a read: zarr's default would read the whole value.
        with self._lock:
            self.counts.read_requests += 1
        return await self._request(self._store.getsize(key))

    async def set(self, key: str, value: Buffer) -> None:
        await self._request(self._store.set(key, value))
        self._count_write(key, value)
        self._cache_drop(key)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        # Counted apart: whether it wrote anything depends on whether the key existed.
        await self._request(self._store.set_if_not_exists(key, value))
        with self._lock:
            self.counts.conditional_writes += 1

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await asyncio.gather(*(self.set(k, v) for k, v in values))

    async def delete(self, key: str) -> None:
        await self._request(self._store.delete(key))
        with self._lock:
            self.counts.deletes.append(key)
        self._cache_drop(key)

    def _counted_listing(self, listing: AsyncIterator[str]) -> AsyncIterator[str]:
        with self._lock:
            self.counts.list_requests += 1
        return listing

    def list(self) -> AsyncIterator[str]:
        return self._counted_listing(self._store.list())

    def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        return self._counted_listing(self._store.list_prefix(prefix))

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        return self._counted_listing(self._store.list_dir(prefix))
