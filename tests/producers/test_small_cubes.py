"""Small cubes are not slower than their files (issue 34 item 9): with ``--chunking grow``
chunks along time grow with the cube, so a young cube decodes what it holds, not a chunk
sized for years of growth.

ECMWF MACC ``SMALL_total_column_co2.nc`` (31 six-hourly steps of packed int16) used to get
one chunk of 1017 steps on its first append, so that every query decoded 33 times the data;
yearly data got chunks of one step. Each file here is appended in 4 granules (in one call,
or one call per granule as a daily job would), accumulated, averaged as a box series and as
a map, and verified against its source, every answer compared with xarray's on the original
file. The sub-daily file is a vendored subset of the producer's (every other row and column);
``benchmarks/bench_small_cubes.py`` times the whole file.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr

from accumulus.grid import declared_chunk_sizes
from accumulus.scope import accumulus_scope

from .commands import answer, assert_close, copy, cos_weighted_mean, ok

# (file, variable, box of the series, the time chunks 4 granules make)
CO2 = ("SMALL_total_column_co2_subset.nc", "tcco2", ("latitude=20/60", "longitude=0/90"))
YEARLY = ("tas_mod1_hist_rectilin_grid_2D.nc", "tas", ("lat=-10/10", "lon=-10/10"))
DAILY = ("daily_by_xarray.nc", "precip", ("lat=-30/30", "lon=100/200"))
CASES = {
    "six-hourly": (*CO2, (8, 8, 16)),  # granules of 8, 8, 7, 8 steps
    "daily": (*DAILY, (10, 10, 20)),  # 40 days in granules of 10
    "yearly": (*YEARLY, (14, 14, 28)),  # 56 years in granules of 14
}


def daily_file(path: Path) -> Path:
    """40 days of a 2-degree grid, written by xarray (float32, NaN where missing)."""
    rng = np.random.default_rng(9)
    values = rng.gamma(0.6, 4.0, size=(40, 90, 180)).astype("f4")
    values[rng.random(values.shape) < 0.05] = np.nan
    dataset = xr.Dataset(
        {"precip": (("time", "lat", "lon"), values, {"units": "mm/day"})},
        coords={
            "time": pd.date_range("2003-01-01T12:00", periods=40, freq="D"),
            "lat": ("lat", np.arange(-89.0, 90.0, 2.0), {"units": "degrees_north"}),
            "lon": ("lon", np.arange(1.0, 360.0, 2.0), {"units": "degrees_east"}),
        },
    )
    dataset.to_netcdf(path, encoding={"time": {"units": "hours since 2003-01-01"}})
    return path


def granules(source: Path, directory: Path, n: int) -> list[Path]:
    """``source`` cut along time into ``n`` files, its stored numbers, types, attributes and
    fill values copied as stored."""
    paths = []
    with netCDF4.Dataset(source) as src:
        src.set_auto_maskandscale(False)
        length = len(src.dimensions["time"])
        edges = np.linspace(0, length, n + 1).round().astype(int)
        for k, (start, stop) in enumerate(itertools.pairwise(edges)):
            path = directory / f"{source.stem}.{k}.nc"
            with netCDF4.Dataset(path, "w", format=src.file_format) as dst:
                dst.setncatts({a: src.getncattr(a) for a in src.ncattrs()})
                for name, dim in src.dimensions.items():
                    size = stop - start if name == "time" else len(dim)
                    dst.createDimension(name, None if dim.isunlimited() else size)
                for name, var in src.variables.items():
                    attrs = {a: var.getncattr(a) for a in var.ncattrs()}
                    out = dst.createVariable(
                        name, var.dtype, var.dimensions, fill_value=attrs.pop("_FillValue", None)
                    )
                    out.set_auto_maskandscale(False)
                    out.setncatts(attrs)
                    part = "time" in var.dimensions
                    out[...] = var[start:stop] if part else var[...]
            paths.append(path)
    return paths


def time_chunks(cube: Path, variable: str) -> tuple[int, ...]:
    with accumulus_scope():
        array = zarr.open_array(cube / variable, mode="r")
        return declared_chunk_sizes(array, 0)


@pytest.mark.parametrize("one_call", [True, False], ids=["one call", "a call per granule"])
@pytest.mark.parametrize("cadence", list(CASES))
def test_a_small_cube_decodes_what_it_holds(tmp_path, capsys, monkeypatch, cadence, one_call):
    name, variable, box, chunks = CASES[cadence]
    source = daily_file(tmp_path / name) if name == DAILY[0] else copy(name, tmp_path)
    parts = granules(source, tmp_path, 4)
    cube = tmp_path / "cube.zarr"
    if one_call:
        ok(capsys, monkeypatch, "append", str(cube), *map(str, parts), "--chunking", "grow")
    else:
        for part in parts:  # resumed every time, as a daily job does
            ok(capsys, monkeypatch, "append", str(cube), str(part), "--chunking", "grow")
    theirs = xr.open_dataset(source)
    length = theirs.sizes["time"]
    # Each new chunk is as long as the cube before it (or what arrives, if more): at most
    # twice what the cube holds is ever decoded, and the chunks are the same however the
    # granules came.
    assert time_chunks(cube, variable) == chunks
    assert length <= sum(chunks) < 2 * length

    ok(capsys, monkeypatch, "accumulate", str(cube), variable)
    lat, lon = (b.split("=")[0] for b in box)
    ranges = [arg for b in box for arg in ("--range", b)]
    series, _ = answer(capsys, monkeypatch, str(cube), variable, "--over", f"{lat},{lon}", *ranges)
    (south, north), (west, east) = (map(float, b.split("=")[1].split("/")) for b in box)
    data = theirs[variable]
    inside = data.where(
        (data[lat] >= south) & (data[lat] <= north) & (data[lon] >= west) & (data[lon] <= east),
        drop=True,
    )
    assert_close(series, cos_weighted_mean(inside, [lat, lon], lat))
    time_map, _ = answer(capsys, monkeypatch, str(cube), variable, "--over", "time")
    assert_close(time_map, data.astype("f8").mean("time").values)

    out = ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(source))
    assert out.strip().startswith(f"{source}: OK (")
    assert f"{length} steps as xarray decodes the file" in out
