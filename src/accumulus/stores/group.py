"""A group of a store seen as a store of its own.

NASA ships granules with their variables in groups (IMERG: ``/Grid``, ``/Grid/Intermediate``)
and a cube keeps them there (``Grid/precipitation``). Every command works on one group at a
time through ``GroupStore``, a view of the store in which that group is the root: the
journal, the lock, consolidated metadata and accumulation groups of a group live inside it,
and everything that reads or writes a cube works unchanged on the view. Which group a
command means is ``hierarchy``'s question.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import ClassVar

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype

from accumulus.errors import AccumulusError
from accumulus.stores.base import DelegatingStore


def normalize_group(group: str | None) -> str:
    """``"/Grid/"``, ``"Grid"`` -> ``"Grid"``; None, ``""`` and ``"/"`` -> ``""`` (the root)."""
    if group is None:
        return ""
    parts = [p for p in group.strip().split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise AccumulusError(f"--group {group!r}: a group path has no '.' or '..' parts")
    return "/".join(parts)


def group_view(store: Store, group: str | None) -> Store:
    """``store`` seen from ``group`` (the store itself for the root)."""
    group = normalize_group(group)
    return GroupStore(store, group) if group else store


def group_label(label: str, group: str | None) -> str:
    """How messages name a group of a store."""
    group = normalize_group(group)
    return f"{label} (group {group})" if group else label


def split_view(store: Store) -> tuple[Store, str]:
    """The store a view (``group_view``, possibly of a view) was made of, and its group."""
    parts: list[str] = []
    while isinstance(store, GroupStore):
        parts.insert(0, store.prefix)
        store = store._store
    return store, "/".join(parts)


def ancestors_of(group: str) -> list[str]:
    """The ancestor groups of ``group``, nearest first: "a/b/c" -> ["a/b", "a", ""]."""
    parts = normalize_group(group).split("/") if group else []
    return ["/".join(parts[:n]) for n in range(len(parts) - 1, -1, -1)]


class GroupStore(DelegatingStore):
    """``store`` with ``prefix/`` added to every key: the group at ``prefix`` as a root."""

    sync_reads_pass_through: ClassVar[bool] = True
    sync_writes_pass_through: ClassVar[bool] = True

    def __init__(self, store: Store, prefix: str) -> None:
        super().__init__(store)
        self.prefix = normalize_group(prefix)

    def __eq__(self, value: object) -> bool:
        return (
            isinstance(value, GroupStore) and value.prefix == self.prefix and super().__eq__(value)
        )

    def __str__(self) -> str:
        return f"{self._store}/{self.prefix}"

    def _key(self, key: str) -> str:
        return f"{self.prefix}/{key}" if key else self.prefix

    def _strip(self, key: str) -> str:
        return key[len(self.prefix) + 1 :]

    async def is_empty(self, prefix: str) -> bool:
        return await self._store.is_empty(self._key(prefix))

    async def getsize(self, key: str) -> int:
        return await self._store.getsize(self._key(key))

    async def clear(self) -> None:
        await self._store.delete_dir(self.prefix)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        return await self._store.get(self._key(key), prototype, byte_range)

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        return super().read_sync(self._key(key), prototype, byte_range)

    def set_sync(self, key: str, value: Buffer) -> None:
        super().set_sync(self._key(key), value)

    def delete_sync(self, key: str) -> None:
        super().delete_sync(self._key(key))

    async def exists(self, key: str) -> bool:
        return await self._store.exists(self._key(key))

    async def set(self, key: str, value: Buffer) -> None:
        await self._store.set(self._key(key), value)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        await self._store.set_if_not_exists(self._key(key), value)

    async def _set_many(self, values: Iterable[tuple[str, Buffer]]) -> None:
        await self._store._set_many([(self._key(k), v) for k, v in values])

    async def delete(self, key: str) -> None:
        await self._store.delete(self._key(key))

    async def delete_dir(self, prefix: str) -> None:
        await self._store.delete_dir(self._key(prefix))

    async def list(self) -> AsyncIterator[str]:
        async for key in self._store.list_prefix(self.prefix + "/"):
            yield self._strip(key)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        async for key in self._store.list_prefix(self._key(prefix)):
            yield self._strip(key)

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        return self._store.list_dir(self._key(prefix))
