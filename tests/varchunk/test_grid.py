"""Chunk bounds of ZEP 3 grids: the seed's example, validation, partial last chunks."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import accumulus.stores.opening  # noqa: F401  (turns zarr's rectilinear chunk grids on)
from accumulus.grid import (
    ChunkBounds,
    array_bounds,
    bounds_from_chunk_shape,
    declared_chunk_sizes,
    last_chunk_is_partial,
    locate,
)

SEED_CHUNK_SHAPE = [[5, 5, 5, 15, 15, 20, 35], 10]


def test_seed_example_bounds_and_lookup():
    axis0, axis1 = bounds_from_chunk_shape(SEED_CHUNK_SHAPE, [100, 100])
    assert axis0.edges == (0, 5, 10, 15, 30, 45, 65, 100)
    assert axis1.edges == (0, 10, 20, 30, 40, 50, 60, 70, 80, 90, 100)
    chunk, offset = locate((axis0, axis1), (17, 17))
    assert chunk == (3, 1)
    # The seed writes "index (2, 2)"; along the regular axis 17 is 7 past the edge at 10,
    # so the offset inside chunk (3, 1) is (2, 7).
    assert offset == (2, 7)


def test_locate_inverts_the_edges_everywhere():
    bounds = bounds_from_chunk_shape(SEED_CHUNK_SHAPE, [100, 100])
    for i in range(100):
        for j in range(100):
            (ci, cj), (oi, oj) = locate(bounds, (i, j))
            assert bounds[0].edges[ci] + oi == i and bounds[1].edges[cj] + oj == j
            assert oi < bounds[0].sizes[ci] and oj < bounds[1].sizes[cj]


@pytest.mark.parametrize(
    ("chunk_shape", "shape", "message"),
    [
        ([[5, 5, 5, 15, 15, 20, 34], 10], [100, 100], "add up to 99, but its length is 100"),
        ([[5, 0, 95], 10], [100, 100], "positive integers"),
        ([[5, -5, 100], 10], [100, 100], "positive integers"),
        ([[50, 50], 0], [100, 100], "must be positive"),
        ([[50, 50]], [100, 100], "1 entries for an array of 2 dimensions"),
        ([[50, 50.5], 10], [100, 100], "positive integers"),
    ],
)
def test_invalid_chunk_shapes_name_the_problem(chunk_shape, shape, message):
    with pytest.raises(ValueError, match=message):
        bounds_from_chunk_shape(chunk_shape, shape)


def test_rectilinear_zarr_array_bounds(tmp_path):
    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    array = group.create_array("x", shape=(100, 100), chunks=SEED_CHUNK_SHAPE, dtype="f4")
    assert array_bounds(array) == bounds_from_chunk_shape(SEED_CHUNK_SHAPE, [100, 100])


def test_last_chunk_is_partial(tmp_path):
    group = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    regular = group.create_array("r", shape=(95,), chunks=(10,), dtype="f4")
    assert last_chunk_is_partial(regular, 0)
    assert declared_chunk_sizes(regular, 0) == (10,) * 10
    regular.resize((100,))
    assert not last_chunk_is_partial(regular, 0)

    # A month still being filled: 41 days in chunks declared [31, 28].
    months = group.create_array("m", shape=(59,), chunks=[[31, 28]], dtype="f4")
    months.resize((41,))  # zarr keeps declared chunk sizes that reach past the extent
    assert array_bounds(months)[0] == ChunkBounds((0, 31, 41))
    assert declared_chunk_sizes(months, 0) == (31, 28)
    assert last_chunk_is_partial(months, 0)
    months.resize((59,))
    assert not last_chunk_is_partial(months, 0)
    months[:] = np.arange(59)
    np.testing.assert_array_equal(months[:], np.arange(59))
