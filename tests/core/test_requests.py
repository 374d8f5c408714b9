"""What a query reads, measured on the store: accumulation chunks at the range boundaries,
raw chunks only where the range cuts a chunk, none for chunk-aligned ranges."""

from __future__ import annotations

import itertools
from math import prod

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.model.groups import accumulation_array, read_group
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.raw_cube import RawCube
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 60, "lat": 18, "lon": 24}
CHUNKS = {"time": 10, "lat": 6, "lon": 8}


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("requests") / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=7)
    write_cube(ds, path, CHUNKS)
    # ZEP 5 as written: each dim alone + lat+lon at chunk ends, area weights.
    accumulus.accumulate(str(path), VAR, minimal=True)
    return path, ds


def raw_chunks_touched(plan) -> set[tuple[int, ...]]:
    """The raw chunks the plan's raw reads intersect (from the plan alone)."""
    touched = set()
    for read in plan.raw_reads:
        ranges = []
        for dim in SIZES:
            lo, hi = read.box[dim]
            ranges.append(range(lo // CHUNKS[dim], (hi - 1) // CHUNKS[dim] + 1))
        touched.update(itertools.product(*ranges))
    return touched


def test_aligned_time_average_reads_no_raw_chunk(cube_path):
    path, ds = cube_path
    result = run_query(
        RawCube.open(str(path)), Query(VAR, ("time",), {"time": ("2001-01-11", "2001-02-09")})
    )
    assert result.stats.raw_chunks_read == 0
    assert result.plan.raw_reads == []
    # Entries 3 (end) and 0 (start) of the two sums Σw·x and Σw, full map each.
    entries = sorted(r.entries["time"] for r in result.plan.accumulation_reads)
    assert entries == [0, 3]
    cube = RawCube.open(str(path))
    chunks = 0
    for term in ("wsum", "wcount"):
        array = accumulation_array(cube, VAR, read_group(cube, VAR).find(["time"]).arrays[term])
        per_entry = {e // array.chunks[0] for e in entries}
        tiles = prod(-(-n // c) for n, c in zip(array.shape[1:], array.chunks[1:], strict=True))
        chunks += len(per_entry) * tiles
    assert result.stats.accumulation_chunks_read == chunks
    expected = xarray_reference(ds[VAR].isel(time=slice(10, 40)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def test_unaligned_area_average_reads_only_boundary_chunks(cube_path):
    path, ds = cube_path
    lat = ds.lat.values
    query = Query(
        VAR,
        ("lat", "lon"),
        {"lat": (lat[2], lat[14]), "lon": (ds.lon.values[3], ds.lon.values[20])},
    )
    result = run_query(RawCube.open(str(path)), query)
    planned = raw_chunks_touched(result.plan)
    assert result.stats.raw_chunks_read == len(planned)
    # Only chunks the box cuts: lat chunks 0 and 2 (rows 2..5 and 12..14), lon chunks 0, 2.
    assert {(c[1], c[2]) for c in planned} <= {(la, lo) for la in (0, 1, 2) for lo in (0, 1, 2)}
    for _, la, lo in planned:
        assert la in (0, 2) or lo in (0, 2)
    full_box_chunks = SIZES["time"] // CHUNKS["time"] * 3 * 3
    assert result.stats.raw_chunks_read < full_box_chunks
    expected = xarray_reference(
        ds[VAR].isel(lat=slice(2, 15), lon=slice(3, 21)), ["lat", "lon"], "area", "mean"
    )
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def test_full_scan_reads_every_chunk_and_no_accumulation(cube_path):
    path, _ = cube_path
    result = run_query(
        RawCube.open(str(path)), Query(VAR, ("lat", "lon"), {}, use_accumulation=False)
    )
    assert result.stats.accumulation_chunks_read == 0
    n_chunks = prod(SIZES[d] // CHUNKS[d] for d in SIZES)
    assert result.stats.raw_chunks_read == n_chunks


def test_measured_bytes_are_the_chunks_read(cube_path):
    path, _ = cube_path
    result = run_query(RawCube.open(str(path)), Query(VAR, ("time",), {}))
    assert result.stats.bytes_read > 0
    assert result.stats.requests >= result.stats.accumulation_chunks_read
    assert result.data.attrs["bytes_read"] == result.stats.bytes_read
