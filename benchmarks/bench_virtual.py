"""Virtual cubes: what ``append --virtual`` reads and costs, against ``xarray.open_mfdataset``
of the same granules (the way a user combines them without accumulus).

The granules are monthly NetCDF4 files as netCDF4 writes them (deflate + shuffle, one HDF5
chunk per month, a ``_FillValue``): a daily 1-degree grid, 28–31 days each, about 8 MB of
values per granule. They are written once and cached under ``benchmark-data/``.

Reported (JSON): the median time to reference all granules (``append_virtual`` into a new
reference file) and to add one more to an existing set; the bytes read from the granules
against their size (the floor is reading nothing but what locates the chunks); the median
time of ``open_mfdataset`` on the same files (metadata and coordinates only, no values), and
one full read of the values through the reference set against the same read through
``open_mfdataset``.

    python benchmarks/bench_virtual.py [--granules 120] [--repeats 3]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr
import zarr

from accumulus.ingest.virtual import append_virtual
from common import DEFAULT_DIR, median_seconds, report

NLAT, NLON = 180, 360


def granules(directory: Path, count: int) -> list[Path]:
    """``count`` monthly granules from January 2001, written once."""
    folder = directory / f"virtual-granules-{NLAT}x{NLON}"
    folder.mkdir(parents=True, exist_ok=True)
    lat = np.linspace(-89.5, 89.5, NLAT)
    lon = np.linspace(0.5, 359.5, NLON)
    paths = []
    for k in range(count):
        start = pd.Timestamp(2001, 1, 1) + pd.DateOffset(months=k)
        path = folder / f"precip-{start:%Y-%m}.nc"
        paths.append(path)
        if path.exists():
            continue
        days = start.days_in_month
        rng = np.random.default_rng(k)
        # Smooth fields with noise compress as real precipitation does (about 2:1).
        base = np.cos(np.deg2rad(lat))[:, None] * (1 + np.sin(np.deg2rad(lon))[None, :])
        values = (base[None] * rng.gamma(2.0, 2.0, (days, 1, 1))).astype("f4")
        values += rng.normal(0, 0.05, values.shape).astype("f4")
        values[rng.random(values.shape) < 0.05] = -9999.0
        partial = path.with_suffix(".part")
        with netCDF4.Dataset(partial, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", NLAT)
            ds.createDimension("lon", NLON)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "days since 2001-01-01", "standard"
            t[:] = (start - pd.Timestamp("2001-01-01")).days + np.arange(days)
            ds.createVariable("lat", "f4", ("lat",))[:] = lat
            ds.createVariable("lon", "f4", ("lon",))[:] = lon
            v = ds.createVariable(
                "precip",
                "f4",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=1,
                shuffle=True,
                chunksizes=(days, NLAT, NLON),
                fill_value=-9999.0,
            )
            v.units = "mm/day"
            v[:] = values
        partial.rename(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--granules", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    files = granules(args.data, args.granules)
    total_bytes = sum(p.stat().st_size for p in files)
    work = Path(tempfile.mkdtemp(prefix="bench-virtual-"))

    def reference_all():
        out = work / f"all-{time.perf_counter_ns()}.json"
        return append_virtual(out, files)

    seconds_all, result = median_seconds(reference_all, args.repeats)
    base = work / "base.json"
    append_virtual(base, files[:-1])

    def add_one():
        copy = work / f"one-{time.perf_counter_ns()}.json"
        copy.write_bytes(base.read_bytes())
        return append_virtual(copy, files[-1:])

    seconds_one, one = median_seconds(add_one, args.repeats)

    def mfdataset():
        with xr.open_mfdataset(files) as ds:
            return ds.sizes["time"]

    seconds_mf, steps = median_seconds(mfdataset, args.repeats)
    assert steps == result.extent[1]

    def read_virtual():
        with zarr.config.set({"array.rectilinear_chunks": True}):
            opened = xr.open_dataset(
                "reference://",
                engine="zarr",
                chunks={},
                backend_kwargs={"consolidated": False, "storage_options": {"fo": str(base)}},
            )
            return float(opened.precip.sum())

    def read_mf():
        with xr.open_mfdataset(files[:-1]) as ds:
            return float(ds.precip.sum())

    seconds_read_virtual, total_virtual = median_seconds(read_virtual, 1)
    seconds_read_mf, total_mf = median_seconds(read_mf, 1)
    assert np.isclose(total_virtual, total_mf, rtol=1e-6)
    report(
        {
            "benchmark": "virtual cube over monthly NetCDF4 granules",
            "granules": len(files),
            "grid": f"daily, {NLAT}x{NLON}, one HDF5 chunk per month",
            "granule_bytes": total_bytes,
            "reference_all": {
                "median_seconds": round(seconds_all, 3),
                "bytes_read": result.bytes_read,
                "bytes_read_share": round(result.bytes_read / total_bytes, 5),
                "floor": "the HDF5 superblock, object headers and chunk index of each granule",
            },
            "append_one": {
                "median_seconds": round(seconds_one, 3),
                "bytes_read": one.bytes_read,
                "bytes_read_share": round(one.bytes_read / one.granule_bytes, 5),
            },
            "open_mfdataset": {"median_seconds": round(seconds_mf, 3)},
            "ratio_reference_all_to_open_mfdataset": round(seconds_all / seconds_mf, 2),
            "full_read_seconds": {
                "through_references": round(seconds_read_virtual, 2),
                "open_mfdataset": round(seconds_read_mf, 2),
            },
        }
    )


if __name__ == "__main__":
    main()
