"""What the keys of a store hold: metadata documents, chunks, and accumulus's own objects.

A key whose last part is ``.zarray``, ``.zgroup``, ``.zattrs``, ``.zmetadata`` (Zarr v2) or
``zarr.json`` (v3) holds a metadata document (``is_metadata_key``: the one rule every store
wrapper, snapshot and reference set goes by); any other key of a Zarr node holds a chunk.

accumulus keeps small objects that are not Zarr nodes beside a cube's arrays, under
``.accumulus/``: the append journal (``ingest/journal.py``) and the writers' lock
(``stores/lock.py``). Zarr and xarray ignore that prefix (it holds no ``.zarray``/
``zarr.json``), and consolidated metadata never lists it, so readers never load it. Every
helper here is one store request.

A ZEP 5 accumulation group is found by its name: the group of variable ``V`` is
``V_accumulation_group``, marked by its ``_ACCUMULATION_GROUP`` attribute. Stores that infer
what their arrays lack (``stores.inferred_conventions``) and the walks over a store's groups
(``hierarchy``) need these two names below the accumulation model, which says the rest of
ZEP 5 (``accumulation.model.spec``).
"""

from __future__ import annotations

from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import FsspecStore

from accumulus.stores.base import innermost
from accumulus.stores.group import split_view

METADATA_DOCUMENTS = frozenset({".zarray", ".zgroup", ".zattrs", ".zmetadata", "zarr.json"})
PREFIX = ".accumulus/"
GROUP_SUFFIX = "_accumulation_group"
TREE_KEY = "_ACCUMULATION_GROUP"


def is_metadata_key(key: str) -> bool:
    """True for Zarr v2/v3 metadata documents, False for chunk keys."""
    return key.rsplit("/", 1)[-1] in METADATA_DOCUMENTS


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
    inner = innermost(store)
    if isinstance(inner, FsspecStore) and "s3" in _protocols(inner):
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


def _protocols(store: FsspecStore) -> tuple[str, ...]:
    protocol = store.fs.protocol
    return tuple(protocol) if isinstance(protocol, tuple | list) else (protocol,)
