"""Issue 38's statistics asked for the first time, against their floor: each question of
``bench_statistics`` with a target (the var, std, trend and mean maps, the whole-months var
map, the JJA series) asked ``--variants`` times with its period shifted (a chunk of days a
time for the maps, a year for the months map and the series), each variant once, so that
nothing a question works out for itself (its resolved ranges, plan, chunk requests,
answer) can have been kept from an earlier asking. ``bench_statistics`` asks one question
``--repeats`` times; a program or a service asks questions it has not asked before (the
service's answer cache serves the others).

What the process keeps for every question is kept here as in a long-lived process: before
timing, every chunk of the accumulation group is read once, through the cube's store, so
that the checksum of each chunk's file has been verified (``chunk_reader`` verifies a file
version's checksum the first time the process reads it, reading it whole: ~0.1 ms a chunk
more, which the floor, reading the same chunks again and again, never pays), and one
question of each kind over another period is asked first. The files are in the page cache
(the benchmark reads them all before timing).

For each question: the median CPU seconds of its variants (one answer each, process CPU),
the floor (``bench_statistics.floor``: ``parts`` and ``fresh``, the mean of the first and
last variants' floors, which read as many chunks of the same arrays), and the median of
the first variant asked again (``again``, as ``bench_statistics`` times it). The cube is
``bench_statistics``'s (run it first, without ``--reuse``, for the same ``--days``).

    python benchmarks/bench_first_questions.py [--days 3650] [--dir DIR] [--variants 8]

(At most 8 variants on the ten-year cube: the series' last three years end with it.)
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from pathlib import Path

import zarr

import accumulus
from accumulus.chunk_reader import ChunkRequest, read_chunks
from accumulus.grid import array_bounds
from bench_statistics import STEP, VARIABLE, floor, labels
from common import DEFAULT_DIR, report

BOX = {"lat": slice(0, 90), "lon": slice(90, 270)}  # the var series' box
MAPS = {"var_map": "var", "std_map": "std", "trend_map": "trend", "mean_map": "mean"}


def variants(path: Path, name: str, count: int) -> list[tuple[str, list[str], dict, dict]]:
    """``count`` questions of ``name``'s shape over shifted periods: (stat, over, ranges,
    options)."""
    if name in MAPS:  # 40 whole chunks, a chunk later each time
        spans = [{"time": slice(STEP * (1 + k), STEP * (41 + k))} for k in range(count)]
        return [(MAPS[name], ["time"], labels(path, span), {}) for span in spans]
    if name == "var_map_months":  # February to November of one year, a year later each time
        years = [2001 + k for k in range(count)]
        return [("var", ["time"], {"time": (f"{y}-02-01", f"{y}-11-30")}, {}) for y in years]
    # season_series: JJA of three years over the box, a year later each time
    box = labels(path, BOX)
    years = [2001 + k for k in range(count)]
    jja = {"season": "JJA"}
    return [
        ("mean", ["lat", "lon"], {**box, "time": (f"{y}-01-01", f"{y + 2}-12-31")}, jja)
        for y in years
    ]


def verify_every_chunk(handle: accumulus.Datacube) -> int:
    """Read every chunk of the accumulation group once through the cube's store (its files'
    checksums verified, as a long-lived process has for what it read before); how many."""
    store = handle.snapshot().cube.store
    group = zarr.open_group(store, path=f"{VARIABLE}_accumulation_group", mode="r")
    read = 0
    for array in _arrays(group):
        if not array.size:
            continue
        coords = itertools.product(*(range(b.n_chunks) for b in array_bounds(array)))
        requests = [ChunkRequest(array, c) for c in coords]
        for k in range(0, len(requests), 16):  # (a batch small enough to be read here)
            read_chunks(requests[k : k + 16], lambda request, chunk: None)
        read += len(requests)
    return read


def _arrays(group: zarr.Group):
    for _, array in group.arrays():
        yield array
    for _, sub in group.groups():
        yield from _arrays(sub)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--days", type=int, default=3650)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--variants", type=int, default=8)
    args = parser.parse_args()
    path = args.dir / f"statistics-{args.days}d.zarr"
    for file in path.rglob("*"):  # (into the page cache)
        if file.is_file():
            file.read_bytes()
    handle = accumulus.open(str(path))
    verified = verify_every_chunk(handle)
    last = 2000 + args.days // 365  # the record's last year: another question than any variant
    for stat in ("mean", "var", "std", "trend"):
        handle.query(VARIABLE, ["time"], {"time": (f"{last}-01-01", f"{last}-06-30")}, stat=stat)
    box = labels(path, BOX)
    handle.query(VARIABLE, ["lat", "lon"], {**box, "time": (f"{last}-01-01", None)}, season="JJA")
    found = {}
    for name in ("var_map", "var_map_months", "std_map", "trend_map", "season_series", "mean_map"):
        asked = variants(path, name, args.variants)
        seconds, results = [], []
        for stat, over, ranges, options in asked:
            started = time.process_time()
            results.append(handle.query(VARIABLE, over, ranges, stat=stat, **options))
            seconds.append(time.process_time() - started)
        floors = [floor(handle, results[k]) for k in (0, -1)]
        parts = statistics.mean(f["parts"][1] for f in floors)
        fresh = statistics.mean(f["fresh"][1] for f in floors)
        stat, over, ranges, options = asked[0]
        again = []
        for _ in range(args.variants):
            started = time.process_time()
            handle.query(VARIABLE, over, ranges, stat=stat, **options)
            again.append(time.process_time() - started)
        first = statistics.median(seconds)
        found[name] = {
            "first_cpu_ms": round(first * 1000, 3),
            "again_cpu_ms": round(statistics.median(again) * 1000, 3),
            "floor_cpu_ms": round(parts * 1000, 3),
            "fresh_floor_cpu_ms": round(fresh * 1000, 3),
            "first_vs_floor_cpu": round(first / parts, 2),
            "first_vs_fresh_floor_cpu": round(first / fresh, 2),
            "each_cpu_ms": [round(s * 1000, 2) for s in seconds],
            "accumulation_chunks": results[0].stats.accumulation_chunks_read,
            "raw_chunks": sum(r.stats.raw_chunks_read for r in results),
        }
    report({"days": args.days, "variants": args.variants, "chunks_verified": verified,
            "questions": found})  # fmt: skip


if __name__ == "__main__":
    main()
