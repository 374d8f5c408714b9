"""What a query plan will cost, in seconds, estimated before anything is read.

Every stored chunk a plan touches is fetched once and decoded whole — or, a Blosc chunk of
which it needs a part, only the blocks holding that part, read by byte ranges of a local
file or of an object store (``chunk_reader.part_reads``: from an object store, the frame's
header first, one round trip more) — so a plan costs, per chunk:

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

from accumulus import chunk_reader
from accumulus.accumulation.model.sums import reduce_terms
from accumulus.accumulation.query.budget import read_budget
from accumulus.chunk_reader import (
    CONSUMERS,
    IN_THREAD_BYTES,
    MAX_IN_FLIGHT,
    SIDE_BY_SIDE_CHUNK,
    WORKERS,
    ChunkRequest,
    PartReads,
    decoded_in_part,
    part_reads,
)
from accumulus.grid import ChunkBounds, array_bounds
from accumulus.identity_memo import IdentityMemo
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
# Raw values are summed at a rate that falls as the block outgrows the processor's caches,
# and a scan sums whole days of chunks: its rate is measured on a block of this many values
# (2 MiB of float32), or the chunk's if smaller (figures: docs/benchmarks.md, "The
# planner's raw summing rate").
RAW_SAMPLE_VALUES = 2**19
CORES = os.cpu_count() or 1
# Chunks decoded on two cores side by side take this share of the time one after another
# would, per core: 16 raw chunks of 2.4 MB, 40 ms in two runs and 67 in one (``chunk_reader``).
PARALLEL_EFFICIENCY = 0.85


@dataclass(frozen=True)
class PlanCost:
    requests: int
    bytes: int  # decoded bytes of every chunk read
    seconds: float  # the estimate
    # Whether the three are lower bounds, not the estimate (``scan_bound``): a scan not
    # estimated in full, its bound already above the estimate of the plan it was set against.
    at_least: bool = False

    def to_dict(self) -> dict[str, int | float | bool]:
        return {
            "requests": self.requests,
            "decoded_bytes": self.bytes,
            "seconds": round(self.seconds, 6),
            "at_least": self.at_least,
        }

    def __str__(self) -> str:
        described = (
            f"{self.requests} chunks, {self.bytes / 2**20:.1f} MiB, ~{self.seconds * 1e3:.1f} ms"
        )
        return f"at least {described}" if self.at_least else described


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
    return _STORAGE.value(store, lambda: _storage(store))


def _storage(store: Store) -> Storage:
    latency, inner = 0.0, store
    while True:
        latency += float(getattr(inner, "latency", 0.0) or 0.0)
        below = getattr(inner, "_store", None)
        if not isinstance(below, Store):
            break
        inner = below
    if not isinstance(inner, LocalStore | MemoryStore | ZipStore):
        latency = max(latency, OBJECT_STORE_LATENCY)
    return Storage(latency, reads_synchronously(store))


_STORAGE: IdentityMemo[Storage] = IdentityMemo()


class _Tally:
    """The chunks of a plan as they are listed: requests, decoded bytes, CPU seconds."""

    def __init__(self) -> None:
        self.requests = 0
        self.bytes = 0
        self.compute = 0.0
        self.header_first = False  # a chunk read in part from an object store: a wave more

    def add(self, count: int, nbytes: int, seconds: float) -> None:
        self.requests += count
        self.bytes += nbytes
        self.compute += seconds

    def cost(self, storage: Storage, memory_bytes: int) -> PlanCost:
        return self._priced(storage, memory_bytes, self._side_by_side(storage), self.header_first)

    def bound(self, storage: Storage, memory_bytes: int, exact_requests: bool) -> PlanCost:
        """The least ``cost`` can be of a plan of at least these requests (exactly these
        where ``exact_requests``), decoded bytes and CPU seconds: no header read first, and
        the chunks decoded side by side on every core ``_side_by_side`` could give them."""
        runs = min(WORKERS if storage.in_thread else CONSUMERS, CORES)
        if exact_requests:
            runs = min(runs, self.requests)
        most = max(1.0, runs * PARALLEL_EFFICIENCY)
        cost = self._priced(storage, memory_bytes, most, False)
        return PlanCost(cost.requests, cost.bytes, cost.seconds, at_least=True)

    def _priced(
        self, storage: Storage, memory_bytes: int, side_by_side: float, header_first: bool
    ) -> PlanCost:
        if self.requests == 0:
            return PlanCost(0, 0, 0.0)
        waves = 0
        if storage.latency > 0:
            in_flight = read_budget(memory_bytes).in_flight_bytes
            waves = max(ceil(self.bytes / in_flight), ceil(self.requests / MAX_IN_FLIGHT))
            waves += header_first
        seconds = (
            storage.latency * waves
            + storage.request_seconds * self.requests
            + self.compute / side_by_side
        )
        return PlanCost(self.requests, self.bytes, seconds)

    def _side_by_side(self, storage: Storage) -> float:
        """How much faster than one after another ``chunk_reader`` decodes the chunks: its
        runs side by side, as long as the longest (3 chunks in 2 runs: 1.5x), at most the
        cores, and at ``PARALLEL_EFFICIENCY`` of them."""
        if storage.in_thread:
            runs = min(WORKERS, self.requests, max(1, -(-self.bytes // IN_THREAD_BYTES)))
            if self.bytes < SIDE_BY_SIDE_CHUNK * self.requests:
                runs = 1
        else:
            runs = min(CONSUMERS, self.requests)
        runs = min(runs, CORES)
        if runs <= 1:
            return 1.0
        longest = -(-self.requests // runs)
        return max(1.0, self.requests / longest * PARALLEL_EFFICIENCY)


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
    # By array object (several handles on one array are alike): its chunk sizes, decoding
    # and summing rates, value size and how a part of a chunk is read, looked up once per
    # plan, not per chunk (``_array_facts``: worked out once per array object).
    arrays: dict[int, tuple[tuple[tuple[int, ...], ...], Rate, Rate, int, PartReads | None]] = {}
    raw_rate = raw_sum_rate(var, terms, over)
    entry_rate = entry_sum_rate()
    # What a chunk decodes of the parts it needs (``decoded_in_part``), by its array's way of
    # reading parts and those parts, where its shape is every chunk's of the array.
    parts: dict[tuple[int, Any], tuple[int, int] | None] = {}
    count = nbytes_total = 0
    compute = 0.0
    header_first = False
    for request in requests:
        array = request.array
        known = arrays.get(id(array))
        if known is None:
            facts = _array_facts(request, storage.in_thread)
            in_part = facts.in_part
            if request.store is not None:  # a sidecar's chunk, read from the store it names
                in_part = _part_reads(request, storage.in_thread)
            known = arrays[id(array)] = (
                facts.sizes,
                facts.decoding,
                raw_rate if facts.path == raw_path else entry_rate,
                facts.itemsize,
                in_part,
            )
        sizes, decoding, summing, itemsize, in_part = known
        part = None
        if in_part is not None:
            if in_part.shape is None or in_part.header_first:  # (depends on the chunk)
                part = decoded_in_part(request, in_part)
            else:  # alike for the chunks of an array needing the same parts: a series' dozens
                # (Looked up once: hashing the parts' slices is most of a lookup.)
                needs = (id(in_part), request.regions or request.needed)
                try:
                    part = parts[needs]
                except KeyError:
                    part = parts[needs] = decoded_in_part(request, in_part)
            header_first = header_first or (part is not None and in_part.header_first)
        if part is None:
            values = 1
            for along, c in zip(sizes, request.coords, strict=True):
                values *= along[c]
            nbytes = values * itemsize
        else:  # only the blocks holding the part needed decoded, its values summed
            nbytes, values = part
        count += 1
        nbytes_total += nbytes
        # (Rate.seconds of one chunk, inlined: a plan lists dozens of chunks.)
        compute += (decoding.per_chunk + nbytes * decoding.per_unit) + (
            summing.per_chunk + values * summing.per_unit
        )
    tally = _Tally()
    tally.add(count, nbytes_total, compute)
    tally.header_first = header_first
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
    # One box, or boxes alike but along one dimension (a season's runs of days): the
    # chunks are a product, the union along that dimension by the others'.
    first = per_box[0] if per_box else []
    differing = [a for a in range(len(first)) if any(c[a] != first[a] for c in per_box)]
    part: tuple[int, int, bool] | None = None
    if per_box and len(differing) <= 1:
        chunks: list[Sequence[int]] = list(first)
        if differing:
            (a,) = differing
            chunks[a] = sorted({c for box_chunks in per_box for c in box_chunks[a]})
        extents = (sum(b.sizes[c] for c in cs) for b, cs in zip(var.bounds, chunks, strict=True))
        count, values = prod(len(cs) for cs in chunks), prod(extents)
        part = _scanned_in_part(var, boxes, chunks, storage)
    else:
        distinct = {coords for chunks in per_box for coords in itertools.product(*chunks)}
        count = len(distinct)
        values = sum(
            prod(b.sizes[c] for b, c in zip(var.bounds, coords, strict=True)) for coords in distinct
        )
    nbytes = values * itemsize
    tally = _Tally()
    if part is not None:
        nbytes, values, tally.header_first = part
    seconds = decode_rate(var.array).seconds(nbytes, count)
    seconds += raw_sum_rate(var, terms, over).seconds(values, count)
    tally.add(count, nbytes, seconds)
    return tally.cost(storage, memory_bytes)


def scan_bound(
    var: VariableInfo,
    boxes: Sequence[Mapping[str, tuple[int, int]]],
    storage: Storage,
    terms: Sequence[str],
    over: Sequence[str],
    memory_bytes: int,
) -> PlanCost:
    """A lower bound of ``scan_cost`` of the same ``boxes`` (which do not overlap: a box,
    its parts either side of a longitude's seam, a season's runs), in a few µs where the
    estimate takes tens: the chunks of the box with the most (all of them, for one box),
    the boxes' values summed and their bytes decoded (a chunk read whole holds more, one
    read in part decodes whole blocks), on every core (``_Tally.bound``). Where it exceeds
    the plan a scan is set against, the scan cannot be chosen: its estimate is not needed."""
    count = values = 0
    for box in boxes:
        chunks = cells = 1
        for dim, bounds in zip(var.dims, var.bounds, strict=True):
            lo, hi = box[dim]
            cells *= hi - lo
            chunks *= len(bounds.chunks_overlapping(lo, hi))
        count, values = max(count, chunks), values + cells
    nbytes = values * var.array.dtype.itemsize
    tally = _Tally()
    if values:
        seconds = decode_rate(var.array).seconds(nbytes, count)
        tally.add(count, nbytes, seconds + raw_sum_rate(var, terms, over).seconds(values, count))
    return tally.bound(storage, memory_bytes, exact_requests=len(boxes) == 1)


@dataclass(frozen=True)
class _ArrayFacts:
    """What the estimate asks of an array's chunks (``plan_cost``): their sizes along each
    dimension, the array's decoding rate, value size and path, and how a part of one of its
    chunks is read from its own store (``_part_reads``)."""

    sizes: tuple[tuple[int, ...], ...]
    decoding: Rate
    itemsize: int
    path: str
    in_part: PartReads | None


def _array_facts(request: ChunkRequest, in_thread: bool) -> _ArrayFacts:
    """``_ArrayFacts`` of the array of ``request``, worked out once per array object (and
    way of reading), not at every question: a statistic's estimate reads several arrays,
    and asking each for all of them (zarr's properties, the memos of each) cost a few µs."""
    array = request.array
    return _FACTS.value(
        array,
        lambda: _ArrayFacts(
            tuple(b.sizes for b in array_bounds(array)),
            decode_rate(array),
            array.dtype.itemsize,
            array.store_path.path,
            None if request.store is not None else _part_reads(request, in_thread),
        ),
        in_thread,
        request.store is None,
        chunk_reader.REMOTE_RANGED_SAVES,  # (a threshold a test may change)
    )


_FACTS: IdentityMemo[_ArrayFacts] = IdentityMemo()


def _part_reads(request: ChunkRequest, in_thread: bool) -> PartReads | None:
    """``chunk_reader.part_reads``, worked out once per array object and way of reading
    (from the array's own store; a sidecar's requests name theirs, asked every plan)."""
    if request.store is not None:
        return part_reads(request, in_thread)
    return _PARTS.value(
        request.array,
        lambda: part_reads(request, in_thread),
        in_thread,
        chunk_reader.REMOTE_RANGED_SAVES,  # (a threshold a test may change)
    )


_PARTS: IdentityMemo[PartReads | None] = IdentityMemo()


# Chunks of a scan looked at one by one at most to see which it reads in part (a long scan
# of small chunks has thousands, each of one Blosc block or a few: read whole). A few µs each.
PART_SCAN_CHUNKS = 256


def _scanned_in_part(
    var: VariableInfo,
    boxes: Sequence[Mapping[str, tuple[int, int]]],
    chunks: Sequence[Sequence[int]],
    storage: Storage,
) -> tuple[int, int, bool] | None:
    """The decoded bytes and values summed of a scan of ``chunks`` (a product, per
    dimension) of a Blosc array read in part as ``chunk_reader.decoded_in_part`` says, each
    chunk the part of it ``boxes`` reach, and whether some chunk is read so from an object
    store (a round trip more); None where every chunk is read whole."""
    if prod(len(cs) for cs in chunks) > PART_SCAN_CHUNKS:
        return None
    ndim = len(var.dims)
    reads = _part_reads(ChunkRequest(var.array, (0,) * ndim), storage.in_thread)
    if reads is None or reads.shape is None or len(reads.shape) != ndim:
        return None
    shape, itemsize, size = reads.shape, reads.itemsize, reads.blocksize
    whole = prod(shape) * itemsize
    # Per dimension (the last first: C order), per chunk: its part's first and last
    # values' byte offsets along it, its part's values and the chunk's, and whether the
    # chunk holds all it declares along it.
    axes: list[list[tuple[int, int, int, int, bool]]] = []
    stride = itemsize
    for axis in range(ndim - 1, -1, -1):
        edges, n = var.bounds[axis].edges, shape[axis]
        spans = [box[var.dims[axis]] for box in boxes]
        terms = []
        for c in chunks[axis]:
            lo_edge, hi_edge = edges[c], edges[c + 1]
            meeting = [(b, e) for b, e in spans if b < hi_edge and e > lo_edge]
            lo = max(min(b for b, _ in meeting), lo_edge) - lo_edge
            hi = min(max(e for _, e in meeting), hi_edge) - lo_edge
            held = hi_edge - lo_edge
            terms.append((lo * stride, (hi - 1) * stride, hi - lo, held, held == n))
        axes.append(terms)
        stride *= n
    saves = chunk_reader.REMOTE_RANGED_SAVES
    nbytes = values = 0
    partly = False
    for chunk in itertools.product(*axes):
        first = last = 0
        part = held = 1
        full = True
        for f, la, p, h, whole_along in chunk:
            first, last, part, held = first + f, last + la, part * p, held * h
            full = full and whole_along
        decoded = min(whole, -(-(last + itemsize) // size) * size) - first // size * size
        if decoded < whole and (
            not reads.header_first or (full and whole - (last + itemsize - first) >= saves)
        ):  # (``chunk_reader._ranged_through_the_loop``)
            nbytes, values, partly = nbytes + decoded, values + part, True
        else:
            nbytes, values = nbytes + held * itemsize, values + held
    return (nbytes, values, reads.header_first) if partly else None


# --------------------------------------------------------------------------------------------
# Calibration: measured once per process


_RATES: dict[Hashable, object] = {}
_RATES_LOCK = threading.RLock()  # a rate may be measured from within another's measure


def _measured[T](key: Hashable, measure: Callable[[], T]) -> T:
    """What ``measure`` gives, measured the first time ``key`` is asked for in the process."""
    rate = _RATES.get(key)
    if rate is None:
        with _RATES_LOCK:
            rate = _RATES.get(key)
            if rate is None:
                rate = _RATES[key] = measure()
    return cast(T, rate)


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


def _sample_shape(chunk: Sequence[int], values: int = SAMPLE_VALUES) -> tuple[int, ...]:
    """A block shaped like a chunk's with about ``values`` values, however small the chunk
    (a rate measured on a few values would measure the calls, not the values): whole
    trailing axes as far as they fit, the leading axis as long as the rest allows."""
    shape, room = [], values
    for a in range(len(chunk) - 1, -1, -1):
        take = max(1, room if a == 0 else min(chunk[a], room))
        shape.append(take)
        room = max(1, room // take)
    return tuple(reversed(shape))


@dataclass(frozen=True)
class Rate:
    """What a chunk costs: ``per_chunk`` seconds, and ``per_unit`` more per byte decoded or
    value summed (a codec's or a NumPy call's fixed cost is worth thousands of values)."""

    per_chunk: float
    per_unit: float

    def seconds(self, units: int, chunks: int = 1) -> float:
        return chunks * self.per_chunk + units * self.per_unit


def decode_rate(array: zarr.Array[Any]) -> Rate:
    """Decoding the array's codec chain, per chunk and per decoded byte, measured once per
    process on a sample it encoded, of one value and of a chunk's shape (chains zarr runs
    only in its event loop, and sharded arrays, are given zarr's default compressor's)."""
    metadata = array.metadata
    # By the metadata's identity: the repr of the codecs costs more than the look-up.
    return _DECODE.value(metadata, lambda: _measured_decode_rate(array))


def _measured_decode_rate(array: zarr.Array[Any]) -> Rate:
    metadata = array.metadata
    # A pipeline iterates over its codecs (zarr's typing does not say so).
    codecs = tuple(cast(Iterable[Any], array.async_array.codec_pipeline))
    dtype = metadata.dtype.to_native_dtype()
    key = ("decode", repr(codecs), str(dtype))
    chunk = _chunk_shape(array_bounds(array))
    return _measured(key, lambda: _decode_rate(codecs, metadata, dtype, chunk))


_DECODE: IdentityMemo[Rate] = IdentityMemo()


def _chunk_shape(bounds: Sequence[ChunkBounds]) -> tuple[int, ...]:
    """The largest chunk's extent along each dimension (regular or rectilinear grids)."""
    return tuple(max(b.sizes, default=1) for b in bounds)


def _decode_rate(
    codecs: tuple[Any, ...], metadata: Any, dtype: np.dtype, chunk: tuple[int, ...]
) -> Rate:
    try:
        transform = ChunkTransform(codecs=codecs)
    except TypeError:  # a codec only zarr's event loop runs: assume a common compressor
        return _default_decode_rate()
    if len(chunk) != metadata.ndim or any(type(c).__name__ == "ShardingCodec" for c in codecs):
        return _default_decode_rate()

    def decode_seconds(shape: tuple[int, ...]) -> float:
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
        return _best_of(lambda: transform.decode_chunk(encoded, spec))

    try:
        return _rate(decode_seconds, _sample_shape(chunk), dtype.itemsize)
    except (ValueError, TypeError):  # a codec bound to its chunks' shape (the ZEP 5
        # generator's accumulation_delta_filter) cannot code a sample of another shape
        return _default_decode_rate()


def _rate(seconds: Callable[[tuple[int, ...]], float], shape: tuple[int, ...], unit: int) -> Rate:
    """A ``Rate`` from what ``seconds`` measures on one value (the fixed cost) and on a
    block of ``shape`` (``unit`` bytes per value; 1 for a rate per value)."""
    per_chunk = seconds(tuple(1 for _ in shape))
    rest = max(0.0, seconds(shape) - per_chunk)
    return Rate(per_chunk, rest / (prod(shape) * unit))


def _default_decode_rate() -> Rate:
    """Zstd's on float32 values (zarr's default compressor), measured as any chain."""
    import numcodecs

    def decode_seconds(shape: tuple[int, ...]) -> float:
        values = _sample(np.dtype("f4"), shape, missing=0.05)
        codec = numcodecs.Zstd()
        encoded = codec.encode(values)
        return _best_of(lambda: codec.decode(encoded))

    return _measured(("decode", "default"), lambda: _rate(decode_seconds, (SAMPLE_VALUES,), 4))


def raw_sum_rate(var: VariableInfo, terms: Sequence[str], over: Sequence[str]) -> Rate:
    """Turning stored values into physical ones (``Decoder.values``) and summing ``terms``
    of them over ``over`` with weights varying along the first dimension averaged over, per
    chunk and per value, measured once per process and kind of query."""
    # By the variable's identity: its key below costs more to make than the look-up.
    return _RAW.value(
        var, lambda: _measured_raw_sum_rate(var, terms, over), tuple(terms), tuple(over)
    )


def _measured_raw_sum_rate(var: VariableInfo, terms: Sequence[str], over: Sequence[str]) -> Rate:
    axes = tuple(var.axis(d) for d in over)
    key = ("raw", var.array.dtype.str, tuple(sorted(var.decoder.attrs)), tuple(terms), axes)

    def reduce_seconds(shape: tuple[int, ...]) -> float:
        # A small sample repeated: making 2**19 values at random would cost more than the
        # measure (the rate does not depend on which values repeat).
        small = _sample(var.array.dtype, (min(prod(shape), SAMPLE_VALUES),), missing=0.05)
        stored = np.resize(small, shape)
        along = min(axes, default=-1)  # weights vary along one dimension averaged over
        weights = np.ones([n if a == along else 1 for a, n in enumerate(shape)])
        values = var.decoder.values
        # (Times of 1: sums against time cost as sums weighted by them.)
        return _best_of(lambda: reduce_terms(values(stored), weights, terms, axes, times=1.0), 3)

    chunk = _chunk_shape(var.bounds)
    shape = _sample_shape(chunk, min(RAW_SAMPLE_VALUES, max(SAMPLE_VALUES, prod(chunk))))
    return _measured(key, lambda: _rate(reduce_seconds, shape, 1))


_RAW: IdentityMemo[Rate] = IdentityMemo()


def entry_sum_rate() -> Rate:
    """Adding accumulation entries (float64) into the answer as ``execute`` does: weighted,
    summed, their magnitude kept; per chunk and per entry, measured once per process."""

    def add_seconds(shape: tuple[int, ...]) -> float:
        entries = _sample(np.dtype("f8"), shape, missing=0.0)
        weights = np.ones((shape[0], 1))
        total = np.zeros(shape[0])

        def add() -> None:
            summed = np.multiply(entries, weights).sum(axis=1)
            np.add(total, summed, out=total)
            np.add(total, np.abs(summed), out=total)

        return _best_of(add)

    return _measured(("entries",), lambda: _rate(add_seconds, (64, SAMPLE_VALUES // 64), 1))
