"""Chunks along the append dimension that grow with the cube (``grid.GrowingGrid``): what a
query decodes stays within twice what the cube holds, no declared chunk ever changes size,
and the chunks depend on the granules only, not on how runs split them."""

from __future__ import annotations

import numpy as np
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.grid import GrowingGrid, declared_chunk_sizes, growing_sizes
from accumulus.scope import accumulus_scope

from .helpers import truth, write_granules

granule_lengths = st.lists(st.integers(1, 60), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(lengths=granule_lengths, cap=st.integers(1, 100))
def test_growing_chunks_bound_what_a_query_decodes(lengths, cap):
    sizes: tuple[int, ...] = ()
    length = 0
    for added in lengths:
        after = growing_sizes(sizes, length, added, cap)
        assert after[: len(sizes)] == sizes  # a declared chunk keeps its size
        length += added
        sizes = after
        assert all(1 <= s <= cap for s in sizes)
        assert sum(sizes[:-1]) < length <= sum(sizes)  # the last chunk holds some data
        # The empty end of the last chunk is never longer than what precedes it.
        assert sum(sizes) - length <= max(sum(sizes[:-1]), 0) or len(sizes) == 1
        assert sum(sizes) <= 2 * length or sizes[-1] == cap


def test_growing_grid_extends_like_its_rule():
    grid = GrowingGrid(124, (), 0)
    for values in (np.arange(8), np.arange(8), np.arange(7), np.arange(8)):
        grid.extend(values)
    assert grid.sizes == (8, 8, 16)
    assert grid.complete_end(31) == 16  # the last chunk is partial: rewritten by the next
    assert grid.rule == "grow:124"


def test_the_chunks_depend_on_the_granules_only(tmp_path):
    t = truth(30, nlat=6, nlon=8)
    granules = write_granules(tmp_path / "in", t, 6)  # 5 granules of 6 steps
    at_once, one_by_one = tmp_path / "once.zarr", tmp_path / "each.zarr"
    accumulus.append(str(at_once), granules, chunking="grow")
    for granule in granules:
        accumulus.append(str(one_by_one), granule, chunking="grow")
    with accumulus_scope():
        chunks = [
            declared_chunk_sizes(zarr.open_array(store / "precip", mode="r"), 0)
            for store in (at_once, one_by_one)
        ]
    assert chunks[0] == chunks[1] == (6, 6, 12, 24)
