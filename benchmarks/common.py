"""Shared by the benchmarks: the synthetic cube (the demo's generator at benchmark size),
medians, and a JSON report."""

from __future__ import annotations

import json
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accumulus.demo import DemoConfig, write_demo_cube

DEFAULT_DIR = Path("benchmark-data")

# A cube shaped like a real archive: 10 years daily at 1 degree, float32 chunks of
# 73 x 90 x 90 (2.4 MB) as xarray writes them, 10 % of values missing; about 0.9 GiB.
REALISTIC = DemoConfig(
    days=3650, resolution=1.0, chunks=(73, 90, 90), view_limit=90.0, missing=0.10
)
# The small-chunk cube of the first release: chunks of 30 x 15 x 30 (54 KB), where Dask's
# per-task overhead dominates any full scan. Reported as a second, labelled case.
SMALL_CHUNKS = DemoConfig(days=4018, chunks=(30, 15, 30))


def cube(directory: Path, config: DemoConfig) -> Path:
    """The benchmark cube for ``config``, written once and reused (a marker file beside it
    holds the configuration it was written with)."""
    chunks = "x".join(map(str, config.chunks))
    path = directory / f"cube-{config.days}d-{config.resolution}deg-{chunks}.zarr"
    marker = path.with_suffix(".config.json")  # beside the store: zarr warns of strangers
    wanted = json.dumps(config.__dict__, default=list)
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing {config.nbytes / 2**30:.2f} GiB benchmark cube {path} ...", file=sys.stderr)
        write_demo_cube(path, config)
        marker.write_text(wanted)
    return path


# Runs of a question last this long together at least, however many ``repeats`` ask: 15
# runs of a 3 ms query span 45 ms, which a transient on a shared machine (the threads of the
# xarray scan just before) moves whole (3.1-3.7 ms, against 2.6 ms over 101 runs).
# The start of the child processes that time a full read against a build (bench_accumulate,
# bench_build_floor): both kinds start their clocks with the same modules loaded: those
# Dask's first compute imports (``distributed``, looking for a client), which the read would
# time and the build not, and the build's own, which the build would time and the read not
# (session build53). ``usage()``: wall seconds and the process's CPU seconds.
TIMED_CHILD_PRELUDE = """
import json, os, resource, sys, time
from pathlib import Path
import dask.array, numpy as np, xarray as xr, zarr
import accumulus, accumulus.api
import importlib.util
if importlib.util.find_spec("distributed") is not None:
    import distributed
import accumulus.accumulation.build.accumulate

def usage():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return time.perf_counter(), r.ru_utime + r.ru_stime
"""

MIN_SECONDS = 0.5


def median_with_cpu(action: Callable[[], Any], repeats: int) -> tuple[float, float, Any]:
    """Median wall and CPU seconds (every thread of the process) of at least ``repeats`` runs
    lasting ``MIN_SECONDS`` together, and the last run's result."""
    walls: list[float] = []
    cpus: list[float] = []
    result = None
    while len(walls) < repeats or sum(walls) < MIN_SECONDS:
        started, cpu = time.perf_counter(), time.process_time()
        result = action()
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu)
    return statistics.median(walls), statistics.median(cpus), result


def median_seconds(action: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of at least ``repeats`` runs (see ``median_with_cpu``), and the last
    run's result."""
    wall, _, result = median_with_cpu(action, repeats)
    return wall, result


def report(document: dict) -> None:
    print(json.dumps(document, indent=2))


def without_leftover(sidecar: Path) -> Path:
    """``sidecar``, removed first where a run stopped halfway left it: a build into it would
    find its group up to date and time nothing. (Where nothing is left, nothing is
    deleted before a timed build.)"""
    shutil.rmtree(sidecar, ignore_errors=True)
    return sidecar
