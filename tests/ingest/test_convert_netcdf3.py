"""NetCDF-3 (classic, 64-bit offset, 64-bit data) → Zarr: files written by netcdf-c through
netCDF4 and NOAA's file shipped with eofs, read back by xarray."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.errors import AccumulusError
from accumulus.ingest.convert import NETCDF3_CODEC, convert
from accumulus.ingest.netcdf3_header import declared_size
from core.test_real_data import example_file

FORMATS = {
    "NETCDF3_CLASSIC": "NetCDF-3 classic",
    "NETCDF3_64BIT_OFFSET": "NetCDF-3 64-bit offset",
    "NETCDF3_64BIT_DATA": "NetCDF-3 64-bit data (CDF5)",
}


def write_netcdf3(path, file_format: str, records: int = 5) -> None:
    """A small NetCDF-3 granule: a record dimension with CF time, packed integers with a fill
    value, floats with a fill value, characters, a scalar, and (CDF5 only) 64-bit and
    unsigned integers."""
    rng = np.random.default_rng(3)
    with netCDF4.Dataset(path, "w", format=file_format) as ds:
        ds.title = "NetCDF-3 test granule"
        ds.version = np.int32(7)
        ds.createDimension("time", None)
        ds.createDimension("lat", 4)
        ds.createDimension("lon", 6)
        ds.createDimension("name_length", 5)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time.calendar = "standard"
        time[:] = np.arange(records)
        ds.createVariable("lat", "f4", ("lat",))[:] = [-30, -10, 10, 30]
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(6) * 60.0
        precip = ds.createVariable("precip", "f4", ("time", "lat", "lon"), fill_value=-999.0)
        precip.units = "mm/day"
        values = rng.gamma(2.0, 2.0, (records, 4, 6)).astype("f4")
        values[:, 1, 2] = -999.0
        precip[:] = values
        packed = ds.createVariable("temp", "i2", ("time", "lat", "lon"), fill_value=-32767)
        packed.set_auto_maskandscale(False)
        packed.scale_factor = 0.01
        packed.add_offset = 273.15
        packed.units = "K"
        raw = rng.integers(-3000, 3000, (records, 4, 6)).astype("i2")
        raw[:, 0, 0] = -32767
        packed[:] = raw
        station = ds.createVariable("station", "S1", ("lat", "name_length"))
        station[:] = netCDF4.stringtochar(np.array(["alpha", "beta", "gam", "d"], "S5"))
        ds.createVariable("crs", "i4", ()).grid_mapping_name = "latitude_longitude"
        if file_format == "NETCDF3_64BIT_DATA":
            ds.createVariable("count", "u2", ("time",))[:] = np.arange(records) * 1000
            ds.createVariable("big", "i8", ("lat",))[:] = [2**40, -(2**40), 0, 1]


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("file_format", list(FORMATS))
def test_netcdf3_converts_and_xarray_reads_it_identically(tmp_path, file_format, zarr_format):
    source = tmp_path / "granule.nc"
    write_netcdf3(source, file_format)
    dest = tmp_path / "cube.zarr"
    with netCDF4.Dataset(source) as ds:
        assert ds.data_model == file_format  # netcdf-c wrote what we asked for
    plan = convert(source, dest, zarr_format=zarr_format)
    assert plan.source_format == FORMATS[file_format]
    assert {a.path: a.codecs for a in plan.arrays}["precip"] == [NETCDF3_CODEC]
    assert "no compression to keep" in plan.note and "all arrays" in plan.note
    expected = xr.open_dataset(source).load()
    actual = xr.open_zarr(dest).load()
    xr.testing.assert_identical(actual, expected)
    assert np.isnan(actual.precip.values[0, 1, 2]) and np.isnan(actual.temp.values[1, 0, 0])
    assert list(actual.station.values) == [b"alpha", b"beta", b"gam", b"d"]
    metadata = zarr.open_array(dest / "precip", mode="r").metadata.to_dict()
    if zarr_format == 2:
        assert metadata["compressor"] == NETCDF3_CODEC
    else:
        assert metadata["codecs"][-1]["name"] in ("zstd", "numcodecs.zstd")
        assert metadata["codecs"][-1]["configuration"]["level"] == 0


def test_codec_given_for_a_netcdf3_variable_replaces_the_default(tmp_path):
    source = tmp_path / "granule.nc"
    write_netcdf3(source, "NETCDF3_CLASSIC")
    dest = tmp_path / "cube.zarr"
    plan = convert(source, dest, codecs={"precip": {"id": "zlib", "level": 6}})
    codecs = {a.path: a.codecs for a in plan.arrays}
    assert codecs["precip"] == [{"id": "zlib", "level": 6}]
    assert codecs["temp"] == [NETCDF3_CODEC]
    assert f"{len(codecs) - 1} of {len(codecs)} arrays" in plan.note
    assert json.loads((dest / "precip" / ".zarray").read_text())["compressor"]["id"] == "zlib"


def test_noaa_sst_file_from_eofs_converts_answers_and_says_its_codec(tmp_path):
    source = example_file("eofs", "sst_ndjfm_anom.nc")
    dest = tmp_path / "sst.zarr"
    done = subprocess.run(
        [sys.executable, "-m", "accumulus", "convert", str(source), str(dest)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "sst [50, 18, 30] float64: zstd" in done.stdout
    assert "NetCDF-3 classic has no compression to keep" in done.stdout
    assert "from NetCDF-3 classic" in done.stdout
    expected = xr.open_dataset(source).load()
    xr.testing.assert_identical(xr.open_zarr(dest).load(), expected)
    # The converted cube answers like xarray on the NOAA file.
    accumulus.accumulate(str(dest), "sst")
    box = {"latitude": (-30, 30), "time": ("1960-01-01", "1990-12-31")}
    ours = accumulus.average(str(dest), "sst", "latitude,longitude", box)
    sst = expected.sst.sel(latitude=slice(-30, 30), time=slice("1960", "1990"))
    weights = np.cos(np.deg2rad(sst.latitude.astype("f8")))
    theirs = sst.weighted(weights).mean(["latitude", "longitude"])
    np.testing.assert_allclose(ours.values, theirs.values, rtol=1e-9)


@pytest.mark.parametrize("file_format", list(FORMATS))
def test_declared_size_is_where_the_data_ends(tmp_path, file_format):
    for records in (0, 1, 4):
        source = tmp_path / f"granule{records}.nc"
        write_netcdf3(source, file_format, records=records)
        size = os.path.getsize(source)
        # netcdf-c pads the last record to 4 bytes; the padding holds no value.
        assert size - 4 < declared_size(source.read_bytes()) <= size


@pytest.mark.parametrize("cut", [1, 100, 1000])
def test_truncated_netcdf3_is_refused_and_nothing_is_written(tmp_path, cut):
    source = tmp_path / "granule.nc"
    write_netcdf3(source, "NETCDF3_64BIT_OFFSET", records=20)
    data = source.read_bytes()
    source.write_bytes(data[: declared_size(data) - cut])
    with pytest.raises(AccumulusError, match=r"granule.nc: truncated NetCDF-3 64-bit offset"):
        convert(source, tmp_path / "out" / "cube.zarr")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"CDF\x09" + bytes(40), r"not a NetCDF file .* starts with b'CDF\\t'"),
        (b"CDF\x01\x00\x00", r"not a readable NetCDF-3 classic file: the header is cut short"),
        (b"CDF\x02" + bytes(4) + b"\x00\x00\x00\x0b" + bytes(8), r"expected the dimensions list"),
    ],
)
def test_bad_netcdf3_headers_are_one_line_errors(tmp_path, content, message):
    source = tmp_path / "granule.nc"
    source.write_bytes(content)
    with pytest.raises(AccumulusError, match=message):
        convert(source, tmp_path / "cube.zarr")
    assert not (tmp_path / "cube.zarr").exists()
