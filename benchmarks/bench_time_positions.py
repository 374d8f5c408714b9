"""Maps over day-precise periods from time accumulations at different positions, on the
default path's cube (``bench_defaults.py``: 24 monthly granules appended, 41-day chunks),
asked alternately so that the machine's load falls on every rule alike.

Each rule (``--rule``, repeatable; default ``1`` and ``month+4``) is built along time alone
into a sidecar beside the cube (reused when present); then each question (``bench_defaults``'
random day-precise maps and its fixed short and long ones) is asked of every rule in turn,
``--repeats`` rounds, and of xarray + Dask's scan of the same store. Reported per rule: the
sidecar's stored bytes against the raw array's, and per question the median time, the raw and
accumulation chunks (and raw days) read, and xarray's time over it; for the cube, its raw
array's stored bytes over their decoded size, the Blosc block size of its first chunk, and
xarray's time for a map over every day (a full read).

    python benchmarks/bench_time_positions.py [--rule 1 --rule month+4] [--repeats 15]
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import time
from pathlib import Path

import numpy as np
import pandas as pd
import zarr

import accumulus
from bench_defaults import build_cube, questions
from bench_positions import timed_scan
from common import DEFAULT_DIR, report
from realistic import VARIABLE


def stored_bytes(sidecar: Path) -> int:
    return sum(
        p.stat().st_size
        for p in sidecar.rglob("*")
        if p.is_file() and not p.name.startswith((".", "zarr.json"))
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR / "defaults")
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--rule", action="append", help="a time rule (repeatable)")
    parser.add_argument("--questions", type=int, default=4, help="random ones")
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--scan-repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args()
    rules = args.rule or ["1", "month+4"]
    zarr.config.set({"array.rectilinear_chunks": True})
    path, _ = build_cube(args.dir, args.days, False, args.dir / "deleted-at-the-end")
    handles, built = {}, {}
    for rule in rules:
        sidecar = args.dir / f"time-at-{rule.replace('+', '_')}.zarr"
        if not sidecar.exists():
            accumulus.accumulate(
                str(path), VARIABLE, ["time"], at={"time": rule}, into=str(sidecar)
            )
        handles[rule] = accumulus.open(str(path), accumulations=str(sidecar))
        built[rule] = stored_bytes(sidecar)
    chunks = sorted(p for p in (path / VARIABLE).iterdir() if not p.name.startswith("."))
    raw_bytes = sum(p.stat().st_size for p in chunks)
    raw_decoded = zarr.open_array(str(path), path=VARIABLE, mode="r").nbytes
    raw_blocks = struct.unpack_from("<i", chunks[0].read_bytes(), 8)[0]  # Blosc's block size
    cube = handles[rules[0]].snapshot().cube
    days = pd.DatetimeIndex(cube.index("time"))
    lat, lon = np.asarray(cube.index("lat")), np.asarray(cube.index("lon"))
    asked = [
        (kind, ranges)
        for kind, over, ranges in questions(days, lat, lon, args.questions, args.seed)
        if kind.startswith("map, day-precise")
    ]
    answers = []
    for kind, ranges in asked:
        times: dict[str, list[float]] = {rule: [] for rule in rules}
        cpu: dict[str, list[float]] = {rule: [] for rule in rules}
        results = {}
        for rule in rules:  # warm
            results[rule] = handles[rule].query(VARIABLE, ["time"], ranges)
        for _ in range(args.repeats):
            for rule in rules:
                started, used = time.perf_counter(), time.process_time()
                handles[rule].query(VARIABLE, ["time"], ranges)
                times[rule].append(time.perf_counter() - started)
                cpu[rule].append(time.process_time() - used)
        scan, expected, _ = timed_scan(path, ["time"], ranges, args.scan_repeats)
        per_rule = {}
        for rule in rules:
            warm = statistics.median(times[rule])
            got = results[rule].data.values
            per_rule[rule] = {
                "warm_seconds": round(warm, 5),
                # The process's CPU per answer: less of the other processes' load than wall
                # time on a shared machine.
                "warm_cpu_seconds": round(statistics.median(cpu[rule]), 5),
                "xarray_over_warm": round(scan / warm, 1),
                "raw_chunks": results[rule].stats.raw_chunks_read,
                "raw_days": sum(
                    b - a for a, b in (r.box["time"] for r in results[rule].plan.raw_reads)
                ),
                "accumulation_chunks": results[rule].stats.accumulation_chunks_read,
                "max_relative_difference": float(
                    np.nanmax(np.abs(got - expected.values) / np.abs(expected.values))
                ),
            }
        days_asked = (pd.Timestamp(ranges["time"][1]) - pd.Timestamp(ranges["time"][0])).days + 1
        answers.append(
            {
                "kind": kind,
                "time": list(ranges["time"]),
                "days": days_asked,
                "xarray_seconds": round(scan, 4),
                "rules": per_rule,
            }
        )
    summary = {}
    for rule in rules:
        ratios = [a["rules"][rule]["xarray_over_warm"] for a in answers]
        summary[rule] = {
            "stored_over_raw": round(built[rule] / raw_bytes, 3),
            "xarray_over_warm_min": min(ratios),
            "xarray_over_warm_median": float(np.median(ratios)),
            "raw_chunks_max": max(a["rules"][rule]["raw_chunks"] for a in answers),
            "warm_seconds_median": float(
                np.median([a["rules"][rule]["warm_seconds"] for a in answers])
            ),
        }
    full, _, _ = timed_scan(
        path, ["time"], {"time": (str(days[0].date()), str(days[-1].date()))}, args.scan_repeats
    )
    report(
        {
            "benchmark": "day-precise maps from time accumulations at different positions",
            "cube": str(path),
            "raw_bytes_stored": raw_bytes,
            "raw_stored_over_decoded": round(raw_bytes / raw_decoded, 4),
            "raw_blosc_blocks": raw_blocks,
            "xarray_full_map_seconds": round(full, 4),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "summary": summary,
            "questions": answers,
        }
    )


if __name__ == "__main__":
    main()
