"""What one running service holds, shared by its routes through a dependency
(``ServiceDep``): the datasets by name, the cache of answers, the computation slots and
their worker threads, the limits, and what the OpenAPI document says of the data (variables,
the pattern of each dimension's ranges).

Answers are computed on worker threads, at most ``ServiceLimits.computations`` at once
(``guard``), and the scans (questions no accumulation can answer) at most
``ServiceLimits.scans`` at once in a queue of their own; the event loop only waits, so
``/api/health`` answers while they run.

A GET of an average takes a shorter way (``run_here``): checked, looked up in the cache and
computed by one call on a thread of its own pool (``light``), which hands the loop one
result; one watcher task per process enforces the queue's time, the computation's time and
a client's leaving for every such call at once, instead of timers per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Annotated, Any

from fastapi import Depends, Request

from accumulus.api import StaleSidecarError
from accumulus.decoded_chunks import DECODED
from accumulus.errors import AccumulusError
from accumulus.service.answers import Answer, compute_answer
from accumulus.service.cache import AnswerCache
from accumulus.service.datasets import Catalog, Dataset, DatasetSnapshot
from accumulus.service.describe import averageable
from accumulus.service.errors import CLIENT_GONE, ServiceError
from accumulus.service.guard import ComputeSlots, RequestGuard, ServiceLimits, ThreadGate
from accumulus.service.memory import release_free_memory, thaw
from accumulus.service.parameters import OPTIONS, AverageRequest, ParameterError, range_pattern
from accumulus.stores.guarded import guarded

# How often a waiting request looks whether its client is still there.
WATCH_SECONDS = 0.1
POLL_SECONDS = 0.005
# Freed memory goes back to the system once no computation has run for this long.
TRIM_IDLE_SECONDS = 0.2
# Kinds of question whose scan-or-not is remembered (then forgotten at once: a new
# snapshot's kinds replace them).
MAX_KINDS = 1024

log = logging.getLogger("accumulus.service")


class Service:
    """One service's datasets, answers and limits. Every dataset is read once now, so a
    store that cannot be read stops the start with an ``AccumulusError``."""

    def __init__(
        self,
        catalog: Catalog,
        *,
        max_cells: int,
        cache_bytes: int,
        limits: ServiceLimits,
        chunk_cache_sizing: Callable[[], int] | None = None,
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
            limits.computations, thread_name_prefix="accumulus-answer"
        )
        # Scans on threads of their own, below the others' priority: a scan takes seconds of
        # CPU, and the light questions beside it should get the cores first.
        self.scan_workers = ThreadPoolExecutor(
            limits.scans, thread_name_prefix="accumulus-scan", initializer=_yield_cpu
        )
        # The short path's threads, one per computation slot: each takes a slot to compute,
        # so none waits for one (with more threads than slots, handing a slot from thread
        # to thread was 5 % of the GIL's time under load: docs/service.md).
        self.light = ThreadPoolExecutor(limits.computations, thread_name_prefix="accumulus-get")
        self._calls: set[HereCall] = set()  # on the short path now (``run_here``)
        # Each computing thread's snapshot read through its gate (``read_guarded``).
        self._guarded = threading.local()
        self._watcher: asyncio.Task | None = None
        # Whether a question is a scan depends on its variable, statistic, weights and
        # accumulation choice, not on its ranges: found once per snapshot and kind.
        self._scans: dict[tuple, bool] = {}
        self._trim: asyncio.TimerHandle | None = None  # giving memory back when idle
        self._last_finished = 0.0
        # The decoded-chunk cache's size by the default's rule (None: a size given, kept),
        # and the snapshots it was last worked out for.
        self._chunk_cache_sizing = chunk_cache_sizing
        self._tokens = {s.dataset: s.token for s in first}  # each dataset's snapshot seen last
        self._sized_for = dict(self._tokens)
        self._sizing = threading.Lock()
        self.health = HealthMonitor(catalog, dict(self._tokens), self.snapshot_of)

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
            snapshot = dataset.snapshot()
            if self._tokens.get(snapshot.dataset) != snapshot.token:
                self._new_snapshot(snapshot)
            return snapshot
        # The service's boundary: a store or library failing (and a fault of ours, logged
        # with its traceback) is a 503 naming the dataset, never a crash of the service.
        except Exception as exc:
            if not isinstance(exc, AccumulusError):
                log.exception("reading the snapshot of dataset %s failed", dataset.name)
            raise ServiceError(f"dataset {dataset.name!r} cannot be read now: {exc}") from None

    def _new_snapshot(self, snapshot: DatasetSnapshot) -> None:
        """A dataset's new snapshot, first seen: the next full collection walks every object
        again (what the one it replaces held may be garbage in cycles now: ``memory.thaw``),
        and the decoded-chunk cache is sized again, when the default's rule sizes it."""
        self._tokens = {**self._tokens, snapshot.dataset: snapshot.token}
        thaw()
        if self._chunk_cache_sizing is not None:
            self._size_chunk_cache(snapshot)

    def _size_chunk_cache(self, changed: DatasetSnapshot) -> None:
        """The decoded-chunk cache sized for the datasets as they stand now (an append or a
        new build changes the accumulation chunks there are to keep), once per change
        (``changed``: the new snapshot that asks). Another dataset that cannot be read now
        leaves the size as it was, and the request that asked unharmed."""
        assert self._chunk_cache_sizing is not None
        with self._sizing:
            try:
                now = {dataset.name: dataset.snapshot().token for dataset in self.catalog}
                if now != self._sized_for:
                    DECODED.set_limit(self._chunk_cache_sizing())
                    self._sized_for = now
            except Exception as exc:  # (sized again at the next change)
                log.warning("the decoded-chunk cache keeps its size: %s", exc)
                self._sized_for = {**self._sized_for, changed.dataset: changed.token}

    @property
    def busy(self) -> int:
        """Computations running now (scans too)."""
        return self.slots.busy + self.scan_slots.busy

    def held_longest(self) -> float:
        """Seconds the computation running longest has run (0 when none runs)."""
        return max(self.slots.held_longest(), self.scan_slots.held_longest())

    def scans(self, snapshot: DatasetSnapshot, checked: AverageRequest) -> bool:
        """Whether ``checked`` is a scan (``DatasetSnapshot.scans``), remembered per snapshot
        and kind of question: the planner's look-up of usable accumulations is then made
        once per request, by the query, not twice."""
        query = checked.query.query
        kind = (
            snapshot.dataset,
            snapshot.token,
            checked.query.variable.name,
            checked.query.weights,
            query.stat,
            query.use_accumulation,
            query.with_,
        )
        found = self._scans.get(kind)
        if found is None:
            found = snapshot.scans(checked.query)
            if len(self._scans) > MAX_KINDS:  # old snapshots' kinds
                self._scans.clear()
            self._scans[kind] = found
        return found

    def compute_here(
        self, call: HereCall, snapshot: DatasetSnapshot, checked: AverageRequest
    ) -> Answer:
        """``compute`` on this worker thread (of ``light``, for ``run_here``): takes a
        computation slot within what is left of the queue's time, and reads through a guard
        the watcher stops when the time is up or the client leaves."""
        limits = self.limits
        slot = self.slots.acquire_here(limits.queue_seconds - (time.monotonic() - call.queued))
        if slot is None:
            raise busy_error(limits, scan=False)
        call.guard = RequestGuard(limits.request_seconds)
        try:
            with self.read_guarded(snapshot, call.guard) as through:
                return compute_answer(through, checked, limits.memory_bytes)
        except Exception as exc:  # the service's boundary: see computation_failure
            raise computation_failure(snapshot, exc) from None
        finally:
            slot.release()

    @contextlib.contextmanager
    def read_guarded(
        self, snapshot: DatasetSnapshot, guard: RequestGuard
    ) -> Iterator[DatasetSnapshot]:
        """``snapshot`` with its chunks read through ``guard`` (and within ``read_seconds``)
        for as long as the block runs, on this thread: the guarded snapshot is made once per
        computing thread and snapshot, its reads asking the thread's gate
        (``guard.ThreadGate``), which asks ``guard`` now and refuses every read after."""
        held = getattr(self._guarded, "held", None)
        if held is None or held[0] is not snapshot:
            gate = ThreadGate()
            read_seconds = self.limits.read_seconds
            through = snapshot.reading_through(lambda store: guarded(store, gate, read_seconds))
            held = self._guarded.held = (snapshot, gate, through)
        _, gate, through = held
        gate.guard = guard
        try:
            yield through
        finally:
            gate.guard = None

    async def run_here(
        self, work: Callable[[HereCall], Any], disconnected: Callable[[], Awaitable[bool]]
    ) -> Any:
        """``work(call)`` on a thread of ``light``, its result (or exception) handed back to
        this loop once. While it waits for a thread, past ``queue_seconds`` it is dropped (503
        busy); while it computes, past ``request_seconds`` (504) or when ``disconnected()``
        says the client left, its guard is stopped and the request answered at once (the
        work ends at its next read). ``_watch`` looks, every ``WATCH_SECONDS``."""
        loop = asyncio.get_running_loop()
        call = HereCall(loop.create_future(), time.monotonic(), disconnected)
        self._calls.add(call)
        if self._watcher is None:
            self._watcher = loop.create_task(self._watch())
        try:
            try:
                self.light.submit(call.run, work)
            except BaseException:  # never started (the service is shutting down)
                call.drop(None)
                raise
            return await call.future
        except asyncio.CancelledError:
            call.drop(None)
            if call.guard is not None:
                call.guard.stop("the client went away")
            raise
        finally:
            self._calls.discard(call)
            self._computed()

    async def _watch(self) -> None:
        """Every ``WATCH_SECONDS`` while calls are on the short path: drop those queued past
        ``queue_seconds``, stop those computing past ``request_seconds`` or (computing for a
        whole period) whose client left."""
        limits = self.limits
        try:
            while self._calls:
                await asyncio.sleep(WATCH_SECONDS)
                now = time.monotonic()
                for call in list(self._calls):
                    guard = call.guard
                    if guard is None:
                        if now - call.queued > limits.queue_seconds:
                            call.drop(busy_error(limits, scan=False))
                        continue
                    if guard.reason is None and guard.expired:
                        guard.stop(f"the request took more than {limits.request_seconds:g} s")
                    # Asked of the computations that have run a whole period: asking costs
                    # the loop a cancel scope (and Starlette's, a repr of the task), and
                    # nearly every light one ends before.
                    elif (
                        guard.reason is None
                        and now - guard.started >= WATCH_SECONDS
                        and await call.disconnected()
                    ):
                        guard.stop("the client went away")
                    if guard.reason is not None:
                        call.fail(stopped_error(limits, guard.reason))
        finally:
            self._watcher = None

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
            scan = self.scans(snapshot, checked)
        slots = self.scan_slots if scan else self.slots
        slot = await slots.acquire(limits.queue_seconds)
        if slot is None:
            raise busy_error(limits, scan)
        guard = RequestGuard(limits.request_seconds)
        loop, finished = asyncio.get_running_loop(), asyncio.Event()

        def work() -> Answer:
            try:
                # The snapshot's chunks (a sidecar's too) and arrays read through the guard.
                with self.read_guarded(snapshot, guard) as through:
                    return compute_answer(through, checked, limits.memory_bytes)
            finally:
                slot.release()
                with contextlib.suppress(RuntimeError):  # that request's loop is gone
                    loop.call_soon_threadsafe(self._finished, finished)

        try:
            running = (self.scan_workers if scan else self.workers).submit(work)
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
            raise stopped_error(limits, guard.reason)
        try:
            return running.result()
        except Exception as exc:  # the service's boundary: see computation_failure
            raise computation_failure(snapshot, exc) from None

    def _finished(self, finished: asyncio.Event) -> None:
        """A computation has ended (on the event loop): tell its request."""
        finished.set()
        self._computed()

    def _computed(self) -> None:
        """A computation has ended (on the event loop): give memory back once no
        computation has run for ``TRIM_IDLE_SECONDS`` (a trim after every answer cost a
        light answer a few per cent of its time: docs/benchmarks.md). One timer at a time,
        moved on when it fires early, not one per answer."""
        loop = asyncio.get_running_loop()
        self._last_finished = loop.time()
        if self._trim is None:
            self._trim = loop.call_later(TRIM_IDLE_SECONDS, self._trim_if_idle)

    def _trim_if_idle(self) -> None:
        loop = asyncio.get_running_loop()
        idle = loop.time() - self._last_finished
        if self.busy or idle < TRIM_IDLE_SECONDS:
            wait = TRIM_IDLE_SECONDS if self.busy else TRIM_IDLE_SECONDS - idle
            self._trim = loop.call_later(wait, self._trim_if_idle)
            return
        self._trim = None
        release_free_memory()


# How far below the other threads a scan's thread runs, in nice values (Linux schedules each
# thread by its own; an unprivileged process may raise it, never lower it back).
SCAN_NICENESS = 10


def _yield_cpu() -> None:
    """Run this thread ``SCAN_NICENESS`` nice values below the one it was started with."""
    with contextlib.suppress(AttributeError, OSError):  # no per-thread priority here
        thread = threading.get_native_id()
        now = os.getpriority(os.PRIO_PROCESS, thread)
        os.setpriority(os.PRIO_PROCESS, thread, min(now + SCAN_NICENESS, 19))


def busy_error(limits: ServiceLimits, scan: bool) -> ServiceError:
    """The 503 of a request that waited ``queue_seconds`` for a computation slot."""
    retry = max(1, round(limits.queue_seconds))
    kind, size = ("scans", limits.scans) if scan else ("computations", limits.computations)
    return ServiceError(
        f"the service is busy ({size} {kind} running and others waiting); try again in {retry} s",
        503,
        {"Retry-After": str(retry)},
    )


def stopped_error(limits: ServiceLimits, reason: str) -> ServiceError:
    """The answer of a computation stopped for ``reason`` (its client left, or its time)."""
    if "client" in reason:
        return ServiceError(f"answer abandoned: {reason}", CLIENT_GONE)
    return ServiceError(
        f"no answer within {limits.request_seconds:g} s; narrow the ranges, use the "
        "accumulations, or try again when the service is less busy",
        504,
    )


def computation_failure(snapshot: DatasetSnapshot, exc: Exception) -> Exception:
    """What a computation's failure is answered as: a parameter's or a stale sidecar's
    error as it is; another ``AccumulusError`` or a library's failure on a store's content
    (or a fault of ours, logged with its traceback) a 503 naming the dataset: the service's
    boundary, not the client's mistake."""
    if isinstance(exc, ParameterError | StaleSidecarError | ServiceError):
        return exc
    if isinstance(exc, AccumulusError):
        return ServiceError(f"dataset {snapshot.dataset!r}: {exc}")
    log.error("computing an answer on dataset %s failed", snapshot.dataset, exc_info=exc)
    return ServiceError(
        f"dataset {snapshot.dataset!r} could not be read to answer this ({type(exc).__name__})"
    )


@dataclass(eq=False)
class HereCall:
    """One call on the short path (``Service.run_here``): queued since ``queued``
    (monotonic), computing once its ``guard`` is set; its result reaches the loop through
    ``future``, once (``run``, ``fail``, ``drop``: the first wins)."""

    future: asyncio.Future
    queued: float
    disconnected: Callable[[], Awaitable[bool]]
    guard: RequestGuard | None = None
    _state: str = "queued"  # then "running" or "dropped"
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def run(self, work: Callable[[HereCall], Any]) -> None:
        """On the worker thread: ``work(self)``, unless the call was dropped meanwhile."""
        with self._lock:
            if self._state != "queued":
                return
            self._state = "running"
        try:
            result = work(self)
        except BaseException as exc:  # handed to the request, raised there
            self._hand_over(_fail, exc)
        else:
            self._hand_over(_succeed, result)

    def drop(self, error: Exception | None) -> None:
        """On the loop: never run it (answered with ``error``, if any), if not yet running."""
        with self._lock:
            if self._state != "queued":
                return
            self._state = "dropped"
        if error is not None:
            _fail(self.future, error)

    def fail(self, error: Exception) -> None:
        """On the loop: answer with ``error`` now (the work, stopped, ends by itself)."""
        _fail(self.future, error)

    def _hand_over(self, settle: Callable[[asyncio.Future, Any], None], value: Any) -> None:
        with contextlib.suppress(RuntimeError):  # that request's loop is gone
            self.future.get_loop().call_soon_threadsafe(settle, self.future, value)


def _succeed(future: asyncio.Future, value: Any) -> None:
    if not future.done():
        future.set_result(value)


def _fail(future: asyncio.Future, error: BaseException) -> None:
    if not future.done():
        future.set_exception(error)


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
