"""Sequential round trips to the store, counted (never timed): a plan's chunks go out in one
batch, the metadata snapshot is one batch of root documents, and an open datacube reads
nothing else again while its snapshot stands; the check that it still stands goes out with
the plan's chunks.

The counting store puts each request in a "wave": one more than the last wave completed
before it started. With a latency on every request, the number of waves is the number of
sequential round trips a query costs on object storage.
"""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 40, "lat": 12, "lon": 16}
CHUNKS = {"time": 10, "lat": 6, "lon": 8}
LATENCY = 0.05  # seconds per request, as object storage


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("round-trips") / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=3)
    write_cube(ds, path, CHUNKS)
    accumulus.accumulate(str(path), VAR, minimal=True)  # chunk ends: unaligned reads raw
    return path, ds


def counting(path) -> CountingStore:
    return CountingStore(open_store(str(path)), latency=LATENCY)


ALIGNED_MAP = (("time",), {"time": ("2001-01-11", "2001-01-30")})  # time chunks 1 and 2
# lat rows 3-8 cut both lat chunks; lon columns 2-15: raw reads of columns 2-7 and the
# accumulation over longitude for columns 8-15.
UNALIGNED_SERIES = (("lat", "lon"), {"lat": (-50.0, 40.0), "lon": (5.0, 40.0)})


def test_opening_reads_the_root_documents_then_the_coordinates(cube_path):
    path, _ = cube_path
    store = counting(path)
    handle = accumulus.open(store)
    # The root documents (the consolidated one among them), then the coordinates at once.
    assert store.counts.round_trips == 2
    metadata = {k for k in store.counts.reads if is_metadata_key(k)}
    assert metadata == {"zarr.json", ".zmetadata", ".zgroup", ".zattrs"}
    assert store.counts.reads[".zmetadata"] > 0
    assert set(store.counts.reads) - metadata == {"time/0", "lat/0", "lon/0"}
    # Every use of the handle looks at the root documents again (one round trip), and reads
    # nothing else while they are unchanged.
    assert handle.data_variables == [VAR]
    assert store.counts.round_trips == 3 and store.counts.read_requests == 11


@pytest.mark.parametrize("query", [ALIGNED_MAP, UNALIGNED_SERIES])
def test_an_open_datacube_answers_in_one_round_trip(cube_path, query):
    path, ds = cube_path
    store = counting(path)
    handle = accumulus.open(store)
    over, ranges = query
    handle.query(VAR, over, ranges)  # warm: coordinates and groups are read by now
    store.reset()
    result = handle.query(VAR, over, ranges)
    # The root documents (has the snapshot changed?) and every chunk of the plan, at once.
    assert store.counts.round_trips == 1
    chunks = [k for k in store.counts.reads if not is_metadata_key(k)]
    assert len(chunks) == result.stats.accumulation_chunks_read + result.stats.raw_chunks_read
    assert len(store.counts.reads) == len(chunks) + 4
    assert store.counts.max_in_flight >= len(chunks)
    selection = {d: slice(*r) for d, r in ranges.items()}
    expected = xarray_reference(ds[VAR].sel(selection), list(over), "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def test_unaligned_ranges_read_raw_and_accumulation_chunks_together(cube_path):
    path, _ = cube_path
    store = counting(path)
    handle = accumulus.open(store)
    over, ranges = UNALIGNED_SERIES
    handle.query(VAR, over, ranges)
    store.reset()
    result = handle.query(VAR, over, ranges)
    assert result.stats.raw_chunks_read > 0 and result.stats.accumulation_chunks_read > 0
    assert store.counts.round_trips == 1
    assert store.counts.max_in_flight >= len(store.counts.reads) - 4  # all chunks at once


def test_an_answer_from_a_snapshot_replaced_meanwhile_is_asked_again(tmp_path):
    """The snapshot check goes out with the reads: when it finds the cube rewritten, the
    answer read from the old snapshot is dropped and the new cube answers."""
    path = tmp_path / "cube.zarr"
    write_cube(synthetic_dataset(SIZES, seed=3), path, CHUNKS)
    accumulus.accumulate(str(path), VAR)
    store = CountingStore(open_store(str(path)))  # through the event loop, as object storage
    handle = accumulus.open(store)
    # Every day, from the raw chunks: the old snapshot's plan reads the new cube's first 40.
    over, ranges = ("time",), {}
    handle.query(VAR, over, ranges, use_accumulation=False)
    new = synthetic_dataset({**SIZES, "time": 50}, seed=4)  # other values, ten days more
    write_cube(new, path, CHUNKS)
    accumulus.accumulate(str(path), VAR)
    store.reset()
    result = handle.query(VAR, over, ranges, use_accumulation=False)
    expected = xarray_reference(new[VAR], list(over), "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    # The check and the old plan's reads, then the new snapshot and its plan's reads.
    assert store.counts.round_trips > 1


@pytest.mark.parametrize(("query", "limit"), [(ALIGNED_MAP, 3), (UNALIGNED_SERIES, 4)])
def test_a_one_shot_query_from_a_cold_start(cube_path, query, limit):
    path, _ = cube_path
    store = counting(path)
    over, ranges = query
    accumulus.query(store, VAR, over, ranges)
    assert store.counts.round_trips <= limit


def test_a_query_failing_on_a_snapshot_replaced_meanwhile_is_asked_again(tmp_path):
    """The old snapshot's plan reads accumulation chunks the rewritten cube no longer has
    (its group is gone): that failure is not the answer, the new cube's scan is."""
    path = tmp_path / "cube.zarr"
    write_cube(synthetic_dataset(SIZES, seed=3), path, CHUNKS)
    accumulus.accumulate(str(path), VAR)
    store = CountingStore(open_store(str(path)))  # through the event loop, as object storage
    handle = accumulus.open(store)
    over, ranges = ALIGNED_MAP
    assert handle.query(VAR, over, ranges).stats.accumulation_chunks_read > 0
    new = synthetic_dataset({**SIZES, "time": 50}, seed=4)
    write_cube(new, path, CHUNKS)  # no accumulations
    result = handle.query(VAR, over, ranges)
    assert result.stats.accumulation_chunks_read == 0
    selection = {d: slice(*r) for d, r in ranges.items()}
    expected = xarray_reference(new[VAR].sel(selection), list(over), "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
