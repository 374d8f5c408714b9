"""Series entries at every element of the last axis, made by the writer from the raw values.

``--at lat=1,lon=1`` with area weights stores, for every day and every row of latitude, the
cumulative sums along longitude of the values (0 where missing) and of their validity, in
chunks ``(CT, CY, 1)``: one longitude, a long run of days, a few rows. A chunk row along
time is whole only once ``CT`` days are read, so entries wait in memory until then. Held as
the raw values themselves (float32, the decoded blocks as they come), a chunk row takes
half the bytes of its float64 sums and integer counts, and nothing is computed per slab;
once whole it is summed here, a few longitudes at a time (``WIDTH_BYTES``), into space each
writing thread keeps (the sums of those longitudes in chunk order, every chunk then
contiguous), then encoded and stored: in parts (each array's chunks of a few rows of
latitude, ``parts``), which the writer's threads take side by side. Every pass is a NumPy
call over a block of days and those longitudes, which stays in the processor's cache, and
nothing of the size of the row is allocated but the raw values: on a fresh process each new
page is a fault and a zeroed page (docs/benchmarks.md, "Build CPU").

The sums are added in the order of the compiled loop they replace (``kernel.
prefix_into_chunks`` after ``kernel.block_sums``), from 0.0 along each row: the same bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import zarr
from zarr.core.metadata import ArrayV2Metadata

from accumulus.accumulation.build.encoded_chunks import encode_chunk, ordered_layout, put_objects

WIDTH_BYTES = 3 * 2**20  # float64 values of one raw block summed at once, about


def eligible(sums: zarr.Array, counts: zarr.Array, first: int) -> bool:
    """Whether ``sums`` and ``counts`` (a series' arrays: time, rows, the summed axis last)
    are written by ``write_part`` from entry ``first`` along time on: both held in chunk
    order by a build (``ordered_layout``), alike along time, ``first`` a chunk edge."""
    if ordered_layout(sums, 0) is None or ordered_layout(counts, 0) is None:
        return False
    side = sums.chunks[0]
    return (
        sums.dtype == np.float64
        and counts.dtype.kind == "u"
        and counts.chunks[0] == side
        and sums.shape == counts.shape
        and first % side == 0
    )


_kept = threading.local()  # each writing thread's space, by name and shape


def _space(name: str, shape: tuple[int, ...], dtype: npt.DTypeLike) -> np.ndarray:
    spaces: dict = _kept.__dict__.setdefault("spaces", {})
    key = (name, shape, np.dtype(dtype))
    if key not in spaces:
        spaces[key] = np.empty(shape, dtype)
    return spaces[key]


@dataclass(frozen=True)
class Part:
    """The chunks of one of a series' arrays (its sums, or its counts: ``count``) in one
    chunk of its rows (``group``, along the second axis) within a chunk row along time:
    summed, encoded and stored on its own (each row of latitude is summed along longitude
    alone), so that the writer's threads share a chunk row's work."""

    array: zarr.Array
    count: bool
    group: int


def parts(sums: zarr.Array, counts: zarr.Array) -> list[Part]:
    """The parts a chunk row of ``sums`` and ``counts`` is written in, the largest first."""
    return [
        Part(array, count, g)
        for array, count in ((sums, False), (counts, True))
        for g in range(-(-array.shape[1] // array.chunks[1]))
    ]


def write_part(part: Part, chunk_row: int, blocks: Sequence[np.ndarray], batch_bytes: int) -> None:
    """Write ``part`` of chunk row ``chunk_row`` along time from ``blocks``, the raw values
    of its days in order (each ``(days, rows, X)``, NaN where missing, no infinity), which
    may stop before the row's end (then padded with the fill value): the cumulative sums
    along the last axis of the values (0 where missing), or of their validity (``count``),
    stored in batches of about ``batch_bytes`` of values."""
    array = part.array
    metadata = array.metadata
    assert isinstance(metadata, ArrayV2Metadata)
    side, rows, _ = metadata.chunks
    _, n_y, n_x = metadata.shape
    lo = part.group * rows
    band = min(rows, n_y - lo)  # rows of latitude in the part
    dtype = metadata.dtype.to_native_dtype()
    length = sum(b.shape[0] for b in blocks)
    longest = max(b.shape[0] for b in blocks)
    # As many longitudes as for all the rows, whatever the part's: its space is kept by each
    # writing thread, and twice as many took longer (docs/benchmarks.md, "Build, session
    # build47").
    width = int(max(1, min(n_x, WIDTH_BYTES // (8 * longest * n_y))))
    kind = blocks[0].dtype  # float32 or float64, as decoded
    bits = f"i{kind.itemsize}"
    raw = _space("raw", (longest, band, width), kind)
    missing = _space("missing", (longest, band, width), bool)
    keep = _space("keep", (longest, band, width), bits)
    out = _space("out", (width, side, rows), dtype)
    # Past the row's end, and past the last row of latitude, chunks hold the fill value.
    out[:, length:] = metadata.fill_value
    out[:, :, band:] = metadata.fill_value
    carry = np.zeros((length, band), dtype="f8" if not part.count else dtype)
    encoded: list[tuple[str, bytes]] = []
    held = 0
    for x0 in range(0, n_x, width):
        x1 = min(x0 + width, n_x)
        w = x1 - x0
        at = 0
        for block in blocks:
            days = block.shape[0]
            m = missing[:days, :, :w]
            values = block[:, lo : lo + band, x0:x1]
            if part.count:
                np.isnan(values, out=m)
                _prefix_into(out, m, carry, at, _valid)
            else:
                # The block's longitudes, then 0 where missing: each value ANDed with 0
                # (missing) or all ones (the bits of -1), a cheaper pass than a masked
                # assignment.
                r, k = raw[:days, :, :w], keep[:days, :, :w]
                np.copyto(r, values)
                np.isnan(r, out=m)
                np.subtract(m.view("u1"), 1, out=k, dtype=bits)
                np.bitwise_and(r.view(bits), k, out=r.view(bits))
                _prefix_into(out, r, carry, at, np.copyto)
            at += days
        for x in range(w):
            key = f"{array.path}/{metadata.encode_chunk_key((chunk_row, part.group, x0 + x))}"
            encoded.append((key, encode_chunk(metadata, dtype, out[x, :, :, None])))
            held += out[x].nbytes
        if held >= batch_bytes:
            put_objects(array.store, encoded)
            encoded, held = [], 0
    if encoded:
        put_objects(array.store, encoded)


def _valid(into: np.ndarray, missing: np.ndarray) -> None:
    np.logical_not(missing, out=into)


def _prefix_into(
    out: np.ndarray,
    part: np.ndarray,
    carry: np.ndarray,
    at: int,
    put: Callable[[np.ndarray, np.ndarray], None],
) -> None:
    """The cumulative sums along its last axis of ``part`` (``(days, rows, X)``, put into
    ``out`` by ``put``: values as they are, or validity from missing), continued from
    ``carry`` (``(days, rows)`` from day ``at``: the sums of the longitudes before, updated),
    into days ``at`` on of ``out`` (``(X, CT, CY)``: one chunk per longitude). Each
    longitude adds to the sums of the ones before, one slice after another (0.0 before the
    first: -0.0 given as 0.0), in place: ``np.cumsum`` along this axis takes several times
    as long."""
    days, rows, w = part.shape
    into = out[:w, at : at + days, :rows]
    put(into, part.transpose(2, 0, 1))
    into[0] += carry[at : at + days]
    for i in range(1, w):
        np.add(into[i - 1], into[i], out=into[i])
    carry[at : at + days] = into[w - 1]
