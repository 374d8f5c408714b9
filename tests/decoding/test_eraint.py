"""Issue 18's report, reproduced: ERA-Interim's ``eraint_uvz.nc`` (NetCDF-3, int16 packed with
negative scale factors, ``_FillValue = NaN`` on the integers) appended along ``month`` turned
the NaN into a fill value of 0, so every valid packed 0 of ``v`` read back as missing. The
fixture rebuilds the file's encoding field by field (``eraint.py``); the original is tried
too when ``ACCUMULUS_ERAINT_UVZ`` names a copy (github.com/pydata/xarray-data, not vendored:
it states no licence)."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
import scipy.io
import xarray as xr

import accumulus
from accumulus.ingest.convert import convert
from ingest.helpers import cli

from .eraint import PACKING, write_eraint_like
from .test_decodes_like_source import assert_same_decoding, open_source

pytestmark = [
    pytest.mark.filterwarnings("ignore::xarray.SerializationWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning"),
]

REAL_FILE = os.environ.get("ACCUMULUS_ERAINT_UVZ")


@pytest.fixture(scope="module")
def eraint_like(tmp_path_factory) -> Path:
    return write_eraint_like(tmp_path_factory.mktemp("era") / "eraint_uvz.nc")


def packed_zeros(path: Path, name: str) -> int:
    with scipy.io.netcdf_file(path, mmap=False) as file:
        return int((file.variables[name].data == 0).sum())


def test_the_fixture_has_the_originals_encoding(eraint_like):
    import netCDF4

    with netCDF4.Dataset(eraint_like) as ds:
        assert ds.file_format == "NETCDF3_64BIT_OFFSET"
        assert ds["latitude"][0] == 90 and ds["latitude"][-1] == -90
        for name in ("z", "u", "v"):
            var = ds[name]
            assert var.dtype == np.int16 and var.dimensions == (
                "month",
                "level",
                "latitude",
                "longitude",
            )
            assert var.scale_factor < 0 and np.isnan(var._FillValue)
            assert isinstance(var.getncattr("_FillValue"), np.float64)
    assert packed_zeros(eraint_like, "v") > 0


def check_appended(source: Path, tmp_path: Path) -> Path:
    """Append ``source`` with the command line; every value survives, the non-conforming
    fill values are reported one line each, and averages match xarray's on the file."""
    cube = tmp_path / "era.zarr"
    result = cli("append", str(cube), str(source), "--dim", "month")
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    for name in ("z", "u", "v"):
        [line] = [w for w in warned if f"variable {name!r}" in w]
        assert source.name in line and "_FillValue nan" in line and "dropped" in line

    expected = open_source(source)
    got = xr.open_zarr(cube).load()
    assert_same_decoding(got, expected, "append")
    zeros = packed_zeros(source, "v")
    offset = PACKING["v"][4]
    assert int((got["v"] == offset).sum()) == int((expected["v"] == offset).sum()) >= zeros > 0
    assert int(got["v"].isnull().sum()) == 0

    accumulus.accumulate(str(cube), "v")
    tropics = {"latitude": (-10.0, 10.0)}
    series = accumulus.average(str(cube), "v", ["latitude", "longitude"], tropics)
    band = expected["v"].astype("f8").sel(latitude=slice(10, -10))
    weights = np.cos(np.deg2rad(band["latitude"].astype("f8")))
    want = band.weighted(weights).mean(["latitude", "longitude"])
    np.testing.assert_allclose(series.values, want.values, rtol=1e-9)

    [report] = accumulus.verify_sources(str(cube), [source])
    assert report.ok and report.steps == 2 and len(report.variables) == 7, report
    return cube


def test_append_keeps_every_value(eraint_like, tmp_path):
    check_appended(eraint_like, tmp_path)


def test_convert_keeps_every_value(eraint_like, tmp_path):
    result = cli("convert", str(eraint_like), str(tmp_path / "era.zarr"))
    assert result.returncode == 0, result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert len(warned) == 3 and all("_FillValue nan marks no value" in w for w in warned)
    got = xr.open_zarr(tmp_path / "era.zarr").load()
    assert_same_decoding(got, open_source(eraint_like), "convert")
    [report] = accumulus.verify_sources(str(tmp_path / "era.zarr"), [eraint_like])
    assert report.ok and report.steps is None


@pytest.mark.skipif(not REAL_FILE, reason="ACCUMULUS_ERAINT_UVZ names no copy of the original")
def test_append_keeps_every_value_of_the_original(tmp_path):
    check_appended(Path(REAL_FILE), tmp_path)


def test_convert_keeps_every_value_of_the_same_encoding_in_hdf5(eraint_like, tmp_path):
    """The same encoding in an HDF5 file (h5py writes the NaN fill too, where netcdf-c would
    refuse it): convert keeps every value and warns as for the NetCDF-3 file."""
    source = tmp_path / "eraint_uvz.h5"
    with scipy.io.netcdf_file(eraint_like, mmap=False) as nc3, h5py.File(source, "w") as h5:
        for name in ("longitude", "latitude", "level", "month"):
            values = nc3.variables[name].data
            scale = h5.create_dataset(name, data=values.astype(values.dtype.newbyteorder("=")))
            scale.make_scale(name)
        for name in ("z", "u", "v"):
            var = nc3.variables[name]
            data = h5.create_dataset(name, data=var.data, chunks=(1, 1, 241, 480))
            for axis, dim in enumerate(var.dimensions):
                data.dims[axis].attach_scale(h5[dim])
            for key, value in var._attributes.items():
                data.attrs[key] = value.decode() if isinstance(value, bytes) else value
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convert(source, tmp_path / "era.zarr")
    messages = [
        str(w.message) for w in caught if issubclass(w.category, accumulus.AccumulusWarning)
    ]
    assert len(messages) == 3 and all("_FillValue nan" in m for m in messages)
    assert_same_decoding(xr.open_zarr(tmp_path / "era.zarr").load(), open_source(source), "convert")


def test_verify_reports_the_lost_values_by_variable_and_range(eraint_like, tmp_path):
    """A cube written as the bug wrote it (fill value 0 on v): verify --sources names the
    variable, the count, the index range and the first difference, and exits 1."""
    cube = tmp_path / "buggy.zarr"
    with xr.open_dataset(eraint_like, decode_cf=False) as raw:
        encoded = raw.drop_encoding()
        for name in ("z", "u", "v"):
            encoded[name].attrs.pop("_FillValue")
        encoding = {"v": {"_FillValue": np.int16(0)}}
        encoded.to_zarr(cube, zarr_format=2, encoding=encoding, consolidated=True)
    result = cli("verify", str(cube), "--sources", str(eraint_like))
    assert result.returncode == 1, result.stdout + result.stderr
    [line] = result.stderr.splitlines()
    zeros = packed_zeros(eraint_like, "v")
    assert "v [month 0:2, level 0:3, latitude " in line, line
    assert f"{zeros} values differ" in line and "cube nan, source -1.46875" in line
    [report] = accumulus.verify_sources(str(cube), [eraint_like], dim="month")
    [difference] = report.differences
    with scipy.io.netcdf_file(eraint_like, mmap=False) as file:
        where = np.argwhere(file.variables["v"].data == 0)
    box = tuple(zip(where.min(axis=0).tolist(), (where.max(axis=0) + 1).tolist(), strict=True))
    assert difference.region == box and difference.count == zeros
