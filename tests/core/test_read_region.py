"""``chunk_reader.read_region`` (how a build reads raw blocks) returns what zarr's own
``__getitem__`` returns, for random regions of arrays in the formats and layouts builds
meet: Zarr v2 and v3, sharded, big-endian, with chunks never written (fill value)."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

from accumulus.chunk_reader import read_region
from accumulus.raw_cube import StoredValues

LAYOUTS = {
    "v2": dict(zarr_format=2, chunks=(4, 3, 5), dtype="<f4", shards=None),
    "v2-big-endian": dict(zarr_format=2, chunks=(4, 3, 5), dtype=">f8", shards=None),
    "v3": dict(zarr_format=3, chunks=(4, 3, 5), dtype="int16", shards=None),
    "v3-sharded": dict(zarr_format=3, chunks=(2, 3, 5), dtype="f8", shards=(4, 6, 10)),
}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_regions_read_as_zarr_reads_them(tmp_path, layout):
    settings = dict(LAYOUTS[layout])
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=settings.pop("zarr_format"))
    array = root.create_array("a", shape=(13, 7, 10), fill_value=-9, **settings)
    rng = np.random.default_rng(len(layout))
    array[:9] = (rng.random((9, 7, 10)) * 1000).astype(array.dtype)  # later chunks never stored
    for _ in range(40):
        region = []
        for n in array.shape:
            lo, hi = sorted(int(v) for v in rng.integers(0, n + 1, size=2))
            region.append(slice(lo, hi))
        got = read_region(array, region)
        want = array[tuple(region)]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(StoredValues(array)[tuple(region)], want)


def test_other_keys_go_to_zarr(tmp_path):
    array = zarr.open_group(tmp_path / "g.zarr", mode="w").create_array(
        "a", shape=(6, 4), chunks=(2, 2), dtype="f8"
    )
    array[...] = np.arange(24.0).reshape(6, 4)
    stored = StoredValues(array)
    np.testing.assert_array_equal(stored[::2, 1], array[::2, 1])
    np.testing.assert_array_equal(stored[(slice(-3, None), slice(None))], array[-3:, :])


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_whole_chunks_come_as_arrays_of_their_own(tmp_path, layout):
    """A region that is one whole chunk (how a build reads its raw blocks, and holds them
    for a series' row) equals zarr's, is writable, and is shared with nothing: changing it
    changes no later read."""
    settings = dict(LAYOUTS[layout])
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=settings.pop("zarr_format"))
    array = root.create_array("a", shape=(13, 7, 10), fill_value=-9, **settings)
    array[:9] = np.arange(9 * 7 * 10).reshape(9, 7, 10).astype(array.dtype)
    chunks = settings["chunks"]
    for corner in [(0, 0, 0), (4, 3, 5), (8, 6, 5), (12, 0, 0)]:  # whole, at the edges, unwritten
        region = [
            slice(c - c % n, min(c - c % n + n, size))
            for c, n, size in zip(corner, chunks, array.shape, strict=True)
        ]
        want = array[tuple(region)]
        got = read_region(array, region)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert got.flags.writeable
        got[...] = 1
        np.testing.assert_array_equal(read_region(array, region), want)
