"""Positioned accumulations as a build lays them out: positions, storage form, arrays.

An accumulation whose entries are not at chunk ends (``--at``, see ``positions``) can hold as
many entries as the raw data has values, so how it is stored is what it costs:

- **positions** along each dimension come from the rule, the chunk bounds and the decoded
  coordinate (``placements``); along the dimension a cube is appended to, the last entry
  is provisional unless the rule fixes it (``positions.final_entries``);
- **storage form** (``spec.storage_form``): weights that do not vary along the accumulated
  dimensions are factored out, so only Σx and the count are stored; a dimension at every
  element that the weights vary along is kept as rows (latitude, for area weights);
- **types**: sums float64, counts the smallest unsigned integer that holds the largest
  count (its largest value is the fill value, marking a chunk never written);
- **compression** chosen by measurement on prefix sums of daily gridded data (``codecs``,
  ``bit_shuffled``, docs/accumulation.md): Blosc LZ4 after a shuffle, as the float64 prefix
  sums of float32 values keep few significant bits when they are exact and shuffling turns
  the zero bits into long runs (about half the bytes); arrays read as series in Blosc
  blocks of ``SERIES_BLOCK`` (``blosc_elements``), so that a box's corners over a short
  period decode a block or two of each chunk, not a half;
- **chunks** follow how queries read them (``chunks``): an accumulation along the batch
  dimension (time) is read one entry at a time for a map, so a chunk is one entry and the
  whole space (``MAP_CHUNK``); one that keeps time is read as long series at a few entries
  (a box's corners along longitude, over its rows of latitude), so a chunk is one entry,
  as long in time as the build can hold back (``BUFFER_BYTES``; rows along time of equal
  length, ``even_rows``), and as many rows as
  ``SERIES_CHUNK`` allows: a box reads about the rows it covers, in few objects. Counts,
  small integers, take as many bytes per chunk as the sums (more rows, within a raw chunk).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from math import prod
from typing import Any, Literal

import numpy as np
import zarr
from numcodecs import Blosc, Fletcher32
from zarr.codecs import Crc32cCodec

from accumulus.accumulation.model import spec, statistics
from accumulus.accumulation.model.positions import CHUNK, entry_positions, final_entries
from accumulus.accumulation.model.weights import varying_dims
from accumulus.raw_cube import RawCube, VariableInfo

MAP_CHUNK = 4 * 2**20  # bytes of float64 entries per chunk of a map-like array, at most
# The same for arrays read as long series (a box's rows): whole latitude columns on the
# default cube, so that a short series reads one chunk of sums per corner column, not two;
# a box over few rows for a long period then decodes more rows than it needs
# (docs/benchmarks.md, session read52).
SERIES_CHUNK = 512 * 2**10
BUFFER_BYTES = 384 * 2**20  # entries a build holds back to write long series chunks whole
# Bytes of a Blosc block of a series-like array's chunk (v2): a series over a short period
# reads a few days of each chunk, which a query decodes block by block (``partial_decode``);
# 16 KiB is 22 days of 90 rows of float64 sums. Chosen by measurement on the default path's
# cube (docs/benchmarks.md, "Series: reading only the days a question needs").
SERIES_BLOCK = 16 * 2**10
# c-blosc splits a block of elements of 16 bytes or less into one stream per byte and
# enlarges such blocks to 64 KiB at least, whatever block size it is asked for; elements of
# 32 bytes keep it. Every Blosc reader decodes the frame alike (its elements are bytes).
_BLOCK_ELEMENT = np.dtype("V32")


def placements(
    cube: RawCube, var: VariableInfo, request: spec.BuildRequest, coverage: Mapping[str, int]
) -> dict[tuple[str, ...], spec.Placement]:
    """Where the entries of every positioned combination of ``request`` end, and how its
    sums are stored (combinations in the variable's order)."""
    weight_dims = varying_dims(cube.decoded, request.weights, var.name)
    settings = cube.root.attrs.get("accumulus", {})
    appended = settings.get("append_dim") if isinstance(settings, dict) else None
    out = {}
    for combo in request.combinations:
        ordered = tuple(d for d in var.dims if d in combo)
        if not request.is_positioned(ordered):
            continue
        rules = request.rules(ordered)
        accumulated, factored = spec.storage_form(ordered, rules, weight_dims)
        positions, final = {}, {}
        for dim in accumulated:
            axis, rule = var.axis(dim), rules[dim]
            needs_index = rule != CHUNK and not isinstance(rule, int)
            positions[dim] = entry_positions(
                rule,
                var.shape[axis],
                dim=dim,
                bounds=var.bounds[axis],
                stride=int(request.strides.get(dim, 1)),
                index=cube.index(dim) if needs_index else None,
            )
            if rule == CHUNK:  # chunk ends are final up to the final raw extent
                final[dim] = sum(p <= coverage[dim] for p in positions[dim])
            else:
                final[dim] = final_entries(rule, positions[dim], var.shape[axis], appended == dim)
        out[ordered] = spec.Placement(rules, accumulated, positions, final, factored)
    return out


def shape(var: VariableInfo, acc: spec.Accumulation) -> tuple[int, ...]:
    """Entries along prefix dimensions, full extent along the others (array_dims order)."""
    bounds = dict(zip(var.dims, var.bounds, strict=True))
    entries = {d: len(p) for d, p in acc.entry_positions(bounds).items()}
    return tuple(entries.get(d, var.shape[var.axis(d)]) for d in acc.array_dims)


def largest_count(var: VariableInfo, acc: spec.Accumulation) -> int:
    """The largest count an entry can hold: every value of the prefix box valid."""
    return prod(var.shape[var.axis(d)] for d in acc.prefix_dims)


def count_dtype(largest: int) -> np.dtype:
    """The smallest unsigned integer type holding counts up to ``largest`` and, above them,
    a fill value (its largest value) that no count takes."""
    return np.min_scalar_type(largest + 1)


def dtype_and_fill(var: VariableInfo, acc: spec.Accumulation, is_count: bool) -> tuple[Any, Any]:
    if not is_count:
        return np.dtype("float64"), np.nan
    dtype = count_dtype(largest_count(var, acc))
    return dtype, np.iinfo(dtype).max


def codecs(zarr_format: int, bit_shuffle: bool, series: bool = False) -> dict[str, Any]:
    """Arguments of ``create_array``: Blosc LZ4 (level 1), with bit shuffle or byte shuffle
    (``bit_shuffled`` says which, by measurement), in blocks of ``SERIES_BLOCK`` for an
    array read as series (``series``; v2, whose chunks a build encodes itself:
    ``blosc_elements``), then a checksum per chunk over the
    compressed bytes, as every accumulation chunk carries (``chunk_check``): crc32c in Zarr
    v3; in v2 Fletcher-32, which netcdf-c reads (it has no crc32c filter), after Blosc as the
    first filter (filters come before the compressor), where Blosc sees the array's elements;
    as a compressor after a checksum filter it would see bytes, and its shuffle would do
    nothing (sums stored 0.83-0.98 of their size instead of 0.44-0.54). zstd takes several
    times as long to encode for a few fewer bytes (docs/benchmarks.md), which a build at
    every element would pay on every entry."""
    if zarr_format == 3:
        shuffle: Literal["bitshuffle", "shuffle"] = "bitshuffle" if bit_shuffle else "shuffle"
        blosc = zarr.codecs.BloscCodec(cname="lz4", clevel=1, shuffle=shuffle)
        return {"compressors": [blosc, Crc32cCodec()]}
    blosc = Blosc(
        cname="lz4",
        clevel=1,
        shuffle=Blosc.BITSHUFFLE if bit_shuffle else Blosc.SHUFFLE,
        blocksize=SERIES_BLOCK if series else 0,
    )
    return {"filters": [blosc, Fletcher32()], "compressors": None}


def blosc_elements(codec: object, chunk: np.ndarray) -> np.ndarray:
    """What ``codec`` is given to encode ``chunk`` (C-contiguous): a Blosc that asks for
    blocks of a set size (``codecs`` of a series array) is given elements of 32 bytes,
    which keep that size (``_BLOCK_ELEMENT``), where ``blosc_item_bytes`` says so;
    otherwise the chunk as it is (a chunk of one block has nothing to leave out, and its
    32-byte elements compress worse: docs/benchmarks.md, "Series: reading only the days a
    question needs")."""
    if isinstance(codec, Blosc) and (
        blosc_item_bytes(chunk.nbytes, chunk.dtype.itemsize, codec.blocksize)
        == _BLOCK_ELEMENT.itemsize
    ):
        return chunk.reshape(-1).view(_BLOCK_ELEMENT)
    return chunk


def blosc_item_bytes(nbytes: int, itemsize: int, blocksize: int) -> int:
    """Bytes of the elements Blosc is given for a chunk of ``nbytes`` of values of
    ``itemsize`` bytes (``blosc_elements``), when it asks for blocks of ``blocksize`` bytes
    (0: its own): 32 where the chunk holds two blocks or more and its bytes are a multiple
    of 32, else the values' own."""
    if (
        blocksize
        and itemsize < _BLOCK_ELEMENT.itemsize
        and nbytes >= 2 * blocksize
        and nbytes % _BLOCK_ELEMENT.itemsize == 0
    ):
        return _BLOCK_ELEMENT.itemsize
    return itemsize


def bit_shuffled(
    chunks: tuple[int, ...], sums: Collection[str], series: bool, itemsize: int, zarr_format: int
) -> bool:
    """Whether an accumulation array of Zarr ``zarr_format`` stored in ``chunks`` of values
    of ``itemsize`` bytes, holding ``sums`` (names of ``statistics.SUMS``), read as series
    or not (``series``), is compressed after a bit shuffle rather than a byte one. Chosen by
    measurement on the entries of built cubes (``bench_entry_codecs.py``,
    docs/benchmarks.md, session codec50): a bit shuffle stores fewer bytes where most low
    bits are zero (counts; sums of float32 values), but c-blosc 1.x's bit unshuffle (SSE2
    only, as numcodecs ships it) is about half of a chunk's decoding. So counts, and the
    sums of values of series-like arrays (a question decodes a block or two of each chunk)
    are bit-shuffled, where Blosc's blocks hold a multiple of 8 of the elements it is given
    (it bit-shuffles a block only then, and leaves it unshuffled otherwise, which compresses
    far worse): a chunk of a multiple of 8 values, or one given in 32-byte elements in
    blocks of ``SERIES_BLOCK`` (whose last, shorter block alone may be left unshuffled).
    Map-like arrays' sums (one entry per chunk, read whole by every map question) and the
    statistics' optional sums (products, whose low bits are not zero) decode much faster
    byte-shuffled, for a few more bytes (the figures: docs/benchmarks.md, "The entries'
    codec")."""
    kinds = [statistics.SUMS[s] for s in sums]
    if all(k.is_count for k in kinds) or (series and not any(k.optional for k in kinds)):
        nbytes = prod(chunks) * itemsize
        blocksize = SERIES_BLOCK if series and zarr_format == 2 else 0  # as ``codecs`` asks
        item = blosc_item_bytes(nbytes, itemsize, blocksize)
        return item == _BLOCK_ELEMENT.itemsize or prod(chunks) % 8 == 0
    return False


def is_series(acc: spec.Accumulation, batch: str) -> bool:
    """Whether an accumulation keeps the batch dimension (time) whole: read as series."""
    return batch not in acc.prefix_dims


def chunks(
    var: VariableInfo, acc: spec.Accumulation, batch: str, slab: int, count: bool = False
) -> tuple[int, ...]:
    """Chunk shape of a positioned accumulation's arrays of sums, or of its counts
    (``count``), in array_dims order. ``batch``: the dimension the build walks in slabs of
    ``slab`` indices."""
    extent = dict(zip(acc.array_dims, shape(var, acc), strict=True))
    size = {d: 1 if d in acc.prefix_dims else extent[d] for d in acc.array_dims}
    rows = [d for d in acc.array_dims if d not in acc.prefix_dims and d != batch]
    series = is_series(acc, batch)
    if series:
        # As long in time as the build can hold back (every entry of the space, of all the
        # arrays, until a chunk row is whole): a series is then read in few objects.
        held = prod(n for d, n in extent.items() if d != batch) * entry_bytes(var, acc)
        longest = min(slab, extent[batch])
        while longest < extent[batch] and longest * 2 * held <= BUFFER_BYTES:
            longest *= 2
        raw_chunk = max(var.bounds[var.axis(batch)].sizes, default=1)
        size[batch] = even_rows(extent[batch], longest, raw_chunk)
    budget = SERIES_CHUNK if series else MAP_CHUNK
    # Whole rows (space) per chunk, halved while a chunk is over the budget: a box then
    # reads about the rows it needs.
    while prod(size.values()) * 8 > budget and any(size[d] > 1 for d in rows):
        widest = max(rows, key=lambda d: size[d])
        size[widest] = (size[widest] + 1) // 2
    if count and series:
        # Counts (small integers) as many bytes per chunk as the sums beside them: rows
        # doubled while they still divide the raw chunk's, so that the tiles a build sums
        # at once (whole raw chunks, whole chunks of every array) stay as they are: fewer
        # objects for a build to create where the sums take fewer rows than a raw chunk.
        sums_bytes = prod(size.values()) * 8
        itemsize = dtype_and_fill(var, acc, True)[0].itemsize
        raw = {d: max(var.bounds[var.axis(d)].sizes, default=1) for d in rows}
        while True:
            wider = [d for d in rows if raw[d] % (2 * size[d]) == 0 and 2 * size[d] <= extent[d]]
            if not wider or 2 * prod(size.values()) * itemsize > sums_bytes:
                break
            widest = max(wider, key=lambda d: extent[d] / size[d])
            size[widest] *= 2
    return tuple(max(1, size[d]) for d in acc.array_dims)


def even_rows(extent: int, longest: int, unit: int) -> int:
    """The length of a series' chunk rows along the batch dimension of ``extent`` entries:
    as few rows as chunks of at most ``longest`` allow, each as long as the others (in whole
    raw chunks of ``unit`` entries), the last one no longer. A build holds a row's raw values
    until the row is whole, then sums, encodes and stores it: rows of equal length become
    whole evenly along the reads, and the row left for after the last read is a row, not
    (with rows of ``longest``) a short row plus most of the one before it, which is whole
    only near the end (docs/benchmarks.md, "session build51"). An append later continues
    the last row, whatever its length then (the chunks are fixed at the first build)."""
    rows = -(-extent // longest)
    units = -(-extent // unit)  # raw chunks along the extent
    return min(longest, unit * -(-units // rows))


def entry_bytes(var: VariableInfo, acc: spec.Accumulation) -> int:
    """Bytes of one entry of all of ``acc``'s arrays together, each in its stored type."""
    names: dict[str, bool] = {}
    for term, name in acc.arrays.items():
        names[name] = names.get(name, False) or statistics.SUMS[term].is_count
    return sum(dtype_and_fill(var, acc, count)[0].itemsize for count in names.values())
