"""Sharded against plain Zarr v3 (issue 19) on the realistic cube: the same data and the same
inner chunks, written by xarray once without and once with shards; what each question reads
and how long it takes, against its floor and against xarray's full scan; what appends write.

The realistic cube (``realistic.py``: ten years of daily values on a 1-degree grid, 3650 x
180 x 360 float32, chunks 73 x 90 x 90 = 2.4 MB, 10 % missing, written by xarray as Zarr v2)
is copied by xarray as Zarr v3 with consolidated metadata and zarr's default compression:
``plain`` with those chunks, ``sharded`` with those inner chunks in shards of 365 x 180 x 360
(40 inner chunks, a year of the globe, per shard: 10 objects). Both are accumulated with the
defaults (each dimension alone + latitude and longitude, area weights); the sharded cube's
accumulation arrays are sharded too.

For each layout: the stored objects (raw array, accumulation group) and the build time. For
each question and layout, medians of

- ``accumulus``: an open datacube answering again (its snapshot is current);
- ``floor``: a bare loop fetching exactly the chunks the plan reads (for a sharded array:
  each shard's index once, then each inner chunk's byte range), concurrently, decoding them
  with the array's codecs and summing them: the least work the question allows with this
  plan;
- ``xarray``: xarray + Dask full scan of the same selection (``weighted(...).mean``) from a
  freshly opened store;

with the requests, bytes and sequential round trips counted at the store, and ``cold``: the
requests of a one-shot query that opens the store (metadata, accumulation metadata, chunks).
Then the same through a store adding ``--latency`` seconds to every request (object
storage). Ratios (sharded / plain, accumulus / floor, xarray / accumulus) are measured in
this run.

Appends: each layout is copied and adopted by ``accumulus append``, then appended to
(``APPENDS``: 10 days into a new shard, 10 more, 280 more, then one day into a shard already
holding 300 days; a Dataset per append, values from the same generator), counting the
objects and bytes written and read, the time (accumulations updated in the same run), and
the bytes the data objects written hold, of which dead (superseded inner chunks an append
keeps in place for readers of the old index, ``stores/stable_shards.py``).

    python benchmarks/bench_sharding.py [--repeats 5] [--scan-repeats 2] [--latency 0.05]
        [--no-appends] [--rebuild]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
from zarr.abc.store import RangeByteRequest, SuffixByteRequest
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import accumulus
from accumulus.accumulation.query.execute import chunk_work
from accumulus.grid import sharding_of
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from bench_average import realistic_questions, sum_parts, xarray_scan
from common import DEFAULT_DIR, median_seconds, report
from realistic import CHUNKS, SHAPE, START, VARIABLE, _block, realistic_cube

SHARDS = (365, 180, 360)
APPENDS = (10, 10, 280, 1)  # days per append
LAYOUTS = {"plain": None, "sharded": SHARDS}

# Time chunks of 73 days from 2001-01-01, shards of 365; lat and lon chunks of 90 degrees.
QUESTIONS = [
    ("1-year map, shard aligned", ("time",), {"time": ("2004-01-01", "2004-12-30")}),
    *realistic_questions(),
]


# --------------------------------------------------------------------------------------------
# The cubes


def write(source: Path, directory: Path, shards: tuple[int, ...] | None) -> Path:
    """The realistic cube copied by xarray as Zarr v3, plain or sharded, once (a marker
    beside it records how)."""
    name = "sharded" if shards else "plain"
    path = directory / f"sharding-{name}-3650x180x360.zarr"
    marker = path.with_suffix(".config.json")
    wanted = json.dumps({"source": source.name, "chunks": CHUNKS, "shards": shards, "v": 2})
    if not (marker.exists() and marker.read_text() == wanted):
        print(f"writing {path} ...", file=sys.stderr)
        ds = xr.open_zarr(source, consolidated=True)
        for variable in ds.variables.values():  # zarr's default codecs for Zarr v3, both
            for key in ("compressor", "compressors", "filters", "chunks", "preferred_chunks"):
                variable.encoding.pop(key, None)
        encoding = {"chunks": CHUNKS} | ({"shards": shards} if shards else {})
        if shards:  # one Dask block per shard, as xarray requires
            ds = ds.chunk(dict(zip(ds[VARIABLE].dims, shards, strict=True)))
        ds.to_zarr(path, mode="w", zarr_format=3, consolidated=True, encoding={VARIABLE: encoding})
        marker.write_text(wanted)
    return path


def objects(path: Path) -> dict:
    """Stored objects of the raw array and of the accumulation group (from ``inspect``)."""
    described = accumulus.inspect(str(path))
    raw = next(a for a in described["arrays"] if a["path"] == VARIABLE)
    (group,) = described["accumulation_groups"]
    arrays = [a for acc in group["accumulations"] for a in acc["arrays"].values()]
    return {
        "raw": raw["objects"],
        "raw_chunk_grid": raw["chunk_grid"],
        "accumulation": sum(a["objects"] for a in arrays),
        "accumulation_bytes": sum(a["bytes_stored"] for a in arrays),
    }


# --------------------------------------------------------------------------------------------
# The floor


def floor_reader(handle: accumulus.Datacube, result):
    """A bare loop over exactly the chunks ``result``'s plan reads: every shard index it
    needs at once, then every chunk (whole object, or inner chunk's byte range) at once,
    each decoded by its array's codecs and the part read summed."""
    snapshot = handle.snapshot()
    var = snapshot.cube.variable(result.query.variable)
    terms = ("wsum", "wcount") if result.weights != "none" else ("sum", "count")
    work = list(chunk_work(snapshot.groups, var, result.plan, terms).values())
    store = var.array.store_path.store
    over = tuple(var.axis(d) for d in result.plan.over)
    prototype = default_buffer_prototype()

    def place(request):
        """(shard key's inner chunk coordinates, chunks per shard) of a sharded chunk."""
        metadata = request.array.metadata
        inner = sharding_of(metadata).chunk_shape
        shard = metadata.chunk_grid.chunk_shape
        per_shard = tuple(s // c for s, c in zip(shard, inner, strict=True))
        coords = tuple(
            (i * c) % s // c for i, c, s in zip(request.coords, inner, shard, strict=True)
        )
        return coords, per_shard

    def spec(metadata, shape) -> ArraySpec:
        return ArraySpec(
            shape=tuple(shape),
            dtype=metadata.dtype,
            fill_value=metadata.fill_value,
            config=ArrayConfig.from_dict({"order": "C"}),
            prototype=prototype,
        )

    async def index(key: str, per_shard) -> np.ndarray:
        n = int(np.prod(per_shard))
        buffer = await store.get(key, prototype, SuffixByteRequest(16 * n + 4))
        return np.frombuffer(buffer.to_bytes()[: 16 * n], "<u8").reshape(*per_shard, 2)

    async def one(request, parts, indexes) -> None:
        metadata = request.array.metadata
        sharding = sharding_of(metadata)
        if sharding is None:
            buffer = await store.get(request.store_key, prototype)
            pipeline = request.array.async_array.codec_pipeline
            shape = metadata.chunk_grid.chunk_shape
        else:
            coords, _ = place(request)
            offset, nbytes = (int(v) for v in indexes[request.store_key][coords])
            byte_range = RangeByteRequest(offset, offset + nbytes)
            buffer = await store.get(request.store_key, prototype, byte_range)
            pipeline, shape = sharding.codec_pipeline, sharding.chunk_shape
        (decoded,) = await pipeline.decode([(buffer, spec(metadata, shape))])
        chunk = decoded.as_numpy_array().reshape(shape)
        await asyncio.to_thread(sum_parts, chunk, parts, over)

    async def run_all() -> None:
        shards = {r.store_key: place(r)[1] for r, _ in work if sharding_of(r.array.metadata)}
        found = await asyncio.gather(*(index(k, n) for k, n in shards.items()))
        indexes = dict(zip(shards, found, strict=True))
        await asyncio.gather(*(one(request, parts, indexes) for request, parts in work))

    return lambda: sync(run_all())


# --------------------------------------------------------------------------------------------
# Measuring


def counted(store: CountingStore) -> dict:
    counts = store.counts
    return {
        "requests": counts.read_requests,
        "metadata_requests": sum(is_metadata_key(k) for k in counts.reads),
        "objects": sum(not is_metadata_key(k) for k in counts.reads),
        "bytes": counts.read_bytes,
        "round_trips": counts.round_trips,
    }


def median(action, repeats: int):
    seconds, result = median_seconds(action, repeats)
    return round(seconds, 5), result


def measure(path: Path, over, ranges, args, latency: float) -> dict:
    store = CountingStore(open_store(str(path)), latency=latency)
    handle = accumulus.open(store)
    handle.query(VARIABLE, over, ranges)  # the snapshot is read once
    store.reset()
    result = handle.query(VARIABLE, over, ranges)
    ours = counted(store)
    ours_seconds, _ = median(lambda: handle.query(VARIABLE, over, ranges), args.repeats)

    floor = floor_reader(handle, result)
    store.reset()
    floor()
    floor_counts = counted(store)
    floor_seconds, _ = median(floor, args.repeats)

    cold = CountingStore(open_store(str(path)), latency=latency)
    accumulus.query(cold, VARIABLE, over, ranges)

    def scan():
        fresh = CountingStore(open_store(str(path)), latency=latency)
        return xarray_scan(fresh, VARIABLE, over, ranges), fresh

    scan_seconds, (expected, scan_store) = median(scan, args.scan_repeats)
    difference = np.nanmax(np.abs(result.data.values - expected.values))
    return {
        "plan": {
            "raw_chunks": result.stats.raw_chunks_read,
            "accumulation_chunks": result.stats.accumulation_chunks_read,
        },
        "accumulus": {"seconds": ours_seconds, **ours},
        "floor": {"seconds": floor_seconds, **floor_counts},
        "xarray": {"seconds": scan_seconds, **counted(scan_store)},
        "cold": counted(cold),
        "accumulus_over_floor": round(ours_seconds / floor_seconds, 2),
        "xarray_over_accumulus": round(scan_seconds / ours_seconds, 1),
        "max_abs_difference_to_xarray": float(difference),
        "answer": result.data.values,
    }


def compare(paths: dict[str, Path], args, latency: float) -> list[dict]:
    rows = []
    for name, over, ranges in QUESTIONS:
        runs = {k: measure(p, over, ranges, args, latency) for k, p in paths.items()}
        answers = [r.pop("answer") for r in runs.values()]
        plain, sharded = runs["plain"], runs["sharded"]
        ratios = {}
        for column in ("accumulus", "floor", "xarray"):
            for k in ("requests", "bytes", "round_trips", "seconds"):
                a, b = sharded[column][k], plain[column][k]
                ratios[f"{column}_{k}"] = round(a / b, 3) if b else None
        for k in ("requests", "metadata_requests"):
            a, b = sharded["cold"][k], plain["cold"][k]
            ratios[f"cold_{k}"] = round(a / b, 3) if b else None
        rows.append(
            {
                "question": name,
                "over": list(over),
                "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
                **runs,
                "sharded_over_plain": ratios,
                "max_abs_difference_sharded_plain": float(
                    np.nanmax(np.abs(answers[0] - answers[1]))
                ),
            }
        )
    return rows


# --------------------------------------------------------------------------------------------
# Appends


def days(start: int, count: int) -> xr.Dataset:
    """Days [start, start + count) of the realistic field (its generator, seeded by place)."""
    values = np.concatenate(
        [
            np.concatenate(
                [
                    _block({None: {"array-location": [(t, t + 1), (y, y + 90), (0, SHAPE[2])]}})
                    for y in range(0, SHAPE[1], 90)
                ],
                axis=1,
            )
            for t in range(start, start + count)
        ]
    )
    return xr.Dataset(
        {VARIABLE: (("time", "lat", "lon"), values, {"units": "K"})},
        coords={
            "time": pd.date_range(START, periods=start + count, freq="D")[start:],
            "lat": ("lat", -89.5 + np.arange(SHAPE[1]), {"units": "degrees_north"}),
            "lon": ("lon", -179.5 + np.arange(SHAPE[2]), {"units": "degrees_east"}),
        },
    )


def stored_bytes(path: Path, keys: list[str]) -> dict:
    """Of the data objects ``keys`` an append wrote: the bytes stored, and for shards the
    bytes no inner chunk of the index uses (``dead``: superseded versions an append kept in
    place for readers of the old index) besides the index itself."""
    stored = dead = 0
    metadata = json.loads((path / VARIABLE / "zarr.json").read_text())
    codec = metadata["codecs"][0]
    for key in keys:
        data = (path / key).read_bytes()
        stored += len(data)
        if codec["name"] == "sharding_indexed":
            shard = metadata["chunk_grid"]["configuration"]["chunk_shape"]
            inner = codec["configuration"]["chunk_shape"]
            n = int(np.prod([s // c for s, c in zip(shard, inner, strict=True)]))
            index = np.frombuffer(data[-(16 * n + 4) : -4], "<u8").reshape(n, 2)
            used = index[index[:, 0] != np.iinfo(np.uint64).max, 1].sum()
            dead += len(data) - int(used) - (16 * n + 4)
    return {"data_bytes_stored": stored, "data_dead_bytes": dead}


def appends(paths: dict[str, Path], directory: Path, sizes: tuple[int, ...]) -> dict:
    """Copies of the cubes appended to ``sizes`` days at a time (the first append adopts
    the copy): what each append wrote and read, and how long it took."""
    out = {}
    for name, source in paths.items():
        path = directory / f"sharding-append-{name}.zarr"
        shutil.rmtree(path, ignore_errors=True)
        shutil.copytree(source, path)
        steps, start = [], SHAPE[0]
        for count in sizes:
            granule = days(start, count)
            start += count
            store = CountingStore(open_store(str(path), "r+"))
            started = time.perf_counter()
            result = accumulus.append(store, granule)
            seconds = time.perf_counter() - started
            counts = store.counts
            data = [k for k in counts.writes if k.startswith(f"{VARIABLE}/c")]
            accumulations = [k for k in counts.writes if "_accumulation_group/" in k]
            steps.append(
                {
                    "extent": list(result.extent),
                    **stored_bytes(path, data),
                    "seconds": round(seconds, 2),
                    "data_objects_written": sorted(data),
                    "data_bytes_written": sum(counts.writes[k] for k in data),
                    "accumulation_objects_written": sum(
                        not is_metadata_key(k) for k in accumulations
                    ),
                    "bytes_written": counts.write_bytes,
                    "write_requests": counts.write_requests,
                    "bytes_read": counts.read_bytes,
                    "read_requests": counts.read_requests,
                    "accumulations_updated": list(result.accumulations),
                }
            )
        reports = accumulus.verify(str(path), VARIABLE)
        out[name] = {"appends": steps, "verify_ok": all(r.ok for r in reports)}
        shutil.rmtree(path)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=2)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--no-appends", action="store_true", help="skip the append section")
    parser.add_argument("--rebuild", action="store_true", help="rebuild the accumulations")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)

    source = realistic_cube(args.dir)
    paths = {name: write(source, args.dir, shards) for name, shards in LAYOUTS.items()}
    layouts = {}
    for name, path in paths.items():
        started = time.perf_counter()
        built = accumulus.accumulate(str(path), VARIABLE, rebuild=args.rebuild, minimal=True)
        layouts[name] = {
            "store": str(path),
            "accumulate": built.action,
            "accumulate_seconds": round(time.perf_counter() - started, 2),
            "objects": objects(path),
        }
    document = {
        "benchmark": "sharded vs plain Zarr v3 on the realistic cube: same data, same chunks",
        "shape": SHAPE,
        "chunks": CHUNKS,
        "shards": SHARDS,
        "layouts": layouts,
        "local": compare(paths, args, 0.0),
    }
    slow = argparse.Namespace(**{**vars(args), "repeats": max(3, args.repeats // 2)})
    slow.scan_repeats = 1
    document["with_latency"] = {
        "seconds_per_request": args.latency,
        "results": compare(paths, slow, args.latency),
    }
    if not args.no_appends:
        document["appends"] = appends(paths, args.dir, APPENDS)
    report(document)


if __name__ == "__main__":
    main()
