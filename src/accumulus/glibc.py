"""glibc's allocator, for the few places that tune it (``mallopt``) or give its freed
memory back (``malloc_trim``): the service after a burst of scans, a build while it runs.
Elsewhere than glibc there is nothing to tune: ``allocator()`` is None."""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

# mallopt's parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_ARENA_MAX = -8


def _load() -> ctypes.CDLL | None:
    if platform.system() != "Linux" or platform.libc_ver()[0] != "glibc":
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None


_LIBC = _load()


def allocator() -> ctypes.CDLL | None:
    """The C library when it is glibc (``mallopt``, ``malloc_trim``); else None."""
    return _LIBC
