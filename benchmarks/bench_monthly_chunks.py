"""Whole-month time averages on a daily cube: regular chunks vs one chunk per month.

Builds a daily cube (regular 10-day chunks, Zarr v2), rechunks it by calendar month with
``accumulus.rechunk`` (Zarr v3), builds the same accumulations on both, then asks for the
time-averaged map of every whole month, and of random whole-month runs, on each. Reports,
per layout, the raw and accumulation chunks read, bytes, requests and the median seconds per
query (with and without a simulated object-store latency per request), next to the baseline
a user would otherwise run: xarray + Dask over the same store. Every answer is checked
against that baseline. Prints one JSON document.

    python benchmarks/bench_monthly_chunks.py [--years 3] [--lat 90] [--lon 180]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

import accumulus
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.raw_cube import RawCube

VAR = "precip"


def make_cube(path: Path, years: int, nlat: int, nlon: int) -> xr.Dataset:
    times = pd.date_range("2003-01-01", f"{2003 + years - 1}-12-31", freq="D")
    rng = np.random.default_rng(0)
    values = rng.gamma(2.0, 2.0, size=(len(times), nlat, nlon)).astype("f4")
    values[rng.random(values.shape) < 0.05] = np.nan
    ds = xr.Dataset(
        {VAR: (("time", "lat", "lon"), values, {"units": "mm/day"})},
        coords={
            "time": times,
            "lat": np.linspace(-89.0, 89.0, nlat),
            "lon": np.linspace(-179.0, 179.0, nlon),
        },
    )
    ds["lat"].attrs.update(units="degrees_north", standard_name="latitude")
    encoding = {VAR: {"chunks": (10, nlat, nlon), "_FillValue": -9999.0}}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True, encoding=encoding)
    return ds


def month_ranges(ds: xr.Dataset, runs: int) -> list[tuple[str, str]]:
    """Every single month, plus ``runs`` random runs of whole months, as inclusive dates."""
    starts = pd.date_range(ds.time.values[0], ds.time.values[-1], freq="MS")
    ends = [s + pd.offsets.MonthEnd(0) for s in starts]
    ranges = [(str(s.date()), str(e.date())) for s, e in zip(starts, ends, strict=True)]
    rng = np.random.default_rng(1)
    for _ in range(runs):
        a, b = sorted(rng.choice(len(starts), size=2, replace=False))
        ranges.append((str(starts[a].date()), str(ends[b].date())))
    return ranges


def baseline(path: Path, ranges: list[tuple[str, str]]) -> tuple[list[np.ndarray], float]:
    """xarray + Dask over the store: answers and median seconds per query."""
    answers, seconds = [], []
    ds = xr.open_zarr(path)
    weights = np.cos(np.deg2rad(ds["lat"]))
    for start, end in ranges:
        began = time.perf_counter()
        data = ds[VAR].sel(time=slice(start, end)).astype("f8")
        answers.append(data.weighted(weights).mean("time").values)
        seconds.append(time.perf_counter() - began)
    return answers, statistics.median(seconds)


def measure(
    path: Path, ranges: list[tuple[str, str]], expected: list[np.ndarray], latency: float
) -> dict:
    cube = RawCube.open(str(path))
    stats, seconds = [], []
    for (start, end), answer in zip(ranges, expected, strict=True):
        result = run_query(cube, Query(VAR, ("time",), {"time": (start, end)}), latency=latency)
        np.testing.assert_allclose(result.data.values, answer, rtol=1e-9, atol=1e-12)
        stats.append(result.stats)
        seconds.append(result.stats.seconds)
    return {
        "raw_chunks_read_total": sum(s.raw_chunks_read for s in stats),
        "queries_reading_raw_chunks": sum(s.raw_chunks_read > 0 for s in stats),
        "accumulation_chunks_read_total": sum(s.accumulation_chunks_read for s in stats),
        "bytes_read_median": statistics.median(s.bytes_read for s in stats),
        "requests_median": statistics.median(s.requests for s in stats),
        "seconds_median": statistics.median(seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--years", type=int, default=3)
    parser.add_argument("--lat", type=int, default=90)
    parser.add_argument("--lon", type=int, default=180)
    parser.add_argument("--runs", type=int, default=12, help="random whole-month runs")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        regular, monthly = Path(folder) / "regular.zarr", Path(folder) / "monthly.zarr"
        ds = make_cube(regular, args.years, args.lat, args.lon)
        accumulus.accumulate(str(regular), VAR, [("time",), ("lat", "lon")], weights="area")
        began = time.perf_counter()
        accumulus.rechunk(str(regular), str(monthly), "time=month")
        rechunk_seconds = time.perf_counter() - began
        ranges = month_ranges(ds, args.runs)
        expected, xarray_seconds = baseline(monthly, ranges)

        report = {
            "cube": {"shape": list(ds[VAR].shape), "dtype": "float32", "years": args.years},
            "queries": len(ranges),
            "rechunk_seconds": round(rechunk_seconds, 3),
            "xarray_dask_seconds_median": round(xarray_seconds, 6),
            "layouts": {},
        }
        for name, path in (("regular_10_day", regular), ("monthly", monthly)):
            local = measure(path, ranges, expected, 0.0)
            remote = measure(path, ranges, expected, args.latency)
            report["layouts"][name] = {
                **local,
                "seconds_median_with_latency": remote["seconds_median"],
                "speedup_vs_xarray": round(xarray_seconds / local["seconds_median"], 1),
            }
        report["latency_per_request"] = args.latency
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
