"""Virtual cubes: what ``append --virtual`` reads and costs, against ``xarray.open_mfdataset``
of the same granules (the way a user combines them without accumulus).

The granules are monthly NetCDF4 files as netCDF4 writes them (deflate + shuffle, one HDF5
chunk per month, a ``_FillValue``): a daily 1-degree grid, 28–31 days each, about 8 MB of
values per granule. They are written once and cached under ``benchmark-data/``.

Reported (JSON): the median time to reference all granules (``append_virtual`` into a new
reference file) and to add one more to an existing set; the bytes read from the granules
against their size (the floor is reading nothing but what locates the chunks); the median
time of ``open_mfdataset`` on the same files (metadata and coordinates only, no values), and
one full read of the values through the reference set against the same read through
``open_mfdataset``.

Then the reference set is accelerated by accumulations beside it (``accumulate virt.json
precip --into side.zarr``, timed against one full read), and questions aligned with the
granules (whole months; the granule's grid is one chunk) are asked through the sidecar of an
open datacube (``warm``) against xarray's scan of the same references (``open_zarr`` of the
reference store, ``weighted(cos lat).mean``, Dask's threads), with requests and bytes counted
at both stores, and against the floor: fetching exactly the chunks the plan reads
(concurrently, through the stores) and decoding them with their codecs. An unaligned map
(two months read raw) is reported beside them.

The same granules are referenced as a Parquet reference set (``append virt.parq …
--virtual``, fsspec's ``LazyReferenceMapper`` layout): its size on disk and the time to
build it, to add one granule, to open it (xarray through fsspec's reference filesystem,
metadata only; ``accumulus.open``) and to answer one month's series, beside the JSON set's.
Then, to show where Parquet pays (``--scale``): synthetic reference sets of 10^4 to 10^6
chunk references, written as JSON and as Parquet by kerchunk (``refs_to_dataframe``), opened
by xarray and one chunk read, JSON against Parquet.

    python benchmarks/bench_virtual.py [--granules 120] [--repeats 3] [--no-full-read]
        [--no-sidecar] [--scale 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import accumulus
from accumulus.accumulation.query.execute import chunk_work
from accumulus.chunk_reader import _chunk_spec as chunk_spec
from accumulus.ingest.virtual import append_virtual
from accumulus.scope import accumulus_scope
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from bench_average import counted
from common import DEFAULT_DIR, median_seconds, report

NLAT, NLON = 180, 360
# Questions on granules from January 2001 (the first two need --granules >= 96).
QUESTIONS = [
    ("series, whole months, global", ("lat", "lon"), {"time": ("2003-01-01", "2008-12-31")}),
    ("map, whole years", ("time",), {"time": ("2003-01-01", "2008-12-31")}),
    ("series, one whole month", ("lat", "lon"), {"time": ("2001-03-01", "2001-03-31")}),
    ("map, unaligned ends (2 months raw)", ("time",), {"time": ("2001-02-10", "2001-11-20")}),
]


def granules(directory: Path, count: int) -> list[Path]:
    """``count`` monthly granules from January 2001, written once."""
    folder = directory / f"virtual-granules-{NLAT}x{NLON}"
    folder.mkdir(parents=True, exist_ok=True)
    lat = np.linspace(-89.5, 89.5, NLAT)
    lon = np.linspace(0.5, 359.5, NLON)
    paths = []
    for k in range(count):
        start = pd.Timestamp(2001, 1, 1) + pd.DateOffset(months=k)
        path = folder / f"precip-{start:%Y-%m}.nc"
        paths.append(path)
        if path.exists():
            continue
        days = start.days_in_month
        rng = np.random.default_rng(k)
        # Smooth fields with noise compress as real precipitation does (about 2:1).
        base = np.cos(np.deg2rad(lat))[:, None] * (1 + np.sin(np.deg2rad(lon))[None, :])
        values = (base[None] * rng.gamma(2.0, 2.0, (days, 1, 1))).astype("f4")
        values += rng.normal(0, 0.05, values.shape).astype("f4")
        values[rng.random(values.shape) < 0.05] = -9999.0
        partial = path.with_suffix(".part")
        with netCDF4.Dataset(partial, "w") as ds:
            ds.createDimension("time", None)
            ds.createDimension("lat", NLAT)
            ds.createDimension("lon", NLON)
            t = ds.createVariable("time", "f8", ("time",))
            t.units, t.calendar = "days since 2001-01-01", "standard"
            t[:] = (start - pd.Timestamp("2001-01-01")).days + np.arange(days)
            ds.createVariable("lat", "f4", ("lat",))[:] = lat
            ds.createVariable("lon", "f4", ("lon",))[:] = lon
            v = ds.createVariable(
                "precip",
                "f4",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=1,
                shuffle=True,
                chunksizes=(days, NLAT, NLON),
                fill_value=-9999.0,
            )
            v.units = "mm/day"
            v[:] = values
        partial.rename(path)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--granules", type=int, default=120)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--data", type=Path, default=DEFAULT_DIR)
    parser.add_argument(
        "--no-full-read", dest="full_read", action="store_false", help="Skip the full reads."
    )
    parser.add_argument(
        "--no-sidecar", dest="sidecar", action="store_false", help="Skip the sidecar queries."
    )
    parser.add_argument(
        "--scale",
        default="10000,100000,1000000",
        help="Reference counts of the synthetic JSON-vs-Parquet open comparison ('' skips it).",
    )
    args = parser.parse_args()
    files = granules(args.data, args.granules)
    total_bytes = sum(p.stat().st_size for p in files)
    work = Path(tempfile.mkdtemp(prefix="bench-virtual-"))

    def reference_all():
        out = work / f"all-{time.perf_counter_ns()}.json"
        return append_virtual(out, files)

    seconds_all, result = median_seconds(reference_all, args.repeats)
    base = work / "base.json"
    append_virtual(base, files[:-1])

    def copy_json() -> Path:
        copy = work / f"one-{time.perf_counter_ns()}.json"
        copy.write_bytes(base.read_bytes())
        return copy

    seconds_one, one = append_one(copy_json, files[-1], args.repeats)

    def mfdataset():
        with xr.open_mfdataset(files) as ds:
            return ds.sizes["time"]

    seconds_mf, steps = median_seconds(mfdataset, args.repeats)
    assert steps == result.extent[1]

    def read_virtual():
        with zarr.config.set({"array.rectilinear_chunks": True}):
            opened = xr.open_dataset(
                "reference://",
                engine="zarr",
                chunks={},
                backend_kwargs={"consolidated": False, "storage_options": {"fo": str(base)}},
            )
            return float(opened.precip.sum())

    def read_mf():
        with xr.open_mfdataset(files[:-1]) as ds:
            return float(ds.precip.sum())

    full_read = {}
    if args.full_read:
        seconds_read_virtual, total_virtual = median_seconds(read_virtual, 1)
        seconds_read_mf, total_mf = median_seconds(read_mf, 1)
        assert np.isclose(total_virtual, total_mf, rtol=1e-6)
        full_read = {
            "through_references": round(seconds_read_virtual, 3),
            "open_mfdataset": round(seconds_read_mf, 3),
        }
    # The sets are written in a work directory, the granules cached elsewhere: a reference set
    # reads outside its own directory only what the reader allows.
    allowed = [str(files[0].parent)]
    queries = (
        sidecar_queries(base, work / "side.zarr", args.repeats, allowed) if args.sidecar else {}
    )
    parquet = parquet_against_json(files, base, work, args.repeats, allowed)
    scale = [synthetic_open(int(n), work, args.repeats) for n in args.scale.split(",") if n]
    report(
        {
            "benchmark": "virtual cube over monthly NetCDF4 granules",
            "granules": len(files),
            "grid": f"daily, {NLAT}x{NLON}, one HDF5 chunk per month",
            "granule_bytes": total_bytes,
            "reference_all": {
                "median_seconds": round(seconds_all, 3),
                "bytes_read": result.bytes_read,
                "bytes_read_share": round(result.bytes_read / total_bytes, 5),
                "floor": "the HDF5 superblock, object headers and chunk index of each granule",
            },
            "append_one": {
                "median_seconds": round(seconds_one, 3),
                "bytes_read": one.bytes_read,
                "bytes_read_share": round(one.bytes_read / one.granule_bytes, 5),
            },
            "open_mfdataset": {"median_seconds": round(seconds_mf, 3)},
            "ratio_reference_all_to_open_mfdataset": round(seconds_all / seconds_mf, 2),
            "full_read_seconds": full_read,
            "sidecar": queries,
            "parquet": parquet,
            "parquet_at_scale": scale,
        }
    )


# --------------------------------------------------------------------------------------------
# The same granules as a Parquet reference set


def append_one(copy_set, granule: Path, repeats: int):
    """Median time of appending ``granule`` to a fresh copy of a set (the copy not timed)."""
    times, result = [], None
    for _ in range(repeats):
        copy = copy_set()
        started = time.perf_counter()
        result = append_virtual(copy, [granule])
        times.append(time.perf_counter() - started)
    return statistics.median(times), result


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def xarray_open(references: Path) -> xr.Dataset:
    """Open a reference set as the docs say (metadata and inline coordinates, no values)."""
    options = {"fo": str(references), "remote_protocol": "file"}
    with accumulus_scope():
        return xr.open_dataset(
            "reference://",
            engine="zarr",
            chunks={},
            backend_kwargs={"consolidated": False, "storage_options": options},
        )


def parquet_against_json(
    files: list[Path], base: Path, work: Path, repeats: int, allowed: list[str]
) -> dict:
    """The JSON set ``base`` (all granules but the last) against the same as Parquet."""
    parquet = work / "base.parq"

    def build():
        shutil.rmtree(parquet, ignore_errors=True)
        return append_virtual(parquet, files[:-1])

    build_seconds, built = median_seconds(build, repeats)

    def copy_parquet() -> Path:
        copy = work / f"one-{time.perf_counter_ns()}.parq"
        shutil.copytree(parquet, copy)
        return copy

    add_seconds, added = append_one(copy_parquet, files[-1], repeats)
    question = ("lat", "lon"), {"time": ("2001-01-01", "2001-01-31")}
    sets = {"json": base, "parquet": parquet}
    opened, answers = {}, {}
    for name, path in sets.items():
        xarray_open(path)  # warm-up: imports, caches of the filesystem
        xarray_seconds, ds = median_seconds(lambda p=path: xarray_open(p), repeats)
        assert ds.sizes["time"] == built.extent[1]
        open_seconds, _ = median_seconds(
            lambda p=path: accumulus.open(str(p), allow_references=allowed), repeats
        )
        handle = accumulus.open(str(path), allow_references=allowed)
        handle.average("precip", *question)  # warm-up: the snapshot, compiled kernels
        query_seconds, answer = median_seconds(
            lambda h=handle: h.average("precip", *question), repeats
        )
        answers[name] = answer.values
        opened[name] = {
            "bytes": path.stat().st_size if path.is_file() else folder_bytes(path),
            "files": 1 if path.is_file() else sum(1 for f in path.rglob("*") if f.is_file()),
            "xarray_open_median_seconds": round(xarray_seconds, 4),
            "accumulus_open_median_seconds": round(open_seconds, 4),
            "one_month_series_median_seconds": round(query_seconds, 4),
        }
    assert np.array_equal(answers["json"], answers["parquet"], equal_nan=True)
    return {
        "references": built.references,
        "build_median_seconds": round(build_seconds, 3),
        "append_one_median_seconds": round(add_seconds, 3),
        "append_one_bytes_read": added.bytes_read,
        "sets": opened,
        "parquet_over_json_bytes": round(opened["parquet"]["bytes"] / opened["json"]["bytes"], 3),
        "parquet_over_json_xarray_open": round(
            opened["parquet"]["xarray_open_median_seconds"]
            / opened["json"]["xarray_open_median_seconds"],
            2,
        ),
        "answers_equal": True,
    }


def synthetic_open(count: int, work: Path, repeats: int) -> dict:
    """``count`` chunk references (a Zarr v2 array of ``count`` one-value chunks, each a byte
    range of one small file) written as JSON and by kerchunk as Parquet; the median time for
    xarray to open each and read one chunk. The file holds ``count`` float32 values, so the
    chunk read is real."""
    import kerchunk.df

    data = work / f"values-{count}.bin"
    values = np.arange(count, dtype="<f4")
    data.write_bytes(values.tobytes())
    side = int(np.ceil(np.sqrt(count)))
    zarray = {
        "zarr_format": 2,
        "shape": [side, side],
        "chunks": [1, 1],
        "dtype": "<f4",
        "compressor": None,
        "filters": None,
        "fill_value": None,
        "order": "C",
    }
    refs: dict = {
        ".zgroup": json.dumps({"zarr_format": 2}),
        "v/.zarray": json.dumps(zarray),
        "v/.zattrs": json.dumps({"_ARRAY_DIMENSIONS": ["y", "x"]}),
    }
    for k in range(side * side):
        refs[f"v/{k // side}.{k % side}"] = [str(data), 4 * (k % count), 4]
    as_json = work / f"synthetic-{count}.json"
    as_json.write_text(json.dumps({"version": 1, "refs": refs}))
    as_parquet = work / f"synthetic-{count}.parq"
    started = time.perf_counter()
    kerchunk.df.refs_to_dataframe(refs, str(as_parquet))
    write_parquet = time.perf_counter() - started
    last = side * side - 1
    result = {"references": side * side, "write_parquet_seconds": round(write_parquet, 2)}
    for name, path in (("json", as_json), ("parquet", as_parquet)):

        def open_and_read(path=path):
            ds = xarray_open(path)
            return float(ds["v"][last // side, last % side].values)

        open_and_read()  # warm-up
        seconds, value = median_seconds(open_and_read, repeats)
        assert value == values[last % count]
        result[name] = {
            "bytes": path.stat().st_size if path.is_file() else folder_bytes(path),
            "open_and_read_one_chunk_median_seconds": round(seconds, 4),
        }
    result["parquet_over_json_open"] = round(
        result["parquet"]["open_and_read_one_chunk_median_seconds"]
        / result["json"]["open_and_read_one_chunk_median_seconds"],
        3,
    )
    return result


# --------------------------------------------------------------------------------------------
# Queries through accumulations beside the reference set


def xarray_scan(store, over, ranges) -> xr.DataArray:
    with accumulus_scope():  # zarr's rectilinear setting: months of 28-31 days
        ds = xr.open_zarr(store, consolidated=False)
        data = ds["precip"].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
        weights = np.cos(np.deg2rad(ds["lat"].astype("f8")))  # as accumulus: float64
        return data.weighted(weights).mean(list(over)).compute()


def floor_reader(handle: accumulus.Datacube, result):
    """A bare loop over exactly the chunks ``result``'s plan reads: fetch them all at once
    from their stores (the sidecar's, the granules'), decode them with their arrays' codecs,
    and sum them."""
    snapshot = handle.snapshot()
    var = snapshot.cube.variable("precip")
    terms = ("wsum", "wcount") if result.weights != "none" else ("sum", "count")
    work = chunk_work(snapshot.groups, var, result.plan, terms)
    requests = [request for request, _ in work.values()]

    async def fetch_and_decode():
        async def one(request):
            array = request.array.async_array
            store = request.store or snapshot.cube.store
            buffer = await store.get(request.store_key, default_buffer_prototype())
            spec = chunk_spec(array.metadata, request.coords)  # shape, dtype, fill
            (decoded,) = await array.codec_pipeline.decode([(buffer, spec)])
            return decoded.as_numpy_array()

        return await asyncio.gather(*(one(r) for r in requests))

    def run() -> float:
        with accumulus_scope():
            chunks = sync(fetch_and_decode())
        return float(sum(np.nansum(c, dtype="f8") for c in chunks))

    return run


def sidecar_queries(references: Path, side: Path, repeats: int, allowed: list[str]) -> dict:
    """Build the sidecar of ``references`` and ask the questions through it and by xarray."""
    with accumulus_scope():
        started = time.perf_counter()
        accumulus.accumulate(str(references), "precip", into=str(side), allow_references=allowed)
        build_seconds = time.perf_counter() - started
        source = CountingStore(open_store(str(references), allow_references=allowed))
        sidecar = CountingStore(open_store(str(side)))
        handle = accumulus.open(source, accumulations=sidecar)
        last = pd.Timestamp(handle.cube.index("time")[-1])
    results = []
    for name, over, ranges in QUESTIONS:
        if pd.Timestamp(ranges["time"][1]) > last:
            continue  # past the granules (fewer than --granules 120)
        handle.query("precip", over, ranges)  # warm-up: the snapshot is read once
        source.reset(), sidecar.reset()
        result = handle.query("precip", over, ranges)
        warm_counts = {"source": counted(source), "sidecar": counted(sidecar)}
        warm, result = median_seconds(lambda: handle.query("precip", over, ranges), repeats)  # noqa: B023
        floor_run = floor_reader(handle, result)
        floor, _ = median_seconds(floor_run, repeats)

        def scan():
            fresh = CountingStore(open_store(str(references), allow_references=allowed))
            return xarray_scan(fresh, over, ranges), fresh  # noqa: B023

        scan_seconds, (expected, scan_store) = median_seconds(scan, max(1, repeats // 2))
        difference = np.abs(result.data.values - expected.values)
        results.append(
            {
                "question": name,
                "over": list(over),
                "ranges": {d: list(r) for d, r in ranges.items()},
                "plan": {
                    "accumulation_chunks": result.stats.accumulation_chunks_read,
                    "raw_chunks": result.stats.raw_chunks_read,
                },
                "warm_seconds": round(warm, 5),
                "floor_seconds": round(floor, 5),
                "xarray_seconds": round(scan_seconds, 4),
                "xarray_over_warm": round(scan_seconds / warm, 1),
                "warm_over_floor": round(warm / floor, 2),
                "warm": warm_counts,
                "xarray": counted(scan_store),
                "max_relative_difference": float(
                    np.nanmax(difference / np.maximum(np.abs(expected.values), 1e-300))
                ),
            }
        )
    return {
        "build_seconds": round(build_seconds, 2),
        "sidecar_bytes": sum(f.stat().st_size for f in side.rglob("*") if f.is_file()),
        "questions": results,
    }


if __name__ == "__main__":
    main()
