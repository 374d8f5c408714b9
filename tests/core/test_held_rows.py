"""Accumulation arrays chunked longer along time than a build's slab: their entries are held
back until a chunk row is whole (``build.accumulate.HELD_ROW_BYTES``), so a box's series reads its
corners in few objects; builds, appends and answers stay exact."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.build import accumulate, stream
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

CHUNKS = {"time": 6, "lat": 4, "lon": 5}


def _grow(path, full, start, stop):
    full.isel(time=slice(start, stop)).to_zarr(path, append_dim="time", consolidated=True)


def _check(path, full, over, isel):
    ranges = {}
    for dim, sl in isel.items():
        values = full[dim].values[sl]
        if dim == "time":
            ranges[dim] = (str(values[0])[:10], str(values[-1])[:10])
        else:
            ranges[dim] = (float(min(values[0], values[-1])), float(max(values[0], values[-1])))
    result = accumulus.open(str(path)).query(VAR, over, ranges)
    expected = xarray_reference(full[VAR].isel(isel), over, "area", "mean")
    np.testing.assert_allclose(np.asarray(result.data), expected.values, rtol=1e-9)
    return result


@pytest.mark.parametrize(("zarr_format", "shards"), [(2, None), (3, True)])
def test_small_corner_arrays_are_chunked_past_a_slab_and_stay_exact(
    tmp_path, monkeypatch, zarr_format, shards
):
    # Slabs of one raw chunk (6 days); rows of latitude-longitude corners (4 arrays of 3 x 4
    # entries per day: 384 B) fit the budget for the whole series, rows of the latitude
    # accumulation (4 x 3 x 20 entries: 1920 B per day) only for 2 slabs.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    monkeypatch.setattr(stream, "TILE_SUMS_BYTES", 1)
    monkeypatch.setattr(accumulate, "HELD_ROW_BYTES", 20 * 1920)
    full = synthetic_dataset({"time": 80, "lat": 12, "lon": 20}, seed=5)
    path = tmp_path / "c.zarr"
    write_cube(full.isel(time=slice(0, 45)), path, CHUNKS, zarr_format=zarr_format)
    dims = [("lat", "lon"), ("lat",)]
    accumulus.accumulate(str(path), VAR, dims, shards=shards)
    group = zarr.open_group(path, mode="r")[f"{VAR}_accumulation_group"]
    assert group["acc_lat_lon"].chunks[0] == 45  # the whole series, over 8 slabs
    assert group["acc_lat"].chunks[0] == 12  # two slabs: a row of 24 days would not fit
    if shards:  # a shard is never longer along time than a chunk row the build holds
        assert group["acc_lat"].shards is not None
        for name in ("acc_lat_lon", "acc_lat"):
            array = group[name]
            assert array.shards is None or array.shards[0] == array.chunks[0], name

    # An aligned box reads one object per corner (and array), not one per slab.
    result = _check(path, full.isel(time=slice(0, 45)), ["lat", "lon"], {"lat": slice(4, 12)})
    assert result.stats.raw_chunks_read == 0
    assert result.stats.accumulation_chunks_read <= 2 * 4

    # Appends rewrite the held rows they end in, and answers stay exact.
    for stop in (50, 80):
        _grow(path, full, 45 if stop == 50 else 50, stop)
        assert accumulus.accumulate(str(path), VAR, dims, shards=shards).action == "updated"
        [report] = accumulus.verify(str(path), VAR)
        assert report.ok, report.problems
        grown = full.isel(time=slice(0, stop))
        _check(path, grown, ["lat", "lon"], {"lat": slice(4, 12), "lon": slice(5, 15)})
        _check(path, grown, ["lat", "lon"], {"lat": slice(1, 10), "time": slice(3, stop - 2)})
        _check(path, grown, ["lat"], {"lat": slice(4, 8), "time": slice(7, stop)})
