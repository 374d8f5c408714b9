"""Stored bytes of an array (``stores.arrays.bytes_stored``, what ``inspect`` and ``accumulate``
report) are what zarr's ``nbytes_stored`` adds up, whether the directory is summed
directly (a local store, through wrappers that keep its keys) or listed through zarr."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from accumulus.stores.arrays import bytes_stored
from accumulus.stores.group import GroupStore
from accumulus.stores.opening import open_store


@pytest.mark.parametrize("zarr_format,separator", [(2, "."), (2, "/"), (3, "/")])
def test_bytes_stored_is_zarrs_count(tmp_path, zarr_format, separator):
    path = tmp_path / "c.zarr"
    root = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    inner = root.create_group("inner")
    encoding = {"name": "v2" if zarr_format == 2 else "default", "separator": separator}
    for group, shape in [(root, (20, 30)), (inner, (20, 60))]:  # sizes tell them apart
        array = group.create_array(
            "a", shape=shape, chunks=(7, 8), dtype="f8", chunk_key_encoding=encoding
        )
        array[...] = np.random.default_rng(0).normal(size=shape)
        array.attrs["note"] = "x" * 50
    seen_through = [
        (open_store(str(path), "r"), ("a", "inner/a")),  # wrappers that keep keys
        (GroupStore(zarr.storage.LocalStore(path), "inner"), ("a",)),  # one that adds a prefix
    ]
    for store, names in seen_through:
        opened = zarr.open_group(store, mode="r")
        for name in names:
            expected = opened[name].nbytes_stored()
            assert expected > 20 * 30  # chunks and metadata documents
            assert bytes_stored(opened[name]) == expected
    memory = zarr.open_group(zarr.storage.MemoryStore(), mode="w")
    small = memory.create_array("m", shape=(4,), chunks=(2,), dtype="i4")
    small[...] = 1
    assert bytes_stored(small) == small.nbytes_stored()
