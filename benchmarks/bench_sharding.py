"""Sharded against plain Zarr v3 (issue 19): the same data, the same inner chunks, written by
xarray once without and once with shards; what each question reads and how long it takes.

Two years of daily values on a 1-degree grid (730 x 180 x 360 float32, the realistic cube's
field and missing values, ``realistic.py``), chunks 73 x 45 x 90 (1.2 MB), written by
xarray as Zarr v3 with consolidated metadata: ``plain`` with those chunks, ``sharded`` with
those inner chunks in shards of 365 x 90 x 180 (8 inner chunks per shard). Both are
accumulated with the defaults (each dimension alone + latitude and longitude, area
weights); the sharded cube's accumulation arrays are sharded too.

For each layout: the stored objects (raw array, accumulation group) and the build time. For
each question and layout: the plan's chunks, the requests and bytes counted at the store,
the sequential round trips, and the median time of an open datacube answering again
(``warm``), locally and through a store adding ``--latency`` seconds to every request
(object storage). Ratios sharded / plain are measured in the same run. The baseline is the
plain layout (the issue's question: does sharding cost reads?); ``bench_average.py`` has
the floor and xarray for the plain layout.

    python benchmarks/bench_sharding.py [--repeats 9] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

import accumulus
from accumulus.storage import CountingStore, is_metadata_key, open_store
from common import DEFAULT_DIR, report
from realistic import MISSING, VARIABLE, _block

SHAPE = (730, 180, 360)
CHUNKS = (73, 45, 90)
SHARDS = (365, 90, 180)

# Time chunks of 73 days from 2001-01-01: edges 2001-03-15, 05-27, 08-08, 10-20, 2002-01-01;
# shard edges 2002-01-01. Latitude chunks of 45 degrees, longitude of 90.
QUESTIONS = [
    ("map, inner-chunk aligned", ("time",), {"time": ("2001-03-15", "2001-10-19")}),
    ("map, unaligned ends", ("time",), {"time": ("2001-02-10", "2002-06-20")}),
    ("series, inner-chunk aligned box", ("lat", "lon"), {"lat": (-45, 45), "lon": (-90, 90)}),
    ("series, unaligned box", ("lat", "lon"), {"lat": (-35, 37), "lon": (-17, 51)}),
]


def dataset() -> xr.Dataset:
    data = da.map_blocks(
        _block, chunks=da.core.normalize_chunks(CHUNKS, SHAPE), dtype="f4",
        meta=np.array((), dtype="f4"),
    )  # fmt: skip
    return xr.Dataset(
        {VARIABLE: (("time", "lat", "lon"), data, {"units": "K"})},
        coords={
            "time": pd.date_range("2001-01-01", periods=SHAPE[0], freq="D"),
            "lat": ("lat", -89.5 + np.arange(SHAPE[1]), {"units": "degrees_north"}),
            "lon": ("lon", -179.5 + np.arange(SHAPE[2]), {"units": "degrees_east"}),
        },
    )


def write(directory: Path, sharded: bool) -> Path:
    """The cube, written once (a marker beside it records how)."""
    name = "sharded" if sharded else "plain"
    path = directory / f"sharding-{name}-730x180x360.zarr"
    marker = path.with_suffix(".config.json")
    wanted = json.dumps({"shape": SHAPE, "chunks": CHUNKS, "shards": SHARDS if sharded else None,
                         "missing": MISSING, "version": 1})  # fmt: skip
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing {path} ...", file=sys.stderr)
        encoding = {"chunks": CHUNKS} | ({"shards": SHARDS} if sharded else {})
        ds = dataset()  # the same values either way: blocks are seeded by their position
        if sharded:  # one Dask block per shard, as xarray requires
            ds = ds.chunk(dict(zip(ds[VARIABLE].dims, SHARDS, strict=True)))
        ds.to_zarr(path, mode="w", zarr_format=3, consolidated=True, encoding={VARIABLE: encoding})
        marker.write_text(wanted)
    return path


def objects(path: Path) -> dict:
    """Stored objects of the raw array and of the accumulation group (from ``inspect``)."""
    described = accumulus.inspect(str(path))
    raw = next(a for a in described["arrays"] if a["path"] == VARIABLE)
    (group,) = described["accumulation_groups"]
    arrays = [a for acc in group["accumulations"] for a in acc["arrays"].values()]
    return {
        "raw": raw["objects"],
        "raw_chunk_grid": raw["chunk_grid"],
        "accumulation": sum(a["objects"] for a in arrays),
        "accumulation_bytes": sum(a["bytes_stored"] for a in arrays),
    }


def measure(path: Path, over, ranges, repeats: int, latency: float) -> dict:
    store = CountingStore(open_store(str(path)), latency=latency)
    handle = accumulus.open(store)
    handle.query(VARIABLE, over, ranges)  # the snapshot is read once
    store.reset()
    result = handle.query(VARIABLE, over, ranges)
    counts = store.counts  # this one query's (the timed repeats below add to them)
    measured = {
        "raw_chunks": result.stats.raw_chunks_read,
        "accumulation_chunks": result.stats.accumulation_chunks_read,
        "requests": counts.read_requests,
        "objects": sum(not is_metadata_key(k) for k in counts.reads),
        "bytes": counts.read_bytes,
        "round_trips": counts.round_trips,
    }
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        handle.query(VARIABLE, over, ranges)
        times.append(time.perf_counter() - started)
    return {
        **measured,
        "warm_seconds": round(statistics.median(times), 5),
        "answer": result.data.values,
    }


def compare(paths: dict[str, Path], repeats: int, latency: float) -> list[dict]:
    rows = []
    for name, over, ranges in QUESTIONS:
        runs = {k: measure(p, over, ranges, repeats, latency) for k, p in paths.items()}
        answers = [r.pop("answer") for r in runs.values()]
        plain, sharded = runs["plain"], runs["sharded"]
        rows.append(
            {
                "question": name,
                "over": list(over),
                "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
                **runs,
                "sharded_over_plain": {
                    k: round(sharded[k] / plain[k], 3) if plain[k] else None
                    for k in ("bytes", "requests", "round_trips", "warm_seconds")
                },
                "max_abs_difference": float(np.nanmax(np.abs(answers[0] - answers[1]))),
            }
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)

    paths = {"plain": write(args.dir, False), "sharded": write(args.dir, True)}
    layouts = {}
    for name, path in paths.items():
        started = time.perf_counter()
        built = accumulus.accumulate(str(path), VARIABLE, rebuild=True)
        layouts[name] = {
            "store": str(path),
            "build_seconds": round(time.perf_counter() - started, 2),
            "accumulate": built.action,
            "objects": objects(path),
        }
    report(
        {
            "benchmark": "sharded vs plain Zarr v3: same data, same inner chunks",
            "shape": SHAPE,
            "chunks": CHUNKS,
            "shards": SHARDS,
            "layouts": layouts,
            "local": compare(paths, args.repeats, 0.0),
            "with_latency": {
                "seconds_per_request": args.latency,
                "results": compare(paths, max(3, args.repeats // 2), args.latency),
            },
        }
    )


if __name__ == "__main__":
    main()
