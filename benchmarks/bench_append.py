"""Appending granules: accumulus append against xarray.Dataset.to_zarr(append_dim=...).

The same NetCDF4 granules (packed int16, zlib+shuffle, a time-bounds variable, 3-hourly
steps) are appended to a new Zarr store three ways:

- ``accumulus_one_call``: ``accumulus.append(store, granules)``, the daily loop's command;
- ``accumulus_per_granule``: one ``accumulus.append`` per granule;
- ``xarray_append_dim``: ``to_zarr`` for the first granule, then ``to_zarr(append_dim="time")``
  per granule, what a user would otherwise write (given the same chunks and codecs).

Each runs on a local directory and on an S3 endpoint (moto in server mode on 127.0.0.1,
started here, spoken to over HTTP), through a ``CountingStore``: wall time (median of
repeats), write requests, bytes written, read requests. Both results are checked equal.

Then the cost of keeping accumulations current: archives of growing size get one more granule
(which completes a chunk); the raw chunks the incremental update reads stay the same, while a
rebuild reads them all.

Prints one JSON document.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import netCDF4
import numpy as np
import xarray as xr
from numcodecs import Shuffle, Zlib

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store

VAR = "precip"
UNITS = "hours since 2000-03-01 12:00:00"


def write_granule(path: Path, packed: np.ndarray, start: int) -> Path:
    steps, ny, nx = packed.shape
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("lat", ny)
        ds.createDimension("lon", nx)
        ds.createDimension("nv", 2)
        time_ = ds.createVariable("time", "i4", ("time",))
        time_.units, time_.calendar, time_.bounds = UNITS, "standard", "time_bnds"
        hours = (start + np.arange(steps)) * 3
        time_[:] = hours
        ds.createVariable("time_bnds", "i4", ("time", "nv"))[:] = np.stack([hours, hours + 3], 1)
        lat = ds.createVariable("lat", "f4", ("lat",))
        lat.units, lat[:] = "degrees_north", np.linspace(-59.875, 59.875, ny)
        lon = ds.createVariable("lon", "f4", ("lon",))
        lon.units, lon[:] = "degrees_east", np.linspace(0.125, 359.875, nx)
        var = ds.createVariable(
            VAR, "i2", ("time", "lat", "lon"), zlib=True, complevel=4, shuffle=True,
            chunksizes=(1, ny, nx), fill_value=-999,
        )  # fmt: skip
        var.set_auto_maskandscale(False)
        var.scale_factor, var.add_offset, var.units = 0.01, 0.0, "mm/hr"
        var[:] = packed
    return path


def make_granules(folder: Path, count: int, steps: int, ny: int, nx: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(count):
        packed = rng.gamma(0.5, 300, size=(steps, ny, nx)).astype("i2")
        packed[rng.random(packed.shape) < 0.05] = -999
        paths.append(write_granule(folder / f"g{k:05d}.nc", packed, k * steps))
    return paths


# The three ways to append --------------------------------------------------------------------


def accumulus_one_call(store, granules, chunk):
    accumulus.append(store, granules, chunks={"time": chunk})


def accumulus_per_granule(store, granules, chunk):
    for granule in granules:
        accumulus.append(store, granule, chunks={"time": chunk})


def xarray_append_dim(store, granules, chunk):
    for k, granule in enumerate(granules):
        with xr.open_dataset(granule) as ds:
            if k == 0:
                ny, nx = ds.sizes["lat"], ds.sizes["lon"]
                # The granule's encoding (int16, scale factor, fill value) and compression, as
                # accumulus keeps them, and the same chunks: only the way to append differs.
                ds[VAR].encoding.update(
                    chunks=(chunk, ny, nx),
                    compressors=[Zlib(level=4)],
                    filters=[Shuffle(elementsize=2)],
                )
                ds.to_zarr(store, mode="w", zarr_format=2, consolidated=True)
            else:
                ds.to_zarr(store, append_dim="time", consolidated=True)


METHODS: dict[str, Callable] = {
    "accumulus_one_call": accumulus_one_call,
    "accumulus_per_granule": accumulus_per_granule,
    "xarray_append_dim": xarray_append_dim,
}


def measure(method: Callable, url: str, granules, chunk, options) -> dict:
    counting = CountingStore(open_store(url, "w", storage_options=options))
    started = time.perf_counter()
    method(counting, granules, chunk)
    seconds = time.perf_counter() - started
    counts = counting.counts
    return {
        "seconds": seconds,
        "write_requests": counts.write_requests,
        "bytes_written": counts.write_bytes,
        "chunk_writes": sum(not is_metadata_key(k) for k in counts.writes),
        "read_requests": counts.read_requests,
        "list_requests": counts.list_requests,
    }


def compare_suite(new_url: Callable[[], str], granules, chunk, repeats, options) -> dict:
    out: dict = {}
    finals = {}
    for name, method in METHODS.items():
        samples = []
        for _ in range(repeats):
            url = new_url()
            samples.append(measure(method, url, granules, chunk, options))
        finals[name] = url
        out[name] = {
            "seconds_median": statistics.median(s["seconds"] for s in samples),
            "seconds": [round(s["seconds"], 3) for s in samples],
            **{k: samples[-1][k] for k in samples[-1] if k != "seconds"},
        }
    reference = _values(finals["xarray_append_dim"], options)
    for name in METHODS:
        values = _values(finals[name], options)
        assert all(np.array_equal(values[k], reference[k], equal_nan=True) for k in reference), name
    base = out["xarray_append_dim"]
    for name in ("accumulus_one_call", "accumulus_per_granule"):
        out[name]["vs_xarray"] = {
            "time_ratio": round(out[name]["seconds_median"] / base["seconds_median"], 3),
            "write_request_ratio": round(out[name]["write_requests"] / base["write_requests"], 3),
            "bytes_written_ratio": round(out[name]["bytes_written"] / base["bytes_written"], 3),
        }
    return out


def _values(url: str, options) -> dict[str, np.ndarray]:
    ds = xr.open_zarr(open_store(url, "r", storage_options=options))
    return {name: ds[name].values for name in (VAR, "time", "time_bnds")}


# Accumulation update cost vs archive size -------------------------------------------------------


def update_cost(folder: Path, sizes: list[int], steps: int, ny: int, nx: int, chunk: int) -> list:
    rows = []
    for size in sizes:
        rng = np.random.default_rng(size)
        archive = rng.gamma(0.5, 300, size=(size, ny, nx)).astype("i2")
        old = write_granule(folder / f"archive{size}.nc", archive, 0)
        new = write_granule(folder / f"next{size}.nc", archive[:steps] + 1, size)
        store = folder / f"archive{size}.zarr"
        accumulus.append(str(store), old, chunks={"time": chunk})
        accumulus.accumulate(str(store), VAR, minimal=True)
        counting = CountingStore(open_store(store, "r+"))
        started = time.perf_counter()
        result = accumulus.append(counting, new)
        update_seconds = time.perf_counter() - started
        assert result.accumulations == (VAR,)
        update_reads = _raw_chunk_reads(counting)
        counting = CountingStore(open_store(store, "r+"))
        started = time.perf_counter()
        accumulus.accumulate(counting, VAR, rebuild=True, minimal=True)
        rebuild_seconds = time.perf_counter() - started
        assert all(r.ok for r in accumulus.verify(str(store)))
        rows.append(
            {
                "archive_steps": size,
                "archive_raw_chunks": -(-size // chunk),
                "appended_steps": steps,
                "append_with_update_seconds": round(update_seconds, 3),
                "update_raw_chunks_read": update_reads,
                "rebuild_seconds": round(rebuild_seconds, 3),
                "rebuild_raw_chunks_read": _raw_chunk_reads(counting),
            }
        )
        shutil.rmtree(store)
    return rows


def _raw_chunk_reads(counting: CountingStore) -> int:
    return sum(k.startswith(f"{VAR}/") and not is_metadata_key(k) for k in counting.counts.reads)


# Local S3 endpoint --------------------------------------------------------------------------------


class LocalS3:
    """moto in server mode on 127.0.0.1, on a free port, with one bucket."""

    def __enter__(self) -> LocalS3:
        import boto3
        from moto.server import ThreadedMotoServer

        logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"):
            os.environ.setdefault(name, "testing")
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        self.server.start()
        self.endpoint = f"http://127.0.0.1:{port}"
        self.bucket = "bench-append"
        boto3.client("s3", endpoint_url=self.endpoint).create_bucket(Bucket=self.bucket)
        return self

    def new_url(self) -> str:
        return f"s3://{self.bucket}/{uuid.uuid4().hex[:12]}.zarr"

    def __exit__(self, *exc) -> None:
        self.server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--granules", type=int, default=24, help="granules appended locally")
    parser.add_argument("--s3-granules", type=int, default=8, help="granules appended to S3")
    parser.add_argument("--steps", type=int, default=8, help="time steps per granule")
    parser.add_argument("--grid", default="120x240", help="lat x lon of a granule")
    parser.add_argument("--chunk", type=int, default=40, help="time steps per chunk")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--archives", default="32,152,632", help="archive sizes (steps)")
    args = parser.parse_args()
    ny, nx = map(int, args.grid.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        folder = Path(tmp)
        granules = make_granules(folder / "granules", args.granules, args.steps, ny, nx)
        local_count = iter(range(10**6))
        result = {
            "setup": {
                "granules": args.granules,
                "s3_granules": args.s3_granules,
                "steps_per_granule": args.steps,
                "grid": [ny, nx],
                "dtype": "int16 (scale 0.01), zlib+shuffle in the granules",
                "chunk_time_steps": args.chunk,
                "repeats": args.repeats,
                "granule_bytes": sum(p.stat().st_size for p in granules),
            },
            "local": compare_suite(
                lambda: str(folder / f"local{next(local_count)}.zarr"),
                granules,
                args.chunk,
                args.repeats,
                None,
            ),
        }
        with LocalS3() as s3:
            result["s3"] = compare_suite(
                s3.new_url,
                granules[: args.s3_granules],
                args.chunk,
                args.repeats,
                {"endpoint_url": s3.endpoint},
            )
            result["s3"]["endpoint"] = s3.endpoint
        sizes = [int(s) for s in args.archives.split(",")]
        result["accumulation_update"] = update_cost(folder, sizes, args.steps, ny, nx, args.chunk)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
