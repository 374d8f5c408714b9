"""Positioned accumulations (``--at``) against chunk-end ones (ZEP 5), xarray's full scan and
the floor.

On the realistic cube of ``realistic.py`` (ten years of daily 1-degree float32, 3650 x 180 x
360, chunks 73 x 90 x 90 = 2.4 MB written by xarray, 0.95 GB; ``--days`` cuts it shorter),
for each way of placing entries:

- ``chunk``: ZEP 5 as written (time, and latitude+longitude, at chunk ends);
- ``time=1``: entries at every day (any period);
- ``time=month``: entries at month boundaries (whole months), on 73-day chunks;
- ``lat=1,lon=1``: entries at every cell (any box);

it builds the accumulation into a sidecar store beside the cube (``accumulate --into``: the
cube itself is never written; a sidecar already built with the same settings is reused unless
``--rebuild``), reports its stored bytes against the raw array's, and asks the questions it
is for. For each question, medians (of ``--repeats`` runs at least, lasting half a second
together: ``common.MIN_SECONDS``) of:

- ``warm``: an open datacube (``accumulus.open`` of the cube and its sidecar, as a user
  opens them) answering again, wall and CPU time; its requests and bytes are counted by
  asking the same question of a second handle on counting stores;
- ``floor``: a bare loop fetching exactly the chunks the plan names, concurrently, decoding
  them with the arrays' numcodecs codecs on a thread pool and summing them (the least work
  the plan allows: ``bench_average.floor_reader``), and ``floor_in_thread``, the same chunks
  read one after another in the calling thread, as accumulus reads a local store;
- ``xarray``: xarray + Dask's full scan of the same selection (``weighted(cos lat).mean``);

with their ratios, the plan's raw and accumulation chunks, requests and bytes counted at the
stores, and the largest relative difference from xarray's answer. For ``time=month`` every
whole-month range of the cube is also planned (not run), counting those that would read a
raw chunk.

    python benchmarks/bench_positions.py [--days 3650] [--repeats 7] [--scan-repeats 3]
        [--variants 'time=1;lat=1,lon=1'] [--rebuild]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

import accumulus
from accumulus.accumulation.query.answer import _plans, usable_layouts
from accumulus.accumulation.query.request import Query
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from bench_average import floor_in_thread_reader, floor_reader
from common import DEFAULT_DIR, median_seconds, median_with_cpu, report
from realistic import CHUNKS, SHAPE, VARIABLE, dataset, realistic_cube

# Time chunks of 73 days from 2001-01-01; lat and lon chunks of 90 cells (1-degree cells
# centred on half degrees). Every range below ends inside a chunk unless it says "months".
QUESTIONS = {
    "map, 17 months, unaligned ends": (("time",), {"time": ("2001-02-15", "2002-07-20")}),
    "map, 8.5 years, unaligned ends": (("time",), {"time": ("2001-05-17", "2009-11-02")}),
    "map, whole months (17)": (("time",), {"time": ("2001-02-01", "2002-06-30")}),
    "map, whole months (8 years)": (("time",), {"time": ("2002-03-01", "2010-02-28")}),
    "series, unaligned box (continent)": (("lat", "lon"), {"lat": (-35, 37), "lon": (-17, 51)}),
    "series, unaligned box (region)": (("lat", "lon"), {"lat": (3, 24), "lon": (-18, 37)}),
}
MAPS = [q for q, (over, _) in QUESTIONS.items() if over == ("time",)]
SERIES = [q for q, (over, _) in QUESTIONS.items() if over == ("lat", "lon")]

VARIANTS = [
    # (name, combinations, at, questions it is for)
    ("chunk", ["time", "lat,lon"], None, list(QUESTIONS)),
    ("time=1", ["time"], {"time": 1}, MAPS),
    ("time=month", ["time"], {"time": "month"}, MAPS),
    ("lat=1,lon=1", ["lat,lon"], {"lat": 1, "lon": 1}, SERIES),
]


def cube_path(directory: Path, days: int) -> Path:
    """The realistic cube (``realistic.realistic_cube``), or a cut of it to ``days`` days
    (same chunks) written once beside it."""
    if days == SHAPE[0]:
        return realistic_cube(directory)
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


def timed_scan(path: Path, over, ranges, repeats: int) -> tuple[float, xr.DataArray, CountingStore]:
    """xarray + Dask's scan of the same cells, each run on a freshly opened store: its median
    seconds, its answer and the store that counted its reads."""

    def scan():
        fresh = CountingStore(open_store(str(path)))
        return xarray_scan(fresh, over, ranges), fresh

    seconds, (expected, store) = median_seconds(scan, repeats)
    return seconds, expected, store


def counted(*stores: CountingStore) -> dict:
    return {
        "requests": sum(s.counts.read_requests for s in stores),
        "chunks": sum(len([k for k in s.counts.reads if not is_metadata_key(k)]) for s in stores),
        "bytes": sum(s.counts.read_bytes for s in stores),
    }


def ask(path: Path, side: Path, name: str, args) -> dict:
    over, ranges = QUESTIONS[name]
    store = CountingStore(open_store(str(path)))
    side_store = CountingStore(open_store(str(side)))
    counted_handle = accumulus.open(store, accumulations=side_store)
    handle = accumulus.open(str(path), accumulations=str(side))  # as a user opens them
    for opened in (handle, counted_handle):
        opened.query(VARIABLE, over, ranges)  # warm-up: the snapshot is read once
    store.reset(), side_store.reset()
    result = counted_handle.query(VARIABLE, over, ranges)
    warm_counts = counted(store, side_store)
    warm, warm_cpu, result = median_with_cpu(
        lambda: handle.query(VARIABLE, over, ranges), args.repeats
    )

    store.reset(), side_store.reset()
    floor_reader(counted_handle, result)()
    floor_counts = counted(store, side_store)
    floor, floor_cpu, _ = median_with_cpu(floor_reader(handle, result), args.repeats)
    in_thread = floor_in_thread_reader(handle, result)
    floor_here = median_seconds(in_thread, args.repeats)[0] if in_thread is not None else None

    scan_seconds, expected, scan_store = timed_scan(path, over, ranges, args.scan_repeats)
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
        "warm_cpu_seconds": round(warm_cpu, 5),
        "floor_seconds": round(floor, 5),
        "floor_cpu_seconds": round(floor_cpu, 5),
        "floor_in_thread_seconds": None if floor_here is None else round(floor_here, 5),
        "xarray_seconds": round(scan_seconds, 4),
        "xarray_over_warm": round(scan_seconds / warm, 1),
        "warm_over_floor": round(warm / floor, 2),
        "warm_over_floor_in_thread": None if floor_here is None else round(warm / floor_here, 2),
        "warm": warm_counts,
        "floor": floor_counts,
        "xarray": counted(scan_store),
        "max_relative_difference": float(np.nanmax(np.abs(got - want) / np.abs(want))),
    }


def whole_month_ranges(path: Path, side: Path) -> dict:
    """Plan (without running) every range of whole months the cube holds, and count those
    whose plan reads a raw chunk."""
    handle = accumulus.open(str(path), accumulations=str(side))
    snapshot = handle.snapshot()
    days = pd.DatetimeIndex(snapshot.cube.index("time"))
    starts = days[days.is_month_start]
    ends = days[days.is_month_end]
    var = snapshot.cube.variable(VARIABLE)
    weights = snapshot.groups.recorded_weights(VARIABLE)
    layouts, _ = usable_layouts(snapshot.groups, var, weights, ("wsum", "wcount"))
    ranges, with_raw = 0, 0
    for start in starts:
        for end in ends[ends > start]:
            query = Query(VARIABLE, ("time",), {"time": (str(start.date()), str(end.date()))})
            (plan,) = _plans(var, snapshot.resolve(query), layouts)
            ranges += 1
            with_raw += bool(plan.raw_reads)
    return {"whole_month_ranges": ranges, "reading_raw_chunks": with_raw}


def storage(side: Path) -> tuple[dict, int | None]:
    """Stored bytes of each accumulation in ``side`` (as ``inspect`` reports them), alone
    and over the raw array's, and the raw array's."""
    [group] = accumulus.inspect(str(side))["accumulation_groups"]
    out, raw = {}, None
    for acc in group["accumulations"]:
        raw, stored = acc["raw_bytes_stored"], acc["bytes_stored"]
        out[f"{','.join(acc['dims'])} at {acc['at']}"] = {
            "bytes_stored": stored,
            "over_raw": round(stored / raw, 3) if stored and raw else None,
        }
    return out, raw


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=SHAPE[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--scan-repeats", type=int, default=3)
    parser.add_argument("--variants", default=";".join(v[0] for v in VARIANTS), help="; between")
    parser.add_argument("--rebuild", action="store_true", help="rebuild sidecars built before")
    parser.add_argument("--no-full-read", action="store_true", help="skip the build's floor")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    path = cube_path(args.dir, args.days)
    read_seconds = None if args.no_full_read else full_read(path)
    results, raw_stored = [], None
    for name, combos, at, questions in VARIANTS:
        if name not in args.variants.split(";"):
            continue
        slug = name.replace("=", "").replace(",", "-")
        side = args.dir / f"{path.stem}.positions-{slug}.side.zarr"
        started = time.perf_counter()
        built = accumulus.accumulate(
            str(path), VARIABLE, combos, at=at, into=str(side), rebuild=args.rebuild
        )
        build_seconds = time.perf_counter() - started
        entry = {"at": name, "sidecar": str(side), "build": built.action}
        if built.action != "up to date":  # built in this run: timed
            entry["build_seconds"] = round(build_seconds, 2)
            if read_seconds:
                entry["build_over_full_read"] = round(build_seconds / read_seconds, 2)
        entry["storage"], raw_stored = storage(side)
        entry["questions"] = [ask(path, side, q, args) for q in questions]
        if name == "time=month":
            entry["every_whole_month_range"] = whole_month_ranges(path, side)
        results.append(entry)
    report(
        {
            "benchmark": "positioned accumulations vs chunk ends vs xarray + Dask full scan",
            "cube": {
                "store": str(path),
                "shape": [args.days, SHAPE[1], SHAPE[2]],
                "chunks": list(CHUNKS),
                "chunk_mib": round(int(np.prod(CHUNKS)) * 4 / 2**20, 2),
                "raw_bytes_stored": raw_stored,
            },
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "full_read_seconds": None if read_seconds is None else round(read_seconds, 2),
            "variants": results,
        }
    )


if __name__ == "__main__":
    main()
