"""Daily datacubes in several calendars, and the references the tests hold accumulus to:
month and year lengths counted by xarray's ``resample`` (an independent path from the
``.dt`` accessors ``accumulus.grid`` uses), answers computed by xarray on the raw data."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

VAR = "precip"


@pytest.fixture(autouse=True)
def rectilinear_chunks():
    """These tests also read and write variable chunk grids with zarr itself, which needs
    zarr's setting on (accumulus turns it on for its own calls only)."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


# (calendar, first day, days): a leap year in each calendar that has one, and the 360-day
# calendar whose months are all 30 days.
CALENDARS = [
    ("standard", "2003-11-01", 200),  # through February 2004 (29 days)
    ("noleap", "2003-11-01", 200),  # February 2004 has 28 days
    ("360_day", "2003-11-01", 200),
]


def daily_times(calendar: str, start: str, days: int, freq: str = "D") -> np.ndarray:
    """Daily (or ``freq``) times in ``calendar``: datetime64 for the standard calendar, cftime
    objects otherwise, as xarray decodes them."""
    use_cftime = calendar not in ("standard", "gregorian", "proleptic_gregorian")
    times = xr.date_range(start, periods=days, freq=freq, calendar=calendar, use_cftime=use_cftime)
    return np.asarray(times)


def daily_dataset(
    calendar: str, start: str, days: int, *, lat: int = 6, lon: int = 5, seed: int = 0
) -> xr.Dataset:
    """Positive random values with NaN holes on a daily time axis of ``calendar``."""
    rng = np.random.default_rng(seed)
    values = rng.uniform(0.1, 10.0, size=(days, lat, lon)).astype("f4")
    values[rng.random(values.shape) < 0.1] = np.nan
    ds = xr.Dataset(
        {VAR: (("time", "lat", "lon"), values, {"units": "mm/day", "long_name": "rain"})},
        coords={
            "time": daily_times(calendar, start, days),
            "lat": np.linspace(-60, 60, lat),
            "lon": np.arange(lon, dtype="f8") * 2.5,
        },
        attrs={"title": "test cube", "source": "accumulus tests"},
    )
    ds["lat"].attrs.update(units="degrees_north", standard_name="latitude")
    ds["time"].encoding.update(units="days since 2000-01-01", calendar=calendar)
    return ds


def write_regular(ds: xr.Dataset, path: Path, time_chunk: int, zarr_format: int = 2) -> None:
    """``ds`` as xarray writes a cube: regular chunks, _FillValue, consolidated metadata."""
    encoding = {VAR: {"chunks": (time_chunk, ds.sizes["lat"], ds.sizes["lon"])}}
    encoding[VAR]["_FillValue"] = -9999.0
    ds.to_zarr(path, mode="w", zarr_format=zarr_format, consolidated=True, encoding=encoding)


def period_counts(times: np.ndarray, freq: str) -> list[int]:
    """Values per calendar month ("MS") or year ("YS"), by xarray's resample."""
    ones = xr.DataArray(np.ones(len(times)), coords={"time": times}, dims="time")
    counts = ones.resample(time=freq).count().values
    return [int(c) for c in counts if c]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, check=False
    )
