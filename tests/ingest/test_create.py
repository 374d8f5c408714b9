"""The first append creates the cube: encodings of the first granule kept, chunks chosen (or
given), static coordinates written once, the time coordinate chunked as a 1-D array."""

from __future__ import annotations

import struct

import numcodecs
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.chunk_reader import ChunkRequest, read_chunks
from accumulus.ingest.layout import (
    COORDINATE_CHUNK_BYTES,
    MIN_CHUNK_BYTES,
    TARGET_CHUNK_BYTES,
    ArraySpec,
    choose_chunks,
    choose_shards,
    step_blocksize,
)
from accumulus.stores.opening import open_store

from .helpers import FILL, SCALE, UNITS, VAR, truth, write_granules


def assert_matches_truth(store, t, n=None) -> None:
    """The cube, decoded by xarray, equals the truth's first ``n`` steps."""
    cube = xr.open_zarr(store)
    expected = t.decoded(n)
    np.testing.assert_array_equal(cube["time"].values, expected["time"].values)
    np.testing.assert_array_equal(cube["lat"].values, expected["lat"].values)
    np.testing.assert_allclose(cube[VAR].values, expected[VAR].values, rtol=1e-12)


def test_create_keeps_the_first_granules_encodings(tmp_path):
    t = truth(10)
    granules = write_granules(tmp_path / "in", t, 5)
    store = tmp_path / "cube.zarr"

    result = accumulus.append(str(store), granules, dim="time", chunks={"time": 4})

    assert result.created and result.extent == (0, 10) and len(result.appended) == 2
    root = zarr.open_group(store, mode="r")
    precip = root[VAR]
    assert precip.dtype == np.dtype("i2") and precip.fill_value == FILL
    assert precip.attrs["scale_factor"] == SCALE and precip.attrs["add_offset"] == 0.0
    assert precip.attrs["units"] == "mm/hr"
    assert precip.compressors == (numcodecs.Zlib(level=4),)
    assert precip.filters == (numcodecs.Shuffle(elementsize=2),)
    assert precip.chunks == (4, 6, 8)
    time = root["time"]
    assert time.dtype == np.dtype("i4")
    assert time.attrs["units"] == UNITS and time.attrs["calendar"] == "standard"
    np.testing.assert_array_equal(time[:], t.hours)
    # A 1-D coordinate gets about 1 MiB per chunk, not the data's 4 steps.
    assert time.chunks == (COORDINATE_CHUNK_BYTES // 4,)
    assert root["time_bnds"].chunks == (COORDINATE_CHUNK_BYTES // 8, 2)
    assert dict(root.attrs)["accumulus"] == {"append_dim": "time"}
    assert_matches_truth(store, t)


def test_static_coordinates_are_written_once(tmp_path):
    t = truth(12)
    granules = write_granules(tmp_path / "in", t, 4)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules[:1], chunks={"time": 4})
    lat_chunk = store / "lat" / "0"
    before = lat_chunk.stat().st_mtime_ns

    accumulus.append(str(store), granules[1:])

    assert lat_chunk.stat().st_mtime_ns == before
    assert_matches_truth(store, t)


def test_zarr_v3_cube(tmp_path):
    t = truth(9)
    granules = write_granules(tmp_path / "in", t, 3)
    store = tmp_path / "cube.zarr"

    accumulus.append(str(store), granules[:2], chunks={"time": 4}, zarr_format=3)
    accumulus.append(str(store), granules[2:])

    root = zarr.open_group(store, mode="r")
    assert root.metadata.zarr_format == 3
    codecs = [type(c).__name__ for c in root[VAR].metadata.codecs]
    assert codecs == ["BytesCodec", "Shuffle", "Zlib"]  # shuffle works on bytes in v3
    assert_matches_truth(store, t)
    assert accumulus.verify(str(store)) == []  # no accumulations yet: nothing to verify


def test_dataset_and_zarr_granules(tmp_path):
    """A granule can be an xarray.Dataset (encoded as its ``encoding`` says) or a Zarr
    store; times in other units are converted to the cube's."""
    t = truth(9)
    netcdf = write_granules(tmp_path / "in", t, 3)
    from_file = xr.open_dataset(netcdf[1])
    dataset = from_file.load()
    dataset["time"].encoding.update(units="minutes since 2000-01-01", dtype="i8")
    zarr_granule = tmp_path / "g2.zarr"
    xr.open_dataset(netcdf[2]).to_zarr(zarr_granule, mode="w")
    store = tmp_path / "cube.zarr"

    result = accumulus.append(str(store), [netcdf[0], dataset, str(zarr_granule)])

    assert len(result.appended) == 3
    assert_matches_truth(store, t)
    assert zarr.open_group(store, mode="r")["time"].attrs["units"] == UNITS


def test_rule_of_thumb_on_a_trmm_sized_grid():
    """TRMM 3B42RT: 480 x 1440 float32 per 3-hour step (2.6 MiB): the seed's ~40 steps."""
    arrays = {
        "precip": ArraySpec(("time", "lat", "lon"), (1, 480, 1440), 4, False),
        "time": ArraySpec(("time",), (1,), 8, True),
        "lat": ArraySpec(("lat",), (480,), 4, True),
    }
    choice = choose_chunks(arrays, "time")
    steps, lat, lon = choice.chunks["precip"]
    assert (lat, lon) == (480, 1440)
    size = steps * 480 * 1440 * 4
    assert MIN_CHUNK_BYTES <= size <= TARGET_CHUNK_BYTES < size + 480 * 1440 * 4
    assert steps == 37
    assert choice.chunks["time"] == (COORDINATE_CHUNK_BYTES // 8,)
    assert choice.chunks["lat"] == (480,)
    assert "37 steps" in choice.reason and "2.6 MiB" in choice.reason


def test_rule_of_thumb_splits_a_step_larger_than_the_target():
    arrays = {"v": ArraySpec(("time", "y", "x"), (1, 8192, 8192), 4, False)}
    steps, y, x = choose_chunks(arrays, "time").chunks["v"]
    assert (steps, y, x) == (1, 4096, 4096)  # 64 MiB: halved twice, largest side first


@pytest.mark.parametrize(("shard_steps", "warned"), [(8, False), (2, True)])
def test_small_chunks_are_warned_about_by_the_size_of_their_shards(shard_steps, warned):
    """Sharded, the objects stored are shards: chunks of 2 MiB in shards of 16 MiB are not
    small objects, shards of 4 MiB are."""
    arrays = {"v": ArraySpec(("time", "y", "x"), (1, 512, 1024), 4, False)}
    choice = choose_chunks(arrays, "time", {"time": 1})
    assert "below 10 MiB" in choice.reason  # 2 MiB chunks, unsharded
    sharded = choose_shards(choice, arrays, "time", {"time": shard_steps})
    assert ("below 10 MiB" in sharded.reason) is warned


def test_given_chunks_are_kept_and_checked():
    arrays = {"v": ArraySpec(("time", "y", "x"), (1, 100, 200), 4, False)}
    assert choose_chunks(arrays, "time", {"time": 40, "x": 50}).chunks["v"] == (40, 100, 50)
    with pytest.raises(accumulus.AccumulusError, match=r"dimension\(s\) \['level'\]"):
        choose_chunks(arrays, "time", {"level": 3})
    with pytest.raises(accumulus.AccumulusError, match="positive integer"):
        choose_chunks(arrays, "time", {"time": 0})


def test_netcdf3_granules(tmp_path):
    """netCDF-3 files (no HDF5, never compressed) are granules too."""
    t = truth(6)
    netcdf4 = write_granules(tmp_path / "in", t, 3)
    classic = []
    for path in netcdf4:
        with xr.open_dataset(path) as ds:
            classic.append(tmp_path / f"{path.stem}.nc3")
            ds.to_netcdf(classic[-1], format="NETCDF3_64BIT")
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), classic, chunks={"time": 4})
    assert_matches_truth(store, t)


def test_uncompressed_granules_get_blosc_blocks_of_whole_steps(tmp_path):
    """Data stored uncompressed in the granules gets Zarr v2's default compression in the
    cube (Blosc LZ4 level 5, byte shuffle) in Blosc blocks of one time step each
    (``layout.step_blocksize``): a map over a period whose ends fall between accumulation
    entries reads each end's raw day as one block of its chunk (the header and that block),
    and equals xarray's mean of the granules."""
    rng = np.random.default_rng(5)
    days = pd.date_range("2001-01-01", periods=30, freq="D")
    lat, lon = np.linspace(-89, 89, 128), np.linspace(0, 358, 256)
    values = rng.normal(280, 10, size=(30, 128, 256)).astype("f4")
    values[:, :8] = np.nan  # a polar cap of missing values
    data = xr.Dataset(
        {"tas": (("time", "lat", "lon"), values)},
        coords={"time": days, "lat": lat, "lon": lon},
    )
    granules = []
    for start in (0, 15):
        granules.append(tmp_path / f"g{start}.nc")
        data.isel(time=slice(start, start + 15)).to_netcdf(granules[-1])
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules, dim="time", chunks={"time": 10})

    tas = zarr.open_group(store, mode="r")["tas"]
    step = 128 * 256 * 4
    assert tas.compressors == (
        numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, step_blocksize((10, 128, 256), 4)),
    )
    header = (store / "tas" / "1.0.0").read_bytes()[:16]
    assert struct.unpack("<BBBBiii", header)[5] == step  # one block per day
    assert zarr.open_group(store, mode="r")["lat"].compressors != tas.compressors  # 1-D: as was

    accumulus.accumulate(str(store), "tas", ["time"])  # entries at chunk ends: every 10 days
    handle = accumulus.open(str(store))
    got = handle.query("tas", ["time"], {"time": ("2001-01-10", "2001-01-21")}, plan="accumulation")
    assert sorted(r.box["time"] for r in got.plan.raw_reads) == [(9, 10), (20, 21)]
    weights = np.cos(np.deg2rad(data.lat))
    want = data.tas.sel(time=slice("2001-01-10", "2001-01-21")).weighted(weights).mean("time")
    np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9)

    read: list[np.ndarray] = []
    local = zarr.open_array(open_store(str(store)), path="tas")
    day = (slice(9, 10), slice(None), slice(None))
    counts = read_chunks([ChunkRequest(local, (0, 0, 0), needed=day)], lambda _, c: read.append(c))
    np.testing.assert_array_equal(read[0][day], values[9:10])
    assert counts.requests == 2 and counts.bytes < 4096 + step  # the header, then one block
