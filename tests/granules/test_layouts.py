"""The fixtures are written in the layouts of the real files: the IMERG granule's structure
compared object by object with the one recorded from a real V07A granule."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import netCDF4
import numpy as np

from .headers import summary
from .layouts import IMERG_TIME_UNITS, ImergGrid, write_era5, write_imerg, write_merra2, write_oisst

RECORDED = Path(__file__).parents[1] / "data" / "imerg_v07a_header.json"
DAY = dt.date(2000, 6, 1)


def recorded() -> dict:
    return json.loads(RECORDED.read_text())["objects"]


def test_imerg_half_hourly_granule_has_the_real_structure(tmp_path):
    written = summary(str(write_imerg(tmp_path, dt.datetime(2000, 6, 1))))
    real = recorded()
    assert sorted(written) == sorted(real)
    for path, node in real.items():
        assert written[path] == node, path  # types, scales, chunking, filters, attributes


def test_imerg_daily_granule_shares_the_grid_layout(tmp_path):
    daily = summary(str(write_imerg(tmp_path, dt.datetime(2000, 6, 1), daily=True)))
    real = recorded()
    shared = [p for p in real if not p.startswith("Grid/") or "/" not in p[5:]]
    for path in shared:
        if path in ("Grid/precipitationQualityIndex", "Grid/Intermediate"):
            continue  # half-hourly products only
        assert daily[path]["kind"] == real[path]["kind"], path
        assert set(daily[path]["attrs"]) == set(real[path]["attrs"]), path
    assert daily["Grid/time"]["attrs"]["calendar"]["value"] == "julian"
    assert daily["Grid/precipitation"]["attrs"]["units"]["value"] == "mm/day"
    assert daily["Grid/precipitation_cnt"]["dims"] == real["Grid/precipitation"]["dims"]


def test_imerg_reads_in_netcdf_as_in_the_real_file(tmp_path):
    path = write_imerg(tmp_path, dt.datetime(2000, 6, 1, 0, 30), grid=ImergGrid.regular(20, 10))
    with netCDF4.Dataset(path) as nc:
        grid = nc["Grid"]
        assert sorted(grid.dimensions) == ["lat", "latv", "lon", "lonv", "nv", "time"]
        assert grid["precipitation"].dimensions == ("time", "lon", "lat")
        assert nc["Grid/Intermediate"]["IRprecipitation"].dimensions == ("time", "lon", "lat")
        time = grid["time"]
        assert (time.units, time.calendar, time.bounds) == (IMERG_TIME_UNITS, "julian", "time_bnds")
        # 2000-06-01 00:30 in seconds since 1980-01-06 on the julian calendar, as the real
        # granule of 00:00 holds 643852800.
        assert time[:].tolist() == [643852800 + 1800]
        assert grid["time_bnds"][:].tolist() == [[643854600, 643856400]]


def test_merra2_layout(tmp_path):
    with netCDF4.Dataset(write_merra2(tmp_path, DAY)) as nc:
        assert nc.data_model == "NETCDF4" and not nc.groups
        t2m = nc["T2M"]
        assert t2m.dimensions == ("time", "lat", "lon") and t2m.dtype == np.float32
        assert t2m._FillValue == t2m.missing_value == t2m.fmissing_value == np.float32(1e15)
        assert (t2m.scale_factor, t2m.add_offset) == (1.0, 0.0)
        assert t2m.filters()["zlib"] and t2m.filters()["shuffle"]
        assert nc["time"].units == "minutes since 2000-06-01 00:30:00"
        assert nc["lon"][0] == -180 and nc["lat"][0] == -90 and nc["lat"][-1] == 90


def test_era5_layout(tmp_path):
    with netCDF4.Dataset(write_era5(tmp_path, DAY)) as nc:
        assert nc.data_model == "NETCDF3_64BIT_OFFSET"
        lat, lon = nc["latitude"][:], nc["longitude"][:]
        assert lat[0] == 90 and lat[-1] == -90 and lon[0] == 0 and lon[-1] < 360
        t2m = nc["t2m"]
        assert t2m.dtype == np.int16 and t2m._FillValue == t2m.missing_value == -32767
        assert {"scale_factor", "add_offset"} <= set(t2m.ncattrs())
        assert nc["time"].units == "hours since 1900-01-01 00:00:00.0"


def test_oisst_layout(tmp_path):
    with netCDF4.Dataset(write_oisst(tmp_path, DAY)) as nc:
        sst = nc["sst"]
        assert sst.dimensions == ("time", "zlev", "lat", "lon") and sst.dtype == np.int16
        assert sst._FillValue == -999 and sst.scale_factor == np.float32(0.01)
        assert np.ma.getmaskarray(sst[:]).any()  # land
        assert nc["time"].units == "days since 1978-01-01 12:00:00"
        assert nc["lon"][0] > 0 and nc["lon"][-1] < 360
