"""The default path, end to end: ``accumulus append CUBE g*.nc --dim time`` of 24 monthly
granules, then ``accumulus accumulate CUBE VAR`` with no options, against xarray + Dask.

The granules are two years of the realistic field (``realistic.py``: daily, 1 degree, 180 x
360 float32, 10 % missing) written by xarray (``to_netcdf``), one per month. ``append``
chooses the raw chunks and ``accumulate`` the layout (``spec.default_layout``); nothing is
tuned here. Reported, each figure with its baseline measured in the same run:

- the build: ``accumulate`` seconds against one full read of the raw data (xarray + Dask
  sum of every value: a build's floor), and the stored bytes of the accumulations against
  the raw array's. Each build (the default one, and ``--at time=1`` and
  ``--at lat=1,lon=1`` for issue 39) and each read runs in a fresh process
  (``bench_accumulate.run_child``: wall and CPU seconds, peak RSS), alternating, into a
  sidecar beside the cube (or under ``--scratch``); the sidecars, and with ``--fresh`` the
  cube made before, are deleted only once everything is measured: on this project's file
  system, files created right after thousands were deleted cost more system time
  (``bench_accumulate``'s docstring), which a user's first build does not pay. The default
  build is then made in place (timed too: ``in_place_seconds``) for the questions;
- questions drawn at random (seeded): area-averaged series over a box of whole cells for a
  day-precise period, maps over whole months, maps over day-precise periods; and a series
  and a map over the last 20 days (the last raw chunk, partial as appends leave it), and
  maps over 5 fixed day-precise periods (5 to 300 days, ends off months). For each, the
  median time of an open datacube answering (``warm``), the floor (the least of two bare
  loops reading exactly the chunks the plan names, by the Blosc blocks the answer reads,
  decoded as the answer decodes them: side by side on threads, ``bench_average.floor_reader``,
  and one after another in the calling thread, ``floor_in_thread_reader``),
  and xarray + Dask's scan of the same selection of the same store, with the raw and
  accumulation chunks, requests and bytes counted at the store, and the largest relative
  difference from xarray's answer.

    python benchmarks/bench_defaults.py [--questions 4] [--repeats 5] [--scan-repeats 2]
        [--days 730] [--fresh] [--build-repeats 1] [--baseline-src OLD/src] [--scratch DIR]
        [--dims time --dims lat,lon --at time=month+4 --at lat=1,lon=1]

``--dims``/``--at`` build the cube's group (the questions') with those instead of the
default layout; ``--build-repeats 0`` times no build.

``--scratch /dev/shm/DIR`` puts the timed builds' sidecars there (the cube and its group
stay in ``--dir``): on this machine's ext4 the sidecars' own deletions slow the files each
next build creates (``bench_build_floor``'s docstring), noise of the bench's making.

``--days 2920`` (four times as long) shows how the build's cost grows with the cube.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd
import zarr

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from accumulus.stores.safe_reads import SETTLED_NS
from bench_accumulate import run_child
from bench_average import floor_in_thread_reader, floor_reader
from bench_positions import full_read, timed_scan
from common import DEFAULT_DIR, median_with_cpu, report, without_leftover
from realistic import VARIABLE, dataset


def granules(directory: Path, days: int) -> list[Path]:
    """Monthly NetCDF granules of the first ``days`` days of the realistic field, written by
    xarray once and reused."""
    ds = dataset().isel(time=slice(0, days))
    months = pd.DatetimeIndex(ds.time.values).to_period("M")
    paths = []
    for month in months.unique():
        path = directory / f"granule-{month}.nc"
        if not path.exists():
            part = ds.sel(time=str(month)).compute()
            part.to_netcdf(path.with_suffix(".tmp"))
            path.with_suffix(".tmp").rename(path)
        paths.append(path)
    return paths


def build_cube(directory: Path, days: int, fresh: bool, trash: Path) -> tuple[Path, dict]:
    """The cube made the default way, with the seconds each command took (None: reused). A
    cube made before is moved into ``trash``, deleted once everything is measured."""
    files = granules(directory, days)
    cube = directory / f"defaults-{days}d.zarr"
    timings: dict = {"granules": len(files)}
    if fresh or not (cube / ".zmetadata").exists():
        if cube.exists():
            trash.mkdir(exist_ok=True)
            cube.rename(trash / cube.name)
        command = [sys.executable, "-m", "accumulus", "append", str(cube), *map(str, files)]
        started = time.perf_counter()
        subprocess.run([*command, "--dim", "time"], check=True, capture_output=True)
        timings["append_seconds"] = round(time.perf_counter() - started, 2)
    return cube, timings


def questions(days: pd.DatetimeIndex, lat: np.ndarray, lon: np.ndarray, n: int, seed: int):
    """``n`` of each kind, drawn at random: (kind, over, ranges)."""
    rng = np.random.default_rng(seed)
    out = []

    def period(whole_months: bool) -> tuple[str, str]:
        if whole_months:
            months = days.to_period("M").unique()
            a, b = sorted(rng.choice(len(months), 2, replace=False))
            return str(months[a].start_time.date()), str(months[b].end_time.date())
        a, b = sorted(rng.choice(len(days), 2, replace=False))
        return str(days[a].date()), str(days[b].date())

    for _ in range(n):
        y0, y1 = sorted(rng.choice(len(lat), 2, replace=False))
        x0, x1 = sorted(rng.choice(len(lon), 2, replace=False))
        box = {"lat": (float(lat[y0]), float(lat[y1])), "lon": (float(lon[x0]), float(lon[x1]))}
        out.append(("series, box, day-precise period", ("lat", "lon"),
                    {"time": period(False), **box}))  # fmt: skip
    for _ in range(n):
        out.append(("map, whole months", ("time",), {"time": period(True)}))
    for _ in range(n):
        out.append(("map, day-precise period", ("time",), {"time": period(False)}))
    # And over the last days, which the last raw chunk (partial, as appends leave it) holds.
    last = (str(days[-20].date()), str(days[-1].date()))
    box = {"lat": (float(lat[40]), float(lat[120])), "lon": (float(lon[100]), float(lon[300]))}
    out.append(("series, box, day-precise period", ("lat", "lon"), {"time": last, **box}))
    out.append(("map, day-precise period", ("time",), {"time": last}))
    # Short and long day-precise maps at fixed places, ends off month and chunk boundaries
    # (the default layout's time entries are at months and every 4 days within them).
    for start, length in ((47, 5), (130, 8), (200, 16), (402, 11), (95, 300)):
        if start + length <= len(days):
            period = (str(days[start].date()), str(days[start + length - 1].date()))
            out.append(("map, day-precise period, fixed", ("time",), {"time": period}))
    return out


BUILDS = {
    "default": (None, None),
    "time=1": (["time"], {"time": 1}),
    "lat=1,lon=1": (["lat,lon"], {"lat": 1, "lon": 1}),
}


def measure_builds(path: Path, repeats: int, trash: Path, baseline: Path | None = None) -> dict:
    """Each build of ``BUILDS`` into a sidecar, and a full read before each, ``repeats``
    times, each in a fresh process: medians, and each build against the reads. With
    ``baseline`` (another checkout's ``src``), each build is also made by that code, beside
    this code's, the two in turn first (``baseline`` in the output: before/after in one run).
    Each build is also given against the read made right before it (``over_read_before_each``):
    on a shared machine the load moves between repeats more than within a pair."""
    trash.mkdir(parents=True, exist_ok=True)
    reads: dict[str, list[dict]] = {name: [] for name in BUILDS}
    runs: dict[str, list[dict]] = {name: [] for name in BUILDS}
    before: dict[str, list[dict]] = {name: [] for name in BUILDS}
    run_child(path, VARIABLE, "read")  # warm: the cube and the modules in the page cache
    for repeat in range(repeats):
        for name, (dims, at) in BUILDS.items():
            reads[name].append(run_child(path, VARIABLE, "read"))
            stem = name.replace(",", "-")
            if baseline is not None and repeat % 2:
                _build_into(
                    before[name], path, dims, at, trash / f"baseline-{stem}-{repeat}.zarr", baseline
                )
            _build_into(runs[name], path, dims, at, trash / f"sidecar-{stem}-{repeat}.zarr")
            if baseline is not None and not repeat % 2:
                _build_into(
                    before[name], path, dims, at, trash / f"baseline-{stem}-{repeat}.zarr", baseline
                )
    every_read = [r for done in reads.values() for r in done]
    read_s = statistics.median(r["seconds"] for r in every_read)
    read_cpu = statistics.median(r["cpu_seconds"] for r in every_read)
    out: dict = {
        "full_read_seconds": round(read_s, 2),
        "full_read_cpu_seconds": round(read_cpu, 2),
        "full_read_peak_rss_mib": round(max(r["peak_rss_bytes"] for r in every_read) / 2**20),
    }
    for name, done in runs.items():
        out[name] = _build_figures(done, read_s, read_cpu)
        out[name]["over_read_before_each"] = [
            round(build["seconds"] / read["seconds"], 2)
            for build, read in zip(done, reads[name], strict=True)
        ]
        if before[name]:
            out[name]["baseline"] = _build_figures(before[name], read_s, read_cpu)
            # Each new build against the old one made right after it: on a shared machine
            # the load moves between repeats more than within a pair.
            out[name]["cpu_over_baseline_each"] = [
                round(new["cpu_seconds"] / old["cpu_seconds"], 3)
                for new, old in zip(done, before[name], strict=True)
            ]
    return out


def _build_into(
    done: list[dict],
    path: Path,
    dims: list[str] | None,
    at: dict[str, int] | None,
    sidecar: Path,
    src: Path | None = None,
) -> None:
    """One build into ``sidecar`` in a fresh process (by the code in ``src``, else this
    checkout's), appended to ``done`` with the bytes it stored."""
    without_leftover(sidecar)
    if src is None:
        done.append(run_child(path, VARIABLE, "build", dims, at, sidecar))
    else:
        with _python_path(src):
            done.append(run_child(path, VARIABLE, "build", dims, at, sidecar))
    done[-1]["stored"] = _stored_bytes(sidecar)


def _build_figures(done: list[dict], read_s: float, read_cpu: float) -> dict:
    seconds = statistics.median(b["seconds"] for b in done)
    cpu = statistics.median(b["cpu_seconds"] for b in done)
    return {
        "seconds": round(seconds, 2),
        "over_full_read": round(seconds / read_s, 2),
        "cpu_seconds": round(cpu, 2),
        "cpu_over_full_read_cpu": round(cpu / read_cpu, 2),
        "peak_rss_mib": round(max(b["peak_rss_bytes"] for b in done) / 2**20),
        "seconds_each": [round(b["seconds"], 2) for b in done],
        "cpu_seconds_each": [round(b["cpu_seconds"], 2) for b in done],
        "stored_bytes": done[-1]["stored"],
    }


@contextmanager
def _python_path(src: Path) -> Iterator[None]:
    """Child processes started meanwhile import accumulus from ``src``."""
    kept = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(src.resolve())
    try:
        yield
    finally:
        if kept is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = kept


def _stored_bytes(sidecar: Path) -> int:
    """Bytes of the accumulation chunks a sidecar holds (not its metadata)."""
    return sum(
        p.stat().st_size
        for p in sidecar.rglob("*")
        if p.is_file()
        and any(part.endswith("_accumulation_group") for part in p.relative_to(sidecar).parts)
        and not p.name.startswith((".", "zarr.json"))
    )


def counted(store: CountingStore) -> dict:
    chunks = [k for k in store.counts.reads if not is_metadata_key(k)]
    return {
        "requests": store.counts.read_requests,
        "chunks": len(chunks),
        "raw_chunks": len([k for k in chunks if k.startswith(f"{VARIABLE}/")]),
        "bytes": store.counts.read_bytes,
    }


def ask(path: Path, kind: str, over, ranges, args) -> dict:
    store = CountingStore(open_store(str(path)))
    counted_handle = accumulus.open(store)
    handle = accumulus.open(str(path))  # as a user opens it
    for opened in (handle, counted_handle):
        opened.query(VARIABLE, over, ranges)  # warm-up: the snapshot is read once
    store.reset()
    result = counted_handle.query(VARIABLE, over, ranges)
    warm_counts = counted(store)
    warm, warm_cpu, result = median_with_cpu(
        lambda: handle.query(VARIABLE, over, ranges), args.repeats
    )
    floors: dict[str, float] = {}
    try:
        store.reset()
        floor_reader(counted_handle, result)()
        floor_counts: dict | None = counted(store)
        floors["side_by_side"] = median_with_cpu(floor_reader(handle, result), args.repeats)[0]
        in_thread = floor_in_thread_reader(handle, result)
        if in_thread is not None:
            floors["in_thread"] = median_with_cpu(in_thread, args.repeats)[0]
    except AttributeError:  # bench_average's floor decodes Zarr v2 arrays only
        floor_counts = None
    # The least of the two: a few small chunks cost less read one after another than
    # handed to threads, many large ones less side by side.
    floor = min(floors.values(), default=None)

    scan_seconds, expected, scan_store = timed_scan(path, over, ranges, args.scan_repeats)
    got, want = result.data.values, expected.values
    return {
        "kind": kind,
        "over": list(over),
        "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
        "plan": {
            "raw_chunks": result.stats.raw_chunks_read,
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "accumulations": sorted({r.key for r in result.plan.accumulation_reads}),
        },
        "warm_seconds": round(warm, 5),
        "warm_cpu_seconds": round(warm_cpu, 5),
        "floor_seconds": None if floor is None else round(floor, 5),
        "floors_seconds": {k: round(v, 5) for k, v in floors.items()},
        "xarray_seconds": round(scan_seconds, 4),
        "xarray_over_warm": round(scan_seconds / warm, 1),
        "warm_over_floor": None if floor is None else round(warm / floor, 2),
        "warm": warm_counts,
        "floor": floor_counts,
        "xarray": counted(scan_store),
        "max_relative_difference": float(np.nanmax(np.abs(got - want) / np.abs(want))),
    }


def storage(path: Path) -> tuple[dict, int | None]:
    """Stored bytes of each accumulation (as ``inspect`` reports them) and of the raw array."""
    [group] = accumulus.inspect(str(path))["accumulation_groups"]
    out, raw = {}, None
    for acc in group["accumulations"]:
        raw = acc["raw_bytes_stored"]
        out[f"{','.join(acc['dims'])} at {acc['at']}"] = acc["bytes_stored"]
    return out, raw


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def summary(answers: list[dict]) -> dict:
    out = {}
    for kind in dict.fromkeys(a["kind"] for a in answers):
        these = [a for a in answers if a["kind"] == kind]
        out[kind] = {
            "questions": len(these),
            "raw_chunks_max": max(a["plan"]["raw_chunks"] for a in these),
            "xarray_over_warm_min": min(a["xarray_over_warm"] for a in these),
            "xarray_over_warm_median": float(np.median([a["xarray_over_warm"] for a in these])),
            "warm_over_floor_median": _median([a["warm_over_floor"] for a in these]),
            "max_relative_difference": max(a["max_relative_difference"] for a in these),
        }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR / "defaults")
    parser.add_argument("--days", type=int, default=730)
    parser.add_argument("--questions", type=int, default=4, help="of each kind")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=2)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--fresh", action="store_true", help="append and accumulate again")
    parser.add_argument("--build-repeats", type=int, default=1, help="0: no builds timed")
    parser.add_argument(
        "--scratch", type=Path, help="where the timed builds write (default: --dir)"
    )
    parser.add_argument(
        "--baseline-src",
        type=Path,
        help="another checkout's src/: each build also made by that code, in the same run",
    )
    parser.add_argument(
        "--at",
        action="append",
        help="build the cube's group with these positions instead of the default layout "
        "(with --dims; e.g. --dims time --dims lat,lon --at time=1 --at lat=1,lon=1)",
    )
    parser.add_argument("--dims", action="append", help="with --at")
    args = parser.parse_args()
    # append chunks daily data by calendar month (a rectilinear grid), which xarray reads
    # through zarr only with this setting (docs/remote.md).
    zarr.config.set({"array.rectilinear_chunks": True})
    args.dir.mkdir(parents=True, exist_ok=True)
    cube_trash = args.dir / "deleted-at-the-end"  # a cube made before, with --fresh
    path, timings = build_cube(args.dir, args.days, args.fresh, cube_trash)
    trash = (args.scratch or args.dir) / "deleted-at-the-end"
    builds = (
        measure_builds(path, args.build_repeats, trash, args.baseline_src)
        if args.build_repeats
        else None
    )
    read_seconds = full_read(path)
    started = time.perf_counter()
    built = accumulus.accumulate(
        str(path),
        VARIABLE,
        dims=args.dims,
        at=args.at,
        rebuild=args.fresh or bool(args.at),
        reset=bool(args.at),
    )
    build_seconds = time.perf_counter() - started
    # Questions are asked once the files just written have settled, as a user's come later:
    # a file changed within ``SETTLED_NS`` is read whole and verified on every read
    # (``chunk_reader``'s memo of verified versions), which only the first seconds pay.
    time.sleep(SETTLED_NS / 1e9)
    stored, raw = storage(path)
    total = sum(v or 0 for v in stored.values())
    handle = accumulus.open(str(path))
    cube = handle.snapshot().cube
    var = cube.variable(VARIABLE)
    days = pd.DatetimeIndex(cube.index("time"))
    lat, lon = np.asarray(cube.index("lat")), np.asarray(cube.index("lon"))
    asked = questions(days, lat, lon, args.questions, args.seed)
    answers = [ask(path, kind, over, ranges, args) for kind, over, ranges in asked]
    report(
        {
            "benchmark": "the default path: append of monthly granules + accumulate, no options",
            "cube": {
                "store": str(path),
                "shape": list(var.shape),
                "chunks": [sorted(set(b.sizes)) for b in var.bounds],
                "raw_bytes_stored": raw,
                **timings,
            },
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "layout": [f"{'+'.join(a.dims)} at {a.rule_text()}" for a in built.group.accumulations],
            "build": {
                "each_in_a_fresh_process": builds,
                "action": built.action,
                "in_place_seconds": round(build_seconds, 2)
                if built.action != "up to date"
                else None,
                "in_place_full_read_seconds": round(read_seconds, 2),
                "stored": stored,
                "stored_over_raw": round(total / raw, 3) if total and raw else None,
            },
            "summary": summary(answers),
            "questions": answers,
        }
    )
    for deleted in {trash, cube_trash}:
        shutil.rmtree(deleted, ignore_errors=True)


if __name__ == "__main__":
    main()
