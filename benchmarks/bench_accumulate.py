"""``accumulate`` against one full read of the raw array (the I/O floor), and its peak memory
at two cube sizes (it should not grow with the cube).

Each measurement runs in a fresh process, which reports its own time and peak RSS.
Prints JSON with medians and the build / full-read ratio measured in this run.

    python benchmarks/bench_accumulate.py [--days 4018] [--small-days 1004] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

from accumulus.demo import VARIABLE, DemoConfig
from common import DEFAULT_DIR, cube, report

CHILD = f"""
import json, resource, sys, time
import xarray as xr
import accumulus
path, what = sys.argv[1], sys.argv[2]
started = time.perf_counter()
if what == "read":
    # Read and decode every chunk once, as the build does (Dask, native chunks).
    float(xr.open_zarr(path)["{VARIABLE}"].sum().compute())
else:
    accumulus.accumulate(path, "{VARIABLE}", rebuild=True)
seconds = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"seconds": seconds, "peak_rss_bytes": rss}}))
"""


def run_child(path: Path, what: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), what], capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def measure(path: Path, repeats: int) -> dict:
    reads = [run_child(path, "read") for _ in range(repeats)]
    builds = [run_child(path, "build") for _ in range(repeats)]
    read_s = statistics.median(r["seconds"] for r in reads)
    build_s = statistics.median(b["seconds"] for b in builds)
    return {
        "full_read_seconds_median": round(read_s, 2),
        "accumulate_seconds_median": round(build_s, 2),
        "accumulate_over_full_read": round(build_s / read_s, 2),
        "accumulate_peak_rss_mib": round(max(b["peak_rss_bytes"] for b in builds) / 2**20),
        "full_read_peak_rss_mib": round(max(r["peak_rss_bytes"] for r in reads) / 2**20),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--days", type=int, default=4018)
    parser.add_argument("--small-days", type=int, default=1004)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    results = []
    for days in (args.small_days, args.days):
        config = DemoConfig(days=days)
        path = cube(args.dir, config)
        results.append(
            {"store_gib": round(config.nbytes / 2**30, 2), "shape": config.shape}
            | measure(path, args.repeats)
        )
    report(
        {
            "benchmark": "accumulate vs one full read",
            "chunks": DemoConfig().chunks,
            "accumulations": "each dimension alone + lat+lon, area weights",
            "results": results,
        }
    )


if __name__ == "__main__":
    main()
