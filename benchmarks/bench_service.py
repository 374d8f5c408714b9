"""Load on the averaging service: N concurrent clients on loopback against `accumulus serve`
with 1 and with 2 worker processes, accumulation-backed against full-scan answers to the same
requests, measured in the same run.

The cube is the realistic one (``realistic.py``: 10 years daily on a 1-degree grid, 3650 x 180
x 360 float32 written by xarray, chunks 73 x 90 x 90 = 2.4 MB), accumulated once (as
``bench_average.py`` does). For each worker count, `accumulus serve --workers W` is started
(its own processes, as deployed) and the same list of distinct requests (random boxes of 10 to
120 degrees a side and periods of a month to the whole record, half area-averaged time series,
half time-averaged maps) is sent three times:

- "accumulation": as the web page asks (the cache cannot help: every request is new);
- "full_scan": the same requests with accumulation=false (every value read from raw chunks);
- "cached": the accumulation requests again, now answered from the service's cache (each
  worker process has its own cache, so with 2 workers a request may miss once more).

Prints one JSON object: per worker count and mode, throughput (requests/s) and p50/p99 latency
(ms), the chunks and bytes the server read per answer, the machine's load average around the
mode, and the largest difference between the two ways of answering; then the ratios of 2 to 1
workers. The machine's other work shares its cores: read the load figures with the times.

    python benchmarks/bench_service.py [--workers 1 2] [--clients 4] [--requests 60]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path

import httpx
import numpy as np
import pandas as pd

import accumulus
from common import DEFAULT_DIR
from realistic import CHUNKS, SHAPE, START, VARIABLE, realistic_cube


def requests_to_send(dataset: str, count: int, seed: int = 1) -> list[str]:
    """Distinct requests: random boxes (10 to 120 degrees a side) and periods (1 month to
    the whole record), alternating series and maps."""
    rng = np.random.default_rng(seed)
    days = SHAPE[0]
    first = pd.Timestamp(START)
    urls = []
    for k in range(count):
        height, width = rng.uniform(10, 120), rng.uniform(10, 120)
        south, west = rng.uniform(-90, 90 - height), rng.uniform(-180, 180 - width)
        length = int(rng.integers(30, days))
        start = first + pd.Timedelta(days=int(rng.integers(0, days - length + 1)))
        end = start + pd.Timedelta(days=length - 1)
        over = "lat,lon" if k % 2 == 0 else "time"
        urls.append(
            f"/api/datasets/{dataset}/{VARIABLE}/average?over={over}"
            f"&time={start.date()}/{end.date()}"
            f"&lat={south:.2f}/{south + height:.2f}&lon={west:.2f}/{west + width:.2f}"
        )
    return urls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(
    cube: Path, port: int, workers: int, sources: str | None = None, options: Sequence[str] = ()
) -> subprocess.Popen:
    """``accumulus serve`` of ``cube`` on ``port``, from ``sources`` (a source tree: another
    version in the same run; default this one), with ``serve``'s ``options``, once it
    answers its health check."""
    sources = sources or str(Path(accumulus.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sources, os.environ.get("PYTHONPATH", "")])}
    command = [sys.executable, "-m", "accumulus", "serve", str(cube), "--port", str(port)]
    process = subprocess.Popen(
        [*command, "--workers", str(workers), *options],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return answering(process, port)


def answering(process: subprocess.Popen, port: int) -> subprocess.Popen:
    """``process``, once the server it runs answers its health check on ``port``."""
    deadline = time.monotonic() + 300
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{port}/api/health").raise_for_status()
            return process
        except httpx.TransportError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the service did not start") from None
            time.sleep(0.2)


def drive(base: str, urls: list[str], clients: int) -> dict:
    """Send ``urls`` from ``clients`` threads (each takes the next unsent one); measure."""
    latencies: list[float] = []
    bodies: dict[str, dict] = {}
    hits = 0
    lock = threading.Lock()
    queue = iter(urls)

    def client() -> None:
        nonlocal hits
        with httpx.Client(base_url=base, timeout=600) as http:
            while True:
                with lock:
                    url = next(queue, None)
                if url is None:
                    return
                started = time.perf_counter()
                response = http.get(url)
                elapsed = time.perf_counter() - started
                response.raise_for_status()
                with lock:
                    latencies.append(elapsed)
                    bodies[url] = response.json()
                    hits += response.headers["X-Accumulus-Cache"] == "hit"

    load_before = os.getloadavg()[0]
    started = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - started
    ms = np.array(latencies) * 1000
    plans = [b["plan"] for b in bodies.values()]
    return {
        "requests": len(latencies),
        "seconds": round(wall, 3),
        "throughput_rps": round(len(latencies) / wall, 2),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "cache_hits": hits,
        "mean_accumulation_chunks_read": round(
            float(np.mean([p["accumulation_chunks_read"] for p in plans])), 1
        ),
        "mean_raw_chunks_read": round(float(np.mean([p["raw_chunks_read"] for p in plans])), 1),
        "mean_bytes_read": int(np.mean([p["bytes_read"] for p in plans])),
        "load_average_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "_bodies": bodies,
    }


def largest_relative_difference(a: dict[str, dict], b: dict[str, dict]) -> float:
    worst = 0.0
    for url, body in a.items():
        x = np.array(body["values"], dtype="f8")
        y = np.array(b[url + "&accumulation=false"]["values"], dtype="f8")
        worst = max(worst, float(np.nanmax(np.abs(x - y) / np.abs(y))))
    return worst


def measure(cube: Path, workers: int, urls: list[str], warm_up: list[str], clients: int) -> dict:
    port = free_port()
    service = start_service(cube, port, workers)
    try:
        base = f"http://127.0.0.1:{port}"
        # Warm up every worker (imports, the first snapshot, the file cache) with requests of
        # both kinds that are not measured.
        drive(base, warm_up + [u + "&accumulation=false" for u in warm_up], clients)
        accumulation = drive(base, urls, clients)
        full_scan = drive(base, [u + "&accumulation=false" for u in urls], clients)
        cached = drive(base, urls, clients)
    finally:
        service.terminate()
        service.wait(timeout=60)
    difference = largest_relative_difference(accumulation["_bodies"], full_scan["_bodies"])
    modes = {"accumulation": accumulation, "full_scan": full_scan, "cached": cached}
    for mode in modes.values():
        del mode["_bodies"]
    return {
        "workers": workers,
        "modes": modes,
        "full_scan_over_accumulation": {
            "p50": round(full_scan["p50_ms"] / accumulation["p50_ms"], 2),
            "p99": round(full_scan["p99_ms"] / accumulation["p99_ms"], 2),
            "throughput": round(accumulation["throughput_rps"] / full_scan["throughput_rps"], 2),
        },
        "largest_relative_difference": difference,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=60, help="per mode")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
    args.dir.mkdir(parents=True, exist_ok=True)

    cube = realistic_cube(args.dir)
    built = accumulus.accumulate(str(cube), VARIABLE, minimal=True)
    dataset = cube.name.removesuffix(".zarr")
    urls = requests_to_send(dataset, args.requests)
    warm_up = requests_to_send(dataset, 4 * args.clients, seed=2)
    runs = [measure(cube, w, urls, warm_up, args.clients) for w in args.workers]
    by_workers = {run["workers"]: run for run in runs}
    scaling = {}
    if 1 in by_workers and 2 in by_workers:
        one, two = by_workers[1]["modes"], by_workers[2]["modes"]
        scaling = {
            mode: {
                "throughput": round(two[mode]["throughput_rps"] / one[mode]["throughput_rps"], 2),
                "p50": round(two[mode]["p50_ms"] / one[mode]["p50_ms"], 2),
            }
            for mode in one
        }
    print(
        json.dumps(
            {
                "benchmark": "service: 1 and 2 worker processes",
                "cube": {
                    "store": str(cube),
                    "shape": list(SHAPE),
                    "chunks": list(CHUNKS),
                    "chunk_mib": round(int(np.prod(CHUNKS)) * 4 / 2**20, 2),
                    "accumulate": built.action,
                },
                "clients": args.clients,
                "requests_per_mode": args.requests,
                "runs": runs,
                "two_workers_over_one": scaling,
                "cpu_count": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
