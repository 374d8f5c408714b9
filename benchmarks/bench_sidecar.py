"""A cube behind an HTTP URL, accelerated by accumulations beside it (a sidecar), against
xarray reading the same URL.

The cube is written by xarray (through the demo's generator: daily at 1 degree, float32
chunks of 73 x 90 x 90, 2.4 MB) and served read-only by a real HTTP server on 127.0.0.1
(``tests/servers.py``) that adds ``--latency`` (20 ms) to every request, as object storage
does. ``accumulate URL --into SIDE`` writes the sidecar on local disk.

Reported (JSON), for a warm handle (``accumulus.open(SIDE)``, first query done): the median
time of an aligned area-averaged time series (whole chunks in time and space: nothing raw) and
of an unaligned one (partial boundary chunks read raw from the URL), the requests the server
saw per query, and the sequential round trips (waves of requests the server saw: the floor
is one, the metadata check that the source has not changed, plus one for raw chunks when
there are any). Beside them, the same questions by xarray on a dataset opened once from the same URL
(``open_zarr`` + ``weighted(cos lat).mean``, Dask's threads), with its requests.

    python benchmarks/bench_sidecar.py [--days 365] [--latency 0.02] [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import xarray as xr

import accumulus
from accumulus.demo import DemoConfig
from common import DEFAULT_DIR, cube, median_seconds, report

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from servers import http_server

ALIGNED = {"time": ("2000-03-14", "2000-08-05"), "lat": ("0", "89.5")}  # chunks 1..2
UNALIGNED = {"time": ("2000-02-01", "2000-08-20"), "lat": ("-30", "45"), "lon": ("-100", "45")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=365)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--data", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    config = DemoConfig(days=args.days, resolution=1.0, chunks=(73, 90, 90), missing=0.10)
    path = cube(args.data, config)
    side = Path(tempfile.mkdtemp(prefix="bench-sidecar-")) / "side.zarr"
    results = {}
    with http_server(path.parent, latency=args.latency) as (base, log):
        url = f"{base}/{path.name}"
        started = time.perf_counter()
        accumulus.accumulate(url, "precip", into=str(side), minimal=True)
        build_seconds = time.perf_counter() - started
        handle = accumulus.open(str(side))
        opened = xr.open_zarr(url)
        for name, ranges in (("aligned", ALIGNED), ("unaligned", UNALIGNED)):
            handle.query("precip", "lat,lon", ranges)  # warm
            log.clear()
            seconds, result = median_seconds(
                lambda r=ranges: handle.query("precip", "lat,lon", r), args.repeats
            )
            requests = len(log.requests) / args.repeats
            log.clear()
            handle.query("precip", "lat,lon", ranges)
            waves = log.round_trips(args.latency / 2)

            def by_xarray(r=ranges):
                box = opened.precip.sel(
                    time=slice(*r["time"]),
                    **{d: slice(*map(float, r[d])) for d in ("lat", "lon") if d in r},
                )
                weights = np.cos(np.deg2rad(box.lat.astype("f8")))
                return box.astype("f8").weighted(weights).mean(["lat", "lon"]).values

            log.clear()
            xr_seconds, expected = median_seconds(by_xarray, 1)
            xr_requests, xr_waves = len(log.requests), log.round_trips(args.latency / 2)
            np.testing.assert_allclose(result.data.values, expected, rtol=1e-9)
            results[name] = {
                "sidecar": {
                    "median_seconds": round(seconds, 4),
                    "requests_to_source": requests,
                    "sequential_round_trips": waves,
                    "seconds_in_latencies": round(seconds / args.latency, 1),
                    "accumulation_chunks_read": result.stats.accumulation_chunks_read,
                    "raw_chunks_read": result.stats.raw_chunks_read,
                },
                "xarray_same_url": {
                    "median_seconds": round(xr_seconds, 4),
                    "requests_to_source": xr_requests,
                    "sequential_round_trips": xr_waves,
                    "seconds_in_latencies": round(xr_seconds / args.latency, 1),
                },
                "floor_round_trips": 1 + (result.stats.raw_chunks_read > 0),
                "ratio_xarray_to_sidecar": round(xr_seconds / seconds, 1),
            }
    report(
        {
            "benchmark": "sidecar accumulations for a cube behind an HTTP URL",
            "cube": f"{path.name}, {config.nbytes / 2**20:.0f} MiB of float32",
            "latency_per_request_seconds": args.latency,
            "accumulate_into_seconds": round(build_seconds, 2),
            "queries": results,
            "note": "sequential round trips: waves of requests the server saw (arrivals more "
            "than half a latency apart); seconds_in_latencies: median seconds / latency",
        }
    )


if __name__ == "__main__":
    main()
