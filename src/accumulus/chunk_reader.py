"""Reading a set of chunks, of any arrays, in one batch.

A query plan names every chunk it needs before any is read, so all of them are requested at
once: one call into zarr's event loop issues every store request concurrently and, as chunks
arrive, hands those that arrived together to a worker thread, where each is decoded with its
array's own codec pipeline, given to the caller's ``consume``, reduced and dropped. On object
storage the whole plan costs one round trip (up to ``MAX_IN_FLIGHT`` requests at a time, and
as many chunks as the memory allowed hold at once), whatever the number of chunks read.

A store that can be read without zarr's event loop (a local directory or memory, seen
through wrappers that pass synchronous reads through, ``stores.base.reads_synchronously``) is
read in the calling thread instead: a plan of a few chunks then costs no hand-over between
threads at all, and a larger one is split into a few runs of chunks read side by side on a
small thread pool. The service's guard reads a local store this way too (asking its guard
before each read: ``stores.guarded``). Requests that count or delay (object storage, the
benchmarks' counting store) always go through the event loop.

A sharded array's chunks are its inner chunks (``grid.read_grid``): each is read as a byte
range of its shard by zarr's sharding codec (``decode_partial``), after the shard's index,
which is fetched once per shard for all the inner chunks a batch reads from it. A shard cut
by the array's end is the one an append rewrites (with the new steps): a reader that fetched
its index just before the rewrite would read byte ranges of the new object at the old
object's offsets (another chunk's bytes, or a cut in one). So after reading from such a
shard, its index is read again: if it changed, the chunk is read again with the new index
(the values the reader's snapshot covers are the same in the new shard); if it did not, the
bytes read were that index's. One more small request per inner chunk read from a partial
shard, none for the others.

Requests are counted here, at the store: every request made and the bytes it returned.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from itertools import product
from math import prod
from typing import Any, Protocol, cast

import numpy as np
import zarr
from numcodecs.abc import Codec as Numcodec
from numcodecs.compat import ensure_ndarray_like
from zarr import AsyncArray
from zarr.abc.store import (
    ByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
    SupportsGetSync,
)
from zarr.codecs import ShardingCodec
from zarr.core.array_spec import ArrayConfig, ArraySpec
from zarr.core.buffer import Buffer, BufferPrototype, NDBuffer, default_buffer_prototype
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.chunk_utils import ChunkTransform
from zarr.core.metadata import ArrayMetadata, ArrayV2Metadata
from zarr.core.sync import sync

from accumulus.decoded_chunks import DECODED
from accumulus.errors import AccumulusError
from accumulus.grid import ChunkBounds, array_bounds, read_grid, sharding_of
from accumulus.partial_decode import (
    BloscChain,
    blosc_chain,
    decode_part,
    decode_ranges,
    decode_ranges_async,
    decode_verified,
    frame_head,
    held_rows,
    span_and_values,
)
from accumulus.stores.base import reader_of, reads_synchronously
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.safe_reads import FileVersion, VersionMemo

# Store requests in flight at once: enough for a plan of small chunks to go out together
# (846 chunks of 54 KB: 7 sequential round trips with 128 at a time); what they hold is
# bounded by the query's memory (``memory_bytes``).
MAX_IN_FLIGHT = 1024
# Reads of an inner chunk of a partial shard, each followed by a check that the shard's index
# did not change meanwhile: a shard rewritten this many times during one read is an error.
SHARD_READS = 3
# Read in the calling thread: a batch of at most this many decoded bytes, or of chunks
# smaller than ``SIDE_BY_SIDE_CHUNK`` on average; other batches are split into runs read
# side by side, one per worker. Small chunks cost more in Python (the GIL, one thread at a
# time) than in their codecs, so they are read faster in one run; large ones in several
# (docs/benchmarks.md, "Figures behind the code").
IN_THREAD_BYTES = 2 * 2**20
# A part of a chunk is read from an object store by byte ranges when the decoded bytes left
# unread are at least this many: the header read first costs a round trip (20-50 ms to S3),
# in which a whole chunk's few more MB would have arrived anyway.
REMOTE_RANGED_SAVES = 4 * 2**20
SIDE_BY_SIDE_CHUNK = 2**20
# The Blosc block the planner assumes where an array's metadata leaves its size to c-blosc
# (``part_reads``): what c-blosc 1.x chooses for 4-byte values shuffled at level 5 (LZ4,
# BloscLZ), a chunk this size or smaller being one block.
AUTO_BLOCK_BYTES = 2**19
WORKERS = max(2, min(4, os.cpu_count() or 1))
# Runs side by side are read by workers (``READ_POOL``) and the calling thread, unless that
# is the main thread: there numcodecs' Blosc decodes with threads of its own, which competed
# with the workers, so it waits.
READ_POOL = "accumulus-read"
# Chunks fetched through the event loop are decoded and summed by this many tasks at once,
# each in a worker thread, taking the chunks that arrived together (4 and 6 measured alike
# on 2 cores, 2 slower).
CONSUMERS = 4
# Those worker threads are this module's own, never zarr's: a ``consume`` may itself wait on
# zarr I/O (a query's array weights), and zarr's reads of a local store run on its event
# loop's default thread pool. Consumers taking that pool's threads to wait there for reads
# that need one of its threads wedged every one of them (two weighted queries were enough
# on 2 cores: 8 consumers, 6 threads). No read needs this pool, so its size bounds only how
# many batches are consumed at once.
CONSUME_POOL = "accumulus-consume"
# Workers by pool and priority (``_pool``): a service's scans run below its other
# computations (``service.state``), and a pool shared by both read a scan's chunks at the
# light questions' priority (a thread keeps the priority of the one that started it), or
# theirs below it.
_POOL_SIZES = {READ_POOL: WORKERS, CONSUME_POOL: 2 * CONSUMERS}
_POOLS: dict[tuple[str, int], ThreadPoolExecutor] = {}
_POOLS_MADE = threading.Lock()
# A checksummed chunk of a local file (every v2 accumulation chunk: Blosc, then Fletcher-32
# over the whole stored chunk) is verified the first time this process reads each version
# of its file (``FileVersion``: the same inode, size, modification and change times);
# later reads of that version read only the Blosc blocks they need (``_read_parts``).
VERIFIED_FILES = 2**16  # versions remembered at most (a few MB); then forgotten, all at once
_VERIFIED: VersionMemo[tuple[int, int], bool] = VersionMemo(VERIFIED_FILES)
# The Blosc header and block table of each settled version of a local file read in part: a
# chunk read again (the same version) is read by the blocks it needs alone, its header not
# read again. At most ``HEADS_FILES`` of them holding ``HEADS_BYTES`` (a block table holds
# 4 bytes a block); then forgotten, all at once.
HEADS_FILES = 2**16
HEADS_BYTES = 16 * 2**20
_HEADS: VersionMemo[tuple[int, int], bytes] = VersionMemo(HEADS_FILES, HEADS_BYTES)


class Derivation(Protocol):
    """A form derived from a decoded chunk (e.g. its prefix sums along an axis), computed
    once and kept in the decoded chunks' cache in the chunk's place."""

    @property
    def form(self) -> str:
        """Names the form among those of one chunk (letters, digits and dashes): the same
        name, the same values from the same chunk."""
        ...

    @property
    def dtype(self) -> np.dtype: ...

    def shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        """The form's shape, of a chunk of ``shape``."""
        ...

    def __call__(self, values: np.ndarray) -> np.ndarray:
        """The form of the chunk ``values``."""
        ...


@dataclass(frozen=True)
class ChunkRequest:
    """One chunk: ``array`` and its coordinates on the array's ``read_grid`` (inner chunks
    of a sharded array), read from ``store`` when given (e.g. a sidecar's accumulations
    beside the cube's data), else from the store ``read_chunks`` is given or the array's
    own."""

    array: zarr.Array
    coords: tuple[int, ...]
    store: Store | None = None
    # The part of the chunk its consumer looks at (slices of the chunk), when not all of it:
    # only the compressed blocks holding it may be decoded, the rest of the chunk handed
    # over undefined (``partial_decode``).
    needed: tuple[slice, ...] | None = None
    # The parts of it, when several apart (a range's two ends in one raw chunk): read by byte
    # ranges, only the blocks holding each are read (``partial_decode.decode_ranges``).
    regions: tuple[tuple[slice, ...], ...] | None = None
    # Whether the chunk, decoded, may be kept for later reads (``decoded_chunks``): an
    # accumulation's chunk, read again by many questions. Kept, it is decoded whole.
    keep: bool = False
    # A form of the chunk its consumer reads instead of the chunk itself, kept in the
    # chunk's place (``keep``): honoured only where the chunk is kept, so a consumer is
    # handed the derived form with this request, or else the chunk with a request without it.
    derive: Derivation | None = None

    @cached_property
    def spec(self) -> ArraySpec:
        """How the chunk is decoded (``_chunk_spec``): its declared shape, dtype, fill value
        and memory order."""
        return _chunk_spec(self.array.metadata, self.coords)

    @cached_property
    def nbytes(self) -> int:
        """Its declared size decoded."""
        return prod(self.spec.shape) * _facts(self.array).grids.native.itemsize

    @cached_property
    def partly(self) -> bool:
        """Whether its consumer looks at a part of it only (``needed``, not all of it)."""
        return self.needed is not None and not _whole(self.needed, self.spec.shape)

    @cached_property
    def spans(self) -> tuple[tuple[tuple[int, int], ...], int]:
        """The bytes of the chunk (C order, its declared shape) from the first to the last
        element of each part needed (``regions``, else ``needed``; all of it when neither),
        and the values those parts hold: worked out once per chunk for the planner's
        estimate (``decoded_in_part``) and the reader (``_readable_here``,
        ``partial_decode.decode_ranges``)."""
        shape = self.spec.shape
        itemsize = _facts(self.array).grids.native.itemsize
        spans = []
        values = 0
        for region in self.regions or (self.needed or tuple(slice(None) for _ in shape),):
            found = span_and_values(region, shape, itemsize)
            if found is not None:
                spans.append((found[0], found[1]))
                values += found[2]
        return tuple(spans), values

    @cached_property
    def _place(self) -> _ShardPlace | None:
        return _place_in_shard(self.array.metadata, self.coords)

    @cached_property
    def store_key(self) -> str:
        """The key of the object holding the chunk (its shard, for a sharded array)."""
        facts = _facts(self.array)
        if facts.grids.sharding is None:
            return self.key
        place = self._place
        assert place is not None
        return facts.prefix + facts.metadata.encode_chunk_key(place.shard)

    @cached_property
    def key(self) -> str:
        """The chunk's name: its store key, followed by its place in the shard when the
        array is sharded (``temp/c/0/1/2[3,0,1]``)."""
        facts = _facts(self.array)
        if facts.grids.sharding is None:
            return facts.chunk_key(self.coords)
        place = self._place
        assert place is not None
        return f"{self.store_key}[{','.join(map(str, place.inner))}]"


class ChunkRequests:
    """Makes the requests of one batch, working out what chunks of one array share once:
    on a regular grid (every chunk declared the same shape) a chunk's decoding spec and its
    size; per request only its key. What a part needed implies (whether it is all of the
    chunk and its byte spans) depends on the part's slices, the chunk's shape and item size
    alone: worked out once for all batches of the process (``_PART_FACTS``). A season's
    series reads a few arrays' chunks at many places with the same few parts, question
    after question: each request worked them out anew (``spec``, ``partly``, ``spans``;
    docs/benchmarks.md, sessions lean53 and season56). The requests made are
    ``ChunkRequest``'s own, their cached facts set to what they would work out."""

    def __init__(self) -> None:
        # By array object: its facts, and its chunks' spec and size on a regular grid.
        self._arrays: dict[int, tuple[_ArrayFacts, ArraySpec | None, int]] = {}

    def request(
        self,
        array: zarr.Array,
        coords: tuple[int, ...],
        store: Store | None = None,
        needed: tuple[slice, ...] | None = None,
        regions: tuple[tuple[slice, ...], ...] | None = None,
        keep: bool = False,
        derive: Derivation | None = None,
    ) -> ChunkRequest:
        # ``ChunkRequest(...)``'s fields set in one update of its attributes: a frozen
        # dataclass's ``__init__`` sets each by ``object.__setattr__``, several times slower
        # for a request made per chunk (the same request: ``==`` compares the fields).
        request = object.__new__(ChunkRequest)
        request.__dict__.update(
            array=array, coords=coords, store=store, needed=needed, regions=regions, keep=keep,
            derive=derive,
        )  # fmt: skip
        known = self._arrays.get(id(array))
        if known is None:
            facts = _facts(array)
            grids = facts.grids
            spec = None if grids.regular is None else _chunk_spec(facts.metadata, coords)
            known = self._arrays[id(array)] = (
                facts, spec, 0 if spec is None else prod(spec.shape) * grids.native.itemsize
            )  # fmt: skip
        facts, spec, nbytes = known
        if spec is None or not _in_grid(coords, facts.grids.grid_shape):
            return request  # (its facts worked out when asked, as any request's)
        # The values its cached properties would work out (``spec``, ``nbytes``, ...).
        cached = request.__dict__
        cached["spec"] = spec
        cached["nbytes"] = nbytes
        if facts.grids.sharding is None:
            cached["key"] = cached["store_key"] = facts.chunk_key(coords)
        where = (regions, needed, spec.shape, facts.grids.native.itemsize)
        known_part = _PART_FACTS.get(where)
        if known_part is None:  # (the spans of a chunk read whole are not asked)
            known_part = (request.partly, request.spans if request.partly else None)
            if len(_PART_FACTS) >= PARTS_KEPT:
                _PART_FACTS.clear()
            _PART_FACTS[where] = known_part
            return request
        partly, spans = known_part
        cached["partly"] = partly
        if spans is not None:
            cached["spans"] = spans
        return request


# What a part of a chunk implies (``ChunkRequest.partly`` and, when it is, ``spans``), by
# (regions, needed, the chunk's shape, item size): at most ``PARTS_KEPT`` (~1 KB each), then
# forgotten all at once.
PARTS_KEPT = 2**12
PartFacts = tuple[bool, tuple[tuple[tuple[int, int], ...], int] | None]
_PART_FACTS: dict[tuple[object, ...], PartFacts] = {}


def _in_grid(coords: tuple[int, ...], grid_shape: tuple[int, ...]) -> bool:
    if len(coords) != len(grid_shape):
        return False
    for c, n in zip(coords, grid_shape, strict=True):  # (a loop: no generator per chunk)
        if not 0 <= c < n:
            break
    else:
        return True
    return False


@dataclass(frozen=True)
class _ShardPlace:
    """Where an inner chunk lies: its shard, its coordinates among the shard's inner chunks,
    and the slices of the shard it covers."""

    shard: tuple[int, ...]
    inner: tuple[int, ...]
    selection: tuple[slice, ...]


def _place_in_shard(metadata, coords: tuple[int, ...]) -> _ShardPlace | None:
    sharding = _grids(metadata).sharding
    if sharding is None:
        return None
    shards = _stored_grid(metadata).dimensions
    shard, inner, selection = [], [], []
    for c, size, dimension in zip(coords, sharding.chunk_shape, shards, strict=True):
        s = dimension.index_to_chunk(c * size)
        start = c * size - dimension.chunk_offset(s)
        shard.append(s)
        inner.append(start // size)
        selection.append(slice(start, start + size))
    return _ShardPlace(tuple(shard), tuple(inner), tuple(selection))


@dataclass
class ReadCounts:
    """What a batch asked the store for: requests (whole objects or byte ranges) and the
    bytes they returned."""

    requests: int = 0
    bytes: int = 0


class ChunkTooLarge(AccumulusError):
    """A chunk declares more bytes decoded than the query may hold at once."""


class ChunkReadError(Exception):
    """Reading or decoding ``request``'s chunk failed with ``cause`` (``reading``), or
    consuming it did."""

    def __init__(self, request: ChunkRequest, cause: BaseException, reading: bool = True) -> None:
        super().__init__(f"chunk {request.key}: {cause}")
        self.request = request
        self.cause = cause
        self.reading = reading

    @property
    def of_the_data(self) -> bool:
        """Whether the data is at fault: its bytes could not be read or decoded, or what
        consumed them refused them (an ``AccumulusError``). Otherwise the consumer failed:
        a fault of this program, to be raised as it is, not told to the user as theirs."""
        return self.reading or isinstance(self.cause, AccumulusError)


def keeps_decoded() -> bool:
    """Whether this process keeps decoded chunks (``decoded_chunks``): where it does, the
    requests asking for it are kept, with their derived forms (``ChunkRequest.derive``),
    when read from a local file."""
    return DECODED.limit > 0


def read_chunks(
    requests: Iterable[ChunkRequest],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    memory_bytes: int | None = None,
    store: Store | None = None,
) -> ReadCounts:
    """Fetch and decode every requested chunk concurrently and call ``consume(request,
    chunk)`` for each (from worker threads, several at a time: ``consume`` must guard what
    it shares). A chunk that is not stored arrives filled with its array's fill value; the
    chunk of a partial edge has its declared shape, or, past the array's end along the first
    dimension, may stop where the array does (``partial_decode``). Each key is read once,
    even when requested twice. Raises ``ChunkReadError`` naming the first chunk that failed.

    ``memory_bytes`` bounds the chunks held at once (fetched, decoded or being consumed) by
    their decoded size: many small chunks go out together, large ones a few at a time, and
    one that declares more (its shape × its dtype's size) is refused before anything is
    read (``ChunkTooLarge``). ``store``: read every key (``ChunkRequest.key``) through it
    instead of the arrays' own store (a wrapper of it, such as the service's guard)."""
    unique = list({r.key: r for r in requests}.values())
    if memory_bytes is not None:
        _check_sizes(unique, memory_bytes)
    counts = ReadCounts()
    here = _readable_here(unique, store) if unique else None
    if here is not None:
        _read_here(here, consume, counts)
    elif unique:
        sync(_read_all(unique, consume, counts, memory_bytes, store, _pool(CONSUME_POOL)))
    return counts


def _check_sizes(requests: Sequence[ChunkRequest], memory_bytes: int) -> None:
    """Refuse, before any is read, a chunk larger decoded than ``memory_bytes``: a store
    may declare any shape (a reference set's 1 x 40000 x 40000 chunk of ``/dev/zero``)."""
    for request in requests:
        size = request.nbytes
        if size > memory_bytes:
            metadata = request.array.metadata
            shape = " x ".join(map(str, _codec_shape(metadata, request.coords)))
            problem = ChunkTooLarge(
                f"chunk {request.key} holds {size} bytes decoded ({shape} "
                f"{metadata.dtype.to_native_dtype()}), more than the {memory_bytes} bytes the "
                "query may hold in chunks at once; give it more memory (memory_bytes=, "
                "--memory-mb)"
            )
            raise ChunkReadError(request, problem)


def read_region(
    array: zarr.Array, region: Sequence[slice], counts: ReadCounts | None = None
) -> np.ndarray:
    """``array[region]`` (one slice of step 1 per axis) with every chunk it touches read in
    one batch (``read_chunks``) and copied into place: what ``zarr.Array.__getitem__``
    returns, without its per-call selection machinery and event-loop round trip when the
    store is read in this thread. A build reads every raw chunk this way. ``counts``: the
    requests and bytes read are added to it."""
    bounds = array_bounds(array)
    out = np.empty([s.stop - s.start for s in region], dtype=array.dtype)
    if out.size == 0:
        return out
    overlapping = [
        b.chunks_overlapping(s.start, s.stop) for b, s in zip(bounds, region, strict=True)
    ]

    def place(request: ChunkRequest, chunk: np.ndarray) -> None:
        inside, at = overlap(bounds, region, request.coords)
        out[at] = chunk[inside]

    done = read_chunks((ChunkRequest(array, coords) for coords in product(*overlapping)), place)
    if counts is not None:
        counts.requests += done.requests
        counts.bytes += done.bytes
    return out


def overlap(
    bounds: Sequence[ChunkBounds], region: Sequence[slice], coords: tuple[int, ...]
) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
    """Where the chunk at ``coords`` meets ``region`` (slices with starts and stops): that
    part as slices of the chunk, and as slices of the region."""
    inside, at = [], []
    for axis, c in enumerate(coords):
        lo, hi = bounds[axis].edges[c], bounds[axis].edges[c + 1]
        start, stop = max(lo, region[axis].start), min(hi, region[axis].stop)
        inside.append(slice(start - lo, stop - lo))
        at.append(slice(start - region[axis].start, stop - region[axis].start))
    return tuple(inside), tuple(at)


# --------------------------------------------------------------------------------------------
# Without the event loop


# Made by the dozen per query: a plain slotted class (a frozen dataclass sets each field
# through object.__setattr__, several times slower to make); never changed once made.
@dataclass(slots=True)
class _Here:
    """A chunk to read in the calling thread: from ``store`` by ``get_sync``, decoded by
    ``transform`` as ``spec`` says; ``nbytes`` decoded."""

    request: ChunkRequest
    store: SupportsGetSync
    spec: ArraySpec
    transform: ChunkTransform
    nbytes: int
    facts: _ArrayFacts  # its array's
    # Read from an open file in parts (``_read_parts``): only the Blosc blocks holding the
    # part needed, once the file's version is known to pass its checksum.
    ranged: bool = False
    partly: bool = False  # the request needs a part of the chunk, not all of it


def _readable_here(requests: Sequence[ChunkRequest], store: Store | None) -> list[_Here] | None:
    """The requests as chunks to read by ``get_sync`` in the calling thread, when every one
    can be: a stored chunk (not an inner chunk of a shard), every codec synchronous, from a
    store that allows it (``stores.base.reads_synchronously``); None otherwise."""
    here = []
    allowed: dict[int, bool] = {}
    facts_of: dict[int, _ArrayFacts] = {}  # by array object: a plan reads a few arrays' chunks
    for request in requests:
        target = request.store or store or request.array.store_path.store
        can = allowed.get(id(target))
        if can is None:
            can = allowed[id(target)] = reads_synchronously(target)
        facts = facts_of.get(id(request.array))
        if facts is None:
            facts = facts_of[id(request.array)] = _facts(request.array)
        grids = facts.grids
        if not can or grids.transform is None or grids.sharding is not None:
            return None
        spec = request.spec
        # reads_synchronously: a local or memory store, below wrappers that pass get_sync on;
        # read below those that only present metadata (``reader_of``).
        reader = cast(SupportsGetSync, reader_of(target, request.store_key))
        nbytes = request.nbytes
        partly = request.partly
        blosc = grids.blosc
        ranged = blosc is not None and _ranged_here(reader) and (partly or bool(blosc.checks))
        # What it decodes: the parts needed (and the rest of their blocks); of a chunk
        # smaller than ``SIDE_BY_SIDE_CHUNK`` that changes no choice of ``_read_here``.
        if ranged and partly and nbytes >= SIDE_BY_SIDE_CHUNK:
            nbytes = min(nbytes, _span_bytes(request))
        here.append(_Here(request, reader, spec, grids.transform, nbytes, facts, ranged, partly))
    return here


def _ranged_here(reader: object) -> bool:
    """Whether a Blosc chunk read in the calling thread from ``reader`` can be read by byte
    ranges of its file (``_read_parts``): a local directory's."""
    return isinstance(reader, LeanLocalStore)


def _span_bytes(request: ChunkRequest) -> int:
    """The bytes from the first to the last element of each part of the chunk ``request``
    needs, added up."""
    return sum(stop - start for start, stop in request.spans[0])


def _read_here(
    chunks: Sequence[_Here],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    counts: ReadCounts,
) -> None:
    """Read, decode and consume ``chunks`` without the event loop: in the calling thread
    when they are few or small, else in runs side by side. Each run holds one chunk at a
    time, so the chunks held are one per worker, whatever the memory allowed."""
    total = sum(chunk.nbytes for chunk in chunks)
    runs = min(WORKERS, len(chunks), max(1, -(-total // IN_THREAD_BYTES)))
    if total < SIDE_BY_SIDE_CHUNK * len(chunks):
        runs = 1
    if runs == 1:
        _read_run(chunks, consume, counts)
        return
    size = -(-len(chunks) // runs)
    parts = [chunks[i : i + size] for i in range(0, len(chunks), size)]
    tallies = [ReadCounts() for _ in parts]
    # The calling thread reads the first run itself, unless it is the main thread.
    own = 0 if threading.current_thread() is threading.main_thread() else 1
    pool = _pool(READ_POOL)
    futures = [
        pool.submit(_read_run, part, consume, tally)
        for part, tally in zip(parts[own:], tallies[own:], strict=True)
    ]
    failed: BaseException | None = None
    if own:
        try:
            _read_run(parts[0], consume, tallies[0])
        except BaseException as exc:  # the others still finish before it is raised
            failed = exc
    for future in futures:
        try:
            future.result()
        except BaseException as exc:  # the first failure is raised once all have finished
            failed = failed or exc
    for tally in tallies:
        counts.requests += tally.requests
        counts.bytes += tally.bytes
    if failed is not None:
        raise failed


def _pool(name: str) -> ThreadPoolExecutor:
    """The pool ``name`` of workers at the calling thread's priority (its nice value),
    made when first asked. Each worker lowers its own priority to that one when it starts
    (any thread may), whichever thread starts it: the consumers are started by zarr's event
    loop, on behalf of the thread reading."""
    nice = _priority()
    pool = _POOLS.get((name, nice))
    if pool is None:
        with _POOLS_MADE:
            pool = _POOLS.get((name, nice))
            if pool is None:
                pool = _POOLS[name, nice] = ThreadPoolExecutor(
                    _POOL_SIZES[name],
                    thread_name_prefix=name if nice == 0 else f"{name}-nice{nice}",
                    initializer=_lower_priority,
                    initargs=(nice,),
                )
    return pool


def _priority() -> int:
    """This thread's nice value (0 where threads have none of their own)."""
    try:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    except (AttributeError, OSError):
        return 0


def _lower_priority(nice: int) -> None:
    """Run this thread at ``nice`` (a worker's start), if it runs above it."""
    if _priority() < nice:
        with contextlib.suppress(AttributeError, OSError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)


def _read_run(
    chunks: Sequence[_Here],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    counts: ReadCounts,
) -> None:
    keeps = keeps_decoded()
    for chunk in chunks:
        request = chunk.request
        kept = keeps and chunk.ranged and request.keep
        if request.derive is not None and not kept:
            request = replace(request, derive=None)  # handed over as it is stored
        # (No closure per chunk: a warm series' chunks are mostly kept, each read in a few
        # calls.)
        _consumed(request, consume, _read(request, _read_now, chunk, counts, kept))


def _read_now(chunk: _Here, counts: ReadCounts, kept: bool) -> np.ndarray:
    """One chunk fetched by ``get_sync`` and decoded by its array's codecs (``kept``: kept
    decoded, and its derived form when its request asks for one)."""
    spec = chunk.spec
    if chunk.ranged:
        store = cast(LeanLocalStore, chunk.store)
        missed = None
        if kept:  # one ``stat`` tells its version: no open, read or close when it is kept
            missed = store.version_sync(chunk.request.store_key)
            found = None if missed is None else _kept_form(chunk, missed)
            if found is not None:
                return found
        read = partial(_read_parts, chunk, counts, kept, missed)
        ranged = store.read_parts_sync(chunk.request.store_key, read)
        if ranged is None:  # no object: one request, as ``get_sync`` answering None
            counts.requests += 1
            derive = chunk.request.derive if kept else None
            return _filled(spec) if derive is None else derive(_filled(spec))
        return ranged
    buffer = chunk.store.get_sync(chunk.request.store_key, prototype=spec.prototype)
    counts.requests += 1
    if buffer is None:
        return _filled(spec)
    counts.bytes += len(buffer)
    return _decode(chunk.request, chunk.transform, buffer, spec)


def _kept_form(chunk: _Here, version: FileVersion) -> np.ndarray | None:
    """The chunk decoded from ``version`` of its file, or its request's derived form
    (``ChunkRequest.derive``), if kept (``decoded_chunks``)."""
    request = chunk.request
    shapes, dtype, form = chunk.facts.kept_as(request.coords, chunk.spec.shape, request.derive)
    return DECODED.get(version, shapes, dtype, form)


def _read_parts(
    chunk: _Here,
    counts: ReadCounts,
    keep: bool,
    missed: FileVersion | None,
    read: Callable[[int, int], bytes],
    version: FileVersion,
) -> np.ndarray:
    """A chunk of a local file (opened once: ``version``) decoded from the byte ranges
    ``partial_decode.decode_ranges`` reads of it (a header, then the blocks holding the
    part needed), or read whole and decoded when its frame cannot be cut (one more read).
    Behind a checksum over the whole stored chunk, it is read whole and verified the first
    time this version of its file is read (once settled: ``VersionMemo``), in parts afterwards.
    ``keep``: decoded whole and kept (``decoded_chunks``), or its request's derived form
    (``ChunkRequest.derive``) made of it and kept instead; ``missed``: a version just
    looked for among those kept and not found (not looked for again)."""

    def counted(start: int, stop: int) -> bytes:
        data = read(start, stop)
        counts.requests += 1
        counts.bytes += len(data)
        return data

    request, spec = chunk.request, chunk.spec
    grids = _grids(request.array.metadata)
    blosc = grids.blosc
    assert blosc is not None  # (``_Here.ranged``)
    derive = request.derive if keep else None
    if keep:
        kept = None if version == missed else _kept_form(chunk, version)
        if kept is not None:
            return kept
        # Decoded whole, to serve the other parts later questions need.
        request = replace(request, needed=None, regions=None)
    checked = bool(blosc.checks)
    file = version.device, version.inode
    verified = checked and _VERIFIED.get(file, version) is not None
    seen = None
    if chunk.partly and not keep and (verified or not checked):
        head = _HEADS.get(file, version)
        seen = None if head is not None else partial(_keep_head, file, version)
        spans = request.spans[0]
        part = decode_ranges(blosc, spec, spans, counted, version.size, verified, head, seen)
        if part is not None:
            return part
    stored = counted(0, version.size)
    if seen is not None and (head := frame_head(stored)) is not None:
        # Read whole (a small chunk whose header was not known): its next reads in part
        # read only the blocks they need.
        seen(head)
    buffer = spec.prototype.buffer.from_bytes(stored)
    values = _decode(request, chunk.transform, buffer, spec, verified)
    if checked and not verified:
        _VERIFIED.put(file, version, True)  # decoded: its checksum passed
    if derive is not None:
        derived = derive(values)
        DECODED.put(version, derived, time.time_ns(), derive.form)
        return derived
    if keep:
        DECODED.put(version, values, time.time_ns())
    return values


def _keep_head(file: tuple[int, int], version: FileVersion, head: bytes) -> None:
    """Remember ``head``, the Blosc header and block table of ``version`` of a file (once:
    a chunk whose part could not be decoded from its blocks is read whole after it)."""
    if _HEADS.get(file, version) is None:
        _HEADS.put(file, version, head, len(head))


# --------------------------------------------------------------------------------------------
# Through zarr's event loop


class _Held:
    """Bytes held by chunks in flight, at most ``limit``."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.used = 0
        self.ready = asyncio.Condition()

    async def take(self, nbytes: int) -> None:
        limit = self.limit
        if limit is None:
            return
        async with self.ready:
            await self.ready.wait_for(lambda: self.used == 0 or self.used + nbytes <= limit)
            self.used += nbytes

    async def give_back(self, nbytes: int) -> None:
        if self.limit is None:
            return
        async with self.ready:
            self.used -= nbytes
            self.ready.notify_all()


async def _read_all(
    requests: Sequence[ChunkRequest],
    consume: Callable[[ChunkRequest, np.ndarray], None],
    counts: ReadCounts,
    memory_bytes: int | None,
    store: Store | None,
    consumers_pool: ThreadPoolExecutor,
) -> None:
    """Fetch every chunk concurrently; decode and consume them in worker threads (of
    ``consumers_pool``) as they arrive, those that arrived together in one hand-over (up to
    ``IN_THREAD_BYTES`` decoded): a plan of many small chunks then costs a few hand-overs,
    not two per chunk."""
    limit = asyncio.Semaphore(MAX_IN_FLIGHT)
    held = _Held(memory_bytes)
    fetcher = _Fetcher(store, counts)
    arrived: asyncio.Queue[tuple[ChunkRequest, _Fetched, int] | None] = asyncio.Queue()
    consumers = min(CONSUMERS, len(requests))
    left = [len(requests)]

    async def fetch(request: ChunkRequest) -> None:
        # Its stored bytes until it is decoded (no more than its decoded size, for a codec
        # that compresses), then its values until they are summed.
        cost = request.nbytes
        await held.take(cost)
        try:
            async with limit:
                fetched = await _fetch(request, fetcher)
        except Exception as exc:  # the store's errors (OSError; fsspec's, aiohttp's, botocore's)
            await held.give_back(cost)
            if isinstance(exc, ChunkReadError):
                raise
            raise ChunkReadError(request, exc) from exc
        arrived.put_nowait((request, fetched, cost))
        left[0] -= 1
        if left[0] == 0:  # every chunk fetched: the consumers stop once they are consumed
            for _ in range(consumers):
                arrived.put_nowait(None)

    async def consumer() -> None:
        while (first := await arrived.get()) is not None:
            batch, nbytes = [first], first[2]
            while not arrived.empty() and nbytes < IN_THREAD_BYTES:
                item = arrived.get_nowait()
                if item is None:  # the end: for this consumer or another
                    arrived.put_nowait(None)
                    break
                batch.append(item)
                nbytes += item[2]
            try:
                await _in_pool(consumers_pool, _consume_all, batch, consume)
            finally:
                await held.give_back(sum(cost for _, _, cost in batch))

    tasks = [asyncio.ensure_future(fetch(r)) for r in requests]
    tasks += [asyncio.ensure_future(consumer()) for _ in range(consumers)]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


async def _in_pool(pool: ThreadPoolExecutor, function: Callable[..., None], *args: object) -> None:
    """``function(*args)`` on a thread of ``pool``. Cancelled, it still waits for the thread
    to finish (a thread cannot be stopped): a batch whose reading failed or was stopped
    returns only once none of its chunks is being consumed any more."""
    running = asyncio.get_running_loop().run_in_executor(pool, function, *args)
    try:
        await asyncio.shield(running)
    except asyncio.CancelledError:
        await asyncio.wait([running])
        running.exception()  # its failure, if any, is not what is raised: the cancellation is
        raise


def _consume_all(
    batch: Sequence[tuple[ChunkRequest, _Fetched, int]],
    consume: Callable[[ChunkRequest, np.ndarray], None],
) -> None:
    """Decode (when zarr can decode a chunk without its event loop) and consume each fetched
    chunk of ``batch``, in this worker thread."""
    for request, fetched, _ in batch:
        if request.derive is not None:  # (never kept here: handed over as it is stored)
            request = replace(request, derive=None)
        _consumed(request, consume, _read(request, fetched.decoded))


def _read(request: ChunkRequest, read: Callable[..., np.ndarray], *args: Any) -> np.ndarray:
    """``read(*args)``, the chunk of ``request``: whatever fails is raised as a
    ``ChunkReadError`` naming the chunk."""
    try:
        return read(*args)
    except ChunkReadError:
        raise
    except Exception as exc:  # the store's and the codecs' errors (OSError, numcodecs', zarr's)
        raise ChunkReadError(request, exc) from exc


def _consumed(
    request: ChunkRequest, consume: Callable[[ChunkRequest, np.ndarray], None], values: np.ndarray
) -> None:
    """``consume(request, values)``, a failure raised as a ``ChunkReadError`` of consuming
    the chunk."""
    try:
        consume(request, values)
    except ChunkReadError:
        raise
    except Exception as exc:  # named with its chunk; ``of_the_data`` tells whose fault
        raise ChunkReadError(request, exc, reading=False) from exc


class _Fetcher:
    """Every store request of one batch, counted. A shard's index (a suffix of the shard, or
    its first bytes) is fetched once and shared by all the inner chunks read from it."""

    def __init__(self, store: Store | None, counts: ReadCounts) -> None:
        self.store = store
        self.counts = counts
        self._indexes: dict[tuple[str, ByteRequest], asyncio.Task] = {}

    async def get(
        self,
        request: ChunkRequest,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        key = request.store_key
        sharding = sharding_of(request.array.metadata)
        if sharding is not None and _is_index_range(byte_range, sharding.index_location):
            assert byte_range is not None
            task = self._indexes.get((key, byte_range))
            if task is None:
                task = asyncio.ensure_future(self._get(request, key, prototype, byte_range))
                self._indexes[key, byte_range] = task
            return await asyncio.shield(task)
        return await self._get(request, key, prototype, byte_range)

    async def get_range(
        self, request: ChunkRequest, prototype: BufferPrototype, start: int, stop: int
    ) -> bytes:
        """Bytes ``[start, stop)`` of the object holding ``request``'s chunk (fewer past
        its end, none when it is not stored)."""
        key = request.store_key
        buffer = await self._get(request, key, prototype, RangeByteRequest(start, stop))
        return b"" if buffer is None else buffer.to_bytes()

    async def read_index_again(
        self, request: ChunkRequest, prototype: BufferPrototype, byte_range: ByteRequest
    ) -> Buffer | None:
        """A shard's index read again, not the one shared; later reads of that shard in
        this batch share the new one."""
        key = request.store_key
        task = asyncio.ensure_future(self._get(request, key, prototype, byte_range))
        self._indexes[key, byte_range] = task
        return await asyncio.shield(task)

    async def _get(
        self,
        request: ChunkRequest,
        key: str,
        prototype: BufferPrototype,
        byte_range: ByteRequest | None,
    ) -> Buffer | None:
        store = request.store or self.store or request.array.store_path.store
        buffer = await store.get(key, prototype, byte_range)
        self.counts.requests += 1  # one event loop: no lock needed
        self.counts.bytes += len(buffer) if buffer is not None else 0
        return buffer


def _is_index_range(byte_range: ByteRequest | None, index_location: str) -> bool:
    """The sharding codec asks for a shard's index as its last bytes (a suffix) or, with
    ``index_location="start"``, its first ones (the inner chunks come after it then)."""
    if index_location == "start":
        return isinstance(byte_range, RangeByteRequest) and byte_range.start == 0
    return isinstance(byte_range, SuffixByteRequest)


@dataclass
class _ShardBytes:
    """The bytes of one shard, as zarr's sharding codec reads them (a ByteGetter); keeps
    the index it was given."""

    fetcher: _Fetcher
    request: ChunkRequest
    sharding: ShardingCodec
    index: tuple[ByteRequest, BufferPrototype, Buffer | None] | None = None

    async def get(
        self, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self.fetcher.get(self.request, prototype, byte_range)
        if byte_range is not None and _is_index_range(byte_range, self.sharding.index_location):
            self.index = (byte_range, prototype, value)
        return value

    async def index_unchanged(self) -> bool:
        """Whether the shard's index, read again now, is the one the chunk was read with."""
        if self.index is None:
            return True
        byte_range, prototype, used = self.index
        fresh = await self.fetcher.read_index_again(self.request, prototype, byte_range)
        if fresh is None or used is None:
            return fresh is None and used is None
        return fresh.to_bytes() == used.to_bytes()


class ShardRewrittenError(Exception):
    """A shard's index changed after every one of ``SHARD_READS`` reads of one of its chunks."""


async def _read_inner(
    request: ChunkRequest,
    fetcher: _Fetcher,
    sharding: ShardingCodec,
    selection: tuple[slice, ...],
    shard_spec: ArraySpec,
    partial: bool,
) -> NDBuffer | None:
    """An inner chunk decoded (None: no shard stored). ``partial``: the shard is cut by the
    array's end, so an append may rewrite it while it is read (see the module's notes)."""
    for _ in range(SHARD_READS if partial else 1):
        shard = _ShardBytes(fetcher, request, sharding)
        try:
            (decoded,) = await sharding.decode_partial([(shard, selection, shard_spec)])
        except Exception:  # the store's or codecs' errors, maybe from an index rewritten since
            if partial and not await shard.index_unchanged():
                continue  # read with an index the shard no longer has
            raise
        if not partial or await shard.index_unchanged():
            return decoded
    raise ShardRewrittenError(
        f"its shard {request.store_key} was rewritten during each of {SHARD_READS} reads"
    )


class _Fetched:
    """A fetched chunk, decoded once: its stored bytes are dropped as it is."""

    def __init__(self, decode: Callable[[], np.ndarray]) -> None:
        self._decode: Callable[[], np.ndarray] | None = decode

    def decoded(self) -> np.ndarray:
        decode, self._decode = self._decode, None
        assert decode is not None, "a fetched chunk is decoded once"
        return decode()


async def _fetch(request: ChunkRequest, fetcher: _Fetcher) -> _Fetched:
    """Fetch a chunk, to be decoded when asked: the codecs run synchronously then (zarr's
    ``ChunkTransform``, for codecs that can), else it is decoded already."""
    array = request.array.async_array
    transform = _grids(array.metadata, array).transform
    if transform is None or _place_in_shard(array.metadata, request.coords) is not None:
        chunk = await _fetch_decode(request, fetcher)
        return _Fetched(lambda: chunk)
    spec = _chunk_spec(array.metadata, request.coords)
    blosc = _grids(array.metadata).blosc
    if blosc is not None and _ranged_through_the_loop(request, blosc, spec):
        read = partial(fetcher.get_range, request, spec.prototype)
        decode = await decode_ranges_async(blosc, spec, request.spans[0], read)
        if decode is not None:
            return _Fetched(decode)
    buffer = await fetcher.get(request, spec.prototype)
    if buffer is None:
        return _Fetched(lambda: _filled(spec))
    return _Fetched(lambda: _decode(request, transform, buffer, spec))


def _ranged_through_the_loop(request: ChunkRequest, blosc: BloscChain, spec: ArraySpec) -> bool:
    """Whether to read only the Blosc blocks holding the part of a chunk ``request`` needs
    by byte ranges of an object store (``decode_ranges_async``): a header first, then the
    blocks, so one round trip more than the whole chunk, worth it only where the bytes
    left unread are many (``REMOTE_RANGED_SAVES``). Not behind a checksum (verified over
    the whole stored chunk), and only for a chunk that holds all it declares: the partial
    last chunk of a growing array is the one an append replaces (``ingest.append``), and
    two reads of it could meet two versions of the object."""
    if blosc.checks or not request.partly:
        return False
    bounds = array_bounds(request.array)
    for b, c, n in zip(bounds, request.coords, spec.shape, strict=True):
        if int(b.edges[c + 1] - b.edges[c]) != n:
            return False
    itemsize = spec.dtype.to_native_dtype().itemsize
    unread = prod(spec.shape) * itemsize - _span_bytes(request)
    return unread >= REMOTE_RANGED_SAVES


# --------------------------------------------------------------------------------------------
# What a read in part costs (the planner's estimate: ``accumulation.query.cost``)


@dataclass(frozen=True, slots=True)
class PartReads:
    """How ``read_chunks`` reads a chunk of an array when a request needs only part of it
    (``part_reads``): by byte ranges of the Blosc blocks holding that part (``blocksize``
    decoded bytes each: the metadata's, else ``AUTO_BLOCK_BYTES``), from a local file in
    the calling thread or, through zarr's event loop, from an object store, the frame's
    header first: one round trip more (``header_first``)."""

    blosc: BloscChain
    blocksize: int
    header_first: bool
    shape: tuple[int, ...] | None  # every chunk's declared shape (a regular grid), else None
    itemsize: int


def part_reads(
    request: ChunkRequest, in_thread: bool, store: Store | None = None
) -> PartReads | None:
    """How the chunks of ``request``'s array are read in part (alike for every chunk of
    it: asked once per array), read in the calling thread (``in_thread``:
    ``stores.base.reads_synchronously``) or not, from ``store`` (else the array's own):
    None where they are read whole and decoded."""
    array = request.array.async_array
    grids = _grids(array.metadata, array)
    blosc = grids.blosc
    if blosc is None or grids.transform is None or grids.sharding is not None:
        return None
    if in_thread:
        target = request.store or store or request.array.store_path.store
        if not _ranged_here(reader_of(target, request.store_key)):
            return None
    elif blosc.checks:  # (``_ranged_through_the_loop``)
        return None
    itemsize = grids.native.itemsize
    # c-blosc makes a frame's blocks the requested size times the type size (numcodecs'
    # Blosc(blocksize=16384) on float32: blocks of 65536 bytes), which is why
    # ``ingest.layout.step_blocksize`` gives a step's values, not its bytes.
    blocksize = int(getattr(blosc.blosc, "blocksize", 0) or 0) * itemsize or AUTO_BLOCK_BYTES
    if grids.regular is not None:  # chunks of one block, or too small to leave enough out
        whole = prod(grids.regular) * itemsize
        if whole <= blocksize or (not in_thread and whole < REMOTE_RANGED_SAVES):
            return None
    return PartReads(blosc, blocksize, not in_thread, grids.regular, itemsize)


def decoded_in_part(request: ChunkRequest, reads: PartReads) -> tuple[int, int] | None:
    """The bytes decoded and the values in the parts needed when ``request``'s chunk is read
    as ``reads`` says: the span of each part (``ChunkRequest.regions``, else ``needed``),
    rounded out to whole Blosc blocks; None where the chunk is read whole (those blocks are
    all of it, or from an object store too little is left unread to pay for the header's
    round trip: ``_ranged_through_the_loop``)."""
    if request.needed is None:
        return None
    if reads.header_first and not _ranged_through_the_loop(request, reads.blosc, request.spec):
        return None
    whole = prod(request.spec.shape) * reads.itemsize
    size = reads.blocksize
    spans, values = request.spans
    # Each part's bytes rounded out to whole blocks.
    runs = [(first // size * size, min(whole, -(-stop // size) * size)) for first, stop in spans]
    decoded = end = 0
    for start, stop in sorted(runs):  # blocks two parts share are decoded once
        decoded += max(0, stop - max(start, end))
        end = max(end, stop)
    return None if decoded >= whole else (decoded, values)


def _decode(
    request: ChunkRequest,
    transform: ChunkTransform,
    buffer: Buffer,
    spec: ArraySpec,
    verified: bool = False,
) -> np.ndarray:
    """A stored chunk decoded by its array's codecs; where its codecs allow
    (``partial_decode``), only the part of it ``request.needed`` names, or a chunk past the
    array's end along the first dimension only as far as the array holds (so it may be
    shorter than declared there). ``verified``: its bytes passed its checksum already."""
    grids = _grids(request.array.metadata)
    if grids.blosc is not None:
        # (All of it, a map's time step: nothing to leave out, no frame to look at.)
        needed = request.needed if request.partly else None
        part = decode_part(
            grids.blosc, request.array, request.coords, buffer, spec, needed, verified
        )
        if part is not None:
            return part
        if verified:
            return decode_verified(grids.blosc, spec, buffer)
    if grids.v2_codecs is not None:
        data = buffer.as_numpy_array()
        for codec in grids.v2_codecs:
            data = codec.decode(data)
        values = ensure_ndarray_like(data).view(grids.native)
        return values.reshape(spec.shape, order=spec.order)
    return transform.decode_chunk(buffer, spec).as_numpy_array().reshape(spec.shape)


def _whole(region: tuple[slice, ...], shape: tuple[int, ...]) -> bool:
    """Whether ``region`` (slices of a chunk of ``shape``) is all of it."""
    # (A list, made inline, not a generator: a few dimensions, asked of every chunk.)
    return len(region) == len(shape) and all(
        [s.indices(n) == (0, n, 1) for s, n in zip(region, shape, strict=True)]
    )


async def _fetch_decode(request: ChunkRequest, fetcher: _Fetcher) -> np.ndarray:
    array = request.array.async_array
    spec = _chunk_spec(array.metadata, request.coords)
    place = _place_in_shard(array.metadata, request.coords)
    if place is None:
        buffer = await fetcher.get(request, spec.prototype)
        if buffer is None:
            return _filled(spec)
        (decoded,) = await array.codec_pipeline.decode([(buffer, spec)])
    else:
        shard = _stored_grid(array.metadata)[place.shard]
        assert shard is not None
        shard_spec = replace(spec, shape=shard.codec_shape)
        sharding = sharding_of(array.metadata)
        assert sharding is not None
        decoded = await _read_inner(
            request, fetcher, sharding, place.selection, shard_spec, shard.is_boundary
        )
        if decoded is None:  # no shard stored
            return _filled(spec)
    assert decoded is not None
    return decoded.as_numpy_array().reshape(spec.shape)


def _filled(spec: ArraySpec) -> np.ndarray:
    fill = spec.fill_value if spec.fill_value is not None else spec.dtype.default_scalar()
    return np.full(spec.shape, fill, dtype=spec.dtype.to_native_dtype())


def _codec_shape(metadata: ArrayMetadata, coords: tuple[int, ...]) -> tuple[int, ...]:
    """The declared shape of the chunk at ``coords`` (the same for every chunk of a regular
    grid); an ``IndexError`` outside the grid."""
    grids = _grids(metadata)
    if grids.regular is not None:
        if len(coords) == len(grids.regular):
            for c, n in zip(coords, grids.grid_shape, strict=True):  # (a loop: no generator)
                if not 0 <= c < n:
                    break
            else:
                return grids.regular
    else:
        chunk = grids.read[coords]
        if chunk is not None:
            return chunk.codec_shape
    raise IndexError(f"chunk {coords} is outside the grid {grids.read.grid_shape}")


def _chunk_spec(metadata: ArrayMetadata, coords: tuple[int, ...]) -> ArraySpec:
    """How zarr decodes the chunk at ``coords``: its declared shape, dtype, fill value and
    memory order (made once per shape of each array's chunks)."""
    shape = _codec_shape(metadata, coords)
    specs = _grids(metadata).specs
    spec = specs.get(shape)
    if spec is None:
        order = metadata.order if metadata.zarr_format == 2 else "C"
        spec = specs[shape] = ArraySpec(
            shape=shape,
            dtype=metadata.dtype,
            fill_value=metadata.fill_value,
            config=ArrayConfig.from_dict({"order": order}),
            prototype=default_buffer_prototype(),
        )
    return spec


@dataclass(frozen=True)
class _Grids:
    metadata: ArrayMetadata
    read: ChunkGrid  # the chunks read one at a time (``grid.read_grid``)
    stored: ChunkGrid  # the objects stored (shards of a sharded array)
    # The shape of every chunk read when the read grid is regular (None otherwise).
    regular: tuple[int, ...] | None = None
    grid_shape: tuple[int, ...] = ()  # the read grid's chunks along each axis (zarr: computed)
    # The array's codecs as one synchronous chain, when every codec can run without zarr's
    # event loop (None otherwise); ``known``: whether that was looked at (an array given).
    transform: ChunkTransform | None = None
    known: bool = False
    specs: dict[tuple[int, ...], ArraySpec] = field(default_factory=dict)  # by chunk shape
    sharding: ShardingCodec | None = None  # ``grid.sharding_of``
    blosc: BloscChain | None = None  # codecs that can decode part of a chunk
    # A Zarr v2 array's numcodecs codecs in decoding order, when its values are the bytes
    # they give, viewed as its dtype: what zarr's ``V2Codec`` does, without its per-chunk
    # look-ups of zarr's configuration (``_v2_codecs``).
    v2_codecs: tuple[Numcodec, ...] | None = None
    native: np.dtype = field(default_factory=lambda: np.dtype("u1"))  # its NumPy dtype


# By the metadata object's identity: hashing zarr's metadata serializes it, which costs more
# than reading a small chunk. Each entry keeps its metadata alive, so no id is reused.
_GRIDS: dict[int, _Grids] = {}


def _grids(metadata: ArrayMetadata, array: AsyncArray | None = None) -> _Grids:
    found = _GRIDS.get(id(metadata))
    if found is None or found.metadata is not metadata:
        if len(_GRIDS) >= 256:
            _GRIDS.clear()
        read = read_grid(metadata)
        regular = tuple(read.chunk_shape) if read.is_regular else None
        found = _Grids(
            metadata,
            read,
            ChunkGrid.from_metadata(metadata),
            regular,
            tuple(read.grid_shape),
            sharding=sharding_of(metadata),
            blosc=blosc_chain(metadata),
            v2_codecs=_v2_codecs(metadata),
            native=metadata.dtype.to_native_dtype(),
        )
        _GRIDS[id(metadata)] = found
    if array is not None and not found.known:
        found = replace(found, transform=_sync_transform(array), known=True)
        _GRIDS[id(metadata)] = found
    return found


@dataclass(slots=True)
class _ArrayFacts:
    """What every chunk of one array object shares, worked out once per array object (an
    open datacube's arrays are read by every question of its snapshot): its grids and
    codecs (``_grids``, with its synchronous chain) and where its chunks' keys begin."""

    array: zarr.Array
    metadata: ArrayMetadata
    grids: _Grids
    prefix: str  # the array's path and "/", or "" at the store's root
    # ``kept_as``'s answers, by the chunk's place along the first dimension, its declared
    # shape and the form's name and dtype: a few per array and form.
    _kept: dict[tuple[object, ...], KeptAs] = field(default_factory=dict)
    # ``chunk_key``'s answers (the chunks a service's questions read, again and again).
    _keys: dict[tuple[int, ...], str] = field(default_factory=dict)

    def chunk_key(self, coords: tuple[int, ...]) -> str:
        """The store key of the stored chunk at ``coords`` (an array that is not sharded)."""
        key = self._keys.get(coords)
        if key is None:
            key = self.prefix + self.metadata.encode_chunk_key(coords)
            if len(self._keys) >= CHUNK_KEYS:
                self._keys.clear()
            self._keys[coords] = key
        return key

    def kept_as(
        self, coords: tuple[int, ...], shape: tuple[int, ...], derive: Derivation | None
    ) -> KeptAs:
        """How the chunk at ``coords`` (declared ``shape``) is kept decoded, or its form
        ``derive``: the shapes a decode of it in this snapshot gives (whole, or past the
        array's end along its first dimension as far as the array holds), their dtype and
        the form's name. The same for every chunk of a regular grid but the last along the
        first dimension: worked out once per array, not per kept chunk read."""
        # On a regular grid only the last chunk along the first dimension may hold fewer
        # rows than declared: the others are one place.
        grids = self.grids
        place = coords[0] if coords else None
        if grids.regular is not None and coords and coords[0] < grids.grid_shape[0] - 1:
            place = -1
        key = (place, shape) if derive is None else (place, shape, derive.form, derive.dtype)
        found = self._kept.get(key)
        if found is None:
            held = held_rows(self.array, coords, shape)
            shapes: tuple[tuple[int, ...], ...] = (shape,)
            if held is not None:
                shapes = ((held, *shape[1:]), shape)
            if derive is None:
                found = (shapes, self.grids.native, "")
            else:
                found = (tuple(derive.shape(s) for s in shapes), derive.dtype, derive.form)
            if len(self._kept) >= KEPT_AS:
                self._kept.clear()
            self._kept[key] = found
        return found


# How a chunk is kept (``_ArrayFacts.kept_as``): the shapes it may have, its dtype and form.
KeptAs = tuple[tuple[tuple[int, ...], ...], np.dtype, str]
# ``kept_as``'s answers remembered per array at most; then forgotten, all at once.
KEPT_AS = 256
# Chunk keys remembered per array at most (``chunk_key``; about 100 bytes each); then
# forgotten, all at once.
CHUNK_KEYS = 4096


# By the array object's identity, each entry keeping its array alive (no id reused), and
# checked against the array's metadata (replaced when the array is resized).
_FACTS: dict[int, _ArrayFacts] = {}


def _facts(array: zarr.Array) -> _ArrayFacts:
    found = _FACTS.get(id(array))
    metadata = array.metadata
    if found is None or found.array is not array or found.metadata is not metadata:
        if len(_FACTS) >= 256:
            _FACTS.clear()
        path = array.store_path.path
        grids = _grids(metadata, array.async_array)
        found = _ArrayFacts(array, metadata, grids, f"{path}/" if path else "")
        _FACTS[id(array)] = found
    return found


def _v2_codecs(metadata: ArrayMetadata) -> tuple[Numcodec, ...] | None:
    """A v2 array's compressor and filters in decoding order, for values of a fixed-size
    dtype; None otherwise, and for the pickle codec, which zarr refuses unless told it may
    run (its refusal is kept: such chunks go through zarr's codecs)."""
    if not isinstance(metadata, ArrayV2Metadata) or metadata.dtype.to_native_dtype().hasobject:
        return None
    codecs = (
        *([metadata.compressor] if metadata.compressor else []),
        *reversed(metadata.filters or ()),
    )
    if any(codec.codec_id == "pickle" for codec in codecs):
        return None
    return codecs


def _sync_transform(array: AsyncArray) -> ChunkTransform | None:
    try:
        # zarr's pipelines iterate their codecs; CodecPipeline does not declare it.
        return ChunkTransform(codecs=tuple(array.codec_pipeline))  # type: ignore[arg-type]
    except TypeError:  # a codec that runs only in zarr's event loop
        return None


def _read_grid(metadata: ArrayMetadata) -> ChunkGrid:
    return _grids(metadata).read


def _stored_grid(metadata: ArrayMetadata) -> ChunkGrid:
    return _grids(metadata).stored
