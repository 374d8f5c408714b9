"""Daily appends into an icechunk repository against the same appends into a plain Zarr
directory, and queries of both.

The same NetCDF4 granules (one day of 3-hourly steps each, packed int16, zlib+shuffle) are
appended one ``accumulus.append`` per day to:

- ``plain``: a Zarr v3 directory (``--zarr-format 3``, as a repository holds), and
- ``icechunk``: ``icechunk://`` on a local directory, one commit per append,

both with their accumulations (built after the first day, updated by every append). For each:
wall time of an append (median over the first and the last ``window`` days: does it grow
with the archive's length?), bytes the store grew by per day (what a day costs on disk;
icechunk keeps every snapshot, so old chunks stay), and the final size.

Then an average (a box, over time) is asked of the plain store, of the repository's head and
of the repository at the commit after day ``window`` (time travel), each through one open
``Datacube`` (median of repeats): the repository's ratio to the plain store is the cost of
reading through icechunk. Both answers are checked equal to the plain store's.

VirtualiZarr's ``to_icechunk(append_dim=)`` is not measured (VirtualiZarr is not installed
here). Prints one JSON document.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

import accumulus
from bench_append import make_granules
from common import median_seconds, report

VAR = "precip"
BOX = {"lat": (-30, 30), "lon": (60, 180)}


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def daily_appends(url: str, root: Path, granules: list[Path], chunk: int) -> dict:
    """One append per granule; the seconds each took and the bytes the store grew by."""
    seconds, grown, snapshots = [], [], []
    for day, granule in enumerate(granules):
        before = directory_bytes(root) if root.exists() else 0
        started = time.perf_counter()
        result = accumulus.append(url, str(granule), chunks={"time": chunk}, zarr_format=3)
        seconds.append(time.perf_counter() - started)
        grown.append(directory_bytes(root) - before)
        snapshots.append(result.snapshot)
        if day == 0:
            accumulus.accumulate(url, VAR, ["time", "lat,lon"])
    return {"seconds": seconds, "grown": grown, "snapshots": snapshots}


def summary(run: dict, window: int) -> dict:
    first, last = run["seconds"][1 : window + 1], run["seconds"][-window:]
    return {
        "append_seconds_first_days": statistics.median(first),
        "append_seconds_last_days": statistics.median(last),
        "growth_last_over_first": statistics.median(last) / statistics.median(first),
        "bytes_per_day": statistics.median(run["grown"][1:]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--window", type=int, default=10, help="days at each end compared")
    parser.add_argument("--grid", type=int, nargs=2, default=(180, 360), metavar=("NY", "NX"))
    parser.add_argument("--chunk", type=int, default=8 * 30, help="time steps per chunk")
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-icechunk-") as tmp:
        work = Path(tmp)
        granules = make_granules(work / "in", args.days, 8, *args.grid)
        granule_bytes = sum(p.stat().st_size for p in granules)
        plain_path, repo_path = work / "plain.zarr", work / "repo"
        plain = daily_appends(str(plain_path), plain_path, granules, args.chunk)
        repo_url = f"icechunk://{repo_path}"
        repo = daily_appends(repo_url, repo_path, granules, args.chunk)

        old = repo["snapshots"][args.window]
        ask = {"ranges": BOX}
        plain_cube = accumulus.open(str(plain_path))
        head_cube = accumulus.open(repo_url)
        old_cube = accumulus.open(repo_url, ref=old)
        plain_s, want = median_seconds(lambda: plain_cube.average(VAR, "time", **ask), args.repeats)
        head_s, got = median_seconds(lambda: head_cube.average(VAR, "time", **ask), args.repeats)
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
        old_s, got_old = median_seconds(lambda: old_cube.average(VAR, "time", **ask), args.repeats)
        # The plain store asked for the same steps the old commit holds.
        steps = (args.window + 1) * 8
        times = xr.open_zarr(plain_path)["time"].values
        first, last = (str(np.datetime_as_string(times[i])) for i in (0, steps - 1))
        same = {"ranges": {**BOX, "time": (first, last)}}
        plain_old_s, want_old = median_seconds(
            lambda: plain_cube.average(VAR, "time", **same), args.repeats
        )
        np.testing.assert_allclose(got_old.values, want_old.values, rtol=1e-9, equal_nan=True)

        report(
            {
                "benchmark": "icechunk",
                "days": args.days,
                "grid": list(args.grid),
                "granule_bytes": granule_bytes // args.days,
                "plain": {**summary(plain, args.window), "bytes": directory_bytes(plain_path)},
                "icechunk": {**summary(repo, args.window), "bytes": directory_bytes(repo_path)},
                "append_ratio_icechunk_over_plain": statistics.median(repo["seconds"][1:])
                / statistics.median(plain["seconds"][1:]),
                "query": {
                    "plain_seconds": plain_s,
                    "icechunk_head_seconds": head_s,
                    "icechunk_head_seconds_over_plain": head_s / plain_s,
                    "old_snapshot_steps": steps,
                    "plain_same_steps_seconds": plain_old_s,
                    "icechunk_old_snapshot_seconds": old_s,
                    "icechunk_old_over_plain_same_steps": old_s / plain_old_s,
                },
            }
        )


if __name__ == "__main__":
    main()
