"""Appending to cubes that `append` did not create: written by xarray's ``to_zarr`` or by
netcdf-c (NCZarr). The first append adopts the cube as it stands, then appends as usual."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.stores.opening import open_store

from .helpers import VAR, snapshot, truth, write_granule


def decoded(store) -> xr.Dataset:
    return xr.open_zarr(open_store(str(store)), consolidated=None).load()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_append_to_a_cube_written_by_xarray(tmp_path, zarr_format):
    t = truth(20)
    store = tmp_path / "cube.zarr"
    first = xr.open_dataset(write_granule(tmp_path / "a.nc", t, 0, 8))
    for v in first.variables.values():
        v.encoding.pop("chunksizes", None)
        v.encoding.pop("contiguous", None)
    first[VAR].encoding["chunks"] = (3, 6, 8)
    first.to_zarr(store, zarr_format=zarr_format, consolidated=True)
    accumulus.accumulate(str(store), VAR)

    result = accumulus.append(
        str(store),
        [write_granule(tmp_path / "b.nc", t, 8, 14), write_granule(tmp_path / "c.nc", t, 14, 20)],
    )
    assert "adopted" in result.recovered
    assert result.extent == (8, 20)
    ds = decoded(store)
    xr.testing.assert_allclose(ds[VAR], t.decoded()[VAR])
    assert VAR in result.accumulations
    [report] = accumulus.verify(str(store), VAR)
    assert report.ok, report.problems
    got = accumulus.average(str(store), VAR, ["lat", "lon"])
    raw = ds[VAR].astype("f8")  # xarray on the raw data as stored
    expected = raw.weighted(np.cos(np.deg2rad(raw["lat"].astype("f8")))).mean(["lat", "lon"])
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
    # Adopted once: the next append goes through the journal like any other.
    again = accumulus.append(str(store), write_granule(tmp_path / "c2.nc", t, 14, 20))
    assert again.appended == () and again.recovered == ""


def test_append_to_an_nczarr_store_written_by_netcdf_c(tmp_path):
    t = truth(12)
    store = tmp_path / "nc.zarr"
    with netCDF4.Dataset(f"file://{store}#mode=nczarr,file", "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("lat", len(t.lat))
        nc.createDimension("lon", len(t.lon))
        nc.createDimension("nv", 2)
        time = nc.createVariable("time", "i4", ("time",))
        time.units, time.calendar = "hours since 2000-03-01 12:00:00", "standard"
        time.bounds = "time_bnds"
        bounds = nc.createVariable("time_bnds", "i4", ("time", "nv"))
        nc.createVariable("lat", "f4", ("lat",))[:] = t.lat
        nc.createVariable("lon", "f4", ("lon",))[:] = t.lon
        nc["lat"].units, nc["lon"].units = "degrees_north", "degrees_east"
        var = nc.createVariable(
            VAR, "i2", ("time", "lat", "lon"), zlib=True, shuffle=True,
            chunksizes=(4, len(t.lat), len(t.lon)), fill_value=-999,
        )  # fmt: skip
        var.set_auto_maskandscale(False)
        var.scale_factor, var.add_offset, var.units = 0.01, 0.0, "mm/hr"
        time[:] = t.hours[:6]
        bounds[:] = np.stack([t.hours[:6], t.hours[:6] + 3], axis=1)
        var[:6] = t.packed[:6]
    result = accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 6, 12))
    assert result.extent == (6, 12)
    xr.testing.assert_allclose(decoded(store)[VAR], t.decoded()[VAR])
    # netcdf-c still reads the store, old and new steps alike.
    with netCDF4.Dataset(f"file://{store}#mode=nczarr,file") as nc:
        np.testing.assert_allclose(nc[VAR][:], t.decoded()[VAR].values, rtol=1e-6)


def test_a_store_without_the_append_dimension_is_refused_unchanged(tmp_path):
    t = truth(8)
    other = tmp_path / "other.zarr"
    xr.Dataset({"x": ("y", [1.0, 2.0])}).to_zarr(other, zarr_format=2)
    before = snapshot(other)
    with pytest.raises(accumulus.AccumulusError, match="no array has the dimension 'time'"):
        accumulus.append(str(other), write_granule(tmp_path / "a.nc", t, 0, 4))
    assert snapshot(other) == before
