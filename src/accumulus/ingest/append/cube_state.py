"""The cube an append writes to, as of its last commit: its root group as readers see it
(consolidated metadata) or as its arrays' own metadata say, its arrays and the committed values
of the append dimension."""

from __future__ import annotations

import numpy as np
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.ingest.append.values import Committed
from accumulus.scope import accumulus_scope
from accumulus.stores.arrays import dimension_names


def consolidated_root(store: Store) -> zarr.Group | None:
    """The root as readers see it (consolidated metadata), or None before the first
    commit. After recovery it is current, and the run reads metadata from it: no
    per-array requests."""
    with accumulus_scope():
        root = zarr.open_group(store, mode="r+")
    return root if root.metadata.consolidated_metadata is not None else None


def fresh_root(store: Store) -> zarr.Group:
    """The root group as the arrays' own metadata describe it (newer than consolidated
    metadata while an append is under way)."""
    return zarr.open_group(store, mode="r+", use_consolidated=False)


def cube_array(root: zarr.Group, name: str) -> zarr.Array:
    array = root[name]
    if not isinstance(array, zarr.Array):
        raise AccumulusError(f"{name} is a group, where the cube needs an array")
    return array


def stored_coordinate(cube: Committed | None, dim: str) -> np.ndarray:
    """The committed values of the append dimension's coordinate."""
    if cube is None or cube.journal.extent == 0:
        return np.asarray([])
    return np.asarray(cube_array(cube.root, dim)[: cube.journal.extent])


def chunk_along(array: zarr.Array, dim: str) -> int:
    """The size along ``dim`` of the objects a regular grid stores: its chunks, or its
    shards when sharded. Appends write and commit by them, so a shard is written once per
    commit (zarr rewrites a shard whole, keeping the inner chunks a write does not cover)."""
    return (array.shards or array.chunks)[dimension_names(array).index(dim)]
