"""The realistic benchmark cube: chunked as archives are, written by xarray the ordinary way.

Ten years of daily values on a 1-degree grid (3650 x 180 x 360 float32, 0.95 GB), chunks of
73 days x 90 x 90 (2.4 MB, inside Pangeo's 1-100 MB guidance), 10 % of the values missing
(NaN, xarray's default fill value), Zarr v2 with consolidated metadata and zarr's default
compression. The field is smooth in space and time with day-to-day noise, so it compresses
about as real geophysical data does. Written once under ``benchmark-data/`` and reused.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

VARIABLE = "tas"
SHAPE = (3650, 180, 360)
CHUNKS = (73, 90, 90)
MISSING = 0.10
START = "2001-01-01"


def _block(block_info: dict | None = None) -> np.ndarray:
    (t0, t1), (y0, y1), (x0, x1) = block_info[None]["array-location"]
    rng = np.random.default_rng([t0, y0, x0])
    day = np.arange(t0, t1)[:, None, None]
    lat = (-89.5 + np.arange(y0, y1))[None, :, None]
    lon = (-179.5 + np.arange(x0, x1))[None, None, :]
    season = np.cos(2 * np.pi * (day - 15) / 365.25) * np.sin(np.deg2rad(lat))
    values = 288 - 30 * np.sin(np.deg2rad(lat)) ** 2 - 12 * season
    values = values + 3 * np.sin(np.deg2rad(2 * lon)) * np.cos(np.deg2rad(lat))
    shape = (t1 - t0, y1 - y0, x1 - x0)
    values = values + rng.normal(0, 2, shape)
    values[rng.random(shape) < MISSING] = np.nan
    return values.astype("f4")


def dataset() -> xr.Dataset:
    data = da.map_blocks(
        _block, chunks=da.core.normalize_chunks(CHUNKS, SHAPE), dtype="f4",
        meta=np.array((), dtype="f4"),
    )  # fmt: skip
    return xr.Dataset(
        {VARIABLE: (("time", "lat", "lon"), data, {"units": "K", "long_name": "air temperature"})},
        coords={
            "time": pd.date_range(START, periods=SHAPE[0], freq="D"),
            "lat": ("lat", -89.5 + np.arange(SHAPE[1]), {"units": "degrees_north"}),
            "lon": ("lon", -179.5 + np.arange(SHAPE[2]), {"units": "degrees_east"}),
        },
    )


def realistic_cube(directory: Path) -> Path:
    """The cube, written once (a marker beside it records how)."""
    path = directory / "realistic-3650x180x360-73x90x90.zarr"
    marker = path.with_suffix(".config.json")
    wanted = json.dumps({"shape": SHAPE, "chunks": CHUNKS, "missing": MISSING, "version": 1})
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing the realistic benchmark cube {path} ...", file=sys.stderr)
        ds = dataset()
        ds[VARIABLE].encoding = {"chunks": CHUNKS}
        ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
        marker.write_text(wanted)
    return path
