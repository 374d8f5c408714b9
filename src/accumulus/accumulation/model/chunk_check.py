"""Finding which chunks of an accumulation array cannot be read.

Accumulation chunks carry a checksum over their stored bytes (crc32c, a codec, in Zarr v3; in
v2 the numcodecs filter ``fletcher32`` after Blosc, HDF5's Fletcher-32 byte for byte and so
one netcdf-c reads too, where it has no crc32c), so bytes changed on disk fail to decode
instead of giving wrong sums.
Zarr's error does not say which chunk failed; these helpers read the chunks of a selection
one at a time to name them, as ``tas_accumulation_group/acc_time/3.0.1``.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numcodecs
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from accumulus.chunk_reader import ChunkReadError


def checksummed_codecs(zarr_format: int) -> dict:
    """Arguments of ``create_array`` that make every chunk carry a checksum, in the form
    other readers know: v3's crc32c codec after compression; in v2 Blosc (LZ4, byte shuffle)
    as the first filter, where its shuffle sees the float64 sums (0.59 of their size, and
    faster to decode than before; a compressor after the checksum filter would see bytes:
    0.77), then numcodecs' fletcher32 filter over the compressed bytes, which netcdf-c
    decodes as HDF5's."""
    if zarr_format == 3:
        return {"compressors": [ZstdCodec(), Crc32cCodec()]}
    return {
        "filters": [numcodecs.Blosc("lz4", 1, numcodecs.Blosc.SHUFFLE), numcodecs.Fletcher32()],
        "compressors": None,
    }


def failing_chunks(
    array: zarr.Array, selection: Sequence[int | slice] | None = None
) -> list[tuple[str, str]]:
    """(key, reason) for each chunk of ``array`` overlapping ``selection`` (integers and
    slices, default everything) that cannot be read; keys include the array's path."""
    selection = list(selection or [slice(None)] * array.ndim)
    ranges = []
    # Blocks are stored objects: the shards of a sharded array (its ``chunks`` are inner).
    blocks = array.shards or array.chunks
    for index, size, chunk in zip(selection, array.shape, blocks, strict=True):
        if isinstance(index, slice):
            start, stop, _ = index.indices(size)
            ranges.append(range(start // chunk, max(start, stop - 1) // chunk + 1))
        else:
            ranges.append(range(index // chunk, index // chunk + 1))
    failing = []
    for coords in itertools.product(*ranges):
        try:
            array.get_block_selection(coords)
        except Exception as exc:  # what each codec raises differs; the reason is kept
            key = array.metadata.encode_chunk_key(coords)
            reason = " ".join(str(exc).split())  # one line (fletcher32's message has two)
            failing.append((f"{array.path}/{key}", reason or type(exc).__name__))
    return failing


def read_problem_text(failed: ChunkReadError) -> str:
    """One line naming the chunk a batch read could not read, and why."""
    # One line (fletcher32's message has two).
    reason = " ".join(str(failed.cause).split()) or type(failed.cause).__name__
    return chunk_problem_text([(failed.request.key, reason)])


def chunk_problem_text(failing: list[tuple[str, str]]) -> str:
    """One line naming the failing chunks (the first three) and the first reason."""
    if not failing:
        return ""
    keys = ", ".join(key for key, _ in failing[:3]) + (" ..." if len(failing) > 3 else "")
    return f"chunk {keys} cannot be read ({failing[0][1]})"
