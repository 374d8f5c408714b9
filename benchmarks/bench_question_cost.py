"""The CPU one warm question costs in-process (issues 37, 38 and 39): an open datacube asked
the same question many times, process CPU time per answer, for a box series over a
day-precise period, a whole-month map and a day-precise map on the default-path cube
(``bench_defaults``' 730 x 180 x 360 cube: ``--cube``).

``--baseline SRC``: the same questions answered by another source tree of accumulus (a
``src`` directory, e.g. ``git archive`` of an older commit), in alternating processes with
this tree (``--rounds`` of each), so that the ratio compares the two on the same machine
load. The figure of each side is the median over its rounds; the chunks read by each
answer are reported beside it, so both sides are seen to answer from the same reads.

    python benchmarks/bench_question_cost.py --cube CUBE [--baseline SRC] [--rounds 5]
        [--questions 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from common import report

# (over, ranges): the questions asked, as bench_defaults' cube labels them.
QUESTIONS = {
    "series": (("lat", "lon"), {"time": ("2001-03-05", "2001-03-21"), "lat": (-20.5, 30.5),
                               "lon": (10.5, 80.5)}),
    "map_month": (("time",), {"time": ("2001-03-01", "2001-03-31")}),
    "map_days": (("time",), {"time": ("2001-03-05", "2001-04-21")}),
}  # fmt: skip


def measure(cube: str, questions: int) -> dict:
    """CPU milliseconds per answer of each question, and the chunks it read."""
    import accumulus

    handle = accumulus.open(cube)
    found = {}
    for name, (over, ranges) in QUESTIONS.items():
        for _ in range(30):  # warm: the snapshot, the calibration of the costs
            result = handle.query("tas", over, ranges)
        started = time.process_time()
        for _ in range(questions):
            handle.query("tas", over, ranges)
        found[name] = {
            "cpu_ms": (time.process_time() - started) / questions * 1e3,
            "raw_chunks": result.stats.raw_chunks_read,
            "accumulation_chunks": result.stats.accumulation_chunks_read,
        }
    return found


def run(cube: str, questions: int, source: str | None) -> dict:
    """``measure`` in a fresh process, importing accumulus from ``source`` when given."""
    env = dict(os.environ)
    if source is not None:
        env["PYTHONPATH"] = source
    command = [sys.executable, __file__, "--cube", cube, "--questions", str(questions), "--one"]
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cube", type=Path, required=True)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--questions", type=int, default=300)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    cube = str(args.cube)
    if args.one:
        print(json.dumps(measure(cube, args.questions)))
        return
    sides = {"this": None} | ({"baseline": str(args.baseline)} if args.baseline else {})
    rounds: dict[str, list[dict]] = {side: [] for side in sides}
    for _ in range(args.rounds):
        for side, source in sides.items():
            rounds[side].append(run(cube, args.questions, source))
    document: dict = {"cube": cube, "rounds": args.rounds, "questions": args.questions}
    for name in QUESTIONS:
        entry = {}
        for side in sides:
            runs = rounds[side]
            entry[side] = {
                "cpu_ms_median": round(statistics.median(r[name]["cpu_ms"] for r in runs), 3),
                "raw_chunks": runs[0][name]["raw_chunks"],
                "accumulation_chunks": runs[0][name]["accumulation_chunks"],
            }
        if "baseline" in entry:
            ratio = entry["this"]["cpu_ms_median"] / entry["baseline"]["cpu_ms_median"]
            entry["this_vs_baseline"] = round(ratio, 3)
        document[name] = entry
    document["load_average"] = [round(x, 2) for x in os.getloadavg()]
    report(document)


if __name__ == "__main__":
    main()
