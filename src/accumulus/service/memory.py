"""The service's memory: glibc's allocator (freed memory reused while it is busy, given back
to the system after a burst of computations) and Python's cycle collector (full collections
that do not walk what has survived one).

A full scan allocates and frees many large NumPy arrays from several threads. glibc's malloc
then keeps freed memory in per-thread arenas, and after each large free it raises its mmap
threshold, so later large arrays come from those arenas too: the process stays at its peak
size long after the work (2.2 GB idle was measured). Fixing the mmap threshold makes large
arrays always mapped (returned on free), fewer arenas limit the spread, and a trim when the
service goes idle returns what is left. Elsewhere than glibc this does nothing.

The thresholds are those of a build (``accumulation/build/stream.py``) and glibc's own
pairing (trim at twice the mmap threshold): every fresh page is a fault, and at a 1 MiB mmap
threshold with glibc's 128 KiB trim threshold each light answer mapped, faulted in and gave
back again about 1 MB of the arrays it made (docs/benchmarks.md, session svc57).

The cycle collector's full collections walk every object the process holds: a worker's
imports, its stores' metadata and its caches' entries, a pause during which every request
waiting on that worker waits too (the tail of the 64-client load: docs/benchmarks.md,
sessions lead57 and lead58). What has survived a collection of the two older generations is
frozen out of the next ones (``gc.freeze``): the objects a worker's requests leave for long
(its caches' entries, none of them garbage) are then walked by no full collection, where
frozen only after a full collection they were walked by the next one. An object frozen may
become garbage in a cycle later, which only a walk of it frees: a new snapshot thaws them all for
the next full collection (what the old snapshot held: ``thaw``), and so does every
``THAW_EVERY``-th full collection (minutes apart under load: one long pause then bounds
what could pile up).
"""

from __future__ import annotations

import gc
from typing import Any

from accumulus.glibc import M_ARENA_MAX, M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, allocator

MMAP_THRESHOLD = 16 * 2**20  # arrays of 16 MiB and more are mapped and unmapped whole
TRIM_THRESHOLD = 2 * MMAP_THRESHOLD  # freed heap memory kept for reuse while busy
ARENAS = 4
# Every this many full collections, the next walks every object (``thaw``'s walk, unasked).
THAW_EVERY = 100
_FULL_COLLECTIONS = [0]  # counted by ``_freeze_survivors``


def tune_allocator() -> bool:
    """Make large allocations return to the system when freed, smaller ones reuse the heap's
    memory while the service is busy; True when it applied."""
    libc = allocator()
    if libc is None:
        return False
    return all(
        libc.mallopt(parameter, value)
        for parameter, value in (
            (M_MMAP_THRESHOLD, MMAP_THRESHOLD),
            (M_TRIM_THRESHOLD, TRIM_THRESHOLD),
            (M_ARENA_MAX, ARENAS),
        )
    )


def release_free_memory() -> None:
    """Return freed heap memory to the system (call when no computation is running)."""
    libc = allocator()
    if libc is not None:
        libc.malloc_trim(0)


def freeze_survivors() -> None:
    """Freeze what the process holds now (its imports and stores, at a worker's start), and
    what survives each collection of the older generations from now on."""
    gc.freeze()
    if _freeze_survivors not in gc.callbacks:
        gc.callbacks.append(_freeze_survivors)


def thaw() -> None:
    """Let the next full collection walk every object again (a snapshot was replaced: what
    it held may be garbage in cycles); what survives it is frozen again."""
    gc.unfreeze()


def _freeze_survivors(phase: str, info: dict[str, Any]) -> None:
    if phase != "stop" or info["generation"] == 0:
        return
    if info["generation"] == 2:
        _FULL_COLLECTIONS[0] += 1
        if not _FULL_COLLECTIONS[0] % THAW_EVERY:  # the next one walks every object again
            gc.unfreeze()
            return
    gc.freeze()
