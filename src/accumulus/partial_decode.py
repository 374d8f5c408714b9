"""Decode only the part of a chunk the array holds, when the chunk extends past the array's
end along its first dimension: a cube's time chunks are sized for growth (31 six-hourly steps
held in a 405-step chunk), and decoding the whole last chunk cost every query 13 times the
bytes it uses (issue 34 item 9).

Along the first dimension of a C-ordered chunk the held steps are a prefix of its elements,
and a Blosc frame is a header, a table of block offsets and independently compressed blocks.
The blocks covering the prefix are cut out into a frame of their own (the header's sizes
rewritten; every block kept whole, so each decodes as it would in the full frame) and
decoded by numcodecs' Blosc; the prefix goes through the array's remaining codec (zarr's
``bytes`` codec, or zarr v2's dtype view) for the held shape. numcodecs removed
``Blosc.decode_partial`` (0.16), so the frame is cut here. Any other codec chain, layout or
frame is left to the full decode (``None``)."""

from __future__ import annotations

import struct
from dataclasses import replace
from math import prod

import numcodecs
import numpy as np
import zarr
from zarr.codecs import BloscCodec, BytesCodec
from zarr.codecs._v2 import V2Codec  # zarr's own view of v2 bytes as an array
from zarr.core.array_spec import ArraySpec
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.metadata import ArrayV2Metadata, ArrayV3Metadata

from accumulus.grid import array_bounds

# Benchmarks set this to False to measure the whole-chunk decode in the same run.
ENABLED = True

# c-blosc 1.x frames: version, version of the codec format, flags, type size, then the
# decoded bytes, the block size and the frame's bytes (little-endian int32).
_HEADER = struct.Struct("<BBBBiii")
_MEMCPYED = 0x02  # the data follows the header uncompressed, without a block table
_FORMAT = 2  # BLOSC_VERSION_FORMAT of c-blosc 1.x, which numcodecs bundles


def held_rows(array: zarr.Array, coords: tuple[int, ...], shape: tuple[int, ...]) -> int | None:
    """The steps the chunk at ``coords`` (declared ``shape``) holds along the first
    dimension, when fewer than it declares; None otherwise."""
    if not shape:
        return None
    edges = array_bounds(array)[0].edges
    rows = int(edges[coords[0] + 1] - edges[coords[0]])
    return rows if rows < shape[0] else None


def decode_held(
    array: zarr.Array, coords: tuple[int, ...], stored: Buffer, spec: ArraySpec
) -> np.ndarray | None:
    """The held part of a chunk, of shape ``(rows held, *spec.shape[1:])``, decoded from
    the Blosc blocks that cover it; None where only the full decode can do it."""
    if not ENABLED:
        return None
    rows = held_rows(array, coords, spec.shape)
    if rows is None:
        return None
    chain = _blosc_chain(array.metadata)
    if chain is None:
        return None
    blosc, rest = chain
    itemsize = spec.dtype.to_native_dtype().itemsize
    needed = rows * prod(spec.shape[1:]) * itemsize
    frame = prefix_frame(stored.as_numpy_array(), needed, prod(spec.shape) * itemsize)
    if frame is None:
        return None
    prefix = np.frombuffer(blosc.decode(frame), dtype=np.uint8, count=needed)
    held = replace(spec, shape=(rows, *spec.shape[1:]))
    decoded = rest._decode_sync(default_buffer_prototype().buffer.from_array_like(prefix), held)
    return decoded.as_numpy_array().reshape(held.shape)


def prefix_frame(stored: np.ndarray, needed: int, declared: int) -> bytes | None:
    """A Blosc frame of the blocks of ``stored`` (a frame of ``declared`` bytes decoded)
    that hold its first ``needed`` bytes; None when it is not a c-blosc 1.x frame of that
    size, or when those blocks are all of it."""
    if len(stored) < _HEADER.size:
        return None
    header = stored[: _HEADER.size].tobytes()
    version, _, flags, _, nbytes, blocksize, cbytes = _HEADER.unpack(header)
    if version != _FORMAT or nbytes != declared or cbytes != len(stored) or blocksize <= 0:
        return None
    if flags & _MEMCPYED:
        # Stored as it is: a frame of one block of the bytes wanted.
        size = blocksize = needed
        end = _HEADER.size + needed
    else:
        blocks = -(-nbytes // blocksize)
        kept = -(-needed // blocksize)
        if kept >= blocks or len(stored) < _HEADER.size + 4 * blocks:
            return None
        size = kept * blocksize
        # The block table stays whole: each block's offset is from the frame's start, and
        # only the first ``kept`` entries are read for a frame of ``kept`` blocks.
        end = int(np.frombuffer(stored, dtype="<i4", count=1, offset=_HEADER.size + 4 * kept)[0])
        if not _HEADER.size + 4 * blocks <= end <= len(stored):
            return None
    return (
        _HEADER.pack(*_HEADER.unpack(header)[:4], size, blocksize, end)
        + stored[_HEADER.size : end].tobytes()
    )


def decoded_bytes(
    array: zarr.Array, coords: tuple[int, ...], shape: tuple[int, ...], stored: bytes | None
) -> int:
    """The bytes the reader decodes for the chunk at ``coords`` (declared ``shape``, stored
    as ``stored``): its declared size, or that of the Blosc blocks holding what the array
    holds (what a benchmark counts)."""
    itemsize = array.dtype.itemsize
    declared = prod(shape) * itemsize
    rows = held_rows(array, coords, shape)
    if not ENABLED or rows is None or stored is None or _blosc_chain(array.metadata) is None:
        return declared
    needed = rows * prod(shape[1:]) * itemsize
    frame = prefix_frame(np.frombuffer(stored, dtype=np.uint8), needed, declared)
    return declared if frame is None else int(_HEADER.unpack(frame[: _HEADER.size])[4])


def _blosc_chain(
    metadata: ArrayV2Metadata | ArrayV3Metadata,
) -> tuple[numcodecs.Blosc, BytesCodec | V2Codec] | None:
    """The array's Blosc compressor and the codec that turns the decompressed bytes into
    its array, when its codecs are exactly those and its chunks C-ordered."""
    if isinstance(metadata, ArrayV3Metadata):
        codecs = metadata.codecs
        if (
            len(codecs) == 2
            and isinstance(codecs[0], BytesCodec)
            and isinstance(codecs[1], BloscCodec)
        ):
            return codecs[1]._blosc_codec, codecs[0]
        return None
    compressor = metadata.compressor
    if metadata.filters or metadata.order != "C" or not isinstance(compressor, numcodecs.Blosc):
        return None
    if metadata.dtype.to_native_dtype().hasobject:
        return None
    return compressor, V2Codec(filters=None, compressor=None)
