"""One request's view of a served store: reads that can be stopped, and that cannot hang or
leak a server path.

Python cannot kill a thread, so the service stops a computation cooperatively: each reads
through its own ``GuardedStore``, which asks the request's gate (``service.guard``'s
``RequestGuard``) before every read and refuses it once the request was stopped (deadline
passed, client gone). A read takes at most ``read_seconds``, reads only regular files of a
local store (a FIFO would block a reader forever) and reports OS errors by key
(``stores.safe_reads``).

A local store's chunks may be read in the calling thread (``read_sync``, which the chunk
reader uses where ``stores.base.reads_synchronously`` allows): the guard is asked and a key
that is not a regular file refused just as by ``get``, without the hand-overs between
threads that an answer of a few chunks spent most of its time in (docs/benchmarks.md, the
service under load). A read of a regular local file has no time limit of its own: it ends.
"""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar, Protocol

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from accumulus.stores.base import DelegatingStore, innermost
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.safe_reads import (
    StoreReadError,
    check_regular_file,
    local_root,
    read_with_limits,
)


class ReadGate(Protocol):
    """What a guarded read asks first: ``check`` raises once the reads must stop."""

    def check(self) -> None: ...


class GuardedStore(DelegatingStore):
    """``store`` read through ``guard``: every read (and size) first checks it, and a read
    takes at most ``read_seconds`` (see the module's docstring)."""

    sync_reads_pass_through: ClassVar[bool] = True  # read_sync guards as get does

    def __init__(self, store: Store, guard: ReadGate, read_seconds: float) -> None:
        super().__init__(store)
        self.guard = guard
        self.read_seconds = read_seconds
        # Our local store reads regular files only (by fstat of what it opened) and answers
        # None for a directory: no stat first, one after a None.
        self._reads_regular_files_only = isinstance(innermost(store), LeanLocalStore)

    @property
    def _root(self) -> Path | None:
        return local_root(self._store)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        self.guard.check()
        return await read_with_limits(
            self._store, self._root, key, prototype, byte_range, self.read_seconds
        )

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        self.guard.check()
        root = self._root
        if root is None:
            return super().read_sync(key, prototype, byte_range)
        if not self._reads_regular_files_only:
            check_regular_file(root, key)
        try:
            found = super().read_sync(key, prototype, byte_range)
        except OSError as exc:  # named by its key, never by a server path
            reason = exc.strerror or type(exc).__name__
            raise StoreReadError(f"cannot read {key}: {reason}") from None
        if found is None:  # missing, or a directory: refused as get refuses it
            check_regular_file(root, key)
        return found

    async def getsize(self, key: str) -> int:
        self.guard.check()
        return await super().getsize(key)
