"""One writer per store: a lock object in the store, with stale-lock recovery.

``accumulus append`` holds it for a whole append (accumulation updates included), and
``accumulus accumulate`` while it writes an accumulation group, so the two never interleave
their writes. The lock is ``.accumulus/lock.json``, created only if absent
(``keys.create_exclusive``: atomic on a local directory and, through ``If-None-Match``, on
S3). It names its holder (host, process, start time, task) and carries a heartbeat the holder
rewrites every few seconds.

A lock is stale when its holder is gone: on the same host, when that process no longer runs
(so a run killed with ``kill -9`` is recovered at once); from another host, when its heartbeat
is older than ``stale_after``. Taking over a stale lock first creates a guard object named
after the stale lock's token, so of several processes recovering at once exactly one deletes
it; the others then find a fresh lock and report the store busy.

Limits, honestly: this is a lease. A holder paused longer than ``stale_after`` (a suspended
laptop, a frozen VM) can lose its lock to another host without noticing until its next
heartbeat or commit check, and hosts compare heartbeats with their own clocks. S3 stores need
conditional writes (``If-None-Match``), which AWS S3 has honoured since 2024.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from types import TracebackType

import psutil
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.stores import keys

LOCK_KEY = keys.PREFIX + "lock.json"
HEARTBEAT_SECONDS = 10.0
STALE_SECONDS = 120.0


# What the holder of the lock is doing, as another writer is told it.
BUSY_BECAUSE = {
    "append": "store is being appended to",
    "accumulate": "store is busy: its accumulations are being built",
}


class StoreBusyError(AccumulusError):
    """Another process is writing to the store (appending, or building accumulations)."""


@dataclass(frozen=True)
class LockRecord:
    token: str
    host: str
    pid: int
    process_started: float  # the holder's process creation time: tells a reused pid apart
    started: float
    heartbeat: float
    command: str
    task: str = "append"  # a key of BUSY_BECAUSE

    @classmethod
    def mine(cls, task: str) -> LockRecord:
        now = time.time()
        return cls(
            token=uuid.uuid4().hex,
            host=socket.gethostname(),
            pid=os.getpid(),
            process_started=psutil.Process().create_time(),
            started=now,
            heartbeat=now,
            command=" ".join(sys.argv)[:200],
            task=task,
        )

    @classmethod
    def parse(cls, data: bytes) -> LockRecord | None:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError):
            return None

    def to_json(self) -> bytes:
        return json.dumps(asdict(self)).encode()

    def describe(self) -> str:
        since = datetime.fromtimestamp(self.started, UTC).isoformat(timespec="seconds")
        return f"pid {self.pid} on {self.host}, since {since}"

    def is_stale(self, stale_after: float) -> bool:
        if self.host == socket.gethostname():
            return not _process_runs(self.pid, self.process_started)
        return time.time() - self.heartbeat > stale_after


def _process_runs(pid: int, started: float) -> bool:
    try:
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except psutil.Error:  # no such process, or a zombie
        return False


class StoreLock:
    """Hold the writers' lock of ``store`` for a ``with`` block, for ``task`` ("append" or
    "accumulate": what another writer is told)."""

    def __init__(
        self,
        store: Store,
        where: str,
        *,
        task: str = "append",
        heartbeat: float = HEARTBEAT_SECONDS,
        stale_after: float = STALE_SECONDS,
    ) -> None:
        self.store = store
        self.where = where
        self.heartbeat = heartbeat
        self.stale_after = stale_after
        self.record = LockRecord.mine(task)
        self.recovered: LockRecord | None = None  # the stale lock taken over, if any
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lost = False
        self._last_beat = time.time()

    def __enter__(self) -> StoreLock:
        self.acquire()
        self._thread = threading.Thread(target=self._beat, name="accumulus-lock", daemon=True)
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self.release()

    def acquire(self) -> None:
        mine = self.record.to_json()
        for _ in range(3):
            if keys.create_exclusive(self.store, LOCK_KEY, mine):
                return
            data = keys.read(self.store, LOCK_KEY)
            if data is None:
                continue  # released meanwhile: try again
            holder = LockRecord.parse(data)
            if holder is not None and not holder.is_stale(self.stale_after):
                raise self._busy(holder)
            self._take_over(data, holder)
        raise StoreBusyError(
            f"{self.where}: store is busy (its lock keeps changing hands); try again later"
        )

    def _take_over(self, stale: bytes, holder: LockRecord | None) -> None:
        token = holder.token if holder else uuid.uuid5(uuid.NAMESPACE_OID, stale.hex()).hex
        guard = f"{LOCK_KEY}.takeover-{token}"
        if not keys.create_exclusive(self.store, guard, self.record.to_json()):
            raise self._busy(holder, "its stale lock is being recovered by another process")
        try:
            if keys.read(self.store, LOCK_KEY) == stale:
                keys.delete(self.store, LOCK_KEY)
                self.recovered = holder
        finally:
            keys.delete(self.store, guard)

    def _busy(self, holder: LockRecord | None, why: str = "") -> StoreBusyError:
        who = holder.describe() if holder else "an unknown process"
        doing = BUSY_BECAUSE.get(holder.task, "store is busy") if holder else "store is busy"
        return StoreBusyError(
            f"{self.where}: {doing} by {who}"
            + (f" ({why})" if why else "")
            + f"; try again when it has finished, or remove {LOCK_KEY} if that process is gone "
            f"(a lock from another host is taken over after {self.stale_after:.0f} s without "
            "a heartbeat)"
        )

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            try:
                data = keys.read(self.store, LOCK_KEY)
                current = LockRecord.parse(data) if data else None
                if current is None or current.token != self.record.token:
                    self._lost = True
                    return
                beat = LockRecord(**{**asdict(self.record), "heartbeat": time.time()})
                keys.write(self.store, LOCK_KEY, beat.to_json())
                self._last_beat = beat.heartbeat
            # The store's errors (OSError; fsspec's, aiohttp's, botocore's on object storage):
            # a failed heartbeat is retried, and check() judges its age.
            except Exception:
                continue

    def check(self) -> None:
        """Raise unless the lock is still ours and recently renewed: called before a commit."""
        late = time.time() - self._last_beat > self.stale_after / 2
        if self._lost or late:
            raise StoreBusyError(
                f"{self.where}: this append lost its lock "
                + ("(another process took it over)" if self._lost else "(heartbeats failed)")
                + "; stopped before committing, nothing of this run is visible"
            )

    def release(self) -> None:
        data = keys.read(self.store, LOCK_KEY)
        current = LockRecord.parse(data) if data else None
        if current is not None and current.token == self.record.token:
            keys.delete(self.store, LOCK_KEY)
