"""Series entries at every element of the last axis, made by the writer from the raw values.

``--at lat=1,lon=1`` with area weights stores, for every day and every row of latitude, the
cumulative sums along longitude of the values (0 where missing) and of their validity, in
chunks ``(CT, CY, 1)``: one longitude, a long run of days, a few rows. A chunk row along
time is whole only once ``CT`` days are read, so entries wait in memory until then. Held as
the raw values themselves (float32, the decoded blocks as they come), a chunk row takes
half the bytes of its float64 sums and integer counts, and nothing is computed per slab;
once whole it is summed here, a few longitudes at a time (``WIDTH_BYTES``), into space each
writing thread keeps (the sums of those longitudes in chunk order, every chunk then
contiguous), then encoded and stored. Every pass is a NumPy call over a block of days and
those longitudes, which stays in the processor's cache, and nothing of the size of the row
is allocated but the raw values: on a fresh process each new page is a fault and a zeroed
page (docs/benchmarks.md, "Build CPU").

The sums are added in the order of the compiled loop they replace (``kernel.
prefix_into_chunks`` after ``kernel.block_sums``), from 0.0 along each row: the same bytes.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import zarr
from zarr.core.metadata import ArrayV2Metadata

from accumulus.accumulation.build.encoded_chunks import encode_chunk, ordered_layout, put_objects

WIDTH_BYTES = 3 * 2**20  # float64 values of one raw block summed at once, about


def eligible(sums: zarr.Array, counts: zarr.Array, first: int) -> bool:
    """Whether ``sums`` and ``counts`` (a series' arrays: time, rows, the summed axis last)
    are written by ``write_row`` from entry ``first`` along time on: both held in chunk
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


def write_row(
    sums: zarr.Array,
    counts: zarr.Array,
    chunk_row: int,
    blocks: Sequence[np.ndarray],
    batch_bytes: int,
) -> None:
    """Write chunk row ``chunk_row`` along time of ``sums`` and ``counts`` from ``blocks``,
    the raw values of its days in order (each ``(days, rows, X)``, NaN where missing, no
    infinity), which may stop before the row's end (then padded with the fill values)."""
    ms, mc = sums.metadata, counts.metadata
    assert isinstance(ms, ArrayV2Metadata) and isinstance(mc, ArrayV2Metadata)
    side, rows_s, _ = ms.chunks
    rows_c = mc.chunks[1]
    _, n_y, n_x = ms.shape
    count_type = mc.dtype.to_native_dtype()
    length = sum(b.shape[0] for b in blocks)
    longest = max(b.shape[0] for b in blocks)
    width = int(max(1, min(n_x, WIDTH_BYTES // (8 * longest * n_y))))
    kind = blocks[0].dtype  # float32 or float64, as decoded
    bits = f"i{kind.itemsize}"
    raw = _space("raw", (longest, n_y, width), kind)
    missing = _space("missing", (longest, n_y, width), bool)
    keep = _space("keep", (longest, n_y, width), bits)
    out_s = _space("sums", (width, -(-n_y // rows_s), side, rows_s), "f8")
    out_c = _space("counts", (width, -(-n_y // rows_c), side, rows_c), count_type)
    # Past the row's end, and past the last row of latitude, chunks hold the fill values.
    for out, rows, fill in ((out_s, rows_s, ms.fill_value), (out_c, rows_c, mc.fill_value)):
        out[:, :, length:] = fill
        out[:, -1, :, n_y - (out.shape[1] - 1) * rows :] = fill
    carry_s = np.zeros((length, n_y))
    carry_c = np.zeros((length, n_y), count_type)
    encoded: list[tuple[str, bytes]] = []
    held = 0
    for x0 in range(0, n_x, width):
        x1 = min(x0 + width, n_x)
        w = x1 - x0
        at = 0
        for block in blocks:
            days = block.shape[0]
            r, m, k = raw[:days, :, :w], missing[:days, :, :w], keep[:days, :, :w]
            # The block's longitudes, then 0 where missing: each value ANDed with 0 (missing)
            # or all ones (the bits of -1), a cheaper pass than a masked assignment.
            np.copyto(r, block[:, :, x0:x1])
            np.isnan(r, out=m)
            np.subtract(m.view("u1"), 1, out=k, dtype=bits)
            np.bitwise_and(r.view(bits), k, out=r.view(bits))
            _prefix_into(out_s, r, carry_s, at, np.copyto)
            _prefix_into(out_c, m, carry_c, at, _valid)
            at += days
        for array, out in ((sums, out_s), (counts, out_c)):
            metadata = array.metadata
            assert isinstance(metadata, ArrayV2Metadata)
            dtype = metadata.dtype.to_native_dtype()
            for x, g in np.ndindex(w, out.shape[1]):
                key = f"{array.path}/{metadata.encode_chunk_key((chunk_row, g, x0 + x))}"
                encoded.append((key, encode_chunk(metadata, dtype, out[x, g, :, :, None])))
                held += out[x, g].nbytes
        if held >= batch_bytes:
            put_objects(sums.store, encoded)
            encoded, held = [], 0
    if encoded:
        put_objects(sums.store, encoded)


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
    into days ``at`` on of chunk order ``out`` (``(X, G, CT, CY)``). Each longitude adds to
    the sums of the ones before, one slice after another (0.0 before the first: -0.0 given
    as 0.0), in place: ``np.cumsum`` along this axis takes several times as long."""
    days, n_y, w = part.shape
    side = out.shape[3]
    for g in range(out.shape[1]):
        lo = g * side
        rows = min(side, n_y - lo)
        into = out[:w, g, at : at + days, :rows]
        put(into, part[:, lo : lo + rows].transpose(2, 0, 1))
        into[0] += carry[at : at + days, lo : lo + rows]
        for i in range(1, w):
            np.add(into[i - 1], into[i], out=into[i])
        carry[at : at + days, lo : lo + rows] = into[w - 1]
