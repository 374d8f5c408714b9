"""The build's writer: entries given slab by slab land where they belong, whether a chunk row
is given whole, in parts (held in one buffer until whole), from inside a chunk (an update),
or past a chunk row's end; counts are stored in their integer type. In Zarr v2 (chunks
encoded by the build) and v3 (written by zarr), and with the writes queued bounded to a
few bytes (every new row then waits for the writes before it)."""

import numpy as np
import pytest
import zarr

from accumulus.accumulation.build import stream
from accumulus.accumulation.build.stream import _Writer


@pytest.mark.parametrize(
    ("first", "sizes"),
    [
        (0, [4, 4, 4, 4, 4]),  # parts of chunk rows of 8, the last row short
        (0, [8, 8, 4]),  # whole chunk rows
        (3, [5, 4, 4, 4]),  # an update from inside a chunk
        (0, [3, 6, 11]),  # parts that cross chunk rows' ends
        (0, [4, 20]),  # a part, then the rest of its row and whole rows (written uncopied)
    ],
)
@pytest.mark.parametrize(("zarr_format", "shards"), [(2, None), (3, None), (3, (16, 2, 2))])
@pytest.mark.parametrize("queued_bytes", [_Writer.QUEUED_BYTES, 1])
def test_entries_land_where_they_belong(
    monkeypatch, first: int, sizes: list[int], zarr_format: int, shards, queued_bytes: int
) -> None:
    """(Sharded: a shard holds two chunk rows, written by different threads, one at a time.)"""
    monkeypatch.setattr(_Writer, "QUEUED_BYTES", queued_bytes)
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=zarr_format)
    shape = (first + sum(sizes), 3, 2)
    layout = {"chunks": (8, 2, 1), "shards": shards}
    sums = root.create_array("sums", shape=shape, dtype="f8", fill_value=np.nan, **layout)
    counts = root.create_array("n", shape=shape, dtype="u2", fill_value=65535, **layout)
    before = np.full((first, 3, 2), 7.0)
    if first:
        sums[:first] = before
        counts[:first] = before
    rng = np.random.default_rng(first + len(sizes))
    values = rng.random(shape)
    whole = np.floor(values * 1000)
    with _Writer({"sums": sums, "n": counts}, threads=2) as writer:
        at = first
        for n in sizes:
            writer.write("sums", 0, at, values[at : at + n])
            writer.write("n", 0, at, whole[at : at + n])
            assert np.array_equal(writer.entry("sums", 0, at + n - 1), values[at + n - 1 : at + n])
            at += n
        writer.flush()
    np.testing.assert_array_equal(sums[:first], before)
    np.testing.assert_array_equal(sums[first:], values[first:])
    np.testing.assert_array_equal(counts[first:], whole[first:].astype("u2"))
    np.testing.assert_array_equal(counts[:first], before.astype("u2"))


@pytest.mark.parametrize(
    ("first", "sizes"),
    [
        (0, [4, 4, 4, 4, 4]),  # parts of chunk rows of 8 (held in chunk order), the last short
        (0, [8, 8, 4]),  # whole chunk rows (summed in place, written uncopied)
        (3, [5, 4, 4, 4]),  # an update from inside a chunk (held as the array lies)
        (0, [3, 6, 11]),  # parts that cross chunk rows' ends
    ],
)
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_entries_summed_along_the_last_axis_by_the_writer(
    monkeypatch, first: int, sizes: list[int], zarr_format: int
) -> None:
    """``prefix_last``: the writer takes the cumulative sums along the last axis (a series'
    rows at every element) itself, into rows held in chunk order where it can (chunks one
    value wide there, Zarr v2; latitude chunks not dividing it), and stores exactly what
    ``np.cumsum`` gives, counts in their integer type."""
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=zarr_format)
    shape = (first + sum(sizes), 5, 7)
    sums = root.create_array("sums", shape=shape, dtype="f8", fill_value=np.nan, chunks=(8, 2, 1))
    counts = root.create_array("n", shape=shape, dtype="u2", fill_value=65535, chunks=(8, 2, 1))
    rng = np.random.default_rng(len(sizes) + first)
    values = rng.normal(280, 2, shape)
    ones = (rng.random(shape) < 0.9).astype("f8")
    ordered: list[int] = []
    write_ordered = stream.write_ordered
    monkeypatch.setattr(
        stream, "write_ordered", lambda *a: ordered.append(a[1]) or write_ordered(*a)
    )
    if first:
        sums[:first] = np.cumsum(values[:first], axis=-1)
        counts[:first] = np.cumsum(ones[:first], axis=-1)
    with _Writer({"sums": sums, "n": counts}, threads=2) as writer:
        at = first
        for n in sizes:
            writer.write("sums", 0, at, values[at : at + n].copy(), prefix_last=True)
            writer.write("n", 0, at, ones[at : at + n].copy(), prefix_last=True)
            at += n
        writer.flush()
    np.testing.assert_array_equal(sums[:], np.cumsum(values, axis=-1))
    np.testing.assert_array_equal(counts[:], np.cumsum(ones, axis=-1).astype("u2"))
    # Rows held in chunk order: every row of both arrays in Zarr v2 but one an update
    # starts inside of, or written whole (uncopied).
    held = {(0, (4, 4, 4, 4, 4)): 2, (0, (8, 8, 4)): 0, (3, (5, 4, 4, 4)): 1, (0, (3, 6, 11)): 2}
    assert len(ordered) == (2 * held[first, tuple(sizes)] if zarr_format == 2 else 0)
