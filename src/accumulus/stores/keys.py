"""Small objects that are not Zarr nodes, kept in a cube's store beside its arrays.

The append journal (``ingest/journal.py``) and the writers' lock (``locking.py``) live under
``.accumulus/`` in the store. Zarr and
xarray ignore that prefix (it holds no ``.zarray``/``zarr.json``), and consolidated metadata
never lists it, so readers never load it. Every helper here is one store request.
"""

from __future__ import annotations

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore, WrapperStore

PREFIX = ".accumulus/"


def read(store: Store, key: str) -> bytes | None:
    value = sync(store.get(key, prototype=default_buffer_prototype()))
    return None if value is None else value.to_bytes()


def write(store: Store, key: str, data: bytes) -> None:
    sync(store.set(key, default_buffer_prototype().buffer.from_bytes(data)))


def delete(store: Store, key: str) -> None:
    sync(store.delete(key))


def create_exclusive(store: Store, key: str, data: bytes) -> bool:
    """Create ``key`` with ``data`` unless it exists; True when this call created it.

    Atomic on a local directory (zarr links a complete temporary file into place) and in
    memory. On S3 zarr's own ``set_if_not_exists`` checks then writes (two requests, racy),
    so the object is PUT with ``If-None-Match: *``, which S3 (since 2024) and moto honour.
    """
    inner = _innermost(store)
    if isinstance(inner, FsspecStore) and "s3" in _protocols(inner):
        from accumulus.hierarchy import split_view

        group = split_view(store)[1]  # a cube's group: its keys are under the group's path
        path = "/".join(p for p in (inner.path.rstrip("/"), group, key) if p)
        try:
            sync(inner.fs._pipe_file(path, data, mode="create"))
        except FileExistsError:
            return False
        return True
    sync(store.set_if_not_exists(key, default_buffer_prototype().buffer.from_bytes(data)))
    return read(store, key) == data


def list_keys(store: Store) -> list[str]:
    async def collect() -> list[str]:
        return [key async for key in store.list()]

    return sorted(sync(collect()))


def top_level(store: Store) -> list[str]:
    """The names directly under the store's root (one listing request)."""

    async def collect() -> list[str]:
        return [name async for name in store.list_dir("")]

    return sorted(sync(collect()))


def _innermost(store: Store) -> Store:
    while isinstance(store, WrapperStore):
        store = store._store
    return store


def _protocols(store: FsspecStore) -> tuple[str, ...]:
    protocol = store.fs.protocol
    return tuple(protocol) if isinstance(protocol, tuple | list) else (protocol,)
