"""Giving memory back to the system after a burst of computations.

A full scan allocates and frees many large NumPy arrays from several threads. glibc's malloc
then keeps freed memory in per-thread arenas, and after each large free it raises its mmap
threshold, so later large arrays come from those arenas too: the process stays at its peak
size long after the work (2.2 GB idle was measured). Fixing the mmap threshold makes large
arrays always mapped (returned on free), fewer arenas limit the spread, and a trim when the
service goes idle returns what is left. Elsewhere than glibc this does nothing.
"""

from __future__ import annotations

from accumulus.glibc import M_ARENA_MAX, M_MMAP_THRESHOLD, allocator

MMAP_THRESHOLD = 1 * 2**20  # arrays of 1 MiB and more are mapped and unmapped whole
ARENAS = 4


def tune_allocator() -> bool:
    """Make large allocations return to the system when freed; True when it applied."""
    libc = allocator()
    if libc is None:
        return False
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(
        libc.mallopt(M_ARENA_MAX, ARENAS)
    )


def release_free_memory() -> None:
    """Return freed heap memory to the system (call when no computation is running)."""
    libc = allocator()
    if libc is not None:
        libc.malloc_trim(0)
