"""What keeps one request from taking the service down: a bounded number of computations at
once, a time limit per request, work stopped when its client goes away, and reads that cannot
hang or leak a server path.

Python cannot kill a thread, so stopping is cooperative: each computation reads through its
own ``stores.guarded.GuardedStore``, which refuses every read once the request's
``RequestGuard`` has been stopped (deadline passed, client gone). A computation then ends at
its next chunk read, and only then gives its slot back, so abandoned work never runs beside
the next request's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.errors import AccumulusError


@dataclass(frozen=True)
class ServiceLimits:
    """How much one service takes on.

    ``computations``: answers computed at once (the rest wait up to ``queue_seconds``, then
    get 503 with ``Retry-After``); ``scans``: answers no accumulation can give (every value
    read from the raw data) computed at once, besides those and in a queue of their own, so
    that the light questions never wait behind a heavy one; ``request_seconds``: the
    longest a computation may run (then 504); ``read_seconds``: the longest one chunk read
    may take; ``memory_bytes``: what one computation's raw reads may hold (see
    ``accumulation.query.budget``).
    """

    computations: int = 2
    scans: int = 1
    queue_seconds: float = 10.0
    request_seconds: float = 60.0
    read_seconds: float = 20.0
    memory_bytes: int = DEFAULT_MEMORY_BYTES

    @property
    def stuck_seconds(self) -> float:
        """A computation holding its slot longer than this is stuck: one stopped at its time
        limit ends at its next chunk read, and a read ends within ``read_seconds``."""
        return self.request_seconds + self.read_seconds

    def __post_init__(self) -> None:
        if min(self.computations, self.scans, self.memory_bytes) < 1:
            raise AccumulusError("a service needs at least one computation slot and some memory")
        if min(self.queue_seconds, self.request_seconds, self.read_seconds) <= 0:
            raise AccumulusError("the service's time limits must be positive")


class RequestStopped(AccumulusError):
    """A computation was stopped from outside: its time ran out or its client left."""


class RequestGuard:
    """The stop switch of one request's computation."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.started = time.monotonic()
        self.deadline = self.started + seconds
        self.reason: str | None = None

    @property
    def expired(self) -> bool:
        return time.monotonic() > self.deadline

    def stop(self, reason: str) -> None:
        self.reason = self.reason or reason

    def check(self) -> None:
        if self.reason is None and self.expired:
            self.stop(f"the request took more than {self.seconds:g} s")
        if self.reason is not None:
            raise RequestStopped(f"computation stopped: {self.reason}")


class ThreadGate:
    """The gate of one computing thread's reads: the ``RequestGuard`` of the request the
    thread answers now (``guard``, set at each request), and between requests none, every
    read refused. A snapshot read through it is made once per thread and snapshot
    (``Service.read_guarded``), not once per request: laying the guarded stores anew for
    each request cost it time, and gave the query new store objects whose facts it worked
    out again (docs/benchmarks.md, session svc54)."""

    def __init__(self) -> None:
        self.guard: RequestGuard | None = None

    def check(self) -> None:
        guard = self.guard
        if guard is None:
            raise RequestStopped("computation stopped: its request has ended")
        guard.check()


class ComputeSlots:
    """At most ``size`` computations at once; waiters are served first come, first served.

    Thread-safe and not tied to one event loop: a slot is released from the worker thread
    that finished, and handed to the next waiter on that waiter's own loop. Each slot held
    knows since when, so that a computation that never gives its slot back shows
    (``held_longest``).
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._held: set[Slot] = set()
        self._waiters: deque[_Waiter] = deque()
        self._lock = threading.Lock()

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self._held)

    def held_longest(self) -> float:
        """Seconds the slot held longest has been held (0 when none is)."""
        with self._lock:
            since = min((slot.since for slot in self._held), default=None)
        return 0.0 if since is None else time.monotonic() - since

    async def acquire(self, timeout: float) -> Slot | None:
        """Take a slot, waiting at most ``timeout`` seconds; None when none came free."""
        loop = asyncio.get_running_loop()
        with self._lock:
            if len(self._held) < self.size and not self._waiters:
                return self._take()
            waiter = _Waiter(loop, loop.create_future())
            self._waiters.append(waiter)
        try:
            return await asyncio.wait_for(asyncio.shield(waiter.future), timeout)
        except TimeoutError:
            self._give_up(waiter)
            return None
        except asyncio.CancelledError:  # the client went away while waiting
            self._give_up(waiter)
            raise

    def acquire_here(self, timeout: float) -> Slot | None:
        """``acquire`` for a worker thread (blocks it): the short path of a GET computes
        on the thread that checked the request, without a hand-over to the event loop."""
        with self._lock:
            if len(self._held) < self.size and not self._waiters:
                return self._take()
            waiter = _Waiter(None, concurrent.futures.Future())
            self._waiters.append(waiter)
        try:
            return waiter.future.result(max(timeout, 0.0))
        except concurrent.futures.TimeoutError:
            self._give_up(waiter)
            return None

    def _take(self) -> Slot:
        slot = Slot(self, time.monotonic())
        self._held.add(slot)
        return slot

    def _give_up(self, waiter: _Waiter) -> None:
        with self._lock:
            slot = waiter.granted
            if slot is None:
                self._waiters.remove(waiter)
        if slot is not None:  # handed over just as the waiter gave up: pass it on
            slot.release()

    def _release(self, slot: Slot) -> None:
        with self._lock:
            if slot not in self._held:
                return  # released already
            self._held.remove(slot)
            while self._waiters:
                waiter = self._waiters.popleft()
                handed = self._take()
                if waiter.loop is None:  # a thread waits (``acquire_here``)
                    waiter.granted = handed
                    waiter.future.set_result(handed)
                    return
                try:
                    waiter.loop.call_soon_threadsafe(_grant, waiter.future, handed)
                except RuntimeError:  # that waiter's loop is closed: skip it
                    self._held.remove(handed)
                    continue
                waiter.granted = handed
                return


@dataclass(eq=False)
class Slot:
    """One computation's place among the ``ComputeSlots``, held ``since`` (monotonic)."""

    slots: ComputeSlots
    since: float

    def release(self) -> None:
        """Give the slot back (to the first waiter); releasing it again does nothing."""
        self.slots._release(self)


@dataclass
class _Waiter:
    loop: asyncio.AbstractEventLoop | None  # None: a thread waits on a concurrent future
    future: Any  # asyncio.Future on ``loop``, else concurrent.futures.Future
    granted: Slot | None = None


def _grant(future: asyncio.Future, slot: Slot) -> None:
    if not future.done():
        future.set_result(slot)
