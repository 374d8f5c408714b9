"""Shared by the benchmarks: the synthetic cube (the demo's generator at benchmark size),
medians, and a JSON report."""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accumulus.demo import DemoConfig, write_demo_cube

DEFAULT_DIR = Path("benchmark-data")


def cube(directory: Path, config: DemoConfig) -> Path:
    """The benchmark cube for ``config``, written once and reused (a marker file holds the
    configuration it was written with)."""
    path = (
        directory
        / f"cube-{config.days}d-{config.resolution}deg-{'x'.join(map(str, config.chunks))}.zarr"
    )
    marker = path / "benchmark-config.json"
    wanted = json.dumps(config.__dict__, default=list)
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing {config.nbytes / 2**30:.2f} GiB benchmark cube {path} ...", file=sys.stderr)
        write_demo_cube(path, config)
        marker.write_text(wanted)
    return path


def median_seconds(action: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of ``repeats`` runs, and the last run's result."""
    times, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = action()
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def report(document: dict) -> None:
    print(json.dumps(document, indent=2))
