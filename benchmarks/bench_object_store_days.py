"""Raw days at a map's ends on object storage: the blocks holding them read by byte ranges
(``chunk_reader._ranged_through_the_loop``) against the whole raw chunk, in the same run.

The cube is ``bench_defaults``' (24 monthly granules appended, the default accumulations:
time entries at month ends and every 2 days), read through a counting store that adds
``--latency`` seconds to every request and delivers each read at ``--bandwidth`` bytes per
second, as one stream of an object store in its region does. Each
day-precise map (random periods, seeded, and the last 20 days) is asked
through the accumulations in both modes, turn by turn; reported per question: median wall
seconds, requests and their sequential round trips, bytes fetched, raw chunks read, and
the answers' largest difference (none: both decode the same values). The ranged mode's
bytes are the floor's (the accumulation entries and the compressed Blosc blocks holding
the raw days) and the first 4 KiB of each raw chunk, read for its block table.

    python benchmarks/bench_object_store_days.py [--dir DIR] [--questions 8] [--repeats 5]
        [--latency 0.03] [--bandwidth 90e6]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

import numpy as np
import pandas as pd
import zarr

import accumulus
from accumulus import chunk_reader
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from bench_defaults import build_cube, questions
from common import DEFAULT_DIR, report
from realistic import VARIABLE

WHOLE = 2**62  # REMOTE_RANGED_SAVES that no chunk reaches: every raw chunk read whole


def ask(handle: accumulus.Datacube, store: CountingStore, ranges: dict, saves: int) -> tuple:
    chunk_reader.REMOTE_RANGED_SAVES = saves
    store.reset()
    started = time.perf_counter()
    result = handle.query(VARIABLE, ("time",), ranges, plan="accumulation")
    seconds = time.perf_counter() - started
    counts = store.counts
    return seconds, (counts.read_requests, counts.round_trips), counts.read_bytes, result


def measure(handle, store, ranges: dict, repeats: int) -> dict:
    modes = {"ranged": chunk_reader.REMOTE_RANGED_SAVES, "whole": WHOLE}
    times: dict[str, list[float]] = {m: [] for m in modes}
    last: dict[str, tuple] = {}
    for turn in range(repeats + 1):  # the first round warms the snapshot and the codecs
        for mode in list(modes)[turn % 2 :] + list(modes)[: turn % 2]:
            seconds, requests, nbytes, result = ask(handle, store, ranges, modes[mode])
            if turn:
                times[mode].append(seconds)
            last[mode] = (requests, nbytes, result)
    chunk_reader.REMOTE_RANGED_SAVES = modes["ranged"]
    ranged, whole = last["ranged"][2], last["whole"][2]
    out = {"period": list(ranges["time"]), "raw_chunks_read": ranged.stats.raw_chunks_read}
    for mode in modes:
        (requests, round_trips), nbytes, _ = last[mode]
        out[mode] = {
            "seconds": round(statistics.median(times[mode]), 4),
            "requests": requests,
            "round_trips": round_trips,
            "bytes": nbytes,
        }
    out["seconds_ranged_over_whole"] = round(out["ranged"]["seconds"] / out["whole"]["seconds"], 3)
    out["bytes_ranged_over_whole"] = round(out["ranged"]["bytes"] / out["whole"]["bytes"], 4)
    out["largest_difference"] = float(np.nanmax(np.abs(ranged.data.values - whole.data.values)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR / "defaults")
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--questions", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--latency", type=float, default=0.03, help="seconds per request")
    # S3's documented single-request throughput within a region: 85-90 MB/s.
    parser.add_argument("--bandwidth", type=float, default=90e6, help="bytes/s of each read")
    args = parser.parse_args()
    zarr.config.set({"array.rectilinear_chunks": True})
    args.dir.mkdir(parents=True, exist_ok=True)
    path, _ = build_cube(args.dir, args.days, False, args.dir / "deleted-at-the-end")
    accumulus.accumulate(str(path), VARIABLE)
    store = CountingStore(open_store(str(path)), latency=args.latency, bandwidth=args.bandwidth)
    handle = accumulus.open(store)
    cube = handle.snapshot().cube
    days = pd.DatetimeIndex(cube.index("time"))
    lat, lon = np.asarray(cube.index("lat")), np.asarray(cube.index("lon"))
    asked = [
        ranges
        for kind, _, ranges in questions(days, lat, lon, args.questions, args.seed)
        if kind == "map, day-precise period"
    ]
    results = [measure(handle, store, ranges, args.repeats) for ranges in asked]
    with_raw = [r for r in results if r["raw_chunks_read"]]

    def spread(key: str) -> list[float]:
        values = [r[key] for r in with_raw]
        return [min(values), round(statistics.median(values), 4), max(values)] if values else []

    report(
        {
            "benchmark": "raw days at a map's ends from object storage: byte ranges vs whole",
            "cube": str(path),
            "latency_per_request": args.latency,
            "bandwidth_per_read": args.bandwidth,
            "remote_ranged_saves": chunk_reader.REMOTE_RANGED_SAVES,
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "questions_reading_raw_days": len(with_raw),
            "seconds_ranged_over_whole_min_median_max": spread("seconds_ranged_over_whole"),
            "bytes_ranged_over_whole_min_median_max": spread("bytes_ranged_over_whole"),
            "questions": results,
        }
    )


if __name__ == "__main__":
    main()
