"""A Zarr store: a local directory, a URL (``s3://``...), a zarr ``Store``, or a reference
set (kerchunk JSON at a URL, Parquet), which ``storage.open_store`` opens as a read-only store
that reads only where it is allowed to.

It is read through xarray's ``zarr`` engine, encoded (``decode_cf=False``), and identified by
the SHA-256 of its keys and values. Its compression is each array's codecs as stored.
``open_zarr_tree`` reads the cube an append writes to the same way.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from typing import Any

import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.filters import FilterError, join_v2, join_v3
from accumulus.ingest.declared import DeclaredVariable, itemsize
from accumulus.ingest.granules.base import CodecChain, GranuleSource, Identity, OpenOptions
from accumulus.ingest.granules.groups import (
    Layout,
    Tree,
    group_to_append,
    read_with,
    tree_dataset,
)
from accumulus.scope import accumulus_scope
from accumulus.stores import keys
from accumulus.stores.arrays import dimension_names
from accumulus.stores.locations import local_path
from accumulus.stores.opening import open_store, store_label


class ZarrKind:
    """A store, a URL, or a local directory."""

    description = "Zarr store"
    types = (Store, str, os.PathLike)

    def guess_can_open(self, item: GranuleSource) -> bool:
        if isinstance(item, Store):
            return True
        if not isinstance(item, str | os.PathLike):
            return False
        path = local_path(item)
        return path is None or path.is_dir()

    def open(self, item: GranuleSource, options: OpenOptions) -> ZarrFile:
        if not isinstance(item, Store | str | os.PathLike):
            raise AccumulusError(f"granule {item}: not a Zarr store")
        where = item if isinstance(item, Store) else local_path(item) or item
        name = store_label(where) if isinstance(where, Store) else os.fspath(where)
        try:
            store = open_store(
                where,
                "r",
                storage_options=options.storage_options,
                allow_references=options.allow_references,
            )
        except AccumulusError as exc:
            raise AccumulusError(f"granule {name}: {exc}") from None
        return ZarrFile(store, name)


class ZarrFile:
    def __init__(self, store: Store, name: str) -> None:
        self.store, self.name = store, name

    def resolve_group(self, dim: str, group: str | None) -> str:
        return group_to_append(_layout(self.store, f"granule {self.name}"), dim, group, self.name)

    def declared(self, group: str) -> list[DeclaredVariable]:
        return [
            DeclaredVariable(
                name=path.rpartition("/")[2],
                dims=dimension_names(node),
                shape=tuple(node.shape),
                itemsize=itemsize(node.dtype),
                chunks=tuple(node.shards or node.chunks) if node.ndim else None,
            )
            for path, node in _members(self.store, f"granule {self.name}")
            if isinstance(node, zarr.Array) and read_with(path.rpartition("/")[0], group)
        ]

    def identity(self) -> Identity:
        digest = hashlib.sha256()
        size = 0
        for key in keys.list_keys(self.store):
            data = keys.read(self.store, key) or b""
            digest.update(key.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
            size += len(data)
        return Identity(size, f"sha256:{digest.hexdigest()}")

    def read(self, group: str, dim: str | None) -> Tree:
        return open_zarr_tree(self.store, group, f"granule {self.name}", dim)

    def compression(self, zarr_format: int, group: str) -> dict[str, CodecChain | None]:
        chains: dict[str, CodecChain | None] = {}
        with accumulus_scope():
            root = zarr.open_group(self.store, mode="r")
            arrays = [(p, n) for p, n in root.members(max_depth=None) if isinstance(n, zarr.Array)]
            for name, array in arrays:
                document: dict[str, Any] = array.metadata.to_dict()  # JSON, by format
                try:
                    if document.get("zarr_format") == 2:
                        chains[name] = join_v2(document.get("filters"), document.get("compressor"))
                    else:
                        chains[name] = join_v3(document["codecs"])
                except FilterError:
                    chains[name] = None  # a codec without a numcodecs form: the store's default
        return chains

    def close(self) -> None:
        pass  # the store holds nothing open


def open_zarr_tree(store: Store, group: str = "", where: str = "", dim: str | None = None) -> Tree:
    """The variables of a Zarr store's ``group`` and of its nested groups along with it
    (those with variables along ``dim``, all when None), as one encoded Dataset (nested
    variables named by relative path). Used for Zarr granules and for the cube an append
    writes to."""
    where = where or store_label(store)
    layout = _layout(store, where)

    def open_group(path: str) -> xr.Dataset:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # "no consolidated metadata"
                return xr.open_dataset(
                    store,  # type: ignore[arg-type]  # xarray's zarr engine opens a zarr Store
                    engine="zarr",
                    group=path or None,
                    decode_cf=False,
                    chunks=None,
                )
        except Exception as exc:  # zarr and xarray's zarr backend raise many kinds
            raise AccumulusError(f"{where}: cannot read it as a Zarr dataset: {exc}") from None

    return tree_dataset(open_group, layout, group, dim, where)


def _members(store: Store, where: str) -> list[tuple[str, zarr.Array | zarr.Group]]:
    """Every array and group of the store, by path."""
    try:
        with accumulus_scope():
            return list(zarr.open_group(store, mode="r").members(max_depth=None))
    except Exception as exc:  # zarr raises many kinds on a store it cannot read
        raise AccumulusError(f"{where}: cannot read it as a Zarr dataset: {exc}") from None


def _layout(store: Store, where: str) -> Layout:
    from accumulus.accumulation.model.spec import GROUP_SUFFIX

    layout: Layout = {"": {}}
    for path, node in _members(store, where):
        parent, _, leaf = path.rpartition("/")
        if any(part.endswith(GROUP_SUFFIX) for part in path.split("/")):
            continue  # accumulations are rebuilt by the cube, not copied
        if isinstance(node, zarr.Group):
            layout.setdefault(path, {})
        else:
            layout.setdefault(parent, {})[leaf] = dimension_names(node)
    return layout
