"""Load on the averaging service: N concurrent clients on loopback, accumulation-backed against
full-scan answers to the same requests, measured in the same run.

Builds a synthetic daily cube in a temporary directory, starts `accumulus serve` on it (its own
process, as deployed), and sends the same list of distinct requests (random boxes and periods,
half area-averaged time series, half time-averaged maps) three times:

- "accumulation": as the web page asks (the cache cannot help: every request is new);
- "full_scan": the same requests with accumulation=false (every value read from raw chunks);
- "cached": the accumulation requests again, now answered from the service's cache.

Prints one JSON object: throughput (requests/s) and p50/p99 latency (ms) per mode, the chunks
and bytes the server read, and the largest difference between the two ways of answering.

    python benchmarks/bench_service.py [--clients 4] [--requests 200] [--days 1461] [--degrees 2]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import xarray as xr

from accumulus import api


def build_cube(path: Path, days: int, degrees: float) -> dict:
    """A smooth seasonal field with noise in chunks of 30 days x 1/6 of each axis (a box of a
    few tens of degrees spans whole chunks), then accumulated."""
    times = pd.date_range("2001-01-01", periods=days, freq="D")
    lat = np.arange(-90 + degrees / 2, 90, degrees)
    lon = np.arange(-180 + degrees / 2, 180, degrees)
    rng = np.random.default_rng(0)
    season = np.cos(2 * np.pi * np.asarray(times.day_of_year) / 365.25)[:, None, None]
    phi = np.deg2rad(lat)[None, :, None]
    values = 300 - 40 * np.sin(phi) ** 2 + 12 * np.sin(phi) * season
    values = values + 4 * np.sin(np.deg2rad(3 * lon))[None, None, :]
    values = (values + rng.normal(0, 1, (days, lat.size, lon.size))).astype("f4")
    ds = xr.Dataset(
        {"tas": (("time", "lat", "lon"), values, {"units": "K"})},
        coords={
            "time": times,
            "lat": ("lat", lat, {"units": "degrees_north"}),
            "lon": ("lon", lon, {"units": "degrees_east"}),
        },
    )
    chunks = (min(30, days), max(1, lat.size // 6), max(1, lon.size // 6))
    ds.to_zarr(path, mode="w", encoding={"tas": {"chunks": chunks}}, consolidated=True)
    started = time.perf_counter()
    api.accumulate(str(path), "tas")
    return {
        "shape": list(values.shape),
        "chunks": list(chunks),
        "raw_bytes": int(values.nbytes),
        "accumulate_seconds": round(time.perf_counter() - started, 2),
    }


def requests_to_send(count: int, days: int, seed: int = 1) -> list[str]:
    """Distinct requests: random boxes (10 to 120 degrees a side) and periods (1 month to
    the whole record), alternating series and maps."""
    rng = np.random.default_rng(seed)
    first = pd.Timestamp("2001-01-01")
    urls = []
    for k in range(count):
        height, width = rng.uniform(10, 120), rng.uniform(10, 120)
        south, west = rng.uniform(-90, 90 - height), rng.uniform(-180, 180 - width)
        length = int(rng.integers(30, days))
        start = first + pd.Timedelta(days=int(rng.integers(0, days - length + 1)))
        end = start + pd.Timedelta(days=length - 1)
        over = "lat,lon" if k % 2 == 0 else "time"
        urls.append(
            f"/api/datasets/cube/tas/average?over={over}"
            f"&time={start.date()}/{end.date()}"
            f"&lat={south:.2f}/{south + height:.2f}&lon={west:.2f}/{west + width:.2f}"
        )
    return urls


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_service(cube: Path, port: int) -> subprocess.Popen:
    sources = str(Path(api.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([sources, os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen(
        [sys.executable, "-m", "accumulus", "serve", str(cube), "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
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
        "throughput_rps": round(len(latencies) / wall, 1),
        "p50_ms": round(float(np.percentile(ms, 50)), 1),
        "p99_ms": round(float(np.percentile(ms, 99)), 1),
        "cache_hits": hits,
        "mean_accumulation_chunks_read": round(
            float(np.mean([p["accumulation_chunks_read"] for p in plans])), 1
        ),
        "mean_raw_chunks_read": round(float(np.mean([p["raw_chunks_read"] for p in plans])), 1),
        "mean_bytes_read": int(np.mean([p["bytes_read"] for p in plans])),
        "_bodies": bodies,
    }


def largest_relative_difference(a: dict[str, dict], b: dict[str, dict]) -> float:
    worst = 0.0
    for url, body in a.items():
        x = np.array(body["values"], dtype="f8")
        y = np.array(b[url + "&accumulation=false"]["values"], dtype="f8")
        worst = max(worst, float(np.nanmax(np.abs(x - y) / np.abs(y))))
    return worst


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--requests", type=int, default=200, help="per mode")
    parser.add_argument("--days", type=int, default=1461)
    parser.add_argument("--degrees", type=float, default=2.0, help="grid spacing")
    args = parser.parse_args()
    warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")

    with tempfile.TemporaryDirectory() as tmp:
        cube_path = Path(tmp) / "cube.zarr"
        cube = build_cube(cube_path, args.days, args.degrees)
        port = free_port()
        service = start_service(cube_path, port)
        try:
            base = f"http://127.0.0.1:{port}"
            urls = requests_to_send(args.requests, args.days)
            # Warm up (imports, the first snapshot, the operating system's file cache) with
            # requests of both kinds that are not measured.
            warm_up = requests_to_send(2 * args.clients, args.days, seed=2)
            drive(base, warm_up + [u + "&accumulation=false" for u in warm_up], args.clients)
            accumulation = drive(base, urls, args.clients)
            full_scan = drive(base, [u + "&accumulation=false" for u in urls], args.clients)
            cached = drive(base, urls, args.clients)
        finally:
            service.terminate()
            service.wait(timeout=30)

    difference = largest_relative_difference(accumulation["_bodies"], full_scan["_bodies"])
    modes = {"accumulation": accumulation, "full_scan": full_scan, "cached": cached}
    for mode in modes.values():
        del mode["_bodies"]
    print(
        json.dumps(
            {
                "benchmark": "service",
                "cube": cube,
                "clients": args.clients,
                "modes": modes,
                "full_scan_over_accumulation": {
                    "p50": round(full_scan["p50_ms"] / accumulation["p50_ms"], 1),
                    "p99": round(full_scan["p99_ms"] / accumulation["p99_ms"], 1),
                    "throughput": round(
                        accumulation["throughput_rps"] / full_scan["throughput_rps"], 1
                    ),
                },
                "largest_relative_difference": difference,
                "cpu_count": os.cpu_count(),
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
