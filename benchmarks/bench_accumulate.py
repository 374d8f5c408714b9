"""``accumulate`` against its floor, one full read of the raw data (xarray + Dask ``sum()`` of
the variable, same threaded scheduler), and its peak memory.

Cubes (``--cubes``, comma-separated):

- "realistic": ``realistic.py``'s cube, written by xarray as archives are (10 years daily
  at 1 degree, 3650 x 180 x 360 float32, chunks 73 x 90 x 90 = 2.4 MB, 10 % missing);
- "realistic-half": the same cut to 5 years (peak memory must not follow the cube's size);
- "small": the first release's benchmark cube, chunks of 30 x 15 x 30 (54 KB), where Dask's
  per-task overhead weighs on both sides; labelled as such.

Builds (``--builds``, comma-separated):

- "default": what ``accumulus accumulate cube.zarr VAR`` builds with no options
  (``spec.default_layout``: time alone at month ends and every 2 days of each month, latitude
  and longitude together at every cell, area weights);
- "time=1": time alone with entries at every day (``--at time=1``, issue 10);
- "lat=1,lon=1": latitude and longitude together with entries at every cell.

Each measurement runs in a fresh process, which reports its wall time, CPU time (every
thread) and peak RSS (``getrusage``); modules are imported before the clock, as a user's
session has them. Each build is a first build into a sidecar store beside the cube
(``accumulate --into``: the cube is only read, so a shared copy of it is never written; the
build reads, sums and writes exactly as in place), removed once measured, then written
back, the kernel's clean caches dropped and the cube and the files the measured processes
ran from read again where the benchmark may (root on Linux: ``forget_deleted_files``;
reported as ``caches_dropped_after_each_build``), and left to settle for a second
(untimed): kept until the end, the sidecars of the builds before filled the page cache and
each build paid more system time than the one before. Reads and builds alternate within
each repeat, so both see the same machine; medians over ``--repeats``. The machine's load
average (``os.getloadavg``) is recorded before and after. Prints JSON.

    python benchmarks/bench_accumulate.py [--repeats 3] [--cubes realistic,small]
        [--builds default,time=1,lat=1,lon=1] [--sidecar-dir DIR]

Builds write beside the cube, on its file system; ``--sidecar-dir /dev/shm`` writes them to
memory, which separates what a build computes from what its file system costs: on this
project's machines (ext4 without a journal) creating a build's 15,000 files costs seconds of
system time, more when as many were deleted in the last minutes (the allocator looks up each
recently freed inode before it takes another), which dropping the caches undoes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import suppress
from dataclasses import replace
from pathlib import Path

from common import DEFAULT_DIR, SMALL_CHUNKS, TIMED_CHILD_PRELUDE, cube, report

CHILD = (
    TIMED_CHILD_PRELUDE
    + """
path, variable, what, dims, at, into = sys.argv[1:7]
wall, cpu = usage()
if what == "read":
    # Read and decode every chunk once (Dask over the stored chunks), as the build must.
    float(xr.open_zarr(path)[variable].sum().compute())
else:
    accumulus.accumulate(path, variable, json.loads(dims), at=json.loads(at), into=into)
end_wall, end_cpu = usage()
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
# The files this process ran from: its modules, their compiled forms, every mapped library,
# and accumulus's own files (numba's compiled loops are cached beside them).
files = {f for m in list(sys.modules.values())
         for f in (getattr(m, "__file__", None), getattr(m, "__cached__", None)) if f}
if os.path.exists("/proc/self/maps"):  # Linux
    with open("/proc/self/maps") as maps:
        files |= {p[5] for p in (line.split(maxsplit=5) for line in maps)
                  if len(p) == 6 and p[5].startswith("/")}
files |= {str(p) for p in Path(accumulus.__file__).parent.rglob("*") if p.is_file()}
print(json.dumps({"seconds": end_wall - wall, "cpu_seconds": end_cpu - cpu,
                  "peak_rss_bytes": rss, "files": sorted(files)}))
"""
)


def builds(lat: str, lon: str) -> dict[str, tuple[list[str] | None, dict | None]]:
    """Each build by name: (dimension combinations, --at rules)."""
    return {
        "default": (None, None),
        "time=1": (["time"], {"time": 1}),
        "lat=1,lon=1": ([f"{lat},{lon}"], {lat: 1, lon: 1}),
    }


SETTLE_SECONDS = 1.0


DROP_CACHES = Path("/proc/sys/vm/drop_caches")


def caches_can_be_dropped() -> bool:
    return os.access(DROP_CACHES, os.W_OK)


def forget_deleted_files(cube_path: Path, used: set[str]) -> None:
    """Leave the machine as it was before a sidecar was written and deleted: the kernel's
    clean caches dropped (where this process may: root on Linux), then every file of the
    cube and every file the measured processes ran from (``used``: modules, libraries,
    numba's cached loops) read again, so that the next read or build finds them in memory as
    before (a read right after a drop alone took 0.1-0.3 s more).

    Without it, a build right after the deletion of the one before (15,000 files) is not a
    user's build: on ext4 without a journal (this project's machines), each new file's
    inode is taken only after the allocator has looked up, in the cached inode table, every
    free inode deleted in the last minutes before it (``recently_deleted``), 5-8 % of a
    ``lat=1,lon=1`` build's CPU in ``perf`` and 1-1.5 s of its wall time on the bench cube.
    Those cached blocks go with the dropped caches."""
    if not caches_can_be_dropped():
        return
    DROP_CACHES.write_text("1\n")
    for file in [*sorted(p for p in cube_path.rglob("*") if p.is_file()), *map(Path, sorted(used))]:
        with suppress(OSError):  # a file gone since (a temporary one)
            file.read_bytes()


def run_child(path: Path, variable: str, what: str, dims=None, at=None, into=None) -> dict:
    args = [str(path), variable, what, json.dumps(dims), json.dumps(at), str(into)]
    # Each measurement starts without the dirty pages of the build before (a gigabyte for a
    # build at every element), written back here, untimed: otherwise the kernel's
    # write-back of one build lands in the next one's time, as a user's build does not pay.
    os.sync()
    out = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"{what} of {path} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def median(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def load() -> list[float]:
    return [round(x, 1) for x in os.getloadavg()]


def measure(
    path: Path, variable: str, wanted: dict, repeats: int, sidecar_dir: Path | None = None
) -> dict:
    """Reads and every wanted build, alternating, ``repeats`` times; each build into a
    sidecar in ``sidecar_dir`` (default: beside the cube)."""
    # Every build writes a new sidecar, removed (untimed) once it is measured, then a pause
    # for the machine to settle: kept until the end, the sidecars of the builds before
    # filled the page cache (8 GB over a run) and each build paid more system time than the
    # one before (a time=1 build 4.1 s in the first repeat, 5.6-5.8 s in the next ones),
    # which a user's build does not.
    sidecar = (sidecar_dir or path.parent) / f"{path.stem}-bench-sidecar.zarr"

    used: set[str] = set()  # the files the measured processes ran from

    def child(*args) -> dict:
        measured = run_child(path, variable, *args)
        used.update(measured.pop("files"))
        return measured

    def build(dims, at) -> dict:
        shutil.rmtree(sidecar, ignore_errors=True)
        try:
            return child("build", dims, at, sidecar)
        finally:
            shutil.rmtree(sidecar, ignore_errors=True)
            os.sync()
            forget_deleted_files(path, used)
            time.sleep(SETTLE_SECONDS)

    child("read")  # warm, as the builds: what it runs from is known before the first drop
    for dims, at in wanted.values():  # the kernel is compiled once per machine, cached
        build(dims, at)
    reads: list[dict] = []
    runs: dict[str, list[dict]] = {name: [] for name in wanted}
    load_before = load()
    for _ in range(repeats):
        for name, (dims, at) in wanted.items():
            reads.append(child("read"))
            runs[name].append(build(dims, at))
    read_s, read_cpu = median(reads, "seconds"), median(reads, "cpu_seconds")
    result: dict = {
        "load_average_before": load_before,
        "load_average_after": load(),
        "full_read_seconds_median": round(read_s, 2),
        "full_read_cpu_seconds_median": round(read_cpu, 2),
        "full_read_peak_rss_mib": round(max(r["peak_rss_bytes"] for r in reads) / 2**20),
        "full_read_runs": len(reads),
        "builds": {},
    }
    for name, done in runs.items():
        build_s, build_cpu = median(done, "seconds"), median(done, "cpu_seconds")
        result["builds"][name] = {
            "seconds_median": round(build_s, 2),
            "over_full_read": round(build_s / read_s, 2),
            "cpu_seconds_median": round(build_cpu, 2),
            "over_full_read_cpu": round(build_cpu / read_cpu, 2),
            "peak_rss_mib": round(max(b["peak_rss_bytes"] for b in done) / 2**20),
            "seconds_each": [round(b["seconds"], 2) for b in done],
        }
    return result


def cubes(directory: Path, names: list[str]) -> list[tuple[str, Path, str, tuple, tuple, str, str]]:
    """(label, path, variable, shape, chunks, latitude, longitude) of each named cube."""
    sys.path.insert(0, str(Path(__file__).parent))
    found = []
    for name in names:
        if name in ("realistic", "realistic-half"):
            from bench_positions import realistic_cube as cut_cube
            from realistic import CHUNKS, SHAPE, VARIABLE, realistic_cube

            days = SHAPE[0] if name == "realistic" else SHAPE[0] // 2
            path = realistic_cube(directory) if name == "realistic" else cut_cube(directory, days)
            label = f"{name} (written by xarray)"
            found.append((label, path, VARIABLE, (days, *SHAPE[1:]), CHUNKS, "lat", "lon"))
        elif name == "small":
            from accumulus.demo import VARIABLE as DEMO_VARIABLE

            config = replace(SMALL_CHUNKS)
            path = cube(directory, config)
            label = "small chunks (54 KB)"
            shape = config.shape
            found.append((label, path, DEMO_VARIABLE, shape, config.chunks, "lat", "lon"))
        else:
            raise SystemExit(f"unknown cube {name!r}: realistic, realistic-half or small")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cubes", default="realistic,small")
    parser.add_argument("--builds", default="default;time=1;lat=1,lon=1", help="; between")
    parser.add_argument(
        "--sidecar-dir",
        type=Path,
        help="where builds write (default: beside the cube); /dev/shm leaves out what the "
        "file system's creation of a build's thousands of files costs",
    )
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    results = []
    for label, path, variable, shape, chunks, lat, lon in cubes(args.dir, args.cubes.split(",")):
        every = builds(lat, lon)
        wanted = {b: every[b] for b in args.builds.split(";")}
        chunk_bytes = 4 * chunks[0] * chunks[1] * chunks[2]
        results.append(
            {
                "cube": label,
                "store": str(path),
                "shape": list(shape),
                "chunks": list(chunks),
                "chunk_mib": round(chunk_bytes / 2**20, 2),
                "raw_gib": round(4 * shape[0] * shape[1] * shape[2] / 2**30, 2),
            }
            | measure(path, variable, wanted, args.repeats, args.sidecar_dir)
            | {
                "sidecar_dir": str(args.sidecar_dir or path.parent),
                "caches_dropped_after_each_build": caches_can_be_dropped(),
            }
        )
    report(
        {
            "benchmark": "accumulate vs one full read (its floor), each in a fresh process",
            "scheduler": "threads",
            "cpus": os.cpu_count(),
            "results": results,
        }
    )


if __name__ == "__main__":
    main()
