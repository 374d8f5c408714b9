"""Series at every element of the last axis made by the writer from the raw values
(``build.raw_series``, ``--at lat=1,lon=1``): the raw values given slab by slab, in blocks
that cross chunk rows' ends and a last row cut short, with missing values and rows of
latitude that do not fill the last chunk, are stored as the cumulative sums along the last
axis and the counts of valid values, and in the same bytes as the writer's summing of
float64 sums (``prefix_last``), the way builds stored them before."""

import numpy as np
import pytest
import zarr
from numcodecs import Blosc, Fletcher32

from accumulus.accumulation.build import raw_series
from accumulus.accumulation.build.stream import _Writer


def _arrays(shape: tuple[int, ...], rows: int = 2) -> tuple[zarr.Group, zarr.Array, zarr.Array]:
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=2)
    codecs = {"filters": [Blosc("lz4", 1, Blosc.SHUFFLE), Fletcher32()], "compressors": None}
    sums = root.create_array(
        "sums", shape=shape, dtype="f8", fill_value=np.nan, chunks=(8, rows, 1), **codecs
    )
    counts = root.create_array(
        "n", shape=shape, dtype="u2", fill_value=65535, chunks=(8, 2 * rows, 1), **codecs
    )
    return root, sums, counts


@pytest.mark.parametrize("sizes", [[4, 4, 4, 4, 4], [8, 8, 4], [3, 6, 11], [20]])
@pytest.mark.parametrize("dtype", ["f4", "f8"])
@pytest.mark.parametrize("width_bytes", [raw_series.WIDTH_BYTES, 1])
def test_raw_values_become_the_series_entries(
    monkeypatch, sizes: list[int], dtype: str, width_bytes: int
) -> None:
    """(``width_bytes`` 1: one longitude at a time, each carried into the next.)"""
    monkeypatch.setattr(raw_series, "WIDTH_BYTES", width_bytes)
    shape = (sum(sizes), 5, 7)
    rng = np.random.default_rng(len(sizes))
    values = rng.normal(280, 30, shape).astype(dtype)
    values[rng.random(shape) < 0.2] = np.nan
    values[0, 0, 0] = -0.0  # summed from 0.0, as the compiled loops do: stored as 0.0
    root, sums, counts = _arrays(shape)
    _, old_sums, old_counts = _arrays(shape)
    with _Writer({"sums": sums, "n": counts}, threads=2) as writer:
        at = 0
        for n in sizes:
            writer.write_raw("sums", "n", at, values[at : at + n].copy())
            at += n
        writer.flush()
    valid = ~np.isnan(values)
    expected = np.cumsum(np.where(valid, values, 0).astype("f8"), axis=-1)
    np.testing.assert_array_equal(sums[:], expected)
    np.testing.assert_array_equal(counts[:], np.cumsum(valid, axis=-1).astype("u2"))
    assert not np.signbit(sums[:]).any()
    # The same bytes as float64 sums summed along the last axis by the writer (which, along
    # an axis this short, sums in NumPy from the first value: -0.0 given as 0.0).
    values[0, 0, 0] = 0.0
    with _Writer({"sums": old_sums, "n": old_counts}, threads=1) as writer:
        at = 0
        for n in sizes:
            part = values[at : at + n]
            writer.write("sums", 0, at, np.where(np.isnan(part), 0, part).astype("f8"), None, True)
            writer.write("n", 0, at, (~np.isnan(part)).astype("f8"), None, True)
            at += n
        writer.flush()
    new, old = _objects(root), _objects(old_sums)
    assert new and new == old


def _objects(array: zarr.Group | zarr.Array) -> dict[str, bytes]:
    """The chunks a memory store holds, by key."""
    held = array.store_path.store._store_dict  # type: ignore[attr-defined]
    return {k: v.to_bytes() for k, v in held.items() if "/." not in k and not k.startswith(".")}


def test_only_arrays_held_in_chunk_order_from_a_chunk_edge() -> None:
    """An update from inside a chunk row, or arrays chunked otherwise, are summed by the
    writer as before (``eligible`` False)."""
    _, sums, counts = _arrays((20, 5, 7))
    assert raw_series.eligible(sums, counts, 0)
    assert raw_series.eligible(sums, counts, 8)
    assert not raw_series.eligible(sums, counts, 3)
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=2)
    wide = root.create_array("w", shape=(20, 5, 7), dtype="f8", chunks=(8, 2, 2))
    assert not raw_series.eligible(wide, counts, 0)
