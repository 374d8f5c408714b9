"""Monthly granules as data centers ship them, written by the real writers: netCDF4
(netcdf-c: deflate + shuffle, a ``_FillValue``, one HDF5 chunk per month) and h5py
(dimension scales, fletcher32), each month its own length (28, 30 or 31 days)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pandas as pd
import xarray as xr

VAR = "precip"
FILL = -9999.0
NLAT, NLON = 18, 36
LAT = np.linspace(-85, 85, NLAT)
LON = np.arange(NLON) * 10.0


def month_values(
    year: int, month: int, seed: int, units: str = "days since 2010-01-01"
) -> tuple[np.ndarray, np.ndarray]:
    """(times in ``units``, values with about 10 % missing as FILL) for one month."""
    start = pd.Timestamp(year, month, 1)
    dates = pd.date_range(start, periods=start.days_in_month, freq="D").to_pydatetime()
    times = netCDF4.date2num(list(dates), units, calendar="standard")
    rng = np.random.default_rng(seed)
    values = rng.gamma(2.0, 2.0, (len(dates), NLAT, NLON)).astype("f4")
    values[rng.random(values.shape) < 0.1] = FILL
    return np.asarray(times, dtype="f8"), values


def netcdf4_granule(
    path: Path,
    year: int,
    month: int,
    *,
    seed: int = 0,
    units: str = "days since 2010-01-01",
    chunk_time: int | None = None,
    chunk_lat: int = NLAT,
    dtype: str = "f4",
    zlib: bool = True,
    extra_variable: bool = False,
    fill_value: float = FILL,
) -> Path:
    """One month written by netCDF4; ``chunk_time`` default: the whole month, one chunk."""
    days, values = month_values(year, month, seed, units)
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "test granule"
        ds.createDimension("time", None)
        ds.createDimension("lat", NLAT)
        ds.createDimension("lon", NLON)
        time = ds.createVariable("time", "f8", ("time",))
        time.units, time.calendar = units, "standard"
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat.units, lat[:] = "degrees_north", LAT
        lon = ds.createVariable("lon", "f4", ("lon",))
        lon.units, lon[:] = "degrees_east", LON
        var = ds.createVariable(
            VAR,
            dtype,
            ("time", "lat", "lon"),
            zlib=zlib,
            shuffle=zlib,
            chunksizes=(chunk_time or len(days), chunk_lat, NLON),
            fill_value=fill_value,
        )
        var.units = "mm/day"
        time[:] = days
        var[:] = np.where(values == FILL, fill_value, values).astype(dtype)
        if extra_variable:
            ds.createVariable("other", "f4", ("time", "lat", "lon"))[:] = values
    return path


def h5py_granule(path: Path, year: int, month: int, *, seed: int = 0) -> Path:
    """One month written by h5py: dimension scales, deflate + shuffle + fletcher32."""
    days, values = month_values(year, month, seed)
    with h5py.File(path, "w") as f:
        f.attrs["title"] = "test granule (h5py)"
        time = f.create_dataset("time", data=days, maxshape=(None,), chunks=(len(days),))
        time.attrs["units"] = "days since 2010-01-01"
        time.attrs["calendar"] = "standard"
        lat = f.create_dataset("lat", data=LAT.astype("f4"))
        lat.attrs["units"] = "degrees_north"
        lon = f.create_dataset("lon", data=LON.astype("f4"))
        lon.attrs["units"] = "degrees_east"
        for scale, name in ((time, "time"), (lat, "lat"), (lon, "lon")):
            scale.make_scale(name)
        var = f.create_dataset(
            VAR,
            data=values,
            chunks=(len(days), 6, NLON),
            compression="gzip",
            shuffle=True,
            fletcher32=True,
            fillvalue=np.float32(FILL),
        )
        var.attrs["_FillValue"] = np.float32(FILL)
        var.attrs["units"] = "mm/day"
        for axis, scale in enumerate((time, lat, lon)):
            var.dims[axis].attach_scale(scale)
    return path


def monthly_granules(
    folder: Path, months: Sequence[int], *, writer: str = "netcdf4", year: int = 2010, **options
) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for month in months:
        path = folder / f"granule-{year}-{month:02d}.nc"
        if writer == "netcdf4":
            netcdf4_granule(path, year, month, seed=month, **options)
        else:
            h5py_granule(path, year, month, seed=month, **options)
        paths.append(path)
    return paths


def same_as_granules(virtual: xr.Dataset, granules: list[Path]) -> None:
    with xr.open_mfdataset(granules) as expected:
        expected = expected.load()
    virtual = virtual.copy()
    virtual.attrs.pop("accumulus", None)
    xr.testing.assert_identical(virtual, expected)
