"""The one base of every accumulus store wrapper, and what a caller may ask of a chain of them.

zarr's ``WrapperStore`` hands every call to the store it wraps, including the reads a
wrapper means to see: a byte-range batch (``get_partial_values``, ``get_ranges``, which a
sharded array's inner chunks are read by) and a batch of keys (``_get_many``) go straight
past an override of ``get``, and a size (``getsize``) reads the whole object through ``get``.
``DelegatingStore`` turns both round: every read of a key passes through the wrapper's own
``get`` (as zarr's ``Store`` reads them), and a size is asked of the store below unless the
wrapper serves other bytes for that key (``serves_own_bytes``: a rewritten or pinned metadata
document). A view zarr derives from a wrapper (``with_read_only``) is a copy of it over the
new store, sharing its settings and what it holds (counts, caches).

What a wrapper leaves to the store below, for the fast paths that skip wrappers (class
flags, all off unless a wrapper says so):

- ``sync_reads_pass_through``: its ``get_sync`` does what its ``get`` does, so a local
  store below may be read in the calling thread (``reads_synchronously``);
- ``sync_writes_pass_through``: its ``set_sync`` does what its ``set`` does
  (``writes_synchronously``);
- ``rewrites_metadata_only``: chunks keep their keys and bytes below it, so stored bytes
  and root documents may be read below it (``below_wrappers``);
- ``passes_other_reads``: a read of a key it does not serve itself (``serves_own_bytes``)
  is the store below's, with nothing done around it (no count, delay or guard), so a chunk
  may be read below it (``reader_of``).

zarr's own synchronous paths (``_supports_sync_io``) see a wrapper as able to do what the
store below can only when both its synchronous reads and writes pass through: a wrapper
that counts, delays, guards or lays out what it reads or writes is always called.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator, Iterable, Sequence
from typing import Any, ClassVar, Self

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import LocalStore, MemoryStore, WrapperStore


class ReadsSync(ABC):
    """zarr's ``get_sync`` (a store's synchronous read), its signature written once: a store
    that reads synchronously in its own way implements ``read_sync``, which is always given
    a buffer prototype. It comes before the zarr store class it overrides, which its
    ``read_sync`` names to read as zarr does."""

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        return self.read_sync(key, prototype or default_buffer_prototype(), byte_range)

    @abstractmethod
    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None: ...


class DelegatingStore(ReadsSync, WrapperStore[Store]):
    """A store wrapper whose every read of a key goes through its own ``get`` (see the
    module's docstring)."""

    sync_reads_pass_through: ClassVar[bool] = False
    sync_writes_pass_through: ClassVar[bool] = False
    rewrites_metadata_only: ClassVar[bool] = False
    passes_other_reads: ClassVar[bool] = False

    @classmethod
    async def open(cls, store_cls: type[Store], *args: Any, **kwargs: Any) -> Self:
        """zarr's ``WrapperStore.open``: a ``store_cls(*args, **kwargs)`` opened and wrapped;
        the keyword arguments this wrapper's ``__init__`` names are its own settings."""
        own = inspect.signature(cls.__init__).parameters
        settings = {k: kwargs.pop(k) for k in list(kwargs) if k in own and k != "store"}
        store = store_cls(*args, **kwargs)
        await store._open()
        return cls(store, **settings)

    def _with_store(self, store: Store) -> Self:
        view = copy.copy(self)
        view._store = store
        return view

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._store!r})"

    @property
    def _supports_sync_io(self) -> bool:
        passes = self.sync_reads_pass_through and self.sync_writes_pass_through
        return passes and super()._supports_sync_io

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        """``get_sync``, which a wrapper serving its own bytes overrides (this one reads the
        store below)."""
        return WrapperStore.get_sync(self, key, prototype=prototype, byte_range=byte_range)

    def reads_in_thread(self) -> bool:
        """Whether this wrapper's ``read_sync`` reads in the calling thread as well as its
        ``get`` through zarr's event loop, of its own (``reads_synchronously``; a read-only
        icechunk session of a local repository)."""
        return False

    def serves_own_bytes(self, key: str) -> bool:
        """Whether ``get(key)`` may return other bytes than the store below holds at
        ``key`` (its size is then that of what ``get`` returns)."""
        return False

    async def getsize(self, key: str) -> int:
        if self.serves_own_bytes(key):
            return await Store.getsize(self, key)  # the size of what this wrapper serves
        return await self._store.getsize(key)

    async def get_partial_values(
        self,
        prototype: BufferPrototype,
        key_ranges: Iterable[tuple[str, ByteRequest | None]],
    ) -> list[Buffer | None]:
        reads = (self.get(key, prototype, byte_range) for key, byte_range in key_ranges)
        return list(await asyncio.gather(*reads))

    async def get_ranges(
        self,
        key: str,
        byte_ranges: Sequence[ByteRequest | None],
        *,
        prototype: BufferPrototype,
        max_concurrency: int | None = None,
        max_gap_bytes: int | None = None,
        max_coalesced_bytes: int | None = None,
    ) -> AsyncIterator[Sequence[tuple[int, Buffer | None]]]:
        options = {
            "max_concurrency": max_concurrency,
            "max_gap_bytes": max_gap_bytes,
            "max_coalesced_bytes": max_coalesced_bytes,
        }
        given = {name: value for name, value in options.items() if value is not None}
        async for group in Store.get_ranges(self, key, byte_ranges, prototype=prototype, **given):
            yield group

    async def _get_many(
        self, requests: Iterable[tuple[str, BufferPrototype, ByteRequest | None]]
    ) -> AsyncGenerator[tuple[str, Buffer | None], None]:
        for key, prototype, byte_range in requests:
            yield key, await self.get(key, prototype, byte_range)


def innermost(store: Store) -> Store:
    """The store below every wrapper of ``store``."""
    while isinstance(store, WrapperStore):
        store = store._store
    return store


def below_wrappers(store: Store, marked: str) -> Store:
    """``store`` under the wrappers whose class sets the flag ``marked`` (a ``ClassVar`` of
    ``DelegatingStore`` such as ``rewrites_metadata_only``), down to the first that does
    not."""
    while getattr(type(store), marked, False):
        store = store._store  # type: ignore[attr-defined]
    return store


def reader_of(store: Store, key: str) -> Store:
    """The first store under ``store`` that does anything with a read of ``key``: below
    the wrappers that pass it on as it is (``passes_other_reads``). A query reads a chunk
    there, past a stack of views that only present metadata."""
    while getattr(type(store), "passes_other_reads", False) and not store.serves_own_bytes(key):  # type: ignore[attr-defined]
        store = store._store  # type: ignore[attr-defined]
    return store


def reads_synchronously(store: Store) -> bool:
    """Whether ``store`` is read as well by ``get_sync`` in the calling thread as through
    zarr's event loop: a local directory or memory, seen only through wrappers whose
    synchronous reads are their asynchronous ones (``sync_reads_pass_through``) — not
    through one that counts or delays its requests (the service's guard passes them on,
    asking its guard first) — or a wrapper below them that reads in the calling thread of
    its own (``DelegatingStore.reads_in_thread``)."""
    below = below_wrappers(store, "sync_reads_pass_through")
    if isinstance(below, DelegatingStore):
        return below.reads_in_thread()
    return isinstance(below, LocalStore | MemoryStore)


def writes_synchronously(store: Store) -> bool:
    """Whether ``store`` is written as well by ``set_sync`` in the calling thread as through
    zarr's event loop: a local directory or memory, seen only through wrappers whose
    ``set_sync`` does what their ``set`` does (``sync_writes_pass_through``) — not through
    one that counts, delays or lays out what is written."""
    return isinstance(below_wrappers(store, "sync_writes_pass_through"), LocalStore | MemoryStore)
