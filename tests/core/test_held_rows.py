"""Accumulation arrays chunked longer along time than a build's slab: their entries are held
back until a chunk row is whole (``build.accumulate.HELD_ROW_BYTES``), so a box's series reads its
corners in few objects; builds, appends and answers stay exact. A positioned series' rows
are of equal length (``placement.even_rows``), and appends continue them."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.build import accumulate, placement, stream
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


def test_even_rows_take_as_few_rows_as_the_longest_allows_in_whole_raw_chunks():
    assert placement.even_rows(730, 328, 41) == 246  # 246 + 246 + 238, not 328 + 328 + 74
    assert placement.even_rows(3650, 584, 73) == 584  # 8 raw chunks a row either way
    assert placement.even_rows(45, 20, 5) == 15
    assert placement.even_rows(40, 20, 5) == 20  # rows of the longest already even
    assert placement.even_rows(31, 31, 41) == 31  # shorter than a raw chunk: one row


def test_series_sums_given_in_32_byte_elements_are_bit_shuffled_whatever_their_count():
    # 246 x 90 values (not a multiple of 8) go to Blosc as 32-byte elements in blocks of
    # 512 (``blosc_elements``): bit-shuffled (Zarr v2; v3's Blosc takes the values as they
    # are); a map's sums byte-shuffled, as before.
    assert placement.bit_shuffled((246, 90, 1), ["sum"], True, 8, 2)
    assert not placement.bit_shuffled((246, 90, 1), ["sum"], True, 8, 3)
    assert placement.bit_shuffled((328, 90, 1), ["sum"], True, 8, 3)
    assert not placement.bit_shuffled((15, 6, 1), ["sum"], True, 8, 2)  # one block, as values
    assert not placement.bit_shuffled((1, 180, 360), ["sum"], False, 8, 2)
    assert placement.bit_shuffled((1, 180, 360), ["count"], False, 2, 2)


def test_a_series_in_rows_of_equal_length_is_exact_and_appends_continue_its_last_row(
    tmp_path, monkeypatch
):
    # Slabs of one raw chunk (5 days); the series' rows could be 20 days long (20 + 20 + 5):
    # they are 15 (15 + 15 + 15), each whole once its days are read, summed from the raw
    # values (``raw_series``, area weights), not walked in tiles.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    monkeypatch.setattr(stream, "TILE_SUMS_BYTES", 1)
    monkeypatch.setattr(placement, "BUFFER_BYTES", 20 * 6 * 8 * 9)  # 20 entries
    full = synthetic_dataset({"time": 70, "lat": 6, "lon": 8}, seed=7)
    path = tmp_path / "c.zarr"
    write_cube(full.isel(time=slice(0, 45)), path, {"time": 5, "lat": 3, "lon": 4})
    at = {"lat": 1, "lon": 1}
    accumulus.accumulate(str(path), VAR, ["lat,lon"], at=at)
    group = accumulus.open(str(path)).accumulation_group(VAR)
    (acc,) = group.accumulations
    root = zarr.open_group(path, mode="r")
    sums = root[f"{group.path}/{acc.arrays['sum']}"]
    assert sums.chunks[0] == 15

    for start, stop in ((45, 52), (52, 70)):  # into the last row, then past it
        _grow(path, full, start, stop)
        assert accumulus.accumulate(str(path), VAR, ["lat,lon"], at=at).action == "updated"
        [report] = accumulus.verify(str(path), VAR)
        assert report.ok, report.problems
        assert zarr.open_group(path, mode="r")[sums.path].chunks[0] == 15
        grown = full.isel(time=slice(0, stop))
        _check(path, grown, ["lat", "lon"], {"lat": slice(1, 5), "lon": slice(2, 7)})
        _check(path, grown, ["lat", "lon"], {"lat": slice(0, 6), "time": slice(13, stop - 1)})
