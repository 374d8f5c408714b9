"""What a query plan will cost, in seconds, estimated before anything is read.

Every stored chunk a plan touches is fetched once and decoded whole, however little of it
the plan needs (zarr decodes whole chunks), so a plan costs, per chunk:

- a request: on local disk a fixed overhead (``LOCAL_REQUEST_SECONDS``: opening the object,
  zarr's and the reader's work per chunk); on object storage a round trip of latency, but
  requests go out together, so the plan waits for as many round trips as it has waves of
  chunks in flight (``budget``: the memory allowed bounds the chunks held at once);
- decoding its bytes with its array's codecs, at a throughput measured once per process and
  codec chain (``decode_rate``: a sample encoded and decoded, a few milliseconds);
- summing its values: a raw chunk's values are decoded to physical values and summed with
  their weights (``raw_sum_rate``, measured once per process and kind of query), an
  accumulation chunk's entries are added (``entry_sum_rate``);

and chunks decoded side by side (a large batch: ``chunk_reader``) share the cores.

The query compares the plan its accumulations allow with the plain scan of the same cells
and runs the one estimated faster, so an accumulation does not make a question slower than
a scan (``benchmarks/bench_planner.py`` measures how close the choice comes to the faster).
"""

from __future__ import annotations

import itertools
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import ceil, prod
from typing import Any, cast

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import default_buffer_prototype
from zarr.core.chunk_utils import ChunkTransform
from zarr.storage import LocalStore, MemoryStore, ZipStore

from accumulus.accumulation.model.sums import reduce_terms
from accumulus.accumulation.query.budget import read_budget
from accumulus.chunk_reader import (
    CONSUMERS,
    IN_THREAD_BYTES,
    MAX_IN_FLIGHT,
    SIDE_BY_SIDE_CHUNK,
    WORKERS,
    ChunkRequest,
)
from accumulus.grid import array_bounds
from accumulus.raw_cube import VariableInfo
from accumulus.stores.base import reads_synchronously

# A chunk's fixed cost beyond its bytes: reading the object, handing it through zarr's
# codecs and the reader, adding its part into the answer. Measured on 200 chunks of 54 KB
# of a local directory (decoding subtracted): about 25 µs each read in the calling thread,
# 100 µs through zarr's event loop (the counting store's path, and object storage's);
# with the answer's bookkeeping, 50 and 120.
LOCAL_REQUEST_SECONDS = 50e-6
EVENT_LOOP_REQUEST_SECONDS = 120e-6
# An object store's round trip, when its latency is not known (a remote URL): S3's first
# byte takes 20-50 ms from outside its region.
OBJECT_STORE_LATENCY = 0.03
# The values a calibration sample holds: enough that timing it is not noise (a few hundred
# µs), few enough that measuring costs a fresh process a few milliseconds at most.
SAMPLE_VALUES = 2**16
CORES = os.cpu_count() or 1


@dataclass(frozen=True)
class PlanCost:
    requests: int
    bytes: int  # decoded bytes of every chunk read
    seconds: float  # the estimate

    def to_dict(self) -> dict[str, int | float]:
        return {
            "requests": self.requests,
            "decoded_bytes": self.bytes,
            "seconds": round(self.seconds, 6),
        }

    def __str__(self) -> str:
        return f"{self.requests} chunks, {self.bytes / 2**20:.1f} MiB, ~{self.seconds * 1e3:.1f} ms"


@dataclass(frozen=True)
class Storage:
    """How a store answers: ``latency`` seconds per round trip (0 on local disk), and
    whether its chunks are read in the calling thread (``chunk_reader``)."""

    latency: float
    in_thread: bool

    @property
    def request_seconds(self) -> float:
        return LOCAL_REQUEST_SECONDS if self.in_thread else EVENT_LOOP_REQUEST_SECONDS


def storage_of(store: Store) -> Storage:
    """A store's latency: what its wrappers add (the benchmarks' and tests' counting store),
    else none on a local directory, memory or zip file, else an object store's. Worked out
    once per store object (a snapshot's is asked at every query)."""
    known = _STORAGE.get(id(store))
    if known is not None and known[0] is store:
        return known[1]
    latency, inner = 0.0, store
    while True:
        latency += float(getattr(inner, "latency", 0.0) or 0.0)
        below = getattr(inner, "_store", None)
        if not isinstance(below, Store):
            break
        inner = below
    if not isinstance(inner, LocalStore | MemoryStore | ZipStore):
        latency = max(latency, OBJECT_STORE_LATENCY)
    storage = Storage(latency, reads_synchronously(store))
    if len(_STORAGE) >= 256:
        _STORAGE.clear()
    _STORAGE[id(store)] = (store, storage)  # keeps the store alive: its id is not reused
    return storage


_STORAGE: dict[int, tuple[Store, Storage]] = {}


class _Tally:
    """The chunks of a plan as they are listed: requests, decoded bytes, CPU seconds."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.compute = 0.0

    def add(self, count: int, nbytes: int, seconds: float) -> None:
        self.requests += count
        self.bytes += nbytes
        self.compute += seconds

    def cost(self, storage: Storage, memory_bytes: int) -> PlanCost:
        if self.requests == 0:
            return PlanCost(0, 0, 0.0)
        waves = 0
        if storage.latency > 0:
            in_flight = read_budget(memory_bytes).in_flight_bytes
            waves = max(ceil(self.bytes / in_flight), ceil(self.requests / MAX_IN_FLIGHT))
        seconds = (
            storage.latency * waves
            + storage.request_seconds * self.requests
            + self.compute / self._side_by_side(storage)
        )
        return PlanCost(self.requests, self.bytes, seconds)

    def _side_by_side(self, storage: Storage) -> int:
        """How many chunks are decoded at once, as ``chunk_reader`` reads them."""
        if storage.in_thread:
            runs = min(WORKERS, self.requests, max(1, -(-self.bytes // IN_THREAD_BYTES)))
            if self.bytes < SIDE_BY_SIDE_CHUNK * self.requests:
                runs = 1
        else:
            runs = min(CONSUMERS, self.requests)
        return max(1, min(runs, CORES))


def plan_cost(
    requests: Iterable[ChunkRequest],
    var: VariableInfo,
    storage: Storage,
    terms: Sequence[str],
    over: Sequence[str],
    memory_bytes: int,
) -> PlanCost:
    """The estimated cost of reading and summing these chunks (distinct ones, as a plan's
    batch reads them): raw chunks of ``var`` and accumulation chunks."""
    raw_path = var.array.store_path.path
    arrays: dict[str, tuple[Any, float, bool]] = {}  # by path: bounds, decode rate, raw
    tally = _Tally()
    raw_rate = raw_sum_rate(var, terms, over)
    entry_rate = entry_sum_rate()
    for request in requests:
        array = request.array
        path = array.store_path.path
        known = arrays.get(path)
        if known is None:
            known = arrays[path] = (array_bounds(array), decode_rate(array), path == raw_path)
        bounds, decoding, raw = known
        values = prod(b.sizes[c] for b, c in zip(bounds, request.coords, strict=True))
        nbytes = values * array.dtype.itemsize
        summing = raw_rate.per_chunk + values * raw_rate.per_value if raw else values * entry_rate
        tally.add(1, nbytes, nbytes * decoding + summing)
    return tally.cost(storage, memory_bytes)


def scan_cost(
    var: VariableInfo,
    boxes: Sequence[Mapping[str, tuple[int, int]]],
    storage: Storage,
    terms: Sequence[str],
    over: Sequence[str],
    memory_bytes: int,
) -> PlanCost:
    """The estimated cost of reading every raw chunk that holds part of any of ``boxes``
    (index ranges), each chunk once: the cost of a plan that reads raw data only. Counted
    without listing the chunks of a single box (a long scan has thousands)."""
    itemsize = var.array.dtype.itemsize
    per_box = [
        [
            bounds.chunks_overlapping(*box[dim])
            for dim, bounds in zip(var.dims, var.bounds, strict=True)
        ]
        for box in boxes
    ]
    if len(per_box) == 1:  # one box: no chunk is shared
        chunks = per_box[0]
        extents = (sum(b.sizes[c] for c in cs) for b, cs in zip(var.bounds, chunks, strict=True))
        count, values = prod(len(cs) for cs in chunks), prod(extents)
    else:
        distinct = {coords for chunks in per_box for coords in itertools.product(*chunks)}
        count = len(distinct)
        values = sum(
            prod(b.sizes[c] for b, c in zip(var.bounds, coords, strict=True)) for coords in distinct
        )
    nbytes = values * itemsize
    tally = _Tally()
    rate = raw_sum_rate(var, terms, over)
    seconds = nbytes * decode_rate(var.array) + count * rate.per_chunk + values * rate.per_value
    tally.add(count, nbytes, seconds)
    return tally.cost(storage, memory_bytes)


# --------------------------------------------------------------------------------------------
# Calibration: measured once per process


_RATES: dict[Hashable, Any] = {}
_RATES_LOCK = threading.Lock()


def _measured[Rate](key: Hashable, measure: Callable[[], Rate]) -> Rate:
    rate = _RATES.get(key)
    if rate is None:
        with _RATES_LOCK:
            rate = _RATES.get(key)
            if rate is None:
                rate = _RATES[key] = measure()
    return cast(Rate, rate)  # what ``measure`` gave for ``key``


def _best_of(action: Callable[[], object], times: int = 5) -> float:
    """The least CPU time (every thread of the process, as Blosc decodes with threads of its
    own) ``action`` took in ``times`` runs: on a loaded machine, wall time measures the
    other processes as well, and a rate measured once is kept for the process."""
    best = float("inf")
    for _ in range(times):
        started = time.process_time()
        action()
        best = min(best, time.process_time() - started)
    return max(best, 1e-9)


def _sample(dtype: np.dtype, shape: tuple[int, ...], missing: float) -> np.ndarray:
    """Values like a geophysical field's (smooth, with noise in the low digits), a fraction
    ``missing`` of them NaN (floating point) — or, for integers, counts growing like an
    accumulation's."""
    rng = np.random.default_rng(0)
    n = prod(shape)
    if dtype.kind in "iu":
        return np.cumsum(rng.integers(0, 3, n)).astype(dtype).reshape(shape)
    smooth = 280 + 10 * np.sin(np.linspace(0, 20, n))
    values = (smooth + rng.normal(0, 2, n)).astype(dtype)
    values[rng.random(n) < missing] = np.nan
    return values.reshape(shape)


def _sample_shape(chunk: Sequence[int]) -> tuple[int, ...]:
    """A block shaped like a chunk's with about ``SAMPLE_VALUES`` values, however small the
    chunk (a rate measured on a few values would measure the calls, not the values): whole
    trailing axes as far as they fit, the leading axis as long as the rest allows."""
    shape, room = [], SAMPLE_VALUES
    for a in range(len(chunk) - 1, -1, -1):
        take = max(1, room if a == 0 else min(chunk[a], room))
        shape.append(take)
        room = max(1, room // take)
    return tuple(reversed(shape))


def decode_rate(array: zarr.Array[Any]) -> float:
    """Seconds per decoded byte of the array's codec chain, measured once per process on a
    sample it encoded (chains zarr runs only in its event loop, and sharded arrays, are given
    the rate of zarr's default compressor)."""
    metadata = array.metadata
    known = _DECODE.get(id(metadata))
    if known is not None and known[0] is metadata:
        return known[1]
    codecs: tuple[Any, ...] = tuple(cast(Iterable[Any], array.async_array.codec_pipeline))
    dtype = metadata.dtype.to_native_dtype()
    key = ("decode", repr(codecs), str(dtype))
    chunk = _chunk_shape(array_bounds(array))
    rate: float = _measured(key, lambda: _decode_rate(codecs, metadata, dtype, chunk))
    if len(_DECODE) >= 256:
        _DECODE.clear()
    _DECODE[id(metadata)] = (metadata, rate)  # by identity: repr of the codecs costs more
    return rate


_DECODE: dict[int, tuple[Any, float]] = {}


def _chunk_shape(bounds: Sequence[Any]) -> tuple[int, ...]:
    """The largest chunk's extent along each dimension (regular or rectilinear grids)."""
    return tuple(max(b.sizes, default=1) for b in bounds)


def _decode_rate(
    codecs: tuple[Any, ...], metadata: Any, dtype: np.dtype, chunk: tuple[int, ...]
) -> float:
    try:
        transform = ChunkTransform(codecs=codecs)
    except TypeError:  # a codec only zarr's event loop runs: assume a common compressor
        return _default_decode_rate()
    shape = _sample_shape(chunk)
    if len(shape) != metadata.ndim or any(type(c).__name__ == "ShardingCodec" for c in codecs):
        return _default_decode_rate()
    spec = ArraySpec(
        shape=shape,
        dtype=metadata.dtype,
        fill_value=metadata.fill_value,
        config=ArrayConfig.from_dict({"order": "C"}),
        prototype=default_buffer_prototype(),
    )
    values = _sample(dtype, shape, missing=0.05)
    encoded = transform.encode_chunk(
        default_buffer_prototype().nd_buffer.from_numpy_array(values), spec
    )
    if encoded is None:
        return 0.0
    return _best_of(lambda: transform.decode_chunk(encoded, spec)) / values.nbytes


def _default_decode_rate() -> float:
    """Zstd's rate on float32 values (zarr's default compressor), measured as any chain."""
    import numcodecs

    def measure() -> float:
        values = _sample(np.dtype("f4"), (SAMPLE_VALUES,), missing=0.05)
        codec = numcodecs.Zstd()
        encoded = codec.encode(values)
        return _best_of(lambda: codec.decode(encoded)) / values.nbytes

    return _measured(("decode", "default"), measure)


@dataclass(frozen=True)
class SumRate:
    """What summing a raw chunk costs: ``per_chunk`` seconds, and ``per_value`` more."""

    per_chunk: float
    per_value: float


def raw_sum_rate(var: VariableInfo, terms: Sequence[str], over: Sequence[str]) -> SumRate:
    """Seconds to turn stored values into physical ones (``Decoder.values``) and sum
    ``terms`` of them over ``over`` with weights varying along the first dimension averaged
    over: per chunk (one row) and per value (the rest of a full sample), measured once per
    process and kind of query."""
    axes = tuple(var.axis(d) for d in over)
    key = ("raw", var.array.dtype.str, tuple(sorted(var.decoder.attrs)), tuple(terms), axes)

    def reduce_seconds(shape: tuple[int, ...]) -> float:
        stored = _sample(var.array.dtype, shape, missing=0.05)
        along = min(axes, default=-1)  # weights vary along one dimension averaged over
        weights = np.ones([n if a == along else 1 for a, n in enumerate(shape)])
        return _best_of(lambda: reduce_terms(var.decoder.values(stored), weights, terms, axes))

    def measure() -> tuple[float, float]:
        shape = _sample_shape(_chunk_shape(var.bounds))
        small = tuple(1 for _ in shape)
        per_chunk = reduce_seconds(small)
        return per_chunk, max(0.0, reduce_seconds(shape) - per_chunk) / prod(shape)

    return SumRate(*_measured(key, measure))


def entry_sum_rate() -> float:
    """Seconds per accumulation entry summed (float64), measured once per process."""

    def measure() -> float:
        entries = _sample(np.dtype("f8"), (64, SAMPLE_VALUES // 64), missing=0.0)
        return _best_of(lambda: entries.sum(axis=1)) / entries.size

    return _measured(("entries",), measure)
