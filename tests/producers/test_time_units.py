"""Time units xarray cannot decode as written (issue 34 item 7).

- CCSM ``b003_TS``: ``days since 0000-00-00 00:00:00``, calendar ``365_days``. What it means
  is clear, and its own ``date`` variable (YYYYMMDD) says so: day 6113 is 0016-10-01 in a
  365-day calendar counted from the start of year 0. The cube stores it in the spelling
  xarray reads (``days since 0000-01-01``, ``365_day``).
- NCEP ``hgt``: ``months since 1958-1-1`` on the standard calendar, where a month has no
  length: refused in one line. ``append`` used to end in a traceback, exit 1, leaving a cube
  of length 0 with a chunk written.
"""

from __future__ import annotations

import cftime
import netCDF4
import numpy as np
import xarray as xr

from command_line import files, refused

from .commands import answer, assert_close, copy, cos_weighted_mean, ok


def ccsm_source(path) -> xr.Dataset:
    """The file as xarray reads it, times from its ``date`` variable (not from its units)."""
    dataset = xr.open_dataset(path, decode_times=False)
    dates = [
        cftime.DatetimeNoLeap(d // 10000, d // 100 % 100, d % 100)
        for d in dataset["date"].values.tolist()
    ]
    return dataset.assign_coords(time=("time", dates))


def test_ccsm_times(tmp_path, capsys, monkeypatch):
    source = copy("b003_TS_200-299_subset.nc", tmp_path)
    cube = tmp_path / "ccsm.zarr"
    ok(capsys, monkeypatch, "append", str(cube), str(source), "--chunks", "time=12")
    ours = xr.open_zarr(cube)
    theirs = ccsm_source(source)
    assert ours["time"].encoding["calendar"] == "365_day"
    assert list(ours["time"].values) == list(theirs["time"].values)  # = the date variable
    assert ours["time"].values[0] == cftime.DatetimeNoLeap(16, 10, 1)

    ok(capsys, monkeypatch, "accumulate", str(cube), "TS")
    series, document = answer(
        capsys, monkeypatch, str(cube), "TS", "--over", "lat,lon",
        "--range", "time=0017-01-01/0018-12-31", "--plan", "accumulation",
    )  # fmt: skip
    assert document["plan"]["accumulation_chunks_read"] > 0
    years = theirs["TS"].sel(time=slice(cftime.DatetimeNoLeap(17, 1, 1), None)).isel(time=slice(24))
    assert_close(series, cos_weighted_mean(years, ["lat", "lon"], "lat"))
    time_map, _ = answer(capsys, monkeypatch, str(cube), "TS", "--over", "time")
    assert_close(time_map, theirs["TS"].astype("f8").mean("time").values)

    out = ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(source))
    assert out.strip() == f"{source}: OK (6 variables, 36 steps as xarray decodes the file)"


def test_ccsm_times_in_a_netcdf4_copy_virtual(tmp_path, capsys, monkeypatch):
    """The same file as NetCDF-4 (nccopy -k nc4 would make it so), referenced in place."""
    classic = copy("b003_TS_200-299_subset.nc", tmp_path)
    source = tmp_path / "b003_nc4.nc"
    with netCDF4.Dataset(classic) as old, netCDF4.Dataset(source, "w") as new:
        old.set_auto_maskandscale(False)
        new.setncatts({a: old.getncattr(a) for a in old.ncattrs()})
        for name, dim in old.dimensions.items():
            new.createDimension(name, None if dim.isunlimited() else len(dim))
        for name, var in old.variables.items():
            chunks = tuple(1 if d == "time" else len(old.dimensions[d]) for d in var.dimensions)
            copied = new.createVariable(name, var.dtype, var.dimensions, chunksizes=chunks or None)
            copied.setncatts({a: var.getncattr(a) for a in var.ncattrs()})
            copied[...] = var[...]
    refs = tmp_path / "ccsm.json"
    side = tmp_path / "side.zarr"
    ok(capsys, monkeypatch, "append", str(refs), str(source), "--virtual")
    ok(capsys, monkeypatch, "accumulate", str(refs), "TS", "--into", str(side))
    theirs = ccsm_source(source)
    series, _ = answer(
        capsys, monkeypatch, str(refs), "TS", "--over", "lat,lon", "--accumulations", str(side)
    )
    assert_close(series, cos_weighted_mean(theirs["TS"], ["lat", "lon"], "lat"))
    out = ok(capsys, monkeypatch, "verify", str(refs), "--sources", str(source))
    assert "OK (6 variables, 36 steps" in out


def test_months_on_a_standard_calendar_are_refused(tmp_path, capsys, monkeypatch):
    source = copy("hgt_subset.nc", tmp_path)
    cube = tmp_path / "hgt.zarr"
    message = refused(capsys, monkeypatch, "append", str(cube), str(source))
    assert message.startswith(f"error: granule {source}: variable 'time' has time units ")
    assert "'months since 1958-1-1 00:00:00'" in message and "360_day" in message
    assert not cube.exists()

    # Nor into an existing cube: it stays as it was.
    other = copy("b003_TS_200-299_subset.nc", tmp_path)
    ok(capsys, monkeypatch, "append", str(cube), str(other))
    before = files(cube)
    refused(capsys, monkeypatch, "append", str(cube), str(source))
    assert files(cube) == before
    assert np.asarray(xr.open_zarr(cube)["TS"].shape).tolist() == [36, 16, 32]
