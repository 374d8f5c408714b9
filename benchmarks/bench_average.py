"""``average`` against its floor and against the full scan a user would otherwise run.

Two cubes: the realistic one (``realistic.py``: 3650 x 180 x 360 float32 written by xarray,
chunks 73 x 90 x 90 = 2.4 MB, 10 % missing) and the small-chunk one (the demo's generator,
chunks 30 x 15 x 30 = 54 KB, where xarray + Dask pays its per-task cost on every chunk).
For each question, medians (of ``--repeats`` runs at least, lasting half a second together:
``common.MIN_SECONDS``) of:

- ``warm``: an open datacube (``accumulus.open``) answering again (its snapshot is current),
  wall and CPU time (of every thread); on a plain local store, as a user opens it (its
  requests are counted by asking the same question of a second handle on a counting store);
- ``cold``: the one-shot ``accumulus.query(path, ...)`` (opens the store every time);
- ``floor``: a bare loop fetching exactly the chunks the plan reads, concurrently, through
  the store, decoding them with the array's codecs (numcodecs) on a thread pool and summing
  them: the least work the question allows with this plan; and ``floor_in_thread``, the same
  chunks read one after another in the calling thread (``get_sync``), as accumulus reads a
  local store, which on a small plan costs less than handing the reads to threads;
- ``xarray``: xarray + Dask full scan of the same selection (``weighted(...).mean``).

Ratios are measured in this run: warm / floor, floor / xarray, xarray / warm. Requests and
bytes are counted at the store. The same questions are then asked through a store adding a
latency to every request (object storage), counting sequential round trips.

    python benchmarks/bench_average.py [--repeats 7] [--scan-repeats 3] [--latency 0.05]
"""

from __future__ import annotations

import argparse
import asyncio
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path

import numcodecs
import numpy as np
import xarray as xr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import WrapperStore

import accumulus
from accumulus.accumulation.query.execute import chunk_work
from accumulus.chunk_reader import _chunk_spec
from accumulus.demo import VARIABLE as DEMO_VARIABLE
from accumulus.demo import DemoConfig
from accumulus.partial_decode import (
    blosc_chain,
    decode_ranges,
    decode_verified,
    frame_head,
    region_spans,
)
from accumulus.stores.base import innermost, reads_synchronously
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from common import DEFAULT_DIR, SMALL_CHUNKS, cube, median_seconds, median_with_cpu, report
from realistic import CHUNKS as REALISTIC_CHUNKS
from realistic import VARIABLE as REALISTIC_VARIABLE
from realistic import realistic_cube

POOL = ThreadPoolExecutor(4)


def realistic_questions() -> list[tuple[str, tuple[str, ...], dict]]:
    # Time chunks of 73 days from 2001-01-01; lat and lon chunks of 90 degrees.
    return [
        ("2-year map, aligned", ("time",), {"time": ("2003-01-01", "2004-12-30")}),
        ("series over an aligned box", ("lat", "lon"), {"lat": (0, 90), "lon": (-90, 90)}),
        ("map, unaligned ends", ("time",), {"time": ("2002-02-15", "2005-07-20")}),
        ("series, unaligned box", ("lat", "lon"), {"lat": (-35, 37), "lon": (-17, 51)}),
        ("series, unaligned region", ("lat", "lon"), {"lat": (0, 25), "lon": (-20, 40)}),
    ]


def small_questions(config: DemoConfig) -> list[tuple[str, tuple[str, ...], dict]]:
    # Time edges every 30 days from 2000-01-01; lat every 15 degrees; lon every 30.
    return [
        ("2-year map, aligned", ("time",), {"time": ("2000-01-31", "2002-01-19")}),
        ("series over an aligned box", ("lat", "lon"), {"lat": (-45, 45), "lon": (-120, 120)}),
        ("map, unaligned ends", ("time",), {"time": ("2000-02-15", "2003-07-20")}),
        ("series, unaligned box", ("lat", "lon"), {"lat": (-35, 37), "lon": (-17, 51)}),
        ("series, unaligned region", ("lat", "lon"), {"lat": (0, 25), "lon": (-20, 40)}),
    ]


# --------------------------------------------------------------------------------------------
# The floor


def sum_parts(chunk: np.ndarray, parts, over: tuple[int, ...]) -> None:
    """The floor's arithmetic on one decoded chunk: each part of the plan it serves summed
    (a raw part: its valid values and their count over ``over``; an accumulation part: its
    entries over the dimensions the part sums)."""
    for part in parts:
        x = chunk[part.local]
        if hasattr(part, "box"):  # raw
            valid = ~np.isnan(x)
            np.sum(np.where(valid, x, 0), axis=over, dtype="f8")
            np.count_nonzero(valid, axis=over)
        else:
            x.sum(axis=part.summed)


def decoded(buffer, compressor, filters, shape, dtype, fill) -> np.ndarray:
    """A chunk's values from its stored bytes (None: not stored, its fill value)."""
    if buffer is None:
        return np.full(shape, fill, dtype=dtype)
    data = buffer if isinstance(buffer, bytes) else buffer.to_bytes()
    data = compressor.decode(data) if compressor is not None else data
    for codec in filters:
        data = codec.decode(data)
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def _counting(store) -> CountingStore | None:
    """The counting store among ``store``'s wrappers, if one is."""
    while not isinstance(store, CountingStore) and isinstance(store, WrapperStore):
        store = store._store
    return store if isinstance(store, CountingStore) else None


def in_part(store, request) -> Callable[[], np.ndarray] | None:
    """Where a chunk is a local file in a Blosc frame: a reader of only its Blosc blocks
    holding the parts the plan needs (those blocks, by byte ranges of one open file, counted
    at ``store`` when it counts; its header known beforehand), decoding them. The least a program
    reading those chunks decodes, and what an answer reads once the file passed its
    checksum (the timed handle's warm answers). Where the frame cannot be cut (or every
    block is needed) the chunk is read whole and decoded as an answer decodes a verified
    file: Blosc alone (``decode_verified``), its checksum not computed again.
    None where the chunk is no such file."""
    root = getattr(innermost(store), "root", None)
    chain = blosc_chain(request.array.metadata)
    if root is None or chain is None or request.needed is None:
        return None
    path = os.path.join(str(root), request.store_key)
    spec = _chunk_spec(request.array.metadata, request.coords)
    regions = request.regions or (request.needed,)
    spans = region_spans(regions, spec.shape, spec.dtype.to_native_dtype().itemsize)

    counting = _counting(store)
    # Its header and block table, known before the timed reads as the answer's reader knows
    # them once it has read a version of the file (``chunk_reader._HEADS``): a small chunk is
    # then read by its blocks too, not whole.
    with open(path, "rb") as file:
        head = frame_head(file.read())

    def read() -> np.ndarray:
        fd = os.open(path, os.O_RDONLY)

        def counted(start: int, stop: int) -> bytes:
            data = os.pread(fd, stop - start, start)
            if counting is not None:  # each range one request, as the answer's are counted
                counting._count_read(request.store_key, data)
            return data

        try:
            size = os.fstat(fd).st_size
            part = decode_ranges(chain, spec, spans, counted, size, verified=True, head=head)
            if part is not None:
                return part
            return decode_verified(chain, spec, spec.prototype.buffer.from_bytes(counted(0, size)))
        finally:
            os.close(fd)

    return read


def floor_reader(handle: accumulus.Datacube, result) -> Callable[[], None]:
    """A bare loop over exactly the chunks ``result``'s plan reads: fetch them all at once
    (a local file's Blosc blocks holding the parts needed: ``in_part``), decode each with its
    array's numcodecs filters and compressor, and sum the part read (valid values and their
    count for raw chunks, the entries for accumulation chunks)."""
    snapshot = handle.snapshot()
    var = snapshot.cube.variable(result.query.variable)
    terms = ("wsum", "wcount") if result.weights != "none" else ("sum", "count")
    work = chunk_work(snapshot.groups, var, result.plan, terms)
    store = var.array.store_path.store
    over = tuple(var.axis(d) for d in result.plan.over)
    items = []
    for key, (request, parts) in work.items():
        metadata = request.array.metadata
        codecs = [numcodecs.get_codec(f.get_config()) for f in metadata.filters or ()]
        compressor = metadata.compressor
        shape, dtype = metadata.chunks, metadata.dtype.to_native_dtype()
        fill = metadata.fill_value
        store_of = request.store or store
        ranged = in_part(store_of, request)
        items.append((key, compressor, codecs[::-1], shape, dtype, parts, store_of, fill, ranged))

    def decode_and_sum(item, buffer) -> None:
        _, compressor, filters, shape, dtype, parts, _, fill, ranged = item
        chunk = (
            decoded(buffer, compressor, filters, shape, dtype, fill) if ranged is None else ranged()
        )
        sum_parts(chunk, parts, over)

    async def nothing() -> None:
        return None

    async def fetch_all():
        prototype = default_buffer_prototype()
        # Each chunk from its own store: a sidecar's accumulations are beside the cube's.
        return await asyncio.gather(
            *(nothing() if item[8] else item[6].get(item[0], prototype) for item in items)
        )

    def run() -> None:
        buffers = sync(fetch_all())
        list(POOL.map(decode_and_sum, items, buffers))

    return run


def floor_in_thread_reader(handle: accumulus.Datacube, result) -> Callable[[], None] | None:
    """The same bare loop with the chunks read one after another in the calling thread
    (``get_sync``, no event loop, no thread pool); None when a store cannot be read so."""
    snapshot = handle.snapshot()
    var = snapshot.cube.variable(result.query.variable)
    terms = ("wsum", "wcount") if result.weights != "none" else ("sum", "count")
    work = chunk_work(snapshot.groups, var, result.plan, terms)
    over = tuple(var.axis(d) for d in result.plan.over)
    items = []
    for key, (request, parts) in work.items():
        store = request.store or var.array.store_path.store
        if not reads_synchronously(store):
            return None
        metadata = request.array.metadata
        codecs = [numcodecs.get_codec(f.get_config()) for f in metadata.filters or ()]
        shape, dtype = metadata.chunks, metadata.dtype.to_native_dtype()
        compressor, fill = metadata.compressor, metadata.fill_value
        ranged = in_part(store, request)
        items.append((store, key, compressor, codecs[::-1], shape, dtype, parts, fill, ranged))

    def run() -> None:
        for store, key, compressor, filters, shape, dtype, parts, fill, ranged in items:
            if ranged is None:
                chunk = decoded(store.get_sync(key), compressor, filters, shape, dtype, fill)
            else:
                chunk = ranged()
            sum_parts(chunk, parts, over)

    return run


# --------------------------------------------------------------------------------------------
# Measuring one question


def xarray_scan(store, variable: str, over, ranges) -> xr.DataArray:
    ds = xr.open_zarr(store, consolidated=True)
    data = ds[variable].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
    return data.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(list(over)).compute()


def counted(store: CountingStore) -> dict:
    chunks = [k for k in store.counts.reads if not is_metadata_key(k)]
    return {
        "requests": store.counts.read_requests,
        "chunks": len(chunks),
        "bytes": store.counts.read_bytes,
        "round_trips": store.counts.round_trips,
    }


def measure(path: Path, variable: str, name, over, ranges, args, latency: float = 0.0) -> dict:
    store = CountingStore(open_store(str(path)), latency=latency)
    counted_handle = accumulus.open(store)
    # Timed as a user opens a local store; through the counting store when it adds latency.
    handle = counted_handle if latency else accumulus.open(str(path))
    for opened in {id(h): h for h in (handle, counted_handle)}.values():
        opened.query(variable, over, ranges)  # warm-up: the snapshot is read once
    repeats = args.repeats if not latency else max(3, args.repeats // 2)

    store.reset()
    result = counted_handle.query(variable, over, ranges)
    warm_counts = counted(store)
    warm, warm_cpu, result = median_with_cpu(lambda: handle.query(variable, over, ranges), repeats)

    store.reset()
    floor_reader(counted_handle, result)()
    floor_counts = counted(store)
    floor, floor_cpu, _ = median_with_cpu(floor_reader(handle, result), repeats)
    in_thread = floor_in_thread_reader(handle, result)
    floor_here = median_seconds(in_thread, repeats)[0] if in_thread is not None else None

    def cold():
        fresh = CountingStore(open_store(str(path)), latency=latency)
        return accumulus.query(fresh, variable, over, ranges), fresh

    cold_seconds, (_, cold_store) = median_seconds(cold, max(3, repeats // 2))

    def scan():
        fresh = CountingStore(open_store(str(path)), latency=latency)
        return xarray_scan(fresh, variable, over, ranges), fresh

    scan_seconds, (expected, scan_store) = median_seconds(scan, args.scan_repeats)
    return {
        "question": name,
        "over": list(over),
        "ranges": {d: [str(a), str(b)] for d, (a, b) in ranges.items()},
        "warm_seconds": round(warm, 5),
        "warm_cpu_seconds": round(warm_cpu, 5),
        "floor_seconds": round(floor, 5),
        "floor_cpu_seconds": round(floor_cpu, 5),
        "floor_in_thread_seconds": None if floor_here is None else round(floor_here, 5),
        "cold_seconds": round(cold_seconds, 5),
        "xarray_seconds": round(scan_seconds, 5),
        "warm_over_floor": round(warm / floor, 2),
        "warm_over_floor_in_thread": None if floor_here is None else round(warm / floor_here, 2),
        "floor_over_xarray": round(floor / scan_seconds, 3),
        "xarray_over_warm": round(scan_seconds / warm, 1),
        "xarray_over_cold": round(scan_seconds / cold_seconds, 1),
        "max_abs_difference": float(np.nanmax(np.abs(result.data.values - expected.values))),
        "plan": {
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "raw_chunks": result.stats.raw_chunks_read,
        },
        "warm": warm_counts,
        "floor": floor_counts,
        "cold": counted(cold_store),
        "xarray": counted(scan_store),
    }


def bench_cube(label: str, path: Path, variable: str, chunks, questions, args) -> dict:
    # The group the cube holds is used as it is (the realistic cube may be shared, read
    # only); a cube without one gets the default accumulations.
    if accumulus.open(str(path)).accumulation_group(variable) is None:
        built = accumulus.accumulate(str(path), variable, minimal=True).action
    else:
        built = "used as stored"
    local = [measure(path, variable, name, over, ranges, args) for name, over, ranges in questions]
    remote = [
        measure(path, variable, name, over, ranges, args, latency=args.latency)
        for name, over, ranges in questions
    ]
    return {
        "cube": label,
        "store": str(path),
        "chunks": list(chunks),
        "chunk_mib": round(int(np.prod(chunks)) * 4 / 2**20, 3),
        "accumulate": built,
        "local": local,
        "with_latency": {"seconds_per_request": args.latency, "results": remote},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--scan-repeats", type=int, default=3)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds per request")
    parser.add_argument("--small-days", type=int, default=4018, help="0: skip that cube")
    parser.add_argument("--skip-realistic", action="store_true")
    args = parser.parse_args()
    args.dir.mkdir(parents=True, exist_ok=True)

    cubes = []
    if not args.skip_realistic:
        path = realistic_cube(args.dir)
        cubes.append(
            bench_cube("realistic (2.4 MB chunks, written by xarray)", path,
                       REALISTIC_VARIABLE, REALISTIC_CHUNKS, realistic_questions(), args)
        )  # fmt: skip
    if args.small_days:
        config = replace(SMALL_CHUNKS, days=args.small_days)
        path = cube(args.dir, config)
        cubes.append(
            bench_cube("small chunks (54 KB: Dask's per-task cost dominates the scan)", path,
                       DEMO_VARIABLE, config.chunks, small_questions(config), args)
        )  # fmt: skip
    report(
        {
            "benchmark": "average: warm, cold, floor and xarray + Dask",
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cubes": cubes,
        }
    )


if __name__ == "__main__":
    main()
