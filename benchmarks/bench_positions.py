"""Positioned accumulations (``--at``) against chunk-end ones (ZEP 5) and xarray's full scan.

On the realistic cube of ``realistic.py`` (daily 1-degree float32, chunks 73 x 90 x 90 =
2.4 MB written by xarray; ``--days`` shortens it), for each way of placing entries:

- ``chunk``: ZEP 5 as written (time, and latitude+longitude, at chunk ends);
- ``time=1``: entries at every day (any period);
- ``time=month``: entries at month boundaries (whole months), on 73-day chunks;
- ``lat=1,lon=1``: entries at every cell (any box);

it builds the accumulation (seconds, against one full read of the raw data: a build's floor),
reports its stored bytes against the raw array's, and asks the questions it is for: medians
of an open datacube answering again, xarray + Dask's full scan of the same selection, their
ratio, the plan's raw and accumulation chunks, requests and bytes counted at the store, and
the largest difference from xarray's answer.

    python benchmarks/bench_positions.py [--days 3650] [--repeats 5] [--scan-repeats 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import xarray as xr

import accumulus
from accumulus.storage import CountingStore, is_metadata_key, open_store
from common import DEFAULT_DIR, median_seconds, report
from realistic import CHUNKS, SHAPE, VARIABLE, dataset

QUESTIONS = {
    # Time chunks of 73 days from 2001-01-01; lat and lon chunks of 90 cells.
    "map, unaligned ends": (("time",), {"time": ("2001-02-15", "2002-07-20")}),
    "map, whole months": (("time",), {"time": ("2001-02-01", "2002-06-30")}),
    "series, unaligned box": (("lat", "lon"), {"lat": (-35, 37), "lon": (-17, 51)}),
}

VARIANTS = [
    # (name, combinations, at, questions it is for)
    ("chunk", ["time", "lat,lon"], None, list(QUESTIONS)),
    ("time=1", ["time"], {"time": 1}, ["map, unaligned ends", "map, whole months"]),
    ("time=month", ["time"], {"time": "month"}, ["map, whole months", "map, unaligned ends"]),
    ("lat=1,lon=1", ["lat,lon"], {"lat": 1, "lon": 1}, ["series, unaligned box"]),
]


def realistic_cube(directory: Path, days: int) -> Path:
    """The realistic cube cut to ``days`` days (same chunks), written once."""
    path = directory / f"realistic-{days}x{SHAPE[1]}x{SHAPE[2]}-{'x'.join(map(str, CHUNKS))}.zarr"
    marker = path.with_suffix(".config.json")
    wanted = json.dumps({"days": days, "chunks": CHUNKS, "version": 1})
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing {path} ...", file=sys.stderr)
        ds = dataset().isel(time=slice(0, days))
        ds[VARIABLE].encoding = {"chunks": CHUNKS}
        ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
        marker.write_text(wanted)
    return path


def full_read(path: Path) -> float:
    """One full read of the raw data (fetch, decode, sum): a build's floor."""
    started = time.perf_counter()
    xr.open_zarr(path, consolidated=True)[VARIABLE].astype("f8").sum().compute()
    return time.perf_counter() - started


def xarray_scan(store, over, ranges) -> xr.DataArray:
    ds = xr.open_zarr(store, consolidated=True)
    data = ds[VARIABLE].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
    return data.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(list(over)).compute()


def counted(store: CountingStore) -> dict:
    return {
        "requests": store.counts.read_requests,
        "chunks": len([k for k in store.counts.reads if not is_metadata_key(k)]),
        "bytes": store.counts.read_bytes,
    }


def ask(path: Path, name: str, args) -> dict:
    over, ranges = QUESTIONS[name]
    store = CountingStore(open_store(str(path)))
    handle = accumulus.open(store)
    handle.query(VARIABLE, over, ranges)  # warm-up: the snapshot is read once
    store.reset()
    result = handle.query(VARIABLE, over, ranges)
    warm_counts = counted(store)
    warm, result = median_seconds(lambda: handle.query(VARIABLE, over, ranges), args.repeats)

    def scan():
        fresh = CountingStore(open_store(str(path)))
        return xarray_scan(fresh, over, ranges), fresh

    scan_seconds, (expected, scan_store) = median_seconds(scan, args.scan_repeats)
    got, want = result.data.values, expected.values
    return {
        "question": name,
        "over": list(over),
        "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
        "plan": {
            "raw_chunks": result.stats.raw_chunks_read,
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "reads": len(result.plan.reads),
            "accumulations": sorted({r.key for r in result.plan.accumulation_reads}),
        },
        "warm_seconds": round(warm, 5),
        "xarray_seconds": round(scan_seconds, 4),
        "xarray_over_warm": round(scan_seconds / warm, 1),
        "warm": warm_counts,
        "xarray": counted(scan_store),
        "max_relative_difference": float(np.nanmax(np.abs(got - want) / np.abs(want))),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=SHAPE[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=3)
    parser.add_argument("--variants", default=";".join(v[0] for v in VARIANTS), help="; between")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = realistic_cube(args.dir, args.days)
    read_seconds = full_read(path)
    results = []
    for name, combos, at, questions in VARIANTS:
        if name not in args.variants.split(";"):
            continue
        started = time.perf_counter()
        built = accumulus.accumulate(str(path), VARIABLE, combos, at=at, rebuild=True)
        build_seconds = time.perf_counter() - started
        storage = {
            acc.key: {
                "bytes_stored": built.stored.get(acc.key),
                "over_raw": round(built.stored[acc.key] / built.raw_stored, 3)
                if built.stored.get(acc.key) and built.raw_stored
                else None,
            }
            for acc in built.group.accumulations
        }
        results.append(
            {
                "at": name,
                "build_seconds": round(build_seconds, 2),
                "build_over_full_read": round(build_seconds / read_seconds, 2),
                "storage": storage,
                "questions": [ask(path, q, args) for q in questions],
            }
        )
    report(
        {
            "benchmark": "positioned accumulations vs chunk ends vs xarray + Dask full scan",
            "cube": {
                "store": str(path),
                "shape": [args.days, SHAPE[1], SHAPE[2]],
                "chunks": list(CHUNKS),
                "chunk_mib": round(int(np.prod(CHUNKS)) * 4 / 2**20, 2),
                "raw_bytes_stored": built.raw_stored if results else None,
            },
            "full_read_seconds": round(read_seconds, 2),
            "variants": results,
        }
    )


if __name__ == "__main__":
    main()
