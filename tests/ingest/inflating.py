"""Granules that declare more than they hold (issue 35 item 4), for the tests and for
benchmarks/bench_ingest_bounds.py."""

from __future__ import annotations

from pathlib import Path

import netCDF4


def declares_a_billion_squared(path: Path) -> Path:
    """9.5 KB on disk: 10^9 latitudes and longitudes, coordinates included, none written."""
    with netCDF4.Dataset(path, "w") as file:
        file.createDimension("time", 1)
        file.createDimension("lat", 10**9)
        file.createDimension("lon", 10**9)
        time = file.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01"
        time[:] = [0]
        file.createVariable("lat", "f8", ("lat",))
        file.createVariable("lon", "f8", ("lon",))
        chunks = (1, 1000, 1000)
        file.createVariable("x", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=chunks)
    return path
