"""The default plan against the faster of the two it chooses between.

The planner (``accumulation/query/cost.py``) estimates, in seconds, the plan a query's
accumulations allow and the plain scan of the same cells, and runs the faster (``plan=
"cheaper"``, the default). This benchmark asks random questions of three cubes whose raw
chunks are 54 KB, 2.4 MB and 95 MB (the demo's generator: daily values on a 1-degree grid;
accumulations over time, latitude, longitude and latitude+longitude, with time entries at
month ends, ``accumulate --at time=month``), on local disk and through a store adding
``--latency`` seconds to every request (object storage). For each question it measures the
median time of:

- ``chosen``: the default plan (what the planner picked, and its estimate);
- ``accumulation``: ``plan="accumulation"`` forced;
- ``scan``: the plain scan (``use_accumulation=False``);

and the ratio chosen / the faster of the two forced plans (``ratio_chosen_over_fastest``).
The default plan is always one of the two (the same reads: ``chosen_is``), so the ratio of
that forced plan's time to the faster's (``ratio_of_plan_chosen``) says how good the choice
was without the noise of timing one plan twice. The three are run in turn, each
round after the other (``interleaved``), so that a transient of a shared machine falls on all
three alike; where the default plan is one of the forced ones, the two timings are of the same
plan and their ratio is the noise of the measurement. The summary gives, per cube and
setting, the worst and median ratios and the fraction within 1.5x, over every question
and over those where the planner had a choice (accumulations could answer). Answers are checked
against each other (rtol 1e-9).

    python benchmarks/bench_planner.py [--questions 12] [--repeats 5] [--latency 0.05]
        [--min-seconds 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import accumulus
from accumulus.demo import VARIABLE, DemoConfig
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from common import DEFAULT_DIR, MIN_SECONDS, cube, report

# Two years each (three for the year chunks); chunks of 54 KB, 2.4 MB and 95 MB (float32).
CUBES = {
    "54KB": DemoConfig(days=731, chunks=(30, 15, 30)),
    "2.4MB": DemoConfig(days=731, chunks=(73, 90, 90), view_limit=90.0, missing=0.10),
    "95MB": DemoConfig(days=1095, chunks=(365, 180, 360)),
}
AT = "time=month"
WITHIN = 1.5


def prepared(directory: Path, config: DemoConfig) -> Path:
    """The cube with its accumulations (built once; building again with the same settings
    does nothing)."""
    path = cube(directory, config)
    accumulus.accumulate(str(path), VARIABLE, at=AT)
    return path


def questions(config: DemoConfig, count: int, seed: int) -> list[tuple[str, str, dict]]:
    """Random maps (over time: whole months or any days, the globe or a box) and series
    (over latitude and longitude: any box, any days)."""
    rng = np.random.default_rng(seed)
    days = pd.date_range(config.start, periods=config.days, freq="D")
    asked = []
    for k in range(count):
        kind = ("map", "series")[k % 2]
        first = int(rng.integers(0, config.days - 1))
        length = int(rng.choice([1, 5, 20, 60, 200, 500])) * (0.5 + rng.random())
        last = min(config.days - 1, first + max(0, int(length)))
        if kind == "map" and rng.random() < 0.5:  # whole months
            start = days[first].to_period("M").start_time
            end = days[last].to_period("M").end_time.normalize()
            if end > days[-1]:
                end = days[-1]
            period = (str(start.date()), str(end.date()))
        else:
            period = (str(days[first].date()), str(days[last].date()))
        ranges: dict = {"time": period}
        if kind == "series" or rng.random() < 0.4:
            lat = sorted(rng.uniform(-89.5, 89.5, 2).round(1))
            lon = sorted(rng.uniform(-179.5, 179.5, 2).round(1))
            ranges |= {"lat": tuple(lat), "lon": tuple(lon)}
        over = "time" if kind == "map" else "lat,lon"
        asked.append((kind, over, ranges))
    return asked


def interleaved(
    actions: dict[str, Callable[[], Any]], repeats: int, limit: float, least: float
) -> dict:
    """Median wall time and last result of each action, run in turn, round after round, so
    that a transient of a shared machine falls on all of them alike (each round begins with
    the next: the one after a large scan pays for memory the scan gave back): ``repeats``
    rounds at least, more until they last ``least`` seconds together (a question of a few
    milliseconds gets many), none begun after ``limit`` seconds."""
    times: dict[str, list[float]] = {name: [] for name in actions}
    results: dict[str, Any] = {}
    names = list(actions)
    began = time.perf_counter()
    while True:
        first = len(times[names[0]]) % len(names)
        for name in names[first:] + names[:first]:
            action = actions[name]
            started = time.perf_counter()
            results[name] = action()
            times[name].append(time.perf_counter() - started)
        elapsed = time.perf_counter() - began
        rounds = len(times["chosen"])
        if elapsed > limit or (rounds >= repeats and elapsed >= least):
            break
    return {name: (statistics.median(times[name]), results[name]) for name in actions}


def measure(
    handle: accumulus.Datacube, over: str, ranges: dict, repeats: int, least: float
) -> dict:
    def ask(**options: Any) -> Callable[[], Any]:
        return lambda: handle.query(VARIABLE, over, ranges, **options)

    ask()()  # the first question of a handle reads its snapshot and measures the codecs
    timed = interleaved(
        {"chosen": ask(), "accumulation": ask(plan="accumulation"),
         "scan": ask(use_accumulation=False)},
        repeats,
        limit=max(4.0, least),
        least=least,
    )  # fmt: skip
    (chosen_s, chosen), (acc_s, acc), (scan_s, scan) = timed.values()
    for other in (acc, scan):
        np.testing.assert_allclose(other.data.values, chosen.data.values, rtol=1e-9, atol=1e-12)
    fastest = min(acc_s, scan_s)
    kind = "accumulation" if chosen.plan.accumulation_reads else "scan"
    # The forced plan the default one is (the same reads): its time is the chosen plan's,
    # measured without the noise of timing one plan twice.
    same = {"accumulation": (acc, acc_s), "scan": (scan, scan_s)}
    twin = next((name for name, (r, _) in same.items() if r.plan.reads == chosen.plan.reads), None)
    return {
        "over": over,
        "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
        "chosen": kind,
        "choice_offered": bool(chosen.costs),
        "chosen_seconds": round(chosen_s, 6),
        "accumulation_seconds": round(acc_s, 6),
        "scan_seconds": round(scan_s, 6),
        "ratio_chosen_over_fastest": round(chosen_s / fastest, 3),
        "chosen_is": twin,  # which forced plan has the same reads
        "ratio_of_plan_chosen": None if twin is None else round(same[twin][1] / fastest, 3),
        "estimated_seconds": {
            "chosen": round(chosen.estimate.seconds, 6),
            **{name: round(cost.seconds, 6) for name, cost in chosen.costs.items()},
        },
        # The scan's figure a lower bound, not its estimate (``cost.scan_bound``): it could
        # not win, and was not estimated in full.
        "scan_bounded": bool(chosen.costs) and chosen.costs["scan"].at_least,
        "requests": {"chosen": chosen.stats.requests, "scan": scan.stats.requests},
    }


def summary(results: list[dict]) -> dict:
    """Worst and median ratio chosen / fastest, the fraction within ``WITHIN``; the same over
    the questions where the planner had a choice (the others run the one plan there is, and
    their ratio is the noise of timing one plan twice)."""

    def figures(ratios: list[float]) -> dict:
        if not ratios:
            return {"questions": 0}
        return {
            "questions": len(ratios),
            "worst_ratio": max(ratios),
            "median_ratio": round(statistics.median(ratios), 3),
            f"fraction_within_{WITHIN}x": round(sum(r <= WITHIN for r in ratios) / len(ratios), 3),
        }

    def ratios(key: str, offered: bool) -> list[float]:
        return [
            r[key] for r in results if r[key] is not None and (r["choice_offered"] or not offered)
        ]

    return {
        "all": figures(ratios("ratio_chosen_over_fastest", False)),
        "with_a_choice": figures(ratios("ratio_chosen_over_fastest", True)),
        "plan_chosen_all": figures(ratios("ratio_of_plan_chosen", False)),
        "plan_chosen_with_a_choice": figures(ratios("ratio_of_plan_chosen", True)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--questions", type=int, default=12, help="random questions per cube")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument(
        "--min-seconds", type=float, default=2 * MIN_SECONDS, help="least time per question"
    )
    parser.add_argument("--cubes", default=",".join(CUBES), help="which cubes: " + ", ".join(CUBES))
    parser.add_argument("--seed", type=int, default=37)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    document: dict = {
        "latency_per_request": args.latency,
        "cpus": os.cpu_count(),
        "load_average_at_start": [round(x, 2) for x in os.getloadavg()],
        "cubes": {},
    }
    every: list[dict] = []
    for name in args.cubes.split(","):
        config = CUBES[name]
        path = prepared(args.dir, config)
        asked = questions(config, args.questions, args.seed)
        settings = {
            "local": accumulus.open(str(path)),
            f"latency_{args.latency}s": accumulus.open(
                CountingStore(open_store(str(path)), latency=args.latency)
            ),
        }
        per_cube = {}
        for setting, handle in settings.items():
            results = [
                {
                    "question": f"{kind} {k}",
                    **measure(handle, over, ranges, args.repeats, args.min_seconds),
                }
                for k, (kind, over, ranges) in enumerate(asked)
            ]
            every += results
            per_cube[setting] = {"summary": summary(results), "results": results}
        document["cubes"][name] = {"chunks": list(config.chunk_shape), **per_cube}
    document["summary"] = summary(every)
    document["load_average_at_end"] = [round(x, 2) for x in os.getloadavg()]
    report(document)


if __name__ == "__main__":
    main()
