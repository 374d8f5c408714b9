"""Decode only the part of a chunk its reader needs, from the Blosc blocks that hold it.

A Blosc frame is a header, a table of block offsets and independently compressed blocks.
Two cases decode fewer blocks than the chunk has:

- a chunk that extends past the array's end along its first dimension (a cube's time chunks
  are sized for growth: 31 six-hourly steps held in a 405-step chunk, whose whole decode cost
  every query 13 times the bytes it uses, issue 34 item 9): the held steps are a prefix of a
  C-ordered chunk's elements, and the chunk comes back cut to them;
- a reader that names the part of the chunk it will look at (``needed``: a query's slab of
  an accumulation chunk, a few time steps of two latitude rows, or a raw box's corner of a
  chunk): the chunk comes back whole-shaped with only the elements from the first to the last
  of that part decoded, the rest left undefined.

The blocks covering the bytes wanted are cut out into a frame of their own (the header's
sizes and the block table rewritten; every block kept whole, so each decodes as it would in
the full frame), decoded by numcodecs' Blosc, and viewed through the array's remaining codec
(zarr's ``bytes`` codec, or zarr v2's dtype view). A checksum filter after Blosc (the
``fletcher32`` every v2 accumulation chunk carries: ``chunk_check``) is verified over the
whole stored chunk first, as the full decode does, unless the reader knows these bytes
passed it already (``verified``). numcodecs removed ``Blosc.decode_partial`` (0.16), so the
frame is cut here. Any other codec chain, layout or frame is left to the full decode
(``None``).

A chunk of a local file can also be read in part (``decode_ranges``): its header and block
table first, then only the compressed bytes of the blocks holding each part needed (a
range's two ends in one raw chunk: two runs of blocks), all from one open file, so the
parts read belong to one version of the chunk. Behind a checksum filter only once that
version of the file passed it (``chunk_reader`` remembers which did): a checksum over the
whole stored chunk cannot be verified from a part of it. Chunks stored by ``append``
(Blosc alone) carry none, and a part read this way is checked only as Blosc checks it (its
header, table and block sizes). From an object store (``decode_ranges_async``) the same
steps run over byte-range requests, the blocks of every part fetched at once after the
header; ``chunk_reader`` asks for it only where many bytes stay unread, and never of a
chunk an append may be replacing meanwhile."""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass, replace
from math import prod

import numcodecs
import numpy as np
import zarr
from numcodecs.abc import Codec
from numcodecs.blosc import decompress  # (``Blosc.decode`` after checks our frames pass)
from numcodecs.fletcher32 import Fletcher32
from zarr.codecs import BloscCodec, BytesCodec
from zarr.codecs._v2 import V2Codec  # zarr's own view of v2 bytes as an array
from zarr.core.array_spec import ArraySpec
from zarr.core.buffer import Buffer
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from accumulus.grid import array_bounds

# Benchmarks set this to False to measure the whole-chunk decode in the same run.
ENABLED = True

# c-blosc 1.x frames: version, version of the codec format, flags, type size, then the
# decoded bytes, the block size and the frame's bytes (little-endian int32).
_HEADER = struct.Struct("<BBBBiii")
_MEMCPYED = 0x02  # the data follows the header uncompressed, without a block table
# Each block compressed as one stream, not split into one stream per byte of a value.
# c-blosc never splits a frame's last, shorter block; cut out alone into a frame of its
# own, where it is a whole block, it is decoded as the one stream it is by this flag.
_DONT_SPLIT = 0x10
_FORMAT = 2  # BLOSC_VERSION_FORMAT of c-blosc 1.x, which numcodecs bundles
# ``decode_ranges``: the first read of a chunk, its header and a block table of up to 1020
# blocks (a longer one is read next); chunks stored in fewer bytes are read whole (one read)
# unless their header and block table are known already (then one read of the blocks).
_PREFIX = 4096
RANGED_FROM = 64 * 2**10

Region = tuple[slice, ...]


def held_rows(array: zarr.Array, coords: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The steps the chunk at ``coords`` (declared ``shape``) holds along the first
    dimension, when fewer than it declares; None otherwise."""
    if not shape:
        return None
    edges = array_bounds(array)[0].edges
    rows = int(edges[coords[0] + 1] - edges[coords[0]])
    return rows if rows < shape[0] else None


@dataclass(frozen=True)
class BloscChain:
    """An array's codecs when they can decode part of a chunk (``blosc_chain``): the
    checksum filters to verify first, its Blosc compressor, and the codec that turns the
    decompressed bytes into its array."""

    checks: tuple[Codec, ...]
    blosc: numcodecs.Blosc
    rest: BytesCodec | V2Codec


def decode_part(
    chain: BloscChain,
    array: zarr.Array,
    coords: tuple[int, ...],
    stored: Buffer,
    spec: ArraySpec,
    needed: Region | None = None,
    verified: bool = False,
) -> np.ndarray | None:
    """The chunk at ``coords`` of ``array`` (its codecs ``chain``) decoded from the Blosc
    blocks that hold ``needed`` (slices of the chunk, within what the array holds), of the
    declared shape with the other elements undefined; without ``needed``, the held part of a
    chunk past the array's end, of shape ``(rows held, *spec.shape[1:])``. None where only
    the full decode can do it (or it would decode every block anyway). ``verified``: these
    stored bytes passed the chain's checksum already (``chunk_reader``), which is not
    computed again."""
    if not ENABLED:
        return None
    itemsize = spec.dtype.to_native_dtype().itemsize
    declared = prod(spec.shape) * itemsize
    if needed is not None:
        span = byte_span(needed, spec.shape, itemsize)
        shape = spec.shape
    else:
        rows = held_rows(array, coords, spec.shape)
        if rows is None:
            return None
        span = (0, rows * prod(spec.shape[1:]) * itemsize)
        shape = (rows, *spec.shape[1:])
    if span is None:
        return None
    data = stored.as_numpy_array()
    body = memoryview(data)[: len(data) - 4 * len(chain.checks)]  # a checksum adds 4 bytes
    blocks = _blocks(body, *span, declared)
    if blocks is None:
        return None
    if not verified:
        for check in chain.checks:  # over the whole stored chunk, as the full decode does
            body = memoryview(check.decode(data))
    frame, first, size = _cut_frame(body, *blocks)
    out = np.empty(declared if needed is not None else size, dtype=np.uint8)
    at = first if needed is not None else 0
    decompress(frame, out[at : at + size])
    view = out if needed is not None else out[: span[1]]
    return _as_array(chain, spec, view, shape)


def decode_verified(chain: BloscChain, spec: ArraySpec, stored: Buffer) -> np.ndarray:
    """The whole chunk (its codecs ``chain``) from ``stored`` bytes that passed the chain's
    checksum already: Blosc and the array's view of its bytes alone."""
    data = stored.as_numpy_array()
    body = data[: len(data) - 4 * len(chain.checks)]
    out = np.empty(prod(spec.shape) * spec.dtype.to_native_dtype().itemsize, dtype=np.uint8)
    decompress(body, out)
    return _as_array(chain, spec, out, spec.shape)


def _as_array(
    chain: BloscChain, spec: ArraySpec, decoded: np.ndarray, shape: tuple[int, ...]
) -> np.ndarray:
    """Decoded bytes (uint8) viewed through the array's remaining codec, as ``shape``."""
    if isinstance(chain.rest, V2Codec):  # what it does (C order: ``blosc_chain``), directly
        return decoded.view(spec.dtype.to_native_dtype()).reshape(shape)
    # The chunk's own prototype (zarr's default when its spec was made): asking zarr for
    # its default again looks its configuration up, once per chunk.
    buffer = spec.prototype.buffer.from_array_like(decoded)
    held = spec if shape == spec.shape else replace(spec, shape=shape)
    return chain.rest._decode_sync(buffer, held).as_numpy_array().reshape(shape)


# A part of a chunk read in ranges: which byte ranges to read next, then what to do with them.
ByteRanges = list[tuple[int, int]]
Decoding = Generator[ByteRanges, list[bytes], Callable[[], np.ndarray] | None]


def decode_ranges(
    chain: BloscChain,
    spec: ArraySpec,
    spans: Sequence[tuple[int, int]],
    read: Callable[[int, int], bytes],
    stored: int,
    verified: bool = False,
    head: bytes | None = None,
    seen: Callable[[bytes], None] | None = None,
) -> np.ndarray | None:
    """The chunk (its codecs ``chain``, ``spec``) of ``stored`` bytes, of its declared shape
    with only the bytes ``spans`` (``[start, stop)`` of the decoded chunk, each a part of it
    from its first element to its last: ``region_spans``) sure to be decoded, from the bytes
    of it that ``read(start, stop)`` gives: its header and block table, then for each run of
    blocks holding a span (runs that meet merged) the compressed bytes of that run, cut into a
    frame of its own and decoded (as ``decode_part``). None (nothing decoded; at most the
    first bytes read) where the frame is not one that can be cut or every block would be
    read anyway, and, behind a checksum filter, unless these stored bytes passed it already
    (``verified``): a checksum over the whole stored chunk cannot be verified from a part,
    and where fewer than ``RANGED_FROM`` bytes are stored and ``head`` is not known (one read
    of all of them then costs less than two). ``head``: the chunk's header and block table
    as ``seen`` (or ``frame_head``) was given them by a read of these same stored bytes (then
    not read again); ``seen``: called with them once read."""
    if not ENABLED or (chain.checks and not verified) or (stored < RANGED_FROM and head is None):
        return None
    steps = _ranged(chain, spec, spans, stored, head, seen)
    try:
        wanted = next(steps)
        while True:
            wanted = steps.send([read(start, stop) for start, stop in wanted])
    except StopIteration as done:
        decode = done.value
    return None if decode is None else decode()


def frame_head(stored: bytes) -> bytes | None:
    """The Blosc header and block table at the start of a chunk's stored bytes, as
    ``decode_ranges`` gives them to its ``seen``; None where they are not a frame it cuts."""
    if len(stored) < _HEADER.size:
        return None
    version, _, flags, _, nbytes, blocksize, _ = _HEADER.unpack_from(stored)
    if version != _FORMAT or blocksize <= 0:
        return None
    end = _head_end(flags, nbytes, blocksize)
    return stored[:end] if len(stored) >= end else None


def _head_end(flags: int, nbytes: int, blocksize: int) -> int:
    """Where a Blosc frame's header and block table end: its header alone where its data
    follows uncompressed (no table), else a 4-byte offset for each block."""
    return _HEADER.size if flags & _MEMCPYED else _HEADER.size + 4 * -(-nbytes // blocksize)


async def decode_ranges_async(
    chain: BloscChain,
    spec: ArraySpec,
    spans: Sequence[tuple[int, int]],
    read: Callable[[int, int], Awaitable[bytes]],
) -> Callable[[], np.ndarray] | None:
    """As ``decode_ranges``, from an object store: ``read`` fetches a byte range (all the
    runs of blocks at once, after the header), and the object's size is not known before
    its header is read. Only for chunks without a checksum filter. What it returns decodes
    the bytes read, once called (in the thread that consumes the chunk); None where the
    chunk is better read whole."""
    if not ENABLED or chain.checks:
        return None
    steps = _ranged(chain, spec, spans, None)
    try:
        wanted = next(steps)
        while True:
            wanted = steps.send(list(await asyncio.gather(*(read(a, b) for a, b in wanted))))
    except StopIteration as done:
        return done.value


def _ranged(
    chain: BloscChain,
    spec: ArraySpec,
    spans: Sequence[tuple[int, int]],
    stored: int | None,
    head: bytes | None = None,
    seen: Callable[[bytes], None] | None = None,
) -> Decoding:
    """``decode_ranges``' steps, without reading: yields the byte ranges to read next and is
    sent their bytes; returns how to decode the part from them, or None. ``stored``: the
    object's size, or None when not known (then the frame's header says it). ``head`` and
    ``seen``: the frame's header and block table, known already, and who keeps them once
    read (``decode_ranges``)."""
    trailer = 4 * len(chain.checks)  # each checksum after the Blosc frame: 4 bytes
    itemsize = spec.dtype.to_native_dtype().itemsize
    declared = prod(spec.shape) * itemsize
    if not spans:
        return None
    if head is None:
        (head,) = yield [(0, _PREFIX if stored is None else min(stored - trailer, _PREFIX))]
    if len(head) < _HEADER.size:
        return None
    header = _HEADER.unpack_from(head)
    version, _, flags, _, nbytes, blocksize, cbytes = header
    framed = cbytes if stored is None else stored - trailer
    if version != _FORMAT or nbytes != declared or cbytes != framed or blocksize <= 0:
        return None
    out = np.empty(declared, dtype=np.uint8)
    table_end = _head_end(flags, nbytes, blocksize)
    if flags & _MEMCPYED:  # stored as it is: the bytes wanted, after the header
        if seen is not None:
            seen(head[:table_end])
        parts = yield [(_HEADER.size + start, _HEADER.size + stop) for start, stop in spans]
        for (start, stop), data in zip(spans, parts, strict=True):
            if len(data) != stop - start:
                return None
            out[start:stop] = np.frombuffer(data, dtype=np.uint8)
        return lambda: _as_array(chain, spec, out, spec.shape)
    blocks = -(-nbytes // blocksize)
    runs = _block_runs(spans, nbytes, blocksize, cbytes)
    if runs is None:
        return None
    if table_end > len(head):
        (head,) = yield [(0, table_end)]
        if len(head) < table_end:
            return None
    if seen is not None:
        seen(head[:table_end])
    table = struct.unpack_from(f"<{blocks}i", head, _HEADER.size)
    cuts = []
    for k0, k1 in runs:
        offsets = table[k0:k1]
        begin, last = min(offsets), max(offsets)  # (blocks out of order: ``_cut_frame``)
        end = min((o for o in table if o > last), default=framed)
        if not table_end <= begin <= last < end <= framed:
            return None  # a table that does not fit the frame: the full decode says so
        cuts.append((k0, k1, offsets, begin, end))
    bodies = yield [(begin, end) for *_, begin, end in cuts]
    frames = []
    for (k0, k1, offsets, begin, end), body in zip(cuts, bodies, strict=True):
        if len(body) != end - begin:
            return None
        shift = _HEADER.size + 4 * (k1 - k0) - begin
        head_of_run, first, size = _run_header(header, k0, k1, end + shift)
        frame = head_of_run + struct.pack(f"<{k1 - k0}i", *(o + shift for o in offsets)) + body
        frames.append((frame, first, size))

    def decode() -> np.ndarray:
        for frame, first, size in frames:
            decompress(frame, out[first : first + size])
        return _as_array(chain, spec, out, spec.shape)

    return decode


def _block_runs(
    spans: Sequence[tuple[int, int]], nbytes: int, blocksize: int, cbytes: int
) -> list[tuple[int, int]] | None:
    """The runs of blocks ``[k0, k1)`` of a frame (``nbytes`` decoded in blocks of
    ``blocksize``, ``cbytes`` stored) holding the byte ``spans``, those that meet merged;
    None when they leave no block out, or too few to pay for copying the compressed bytes
    of the blocks kept into a frame of their own: the blocks left out must hold at least as
    many bytes decoded as those kept hold compressed. LZ4 decodes data that compresses
    little about as fast as it is copied, and data that compresses well several times
    slower than its compressed bytes are copied (docs/benchmarks.md, "Series: reading only
    the days a question needs")."""
    runs: list[tuple[int, int]] = []
    for k0, k1 in sorted((start // blocksize, -(-stop // blocksize)) for start, stop in spans):
        if runs and k0 <= runs[-1][1]:
            runs[-1] = (runs[-1][0], max(k1, runs[-1][1]))
        else:
            runs.append((k0, k1))
    kept = sum(k1 - k0 for k0, k1 in runs)
    left = -(-nbytes // blocksize) - kept
    if left < 1 or left * nbytes < kept * cbytes:
        return None
    return runs


def _block_range(
    start: int, stop: int, nbytes: int, blocksize: int, cbytes: int
) -> tuple[int, int] | None:
    """The blocks ``[k0, k1)`` that hold bytes ``[start, stop)``; None when cutting them
    out is not worth it (``_block_runs``)."""
    runs = _block_runs([(start, stop)], nbytes, blocksize, cbytes)
    return None if runs is None else runs[0]


def byte_span(region: Region, shape: tuple[int, ...], itemsize: int) -> tuple[int, int] | None:
    """The bytes of a C-ordered chunk of ``shape`` from the first element of ``region`` to
    its last (None for an empty region)."""
    found = span_and_values(region, shape, itemsize)
    return None if found is None else (found[0], found[1])


def span_and_values(
    region: Region, shape: tuple[int, ...], itemsize: int
) -> tuple[int, int, int] | None:
    """``byte_span`` of ``region`` and the values it holds, in one pass (None for an empty
    region)."""
    first = last = 0
    stride, count = itemsize, 1
    for s, n in zip(reversed(region), reversed(shape), strict=True):
        start, stop, _ = s.indices(n)
        if stop <= start:
            return None
        count *= stop - start
        first += start * stride
        last += (stop - 1) * stride
        stride *= n
    return first, last + itemsize, count


def region_spans(
    regions: Sequence[Region], shape: tuple[int, ...], itemsize: int
) -> list[tuple[int, int]]:
    """The byte spans of the non-empty ``regions`` of a C-ordered chunk of ``shape``
    (``byte_span`` of each): what ``decode_ranges`` reads."""
    return [s for s in (byte_span(r, shape, itemsize) for r in regions) if s is not None]


def _blocks(frame: memoryview, start: int, stop: int, declared: int) -> tuple[int, int] | None:
    """The blocks ``[k0, k1)`` of a c-blosc 1.x frame (``declared`` bytes decoded) that
    hold bytes ``[start, stop)`` (for a frame stored as it is, bytes, not blocks); None when
    it is not such a frame, or those are all of it."""
    if len(frame) < _HEADER.size:
        return None
    version, _, flags, _, nbytes, blocksize, cbytes = _HEADER.unpack_from(frame)
    if version != _FORMAT or nbytes != declared or cbytes != len(frame) or blocksize <= 0:
        return None
    if flags & _MEMCPYED:
        return (start, stop) if stop - start < nbytes else None
    if len(frame) < _HEADER.size + 4 * -(-nbytes // blocksize):
        return None
    return _block_range(start, stop, nbytes, blocksize, cbytes)


def _cut_frame(frame: memoryview, k0: int, k1: int) -> tuple[bytes, int, int]:
    """A frame of blocks ``[k0, k1)`` of ``frame`` (``_blocks``), with where its decoded
    bytes begin in the chunk and how many they are."""
    header = _HEADER.unpack_from(frame)
    flags, nbytes, blocksize = header[2], header[4], header[5]
    if flags & _MEMCPYED:  # stored as it is: a frame of one block of the bytes wanted
        size = k1 - k0
        data = frame[_HEADER.size + k0 : _HEADER.size + k1]
        return _HEADER.pack(*header[:4], size, size, _HEADER.size + size) + data, k0, size
    blocks = -(-nbytes // blocksize)
    kept = k1 - k0
    table = struct.unpack_from(f"<{blocks}i", frame, _HEADER.size)
    offsets = table[k0:k1]
    # Blocks lie in the frame in the order they were compressed: by several threads (c-blosc
    # in numcodecs' main thread) not always in block order, so the bytes kept run from the
    # first of them to where the block after the last of them begins.
    begin, last = min(offsets), max(offsets)
    end = min((o for o in table if o > last), default=len(frame))
    # Offsets are from the frame's start: shifted to the end of the new, shorter table.
    shift = _HEADER.size + 4 * kept - begin
    head, first, size = _run_header(header, k0, k1, end + shift)
    return (
        head + struct.pack(f"<{kept}i", *(o + shift for o in offsets)) + frame[begin:end],
        first,
        size,
    )


def _run_header(header: tuple, k0: int, k1: int, cbytes: int) -> tuple[bytes, int, int]:
    """The header of a frame of blocks ``[k0, k1)`` of a frame with ``header`` (its fields,
    unpacked), ``cbytes`` long; with where its decoded bytes begin in the chunk and how many
    they are."""
    version, version_codec, flags, typesize, nbytes, blocksize, _ = header
    first = k0 * blocksize
    size = min(k1 * blocksize, nbytes) - first
    if size < blocksize:  # the last, shorter block alone: one stream (``_DONT_SPLIT``)
        flags, blocksize = flags | _DONT_SPLIT, size
    return (
        _HEADER.pack(version, version_codec, flags, typesize, size, blocksize, cbytes),
        first,
        size,
    )


def decoded_bytes(
    array: zarr.Array, coords: tuple[int, ...], shape: tuple[int, ...], stored: bytes | None
) -> int:
    """The bytes the reader decodes for the chunk at ``coords`` (declared ``shape``, stored
    as ``stored``) read whole: its declared size, or that of the Blosc blocks holding what
    the array holds (what a benchmark counts)."""
    itemsize = array.dtype.itemsize
    declared = prod(shape) * itemsize
    rows = held_rows(array, coords, shape)
    chain = blosc_chain(array.metadata)
    if not ENABLED or rows is None or stored is None or chain is None:
        return declared
    data = memoryview(stored)
    body = data[: len(data) - 4 * len(chain.checks)]
    blocks = _blocks(body, 0, rows * prod(shape[1:]) * itemsize, declared)
    if blocks is None:
        return declared
    return _cut_frame(body, *blocks)[2]


def blosc_chain(metadata: ArrayV2Metadata | ArrayV3Metadata) -> BloscChain | None:
    """The array's codecs as a ``BloscChain``, when they are exactly those and its chunks
    C-ordered: v3 ``bytes`` then ``blosc``; v2 Blosc as the compressor, or as the only
    filter before ``fletcher32`` (accumulation chunks, ``chunk_check``)."""
    if isinstance(metadata, ArrayV3Metadata):
        codecs = metadata.codecs
        if (
            len(codecs) == 2
            and isinstance(codecs[0], BytesCodec)
            and isinstance(codecs[1], BloscCodec)
        ):
            return BloscChain((), codecs[1]._blosc_codec, codecs[0])
        return None
    if metadata.order != "C" or metadata.dtype.to_native_dtype().hasobject:
        return None
    encoded = [*(metadata.filters or ()), *([metadata.compressor] if metadata.compressor else [])]
    if not encoded or not isinstance(encoded[0], numcodecs.Blosc):
        return None
    checks = encoded[1:]
    if len(checks) > 1 or not all(isinstance(c, Fletcher32) for c in checks):
        return None
    return BloscChain(tuple(checks), encoded[0], V2Codec(filters=None, compressor=None))
