"""``accumulate`` against its floor, one full read of the raw data (xarray + Dask ``sum()`` of
the variable, same threaded scheduler), and its peak memory, on three cubes:

- "realistic": shaped like a real archive (10 years daily at 1 degree, float32 chunks of
  73 x 90 x 90 = 2.4 MB written by xarray, 10 % missing, 0.9 GiB);
- the same at half its length (peak memory must not depend on the cube's size);
- "small chunks": the first release's benchmark cube, chunks of 30 x 15 x 30 (54 KB), where
  Dask's per-task overhead dominates both sides; labelled as such.

Each measurement runs in a fresh process, which reports its wall time, CPU time and peak
RSS (imports excluded, as a user's session has them). Each build is a first build: the
previous run's accumulation group is deleted before the clock starts. Reads and builds
alternate, so both see the same machine; medians over ``--repeats``. The build computes
every default accumulation (each dimension alone + latitude and longitude, area weights).
``verify`` (one pass recomputing every entry, slab by slab) is timed on the realistic cube.
Prints JSON.

    python benchmarks/bench_accumulate.py [--repeats 3] [--small-days 4018]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from accumulus.demo import VARIABLE
from common import DEFAULT_DIR, REALISTIC, SMALL_CHUNKS, cube, report

CHILD = f"""
import json, resource, sys, time
import xarray as xr
import accumulus

def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime

path, what = sys.argv[1], sys.argv[2]
if what == "build":  # a first build: the previous run's group is removed, untimed
    import zarr
    root = zarr.open_group(path, mode="r+")
    if "{VARIABLE}_accumulation_group" in root:
        del root["{VARIABLE}_accumulation_group"]
    zarr.consolidate_metadata(path)
wall, cpu = usage()
if what == "read":
    # Read and decode every chunk once (Dask over the stored chunks), as the build must.
    float(xr.open_zarr(path)["{VARIABLE}"].sum().compute())
elif what == "build":
    accumulus.accumulate(path, "{VARIABLE}")
else:
    [report] = accumulus.verify(path, "{VARIABLE}")
    assert report.ok, report.problems
end_wall, end_cpu = usage()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({{"seconds": end_wall - wall, "cpu_seconds": end_cpu - cpu,
                  "peak_rss_bytes": rss}}))
"""


def run_child(path: Path, what: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), what], capture_output=True, text=True
    )
    if out.returncode:
        raise SystemExit(f"{what} of {path} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def measure(path: Path, repeats: int, with_verify: bool) -> dict:
    run_child(path, "build")  # warm: the kernel is compiled once per machine, then cached
    reads, builds, verifies = [], [], []
    for _ in range(repeats):
        reads.append(run_child(path, "read"))
        builds.append(run_child(path, "build"))
        if with_verify:
            verifies.append(run_child(path, "verify"))
    read_s, build_s = median(reads, "seconds"), median(builds, "seconds")
    read_cpu, build_cpu = median(reads, "cpu_seconds"), median(builds, "cpu_seconds")
    result = {
        "full_read_seconds_median": round(read_s, 2),
        "accumulate_seconds_median": round(build_s, 2),
        "accumulate_over_full_read": round(build_s / read_s, 2),
        "full_read_cpu_seconds_median": round(read_cpu, 2),
        "accumulate_cpu_seconds_median": round(build_cpu, 2),
        "accumulate_over_full_read_cpu": round(build_cpu / read_cpu, 2),
        "accumulate_peak_rss_mib": round(max(b["peak_rss_bytes"] for b in builds) / 2**20),
        "full_read_peak_rss_mib": round(max(r["peak_rss_bytes"] for r in reads) / 2**20),
    }
    if with_verify:
        verify_s = median(verifies, "seconds")
        result |= {
            "verify_seconds_median": round(verify_s, 2),
            "verify_over_full_read": round(verify_s / read_s, 2),
            "verify_peak_rss_mib": round(max(v["peak_rss_bytes"] for v in verifies) / 2**20),
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--small-days", type=int, default=SMALL_CHUNKS.days)
    parser.add_argument("--no-verify", action="store_true", help="skip timing verify")
    args = parser.parse_args()
    cases = [
        ("realistic", REALISTIC, not args.no_verify),
        # Same chunks, half the length: peak memory must not follow the cube's size.
        ("realistic, 5 years", replace(REALISTIC, days=REALISTIC.days // 2), False),
        ("small chunks (54 KB)", replace(SMALL_CHUNKS, days=args.small_days), False),
    ]
    results = []
    for label, config, with_verify in cases:
        path = cube(args.dir, config)
        chunk_bytes = 4 * config.chunks[0] * config.chunks[1] * config.chunks[2]
        results.append(
            {
                "cube": label,
                "shape": config.shape,
                "chunks": config.chunks,
                "chunk_mib": round(chunk_bytes / 2**20, 2),
                "store_gib": round(config.nbytes / 2**30, 2),
            }
            | measure(path, args.repeats, with_verify)
        )
    report(
        {
            "benchmark": "accumulate vs one full read (its floor)",
            "accumulations": "each dimension alone + lat+lon, area weights",
            "scheduler": "threads",
            "results": results,
        }
    )


if __name__ == "__main__":
    main()
