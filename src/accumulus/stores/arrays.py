"""Zarr arrays and groups as stored: dimension names, stored bytes, metadata written by
zarr's own serialization, and consolidated metadata refreshed after every write."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.common import ZarrFormat
from zarr.core.metadata import ArrayMetadata
from zarr.core.sync import sync
from zarr.storage import FsspecStore, LocalStore, StorePath

from accumulus.errors import AccumulusError
from accumulus.scope import accumulus_scope
from accumulus.stores.base import below_wrappers, innermost
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.nczarr_metadata import write_nczarr_metadata


def consolidate(store: Store) -> None:
    """Refresh consolidated metadata and, from it, netcdf-c's NCZarr metadata (the last step
    of every write), so netcdf-c opens every store we write (see ``stores.nczarr_metadata``)."""
    with accumulus_scope():
        zarr.consolidate_metadata(store)
    write_nczarr_metadata(store)


def checked_format(value: int) -> ZarrFormat:
    """``value`` as zarr's type for a format: 2 or 3."""
    if value == 2:
        return 2
    if value == 3:
        return 3
    raise AccumulusError(f"Zarr format {value}: there are formats 2 and 3")


def array_at(group: zarr.Group, path: str) -> zarr.Array:
    """The array at ``path`` below ``group`` (zarr's ``group[path]`` may be either kind)."""
    node = group[path]
    if not isinstance(node, zarr.Array):
        raise TypeError(f"{node.path}: a group where an array is expected")
    return node


def group_at(group: zarr.Group, path: str) -> zarr.Group:
    """The group at ``path`` below ``group`` (itself for "")."""
    node = group[path] if path else group
    if not isinstance(node, zarr.Group):
        raise TypeError(f"{node.path}: an array where a group is expected")
    return node


def dimension_names(array: zarr.Array) -> tuple[str, ...]:
    """An array's dimension names: ``dimension_names`` in Zarr v3, the xarray convention
    ``_ARRAY_DIMENSIONS`` in v2; empty unless every dimension has a name."""
    names: Any  # v2's is an attribute: any JSON
    if array.metadata.zarr_format == 3:
        names = array.metadata.dimension_names
    else:
        names = array.attrs.get("_ARRAY_DIMENSIONS")
    if names is None or len(names) != array.ndim or any(n is None for n in names):
        return ()
    return tuple(str(n) for n in names)


def bytes_stored(array: zarr.Array) -> int | None:
    """The array's stored bytes, or None where the store cannot list them (HTTP servers
    without directory listings, reference sets whose chunks live in other files)."""
    directory = _local_directory(array)
    try:
        if directory is not None:
            # What zarr's nbytes_stored adds up, without its task per file: a build measures
            # every array it wrote (docs/benchmarks.md, "Figures behind the code").
            return sum(
                os.path.getsize(os.path.join(top, name))
                for top, _, names in os.walk(directory)
                for name in names
            )
        return int(array.nbytes_stored())
    # A store's listing errors: OSError, fsspec's and aiohttp's (403 from a web server),
    # NotImplementedError where a store cannot list.
    except Exception:
        return None
    finally:
        _forget_listings(array.store_path.store)


def missing_chunks(array: zarr.Array) -> list[str] | None:
    """The keys of ``array``'s chunk objects (its shards, when sharded) that its store does
    not hold, in chunk order; None where the store cannot list them. An array whose writer
    writes every chunk (accumulations: a query refuses a missing one) is damaged when any
    is missing, while its metadata, consolidated elsewhere, still opens it."""
    grid = ChunkGrid.from_metadata(array.metadata)
    counts = [d.nchunks for d in grid.dimensions]
    prefix = f"{array.store_path.path}/" if array.store_path.path else ""
    encode = array.metadata.encode_chunk_key
    try:
        stored = _keys_stored(array, prefix)
    # A store's listing errors, as for bytes_stored.
    except Exception:
        return None
    finally:
        _forget_listings(array.store_path.store)
    return [
        key
        for coords in itertools.product(*(range(n) for n in counts))
        if (key := encode(coords)) not in stored
    ]


def _keys_stored(array: zarr.Array, prefix: str) -> set[str]:
    """The keys below ``array`` that its store holds, relative to the array, metadata left
    out."""
    directory = _local_directory(array)
    if directory is not None:
        return {
            os.path.relpath(os.path.join(top, name), directory).replace(os.sep, "/")
            for top, _, names in os.walk(directory)
            for name in names
        }

    async def listed() -> set[str]:
        store = array.store_path.store
        return {k[len(prefix) :] async for k in store.list_prefix(prefix)}

    return {k for k in sync(listed()) if not is_metadata_key(k)}


def _local_directory(array: zarr.Array) -> Path | None:
    """The directory holding ``array``'s objects, when its store is a local directory seen
    only through wrappers that keep its keys (``rewrites_metadata_only``)."""
    store = below_wrappers(array.store_path.store, "rewrites_metadata_only")
    return store.root / array.store_path.path if isinstance(store, LocalStore) else None


def _forget_listings(store: Store) -> None:
    """Drop the listings fsspec keeps after a listing: s3fs answers a later read of a key
    another process wrote meanwhile from them, as a missing key (a chunk read as fill)."""
    store = innermost(store)
    if isinstance(store, FsspecStore):
        store.fs.invalidate_cache()


def array_with(
    array: zarr.Array, *, metadata: ArrayMetadata | None = None, store: Store | None = None
) -> zarr.Array:
    """``array`` with other ``metadata`` (e.g. a new chunk grid) or reading from another
    ``store`` (e.g. a counting wrapper of its own), without any store request."""
    path = array.store_path if store is None else StorePath(store, array.store_path.path)
    return zarr.Array(AsyncArray(metadata or array.metadata, path, config=array.async_array.config))


def store_metadata(array: zarr.Array, metadata: ArrayMetadata | None = None) -> None:
    """Write ``metadata`` (by default the array's own) as ``array``'s metadata documents, by
    zarr's own serialization: e.g. the array grown, with a new chunk grid
    (``grid.with_chunk_sizes``). The group's consolidated metadata, if any, is the caller's
    to refresh."""

    async def write() -> None:
        documents = (metadata or array.metadata).to_buffer_dict(default_buffer_prototype())
        for key, buffer in documents.items():
            await (array.store_path / key).set(buffer)

    sync(write())
