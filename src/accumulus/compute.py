"""Running Dask graphs: choosing the scheduler and reporting progress.

``scheduler`` is what a user types after ``--scheduler``: "threads" (the default),
"processes", "synchronous", or the address of a ``distributed`` scheduler
("tcp://host:port"). Progress goes to an optional ``report(done, total)`` callback so the
library never draws anything itself.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import Any, TypeGuard

import dask
from dask.callbacks import Callback

from accumulus.errors import AccumulusError

Progress = Callable[[int, int], None]
LOCAL_SCHEDULERS = ("threads", "processes", "synchronous")


class _TaskProgress(Callback):
    """Calls ``report(done, total)`` as a local Dask scheduler finishes tasks."""

    def __init__(self, report: Progress) -> None:
        super().__init__()
        self._report = report
        self._total = 0

    def _start_state(self, dsk: Any, state: dict) -> None:
        self._total = sum(len(state[k]) for k in ("ready", "waiting", "running", "finished"))
        self._report(0, self._total)

    def _posttask(self, key: Any, result: Any, dsk: Any, state: dict, worker_id: Any) -> None:
        self._report(len(state["finished"]), self._total)


def is_distributed(scheduler: str | None) -> TypeGuard[str]:
    return bool(scheduler) and "://" in str(scheduler)


@contextmanager
def _client(address: str) -> Iterator[Any]:
    from distributed import Client

    try:
        client = Client(address, timeout="3s")
    except OSError as exc:
        raise AccumulusError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
    try:
        yield client
    finally:
        client.close()


def check_scheduler(scheduler: str | None) -> None:
    """Refuse an unknown scheduler before any work (or any write) starts."""
    if scheduler and not is_distributed(scheduler) and scheduler not in LOCAL_SCHEDULERS:
        raise AccumulusError(
            f"unknown scheduler {scheduler!r}: use threads, processes, synchronous "
            "or the address of a distributed scheduler (tcp://host:port)"
        )
    if is_distributed(scheduler):
        with _client(scheduler):
            pass


def run(
    collections: Sequence[Any], scheduler: str | None = None, progress: Progress | None = None
) -> list[Any]:
    """Compute Dask collections on the chosen scheduler, reporting progress."""
    scheduler = scheduler or "threads"
    if is_distributed(scheduler):
        with _client(scheduler) as client:
            futures = client.compute(list(collections))
            from distributed import as_completed

            if progress:
                progress(0, len(futures))
            for done, _ in enumerate(as_completed(futures), start=1):
                if progress:
                    progress(done, len(futures))
            return client.gather(futures)
    check_scheduler(scheduler)
    reporting = _TaskProgress(progress) if progress else nullcontext()
    with reporting:
        return list(dask.compute(*collections, scheduler=_local_get(scheduler)))


def _local_get(scheduler: str) -> Callable:
    """Dask's function running a graph on a local scheduler. Given by name, Dask would
    first import ``distributed`` (half a second) to look for a client this never uses."""
    if scheduler == "threads":
        from dask.threaded import get as threaded

        return threaded
    if scheduler == "processes":
        from dask.multiprocessing import get as processes

        return processes
    from dask.local import get_sync

    return get_sync
