"""``average`` against the full scan a user would otherwise run (xarray + Dask) on the same
store of 1 GiB or more: time-averaged maps and area-averaged time series, chunk-aligned and
unaligned, locally and through a store adding a fixed latency per request (object storage).

Prints JSON: medians, ratios measured in this run, and request/byte counts for both.

    python benchmarks/bench_average.py [--days 4018] [--repeats 5] [--latency 0.05]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import dask
import numpy as np
import pandas as pd
import xarray as xr

from accumulus import api
from accumulus.accumulation.query import run_query
from accumulus.accumulation.request import Query
from accumulus.cube import Cube
from accumulus.demo import VARIABLE, DemoConfig
from accumulus.storage import CountingStore, is_metadata_key, open_store
from common import DEFAULT_DIR, cube, median_seconds, report


def queries(config: DemoConfig) -> list[tuple[str, list[str], dict]]:
    start = pd.Timestamp(config.start)
    step = config.chunks[0]
    last_edge = (config.days // step) * step
    day = lambda i: str((start + pd.Timedelta(days=i)).date())  # noqa: E731
    return [
        # Time edges every 30 days; lat edges every 15 rows (-90, -75, ...); lon every 30.
        ("map, aligned", ["time"], {"time": (day(step), day(last_edge - 1))}),
        ("map, unaligned", ["time"], {"time": (day(45), day(config.days - 50))}),
        ("time series, aligned", ["lat", "lon"], {"lat": (-45, 45), "lon": (-120, 120)}),
        ("time series, unaligned, continent", ["lat", "lon"], {"lat": (-35, 37), "lon": (-17, 51)}),
        ("time series, unaligned, region", ["lat", "lon"], {"lat": (0, 25), "lon": (-20, 40)}),
    ]


def xarray_full_scan(store, over, ranges):
    ds = xr.open_zarr(store, consolidated=True)
    data = ds[VARIABLE].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
    return data.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(over).compute()


def counted(store: CountingStore) -> dict:
    chunks = [k for k in store.counts.reads if not is_metadata_key(k)]
    return {
        "requests": store.counts.read_requests,
        "chunks": len(chunks),
        "bytes": store.counts.read_bytes,
    }


def measure(path: Path, name, over, ranges, repeats, scan_repeats, latency=0.0) -> dict:
    def ours():
        store = CountingStore(open_store(str(path)), latency=latency)
        cube = Cube(store, str(path))  # metadata snapshot read inside the timing
        return run_query(cube, Query(VARIABLE, tuple(over), ranges)), store

    def scan():
        store = CountingStore(open_store(str(path)), latency=latency)
        return xarray_full_scan(store, over, ranges), store

    seconds, (result, our_store) = median_seconds(ours, repeats)
    scan_seconds, (expected, scan_store) = median_seconds(scan, scan_repeats)
    return {
        "query": name,
        "accumulus_seconds_median": round(seconds, 4),
        "full_scan_seconds_median": round(scan_seconds, 4),
        "speedup": round(scan_seconds / seconds, 1),
        "max_abs_difference": float(np.nanmax(np.abs(result.data.values - expected.values))),
        "accumulus": {
            **counted(our_store),
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "raw_chunks": result.stats.raw_chunks_read,
        },
        "full_scan": counted(scan_store),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=4018, help="11 years: 1.04 GiB at 1 degree")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--latency-days", type=int, default=365)
    parser.add_argument("--rebuild", action="store_true", help="rebuild the accumulations")
    args = parser.parse_args()

    config = DemoConfig(days=args.days)
    path = cube(args.dir, config)
    api.accumulate(str(path), VARIABLE, rebuild=args.rebuild)
    local = [
        measure(path, name, over, ranges, args.repeats, args.scan_repeats)
        for name, over, ranges in queries(config)
    ]
    # With latency, both sides get 16 threads (I/O bound); the period is shortened so the
    # full scan finishes in minutes.
    remote = []
    with dask.config.set(num_workers=16):
        short = DemoConfig(days=args.latency_days)
        for name, over, ranges in [queries(short)[i] for i in (1, 3, 4)]:
            remote.append(measure(path, name, over, ranges, 3, 1, latency=args.latency))
    report(
        {
            "benchmark": "average vs xarray+Dask full scan",
            "store": str(path),
            "store_gib": round(config.nbytes / 2**30, 2),
            "shape": config.shape,
            "chunks": config.chunks,
            "local": local,
            "with_latency": {"seconds_per_request": args.latency, "results": remote},
        }
    )


if __name__ == "__main__":
    main()
