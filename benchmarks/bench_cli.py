"""How long the command line takes, as a user runs it: ``accumulus --help`` and
``accumulus average <realistic cube> tas ... --json`` in fresh processes (issue 14 item 5:
at most 0.3 s and 1.0 s).

For each command, medians over ``--repeats`` runs of the wall time and of the CPU time (user
+ system) of the process, and for ``average`` the seconds the query itself took (the plan's
``seconds`` in its JSON) and the chunks it read. The floors are a bare interpreter
(``python -c pass``) and one that imports what every query needs (xarray, zarr, and
``dask.base``, which xarray imports): what ``average`` takes beyond that and its query is
reported. The cube is the realistic one (``realistic.py``: 3650 x 180 x 360
float32 written by xarray, chunks 73 x 90 x 90 = 2.4 MB), accumulated once. The machine's
load average is printed beside each command: wall times on a shared machine move with it,
CPU times much less.

    python benchmarks/bench_cli.py [--repeats 7]

It measures the accumulus of the interpreter that runs it: as a user installs it (without
the development extras, whose packages each library's entry-point scan reads too),

    python -m venv /tmp/v && /tmp/v/bin/pip install . && /tmp/v/bin/python benchmarks/bench_cli.py
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import accumulus
from common import DEFAULT_DIR
from realistic import CHUNKS, VARIABLE, realistic_cube

# The console script a user runs (``python -m accumulus`` where there is none).
SCRIPT = Path(sys.executable).with_name("accumulus")
COMMAND = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "accumulus"]


LIBRARIES = "python: import xarray, zarr (a query's libraries)"
LIBRARIES_CODE = (
    "import gc, os\ngc.disable()\nimport xarray, zarr, dask.base\ngc.freeze()\nos._exit(0)"
)


def questions(cube: str) -> dict[str, list[str]]:
    # Time chunks of 73 days from 2001-01-01; lat and lon chunks of 90 degrees.
    average = [*COMMAND, "average", cube, VARIABLE]
    return {
        "map, aligned": [*average, "--over", "time", "--range", "time=2003-01-01/2004-12-30"],
        "series, aligned box": [
            *average, "--over", "lat,lon", "--range", "lat=0/90", "--range", "lon=-90/90",
        ],
        "map, unaligned ends": [
            *average, "--over", "time", "--range", "time=2002-02-15/2005-07-20",
        ],
        "series, unaligned box": [
            *average, "--over", "lat,lon", "--range", "lat=-35/37", "--range", "lon=-17/51",
        ],
    }  # fmt: skip


def run(command: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """Wall and CPU seconds of one run, and what it printed."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, done.stdout


def measure(name: str, command: list[str], repeats: int, env: dict[str, str]) -> dict:
    load = os.getloadavg()[0]
    runs = [run(command, env) for _ in range(repeats)]
    result = {
        "command": name,
        "wall_seconds": round(statistics.median(r[0] for r in runs), 3),
        "wall_min_max": [round(min(r[0] for r in runs), 3), round(max(r[0] for r in runs), 3)],
        "cpu_seconds": round(statistics.median(r[1] for r in runs), 3),
        "load_average_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
    }
    if "--json" in command:
        plans = [json.loads(r[2])["plan"] for r in runs]
        result["query_seconds"] = round(statistics.median(p["seconds"] for p in plans), 3)
        result["plan"] = {
            "accumulation_chunks": plans[-1]["accumulation_chunks_read"],
            "raw_chunks": plans[-1]["raw_chunks_read"],
            "bytes": plans[-1]["bytes_read"],
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)
    cube = realistic_cube(args.dir)
    built = accumulus.accumulate(str(cube), VARIABLE, minimal=True)
    sources = str(Path(accumulus.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sources, os.environ.get("PYTHONPATH", "")])}
    # As an installed package runs: its modules compiled once, their bytecode cached (pip
    # compiles them at install). Without it every run compiles accumulus again: 1.03-1.07 s
    # for the aligned box's average instead of 0.92 s, where PYTHONDONTWRITEBYTECODE is set.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    commands = {
        "python -c pass (the floor)": [sys.executable, "-c", "pass"],
        # What any query must load: xarray (which loads dask.base to ask whether an array is
        # Dask's) and zarr, imported as the command line imports them and left as it leaves.
        LIBRARIES: [sys.executable, "-c", LIBRARIES_CODE],
        "accumulus --help": [*COMMAND, "--help"],
        **{
            f"accumulus average --json: {q}": [*c, "--json"]
            for q, c in questions(str(cube)).items()
        },
    }
    for command in commands.values():  # the file cache, bytecode and numba's kernel cache, warm
        run(command, env)
    results = [measure(name, command, args.repeats, env) for name, command in commands.items()]
    libraries = next(r["wall_seconds"] for r in results if r["command"] == LIBRARIES)
    for result in results:
        if "query_seconds" in result:  # what the command adds to its libraries and its query
            beyond = result["wall_seconds"] - libraries - result["query_seconds"]
            result["beyond_libraries_and_query_seconds"] = round(beyond, 3)
    print(
        json.dumps(
            {
                "benchmark": "command line: wall and CPU seconds of fresh processes",
                "cube": {"store": str(cube), "chunks": list(CHUNKS), "accumulate": built.action},
                "repeats": args.repeats,
                "results": results,
                "cpu_count": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
