"""What one running service holds, shared by its routes through a dependency
(``ServiceDep``): the datasets by name, the cache of answers, the computation slots and
their worker threads, the limits, and what the OpenAPI document says of the data (variables,
the pattern of each dimension's ranges).

Answers are computed on worker threads, at most ``ServiceLimits.computations`` at once
(``guard``), and the scans (questions no accumulation can answer) at most
``ServiceLimits.scans`` at once in a queue of their own; the event loop only waits, so
``/api/health`` answers while they run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Annotated

from fastapi import Depends, Request

from accumulus.api import StaleSidecarError
from accumulus.errors import AccumulusError
from accumulus.service.answers import Answer, compute_answer
from accumulus.service.cache import AnswerCache
from accumulus.service.datasets import Catalog, Dataset, DatasetSnapshot
from accumulus.service.describe import averageable
from accumulus.service.errors import CLIENT_GONE, ServiceError
from accumulus.service.guard import ComputeSlots, RequestGuard, ServiceLimits
from accumulus.service.memory import release_free_memory
from accumulus.service.parameters import OPTIONS, AverageRequest, ParameterError, range_pattern
from accumulus.stores.guarded import GuardedStore

# How often a waiting request looks whether its client is still there.
WATCH_SECONDS = 0.1
POLL_SECONDS = 0.005
# Freed memory goes back to the system once no computation has run for this long.
TRIM_IDLE_SECONDS = 0.2

log = logging.getLogger("accumulus.service")


class Service:
    """One service's datasets, answers and limits. Every dataset is read once now, so a
    store that cannot be read stops the start with an ``AccumulusError``."""

    def __init__(
        self, catalog: Catalog, *, max_cells: int, cache_bytes: int, limits: ServiceLimits
    ) -> None:
        self.catalog = catalog
        self.max_cells = max_cells
        self.limits = limits
        first = [dataset.snapshot() for dataset in catalog]
        # Each dimension's range pattern (the first dataset's coordinate wins a shared name).
        self.range_patterns = {
            str(d): range_pattern(s.cube.index(str(d)))
            for s in reversed(first)
            for d in s.cube.raw.dims
            if d not in OPTIONS
        }
        self.variables = sorted({v for s in first for v in averageable(s.cube)})
        self.cache = AnswerCache(cache_bytes)
        self.slots = ComputeSlots(limits.computations)
        self.scan_slots = ComputeSlots(limits.scans)
        self.workers = ThreadPoolExecutor(
            limits.computations + limits.scans, thread_name_prefix="accumulus-answer"
        )
        self._trim: asyncio.TimerHandle | None = None  # giving memory back when idle
        self.health = HealthMonitor(catalog, {s.dataset: s.token for s in first}, self.snapshot_of)

    def dataset(self, name: str) -> Dataset:
        """The dataset ``name`` (a 404 naming the datasets there are, when none)."""
        dataset = self.catalog.get(name)
        if dataset is None:
            raise ParameterError(
                "dataset", f"no dataset {name!r}; datasets are {self.catalog.names}", missing=True
            )
        return dataset

    def snapshot_of(self, dataset: Dataset) -> DatasetSnapshot:
        """``dataset`` as it stands now (a 503 when it cannot be read)."""
        try:
            return dataset.snapshot()
        # The service's boundary: a store or library failing (and a fault of ours, logged
        # with its traceback) is a 503 naming the dataset, never a crash of the service.
        except Exception as exc:
            if not isinstance(exc, AccumulusError):
                log.exception("reading the snapshot of dataset %s failed", dataset.name)
            raise ServiceError(f"dataset {dataset.name!r} cannot be read now: {exc}") from None

    @property
    def busy(self) -> int:
        """Computations running now (scans too)."""
        return self.slots.busy + self.scan_slots.busy

    def held_longest(self) -> float:
        """Seconds the computation running longest has run (0 when none runs)."""
        return max(self.slots.held_longest(), self.scan_slots.held_longest())

    async def compute(
        self,
        request: Request,
        snapshot: DatasetSnapshot,
        checked: AverageRequest,
        scan: bool | None = None,
    ) -> Answer:
        """Compute on a worker thread once a slot is free (a scan's slot for a question no
        accumulation answers: ``scan``, found here when not given); stop it when its time is
        up or its client leaves. The slot is given back by the thread, when the work has
        really ended."""
        limits = self.limits
        if scan is None:
            scan = snapshot.scans(checked.query)
        slots, size = (self.scan_slots, limits.scans) if scan else (self.slots, limits.computations)
        slot = await slots.acquire(limits.queue_seconds)
        if slot is None:
            retry = max(1, round(limits.queue_seconds))
            kind = "scans" if scan else "computations"
            raise ServiceError(
                f"the service is busy ({size} {kind} running and others "
                f"waiting); try again in {retry} s",
                503,
                {"Retry-After": str(retry)},
            )
        guard = RequestGuard(limits.request_seconds)
        loop, finished = asyncio.get_running_loop(), asyncio.Event()

        def work() -> Answer:
            try:
                # The snapshot's chunks (a sidecar's too) and arrays read through the guard.
                guarded = snapshot.reading_through(
                    lambda store: GuardedStore(store, guard, limits.read_seconds)
                )
                return compute_answer(guarded, checked, limits.memory_bytes)
            finally:
                slot.release()
                with contextlib.suppress(RuntimeError):  # that request's loop is gone
                    loop.call_soon_threadsafe(self._finished, finished)

        try:
            running = self.workers.submit(work)
        except BaseException:  # never started (the service is shutting down)
            slot.release()
            raise
        try:
            while not await _finished(finished, WATCH_SECONDS):
                if guard.expired:
                    guard.stop(f"the request took more than {limits.request_seconds:g} s")
                elif await request.is_disconnected():
                    guard.stop("the client went away")
                if guard.reason is not None:
                    break
        except asyncio.CancelledError:
            guard.stop("the client went away")
            raise
        stopped = guard.reason is not None and (
            not running.done() or running.exception() is not None
        )
        if stopped and guard.reason is not None:
            if "client" in guard.reason:
                raise ServiceError(f"answer abandoned: {guard.reason}", CLIENT_GONE)
            raise ServiceError(
                f"no answer within {limits.request_seconds:g} s; narrow the ranges, use the "
                "accumulations, or try again when the service is less busy",
                504,
            )
        try:
            return running.result()
        except AccumulusError as exc:
            if isinstance(exc, ParameterError | StaleSidecarError):
                raise
            raise ServiceError(f"dataset {snapshot.dataset!r}: {exc}") from None
        # The service's boundary: a store's content made a library fail (or a fault of ours,
        # logged with its traceback): a 503, not the client's mistake.
        except Exception as exc:
            log.exception("computing an answer on dataset %s failed", snapshot.dataset)
            raise ServiceError(
                f"dataset {snapshot.dataset!r} could not be read to answer this "
                f"({type(exc).__name__})"
            ) from None

    def _finished(self, finished: asyncio.Event) -> None:
        """A computation has ended (on the event loop): tell its request, and give memory
        back once no computation has run for ``TRIM_IDLE_SECONDS`` (a trim after every
        answer cost a light answer a few per cent of its time: docs/benchmarks.md)."""
        finished.set()
        if self._trim is not None:
            self._trim.cancel()
        self._trim = asyncio.get_running_loop().call_later(TRIM_IDLE_SECONDS, self._trim_if_idle)

    def _trim_if_idle(self) -> None:
        self._trim = None
        if not self.busy:
            release_free_memory()


async def service_of(request: Request) -> Service:
    """The service answering ``request`` (run in the event loop: no thread to wait for)."""
    return request.app.state.service


ServiceDep = Annotated[Service, Depends(service_of)]


async def _finished(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


class HealthMonitor:
    """Snapshot tokens for ``/api/health``: read (by ``read``) afresh when the stores answer
    in time, else the last ones read (a read still under way finishes in the background and
    is not started twice)."""

    def __init__(
        self, catalog: Catalog, tokens: dict[str, str], read: Callable[[Dataset], DatasetSnapshot]
    ) -> None:
        self.catalog = catalog
        self.last = dict(tokens)
        self.read = read
        self._pool = ThreadPoolExecutor(len(catalog.names), thread_name_prefix="accumulus-health")
        self._reading: dict[str, Future] = {}
        self._lock = threading.Lock()

    async def tokens(self, wait: float) -> dict[str, str]:
        with self._lock:
            for dataset in self.catalog:
                reading = self._reading.get(dataset.name)
                if reading is None or reading.done():
                    self._reading[dataset.name] = self._pool.submit(self._check, dataset)
            readings = list(self._reading.values())
        deadline = time.monotonic() + wait
        while not all(r.done() for r in readings) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        return dict(self.last)

    def _check(self, dataset: Dataset) -> None:
        try:
            self.last[dataset.name] = self.read(dataset).token
        except AccumulusError as exc:
            self.last[dataset.name] = f"error: {exc}"
