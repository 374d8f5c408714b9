"""Small synthetic datacubes for the service tests: a smooth, seasonal surface temperature
on a regular latitude/longitude grid, written with xarray and accumulated with accumulus."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from accumulus import api

# Chunks that do not divide the test grid (40 x 12 x 16): queries mix accumulation entries and
# partial chunks.
CHUNKS = (8, 5, 6)


def temperature(times: pd.DatetimeIndex, lat: np.ndarray, lon: np.ndarray, seed: int = 0):
    """Kelvin: warm tropics, seasons of opposite sign in each hemisphere, waves along
    longitude, a little noise, and a few missing values."""
    t, y, x = np.meshgrid(np.asarray(times.day_of_year), lat, lon, indexing="ij")
    phi = np.deg2rad(y)
    season = 12 * np.sin(phi) * np.cos(2 * np.pi * (t - 200) / 365.25)
    waves = 4 * np.sin(np.deg2rad(3 * x)) * np.cos(2 * phi)
    noise = np.random.default_rng(seed).normal(0, 0.5, t.shape)
    values = (300 - 40 * np.sin(phi) ** 2 + season + waves + noise).astype("f4")
    values[::7, 1, 2] = np.nan
    return values


def dataset(start: str, ntime: int, nlat: int, nlon: int, seed: int = 0) -> xr.Dataset:
    times = pd.date_range(start, periods=ntime, freq="D")
    lat = np.linspace(-90, 90, nlat + 1)[:-1] + 90 / nlat
    lon = np.linspace(-180, 180, nlon + 1)[:-1] + 180 / nlon
    tas = temperature(times, lat, lon, seed)
    return xr.Dataset(
        {"tas": (("time", "lat", "lon"), tas, {"units": "K", "long_name": "air temperature"})},
        coords={
            "time": times,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
    )


def write_cube(
    path: Path,
    ds: xr.Dataset,
    chunks: tuple[int, int, int],
    *,
    zarr_format: int = 3,
    consolidated: bool = True,
    accumulate: bool = True,
) -> Path:
    """Write ``ds`` as a cube (chunked ``chunks`` along time, lat, lon) and accumulate it."""
    ds.to_zarr(
        path,
        mode="w",
        encoding={"tas": {"chunks": chunks}},
        zarr_format=zarr_format,
        consolidated=consolidated,
    )
    if accumulate:
        api.accumulate(str(path), "tas")
    return path


def append_days(path: Path, ds: xr.Dataset) -> None:
    """Extend the cube along time the way xarray appends (new chunks, then metadata)."""
    ds.to_zarr(path, append_dim="time")


def area_mean(ds: xr.Dataset, over: list[str], **ranges: slice) -> xr.DataArray:
    """What an average must equal: xarray's cos(latitude)-weighted mean of the raw data."""
    data = ds.tas.astype("f8").sel(ranges)
    return data.weighted(np.cos(np.deg2rad(data.lat))).mean(over)
