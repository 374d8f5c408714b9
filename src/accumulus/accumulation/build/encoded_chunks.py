"""Writing a region of whole chunks of an unsharded Zarr v2 array as encoded bytes, past
zarr's per-chunk write path (the counterpart of ``chunk_reader`` for a build's writes).

A build writes about a thousand chunks per accumulation group, a positioned one tens of
thousands. Through ``zarr.Array.__setitem__`` most of a chunk's CPU is not its codecs but
selection and scatter into a chunk buffer and an event-loop round trip per chunk, more under
a build's load (docs/benchmarks.md). For an unsharded Zarr v2 array the spec fixes a chunk's
bytes completely: its values, padded with the fill value to the whole chunk shape, in C
order, through the array's filters then its compressor (the numcodecs objects zarr itself
calls). Such chunks are encoded here and stored together (``put_objects``). Other arrays (Zarr v3,
sharded, Fortran order) and regions that cut a chunk are written through zarr.

Chunks one value wide along the last axis (entries at every element of it, read as long
series: ``--at lat=1,lon=1``) are not gathered one by one from the region: each would read
one value per cache line of it. The region is first copied into chunk order in one compiled
pass (``kernel.chunk_order``), into space each writing thread keeps for the next region.
A build may also hold such chunks in chunk order from the start (``ordered_layout``: its
writer sums entries straight into that layout), written then by ``write_ordered``.
"""

from __future__ import annotations

import asyncio
import struct
import threading
from collections.abc import Sequence
from itertools import product
from math import prod
from typing import Any, cast

import numpy as np
import zarr
from imagecodecs import h5checksum_fletcher32
from numcodecs import Fletcher32
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes
from zarr.abc.store import Store, SupportsSetSync
from zarr.core.buffer import default_buffer_prototype
from zarr.core.metadata import ArrayV2Metadata
from zarr.core.sync import sync

from accumulus.accumulation.build.placement import blosc_elements
from accumulus.stores.base import writes_synchronously


def write_region(array: zarr.Array, window: Sequence[slice], values: np.ndarray) -> None:
    """``array[window] = values``. Where ``window`` covers whole chunks of an unsharded Zarr
    v2 array (it may end at the array's end inside a chunk), each chunk is encoded here and
    written whole; otherwise (a chunk cut, to be read and merged; other formats) through
    zarr."""
    metadata = array.metadata
    starts = [w.start or 0 for w in window]
    if not (
        isinstance(metadata, ArrayV2Metadata)
        and metadata.order == "C"
        and _whole_chunks(starts, values.shape, metadata.chunks, metadata.shape)
    ):
        array[tuple(window)] = values
        return
    chunks = metadata.chunks
    dtype = metadata.dtype.to_native_dtype()
    encoded: list[tuple[str, bytes]] = []
    grid = [
        range(s // c, -(-(s + n) // c))
        for s, c, n in zip(starts, chunks, values.shape, strict=True)
    ]
    ordered = _in_chunk_order(values, metadata, dtype, [len(r) for r in grid])
    for k, index in enumerate(product(*grid)):
        if ordered is not None:
            chunk = ordered[k]
        else:
            part = tuple(
                slice(i * c - s, min((i + 1) * c - s, n))
                for i, c, s, n in zip(index, chunks, starts, values.shape, strict=True)
            )
            chunk = values[part]
        key = f"{array.path}/{metadata.encode_chunk_key(index)}"
        encoded.append((key, encode_chunk(metadata, dtype, chunk)))
    put_objects(array.store, encoded)


def ordered_layout(array: zarr.Array, axis: int) -> tuple[int, ...] | None:
    """The layout a row of ``array``'s chunks along ``axis`` (whole along the other axes) is
    held in when its chunks are ``(CT, CY, 1)`` with ``axis`` 0, of an unsharded, C-ordered
    Zarr v2 array of native numbers: ``(X, GY, CT, CY)``, each chunk ``[x, gy]`` then
    contiguous, as ``write_ordered`` encodes it; None for any other array."""
    metadata = array.metadata
    if not (isinstance(metadata, ArrayV2Metadata) and metadata.order == "C"):
        return None
    dtype = metadata.dtype.to_native_dtype()
    if axis != 0 or len(metadata.chunks) != 3 or metadata.chunks[2] != 1:
        return None
    if not (dtype.kind in "fiu" and dtype.isnative):
        return None
    side_t, side_y, _ = metadata.chunks
    return (metadata.shape[2], -(-metadata.shape[1] // side_y), side_t, side_y)


def write_ordered(
    array: zarr.Array, chunk_row: int, ordered: np.ndarray, length: int, batch_bytes: int
) -> None:
    """Write chunk row ``chunk_row`` along axis 0 of ``array`` from ``ordered`` (held in
    ``ordered_layout``), whose first ``length`` entries along that axis are filled: each
    chunk encoded from its own contiguous block (padded with the fill value past
    ``length`` or the array's end), stored in batches of about ``batch_bytes`` of values."""
    metadata = array.metadata
    assert isinstance(metadata, ArrayV2Metadata)
    dtype = metadata.dtype.to_native_dtype()
    side_y = metadata.chunks[1]
    n_y = metadata.shape[1]
    encoded: list[tuple[str, bytes]] = []
    held = 0
    for x, g in product(range(ordered.shape[0]), range(ordered.shape[1])):
        rows = min(side_y, n_y - g * side_y)
        chunk = ordered[x, g, :length, :rows, None]
        key = f"{array.path}/{metadata.encode_chunk_key((chunk_row, g, x))}"
        encoded.append((key, encode_chunk(metadata, dtype, chunk)))
        held += chunk.nbytes
        if held >= batch_bytes:
            put_objects(array.store, encoded)
            encoded, held = [], 0
    if encoded:
        put_objects(array.store, encoded)


_kept = threading.local()  # each thread's space for regions in chunk order


def _in_chunk_order(
    values: np.ndarray, metadata: ArrayV2Metadata, dtype: np.dtype, grid: Sequence[int]
) -> np.ndarray | None:
    """The region's chunks (``grid`` of them along each axis), each whole and contiguous, in
    the order of the chunk grid (``(chunk count, *chunk shape)``; padded with the fill value
    where the region ends inside a chunk), for chunks ``(CA, CB, 1)`` several along the last
    axis, numbers in the machine's byte order; None for others. Kept in space of the calling
    thread's, reused for the next region (a build writes hundreds, and new memory costs a
    zeroed page per page)."""
    chunks = metadata.chunks
    if values.ndim != 3 or chunks[2] != 1 or values.shape[2] < 2:
        return None
    if not all(d.kind in "fiu" and d.isnative for d in (values.dtype, dtype)):
        return None
    from accumulus.accumulation.build.kernel import chunk_order  # numba: loaded by builds

    shape = (*grid, chunks[0], chunks[1])
    nbytes = prod(shape) * dtype.itemsize
    space = getattr(_kept, "space", None)
    if space is None or space.nbytes < nbytes:
        space = _kept.space = np.empty(nbytes, dtype="u1")
    out = space[:nbytes].view(dtype).reshape(shape)
    if any(n % c for n, c in zip(values.shape, chunks, strict=True)):
        out.fill(metadata.fill_value)
    chunk_order(values, out)
    return out.reshape(-1, *chunks)


def _whole_chunks(
    starts: Sequence[int], shape: Sequence[int], chunks: Sequence[int], array: Sequence[int]
) -> bool:
    """Whether the region of ``shape`` at ``starts`` starts and ends at chunk edges (or the
    array's end) along every axis."""
    return all(
        start % chunk == 0 and ((start + n) % chunk == 0 or start + n == size)
        for start, n, chunk, size in zip(starts, shape, chunks, array, strict=True)
    )


def encode_chunk(metadata: ArrayV2Metadata, dtype: np.dtype, values: np.ndarray) -> bytes:
    """One chunk's stored bytes (``values`` may be a part of it, at the array's end)."""
    if values.shape == metadata.chunks:
        chunk = np.ascontiguousarray(values, dtype=dtype)
    else:
        chunk = np.full(metadata.chunks, metadata.fill_value, dtype=dtype)
        chunk[tuple(slice(0, n) for n in values.shape)] = values
    data = chunk
    for codec in metadata.filters or ():
        data = _encoded(codec, blosc_elements(codec, data))
    if metadata.compressor is not None:
        data = _encoded(metadata.compressor, data)
    return ensure_bytes(data)


def _encoded(codec: Codec, data: Any) -> Any:
    """``codec.encode(data)``; for Fletcher-32 the same bytes (the data, then the checksum
    in 4 bytes little-endian) with the checksum taken by imagecodecs, which lets other
    threads run meanwhile (numcodecs' holds the interpreter lock: a build's other threads
    waited on it for every chunk) and is faster."""
    if not isinstance(codec, Fletcher32):
        return codec.encode(data)
    raw = ensure_bytes(data)
    return raw + struct.pack("<I", h5checksum_fletcher32(raw))


def put_objects(store: Store, items: list[tuple[str, bytes]]) -> None:
    """Store every ``(key, bytes)``: into a local directory or memory one after the other in
    this thread (``stores.base.writes_synchronously``: through zarr's event loop each write
    is a task, a worker thread and a wake-up, which cost a build at every element more
    than the files themselves); elsewhere concurrently, in one round of zarr's event loop,
    through the store's ``set``, which wrappers (counting, stable shard layouts) override."""
    buffer = default_buffer_prototype().buffer
    if writes_synchronously(store):
        synchronous = cast(SupportsSetSync, store)  # writes_synchronously: local or memory
        for key, data in items:
            synchronous.set_sync(key, buffer.from_bytes(data))
        return

    async def put_all() -> None:
        await asyncio.gather(*(store.set(key, buffer.from_bytes(data)) for key, data in items))

    sync(put_all())
