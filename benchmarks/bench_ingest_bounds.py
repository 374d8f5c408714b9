"""Granules that inflate (issue 35 item 4): peak memory of ingesting what a granule declares.

- The deflate bomb: a NetCDF4 file of 16384 x 180 x 360 float32 zeros, zlib level 9, in
  netCDF4's default chunks (2341 x 26 x 52), about 5.7 MB on disk for 4.0 GiB of values
  (its chunks are written already compressed, through HDF5's direct chunk write: the same
  bytes netCDF4 writes, in seconds instead of minutes). Appended by the command line
  (``accumulus append``) against the baseline a user would otherwise run,
  ``xr.open_dataset(f, chunks={}).to_zarr(store)`` (Dask, the file's own chunks), and
  against the floor: reading every value once, a row of the file's chunks at a time.
- A 9.5 KB granule declaring 10^9 x 10^9 cells: refused, and how much memory that took.

Each run is a fresh process, whose peak resident set (``ru_maxrss``) it reports itself.
Target: the bomb appended at a peak RSS of at most 1.5 GB. Prints one JSON document with
medians over ``--repeats`` runs, and the machine's load average, for the figures are wall
times on a shared machine.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import h5py
import netCDF4
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from ingest.inflating import declares_a_billion_squared

STEPS, NY, NX = 16384, 180, 360
TARGET_RSS = 1.5e9

# Each run: a fresh interpreter that runs one action and prints its peak RSS (bytes).
RUNNER = """
import resource, sys, time
started = time.perf_counter()
action = sys.argv[1]
if action == "accumulus":
    from accumulus.cli import main
    sys.argv = ["accumulus", "append", sys.argv[2], sys.argv[3]]
    try:
        main()
    except SystemExit as exc:
        code = exc.code or 0
    else:
        code = 0
elif action == "xarray":
    import xarray as xr
    xr.open_dataset(sys.argv[3], chunks={}).to_zarr(sys.argv[2], zarr_format=2)
    code = 0
else:  # the floor: every value read once, a row of chunks at a time
    import netCDF4
    with netCDF4.Dataset(sys.argv[3]) as file:
        var = file["zeros"]
        rows = var.chunking()[0]
        for start in range(0, var.shape[0], rows):
            var[start : start + rows]
    code = 0
seconds = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(f"RESULT {code} {seconds} {rss}", file=sys.stderr)
"""


def deflate_bomb(path: Path) -> Path:
    """Zeros declared in netCDF4's default chunks, every chunk one zlib-9 stream."""
    with netCDF4.Dataset(path, "w") as file:
        file.createDimension("time", STEPS)
        file.createDimension("lat", NY)
        file.createDimension("lon", NX)
        time_ = file.createVariable("time", "f8", ("time",))
        time_.units = "days since 2000-01-01"
        time_[:] = np.arange(STEPS)
        file.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-89.5, 89.5, NY)
        file.createVariable("lon", "f4", ("lon",))[:] = np.linspace(-179.5, 179.5, NX)
        file.createVariable("zeros", "f4", ("time", "lat", "lon"), zlib=True, complevel=9)
    with h5py.File(path, "r+") as file:
        dataset = file["zeros"]
        chunks = dataset.chunks
        compressed = zlib.compress(np.zeros(chunks, "f4").tobytes(), 9)
        for t in range(0, STEPS, chunks[0]):
            for y in range(0, NY, chunks[1]):
                for x in range(0, NX, chunks[2]):
                    dataset.id.write_direct_chunk((t, y, x), compressed)
    return path


def measure(action: str, granule: Path, out: Path) -> dict:
    shutil.rmtree(out, ignore_errors=True)
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, action, str(out), str(granule)],
        capture_output=True,
        text=True,
        check=False,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("RESULT "))
    code, seconds, rss = line.split()[1:]
    errors = [x for x in done.stderr.splitlines() if x.startswith("error:")]
    return {"exit": int(code), "seconds": float(seconds), "peak_rss": int(rss), "errors": errors}


def medians(action: str, granule: Path, out: Path, repeats: int) -> dict:
    runs = [measure(action, granule, out) for _ in range(repeats)]
    return {
        "exit": runs[-1]["exit"],
        "errors": runs[-1]["errors"],
        "seconds_median": statistics.median(r["seconds"] for r in runs),
        "peak_rss_median": statistics.median(r["peak_rss"] for r in runs),
        "peak_rss_max": max(r["peak_rss"] for r in runs),
        "runs": len(runs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="work directory (default: tmp)")
    args = parser.parse_args()
    work = Path(args.dir or tempfile.mkdtemp(prefix="bench-ingest-bounds-"))
    work.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    bomb = deflate_bomb(work / "bomb.nc")
    built = time.perf_counter() - started
    huge = declares_a_billion_squared(work / "huge.nc")

    accumulus_run = medians("accumulus", bomb, work / "bomb.zarr", args.repeats)
    xarray_run = medians("xarray", bomb, work / "bomb-xarray.zarr", args.repeats)
    floor = medians("floor", bomb, work / "unused", args.repeats)
    refused = medians("accumulus", huge, work / "huge.zarr", args.repeats)
    document = {
        "benchmark": "ingest_bounds",
        "load_average": os.getloadavg(),
        "bomb": {
            "file_bytes": bomb.stat().st_size,
            "declared_bytes": STEPS * NY * NX * 4,
            "build_seconds": round(built, 1),
            "accumulus_append": accumulus_run,
            "xarray_to_zarr_dask": xarray_run,
            "floor_read_once": floor,
            "rss_vs_target": accumulus_run["peak_rss_max"] / TARGET_RSS,
            "rss_vs_xarray": accumulus_run["peak_rss_median"] / xarray_run["peak_rss_median"],
            "seconds_vs_xarray": accumulus_run["seconds_median"] / xarray_run["seconds_median"],
            "seconds_vs_floor": accumulus_run["seconds_median"] / floor["seconds_median"],
        },
        "declared_1e9_by_1e9": {"file_bytes": huge.stat().st_size, "accumulus_append": refused},
    }
    print(json.dumps(document, indent=2))
    if args.dir is None:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
