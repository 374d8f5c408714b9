"""What accumulus changes in zarr and in ``warnings`` while it works, and only then.

accumulus reads and writes ZEP 3 variable chunk grids, which zarr-python handles only with
its experimental ``array.rectilinear_chunks`` setting on, and it keeps objects of its own
(``.accumulus/``) beside a cube's arrays, which zarr warns about when it lists a store; it
also relies on consolidated metadata in Zarr v3 knowingly, as xarray does. Importing
accumulus changes none of that: every public entry point (the functions of ``api``, the
``Datacube`` handle, the command line, the service) runs inside ``accumulus_scope()``.

The setting and the filters are process-wide (zarr's configuration and Python's warning
filters are), so the scope counts the calls inside it: the first to enter turns them on, the
last to leave restores what was there. Threads of a service answering at once share one
scope, and no call can switch the setting off under another.

A process that is accumulus' own (a service's: ``service.server.serve``) enters the scope
once for its whole life (``hold_scope``): turning it on and off again for each of a
request's calls was worth saving (docs/benchmarks.md); inside it, a call only counts itself.
"""

from __future__ import annotations

import functools
import re
import threading
import warnings
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import zarr

# (message pattern, category) of the warnings accumulus silences for its own calls.
QUIET = (
    # Zarr lists ``.accumulus/`` (our journal and lock, not a Zarr node) as a stranger.
    (r"Object at \.accumulus is not recognized", UserWarning),
    # Consolidated metadata is not in the Zarr v3 specification yet; we rely on it.
    (r".*[Cc]onsolidated metadata.*", UserWarning),
    # A Parquet reference set's index (``.zmetadata``), listed by zarr as a stranger.
    (r"Object at \.zmetadata is not recognized", UserWarning),
    # pandas 3 deprecates the engine fsspec reads Parquet reference sets with.
    (r"The 'fastparquet' engine is deprecated", Warning),
    # netCDF char data (a CF grid_mapping variable, |S1) has no data type in the Zarr v3
    # spec yet: zarr-python keeps it as its own null-terminated bytes, and says so at length
    # for every such array it writes or reads (docs/decoding.md says it once).
    (r"The data type \(NullTerminatedBytes", FutureWarning),
)

_lock = threading.Lock()
_depth = 0
_restore: Callable[[], None] | None = None


def _enter() -> None:
    global _depth, _restore
    with _lock:
        _depth += 1
        if _depth == 1:
            _restore = _turn_on()


def _leave() -> None:
    global _depth, _restore
    with _lock:
        _depth -= 1
        if _depth == 0 and _restore is not None:
            _restore()
            _restore = None


class _Scope:
    """The context manager of ``accumulus_scope`` (a class, not a generator: entered in
    every call of the public functions)."""

    def __enter__(self) -> None:
        _enter()

    def __exit__(self, *exc: object) -> None:
        _leave()


_SCOPE = _Scope()


def accumulus_scope() -> AbstractContextManager[None]:
    """Variable chunk grids on, accumulus' own warnings off, for the calls inside."""
    return _SCOPE


def scoped[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    """Run ``function`` inside ``accumulus_scope()``."""

    @functools.wraps(function)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        _enter()
        try:
            return function(*args, **kwargs)
        finally:
            _leave()

    return wrapper


def hold_scope() -> None:
    """Enter the scope for the rest of the process' life (a process of accumulus' own:
    what it changes then holds for everything the process runs)."""
    _enter()


# The filters ``warnings.filterwarnings("ignore", message=..., category=...)`` would add for
# ``QUIET``, made once: every call from outside the scope (each query of an open datacube)
# adds and removes them, and adding them one by one cost more than the rest of the scope
# (docs/benchmarks.md, "Per-question cost").
_FILTERS = [("ignore", re.compile(message, re.I), category, None, 0) for message, category in QUIET]


def _turn_on() -> Callable[[], None]:
    # The setting's own record undoes it (one lookup), not a second ``set`` of the value
    # read before it (parsing the key again).
    grids = zarr.config.set({"array.rectilinear_chunks": True})
    added: list[Any] = list(reversed(_FILTERS))  # the first of QUIET ends last, as before
    for entry in added:  # as ``filterwarnings`` adds one: any same entry moves to the front
        if entry in warnings.filters:
            warnings.filters.remove(entry)  # type: ignore[attr-defined]  # a list at run time
    warnings.filters[0:0] = added  # type: ignore[index]
    warnings._filters_mutated()  # type: ignore[attr-defined]

    def restore() -> None:
        grids.__exit__(None, None, None)
        for entry in added:
            # Only our own entries: filters others added meanwhile stay.
            if entry in warnings.filters:
                warnings.filters.remove(entry)  # type: ignore[attr-defined]  # a list at run time
        # Python caches which warnings it has already filtered; tell it the filters changed
        # (what ``warnings.filterwarnings`` does itself when it adds one).
        warnings._filters_mutated()  # type: ignore[attr-defined]

    return restore
