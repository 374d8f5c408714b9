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

``guarded`` puts the guard where it costs least: a local directory seen through wrappers
(``DelegatingStore``: the snapshot's views of its metadata) is guarded at the bottom
(``GuardedLocalStore``), so that a query reads its chunks as it reads them unguarded, below
the views and by byte ranges; any other store is guarded as a whole (``GuardedStore``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar, Protocol

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from accumulus.stores.base import DelegatingStore, innermost
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.safe_reads import (
    FileVersion,
    StoreReadError,
    check_regular_file,
    local_root,
    read_with_limits,
)


def guarded(store: Store, guard: ReadGate, read_seconds: float) -> Store:
    """``store`` read through ``guard``, each read taking at most ``read_seconds`` (see the
    module's docstring): wrappers over our local directory store are laid anew over a
    ``GuardedLocalStore`` of it (they share what they hold with the originals); any other
    store is wrapped whole by a ``GuardedStore``."""
    wrappers: list[DelegatingStore] = []
    below = store
    while isinstance(below, DelegatingStore):
        wrappers.append(below)
        below = below._store
    if type(below) is not LeanLocalStore:
        return GuardedStore(store, guard, read_seconds)
    found: Store = GuardedLocalStore(below, guard, read_seconds)
    for wrapper in reversed(wrappers):
        found = wrapper._with_store(found)
    return found


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
        self._root = local_root(store)  # (looked up once, not at every read)

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
            raise _unreadable(key, exc) from None
        if found is None:  # missing, or a directory: refused as get refuses it
            check_regular_file(root, key)
        return found

    async def getsize(self, key: str) -> int:
        self.guard.check()
        return await super().getsize(key)


class GuardedLocalStore(LeanLocalStore):
    """Our local directory store (``store``) as one request reads it: every read (and
    size) first asks ``guard`` and is then ``store``'s own; an OS error is named by its key,
    never by a server path; an asynchronous read takes at most ``read_seconds`` and reads
    only regular files. Being a ``LeanLocalStore`` of the same directory, it is read as the
    store itself is: chunks in the calling thread, by the byte ranges a chunk allows."""

    def __init__(self, store: LeanLocalStore, guard: ReadGate, read_seconds: float) -> None:
        super().__init__(store.root, read_only=store.read_only)
        self._is_open = store._is_open
        self.store = store
        self.guard = guard
        self.read_seconds = read_seconds

    def with_read_only(self, read_only: bool = False) -> GuardedLocalStore:
        view = self.store.with_read_only(read_only)
        return GuardedLocalStore(view, self.guard, self.read_seconds)

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        self.guard.check()
        if byte_range is not None:  # zarr's read, which would open a FIFO and wait
            check_regular_file(self.root, key)
        try:
            found = self.store.read_sync(key, prototype, byte_range)
        except OSError as exc:  # named by its key, never by a server path
            raise _unreadable(key, exc) from None
        if found is None:  # missing, or a directory: refused as get refuses it
            check_regular_file(self.root, key)
        return found

    def read_parts_sync[T](
        self, key: str, parts: Callable[[Callable[[int, int], bytes], FileVersion], T]
    ) -> T | None:
        self.guard.check()
        try:
            return self.store.read_parts_sync(key, parts)
        except OSError as exc:
            raise _unreadable(key, exc) from None

    def version_sync(self, key: str) -> FileVersion | None:
        self.guard.check()
        try:
            return self.store.version_sync(key)
        except OSError as exc:
            raise _unreadable(key, exc) from None

    async def get(
        self,
        key: str,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        self.guard.check()
        prototype = prototype or default_buffer_prototype()
        return await read_with_limits(
            self.store, self.root, key, prototype, byte_range, self.read_seconds
        )

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        return [await self.get(key, prototype, byte_range) for key, byte_range in key_ranges]

    async def getsize(self, key: str) -> int:
        self.guard.check()
        return await self.store.getsize(key)


def _unreadable(key: str, exc: OSError) -> StoreReadError:
    return StoreReadError(f"cannot read {key}: {exc.strerror or type(exc).__name__}")
