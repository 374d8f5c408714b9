"""Chunks a build encodes itself (``build.encoded_chunks.write_region``) are the bytes zarr writes:
the same region written both ways gives byte-identical stored objects, for the codecs,
dtypes, fill values, key separators and partial edge chunks builds meet; regions that cut a
chunk, and Zarr v3 arrays, go through zarr and keep what they do not cover."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest
import zarr

from accumulus.accumulation.build.encoded_chunks import write_region
from accumulus.stores.base import writes_synchronously
from accumulus.stores.counting import CountingStore
from accumulus.stores.group import GroupStore
from accumulus.stores.keys import is_metadata_key

CASES = {
    "sums": ("float64", np.nan, [numcodecs.Fletcher32()], numcodecs.Blosc("lz4", 5), "."),
    "counts": ("int64", -1, [numcodecs.Fletcher32()], numcodecs.Zstd(3), "."),
    "shuffled": ("float64", np.nan, [numcodecs.Shuffle(8)], numcodecs.Zlib(1), "/"),
    "bare": ("float32", 0.0, None, None, "."),
    # As a build writes positioned arrays: Blosc, then the checksum over its bytes.
    "checked": (
        "uint16",
        65535,
        [numcodecs.Blosc("lz4", 1, numcodecs.Blosc.BITSHUFFLE), numcodecs.Fletcher32()],
        None,
        ".",
    ),
    "big-endian": (">f8", np.nan, None, numcodecs.Blosc("zstd", 1), "."),
}


def _array(root: zarr.Group, name: str, case: str) -> zarr.Array:
    dtype, fill, filters, compressor, separator = CASES[case]
    return root.create_array(
        name,
        shape=(13, 7, 10),
        chunks=(4, 3, 5),
        dtype=dtype,
        fill_value=fill,
        filters=filters,
        compressors=compressor,
        chunk_key_encoding={"name": "v2", "separator": separator},
        config={"write_empty_chunks": True},
    )


def _stored(root_path, name: str) -> dict[str, bytes]:
    found = sorted(p for p in (root_path / name).rglob("*") if p.is_file())
    return {str(p.relative_to(root_path / name)): p.read_bytes() for p in found}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "window",
    [
        (slice(0, 13), slice(0, 7), slice(0, 10)),  # everything, edge chunks partial
        (slice(4, 12), slice(3, 7), slice(5, 10)),  # whole chunks inside, then to the end
        (slice(8, 13), slice(0, 6), slice(0, 5)),
    ],
)
def test_encoded_chunks_are_zarrs_bytes(tmp_path, case, window):
    rng = np.random.default_rng(len(case) + window[0].start)
    shape = tuple(w.stop - w.start for w in window)
    values = rng.normal(size=shape) * 1e6
    values[rng.random(shape) < 0.1] = np.nan if CASES[case][0] != "int64" else 7
    if CASES[case][0] == "int64":
        values = np.nan_to_num(values).astype("int64")
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    by_zarr = _array(root, "by_zarr", case)
    by_us = _array(root, "by_us", case)
    by_zarr[window] = values
    write_region(by_us, window, values)
    assert _stored(tmp_path / "g.zarr", "by_us") == _stored(tmp_path / "g.zarr", "by_zarr")
    np.testing.assert_array_equal(by_us[window], values.astype(by_us.dtype))


def test_a_cut_chunk_is_merged_through_zarr(tmp_path):
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    array = _array(root, "a", "sums")
    array[...] = 1.0
    write_region(array, (slice(2, 6), slice(0, 7), slice(0, 10)), np.full((4, 7, 10), 2.0))
    got = array[...]
    assert (got[2:6] == 2).all() and (got[:2] == 1).all() and (got[6:] == 1).all()


def test_zarr_v3_arrays_are_written_by_zarr(tmp_path):
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=3)
    array = root.create_array("a", shape=(8, 6), chunks=(4, 3), shards=(8, 6), dtype="f8")
    values = np.arange(48.0).reshape(8, 6)
    write_region(array, (slice(0, 8), slice(0, 6)), values)
    np.testing.assert_array_equal(array[...], values)


def test_writes_go_through_wrappers_that_change_them(tmp_path):
    """Into a local directory, chunks are written in the calling thread (``set_sync``) only
    through wrappers that write as the directory does: one that counts still sees every
    write, one that adds a prefix still adds it."""
    local = zarr.storage.LocalStore(tmp_path / "g.zarr")
    counting = CountingStore(local)
    prefixed = GroupStore(local, "inner")
    assert writes_synchronously(local) and writes_synchronously(prefixed)
    assert not writes_synchronously(counting)
    values = np.arange(13 * 7 * 10.0).reshape(13, 7, 10)
    for store, name in [(counting, "counted"), (prefixed, "prefixed")]:
        array = _array(zarr.open_group(store, mode="a", zarr_format=2), name, "sums")
        write_region(array, (slice(0, 13), slice(0, 7), slice(0, 10)), values)
        np.testing.assert_array_equal(array[...], values)
    chunks = 4 * 3 * 2
    assert sum(not is_metadata_key(k) for k in counting.counts.writes) == chunks
    stored = _stored(tmp_path / "g.zarr" / "inner", "prefixed")
    assert sum(not key.startswith(".") for key in stored) == chunks


@pytest.mark.parametrize("dtype, fill", [("float64", np.nan), ("uint16", 65535)])
@pytest.mark.parametrize(
    "window",
    [
        (slice(0, 13), slice(0, 7), slice(0, 10)),  # edge chunks partial along two axes
        (slice(4, 12), slice(3, 6), slice(2, 9)),  # whole chunks only
        (slice(8, 13), slice(0, 7), slice(9, 10)),  # one chunk along the last axis
    ],
)
def test_chunks_one_value_wide_are_copied_in_chunk_order(
    tmp_path, monkeypatch, dtype, fill, window
):
    """Chunks one value wide along the last axis (a build's series at every element) are
    taken from a copy of the region in chunk order; the stored bytes are still zarr's, for
    a region given as a strided view of float64 entries (as a build holds them), cast to
    the array's type, ending inside chunks or not."""
    from accumulus.accumulation.build import encoded_chunks

    ordered = []
    in_chunk_order = encoded_chunks._in_chunk_order
    monkeypatch.setattr(
        encoded_chunks,
        "_in_chunk_order",
        lambda *args: ordered.append(in_chunk_order(*args)) or ordered[-1],
    )
    rng = np.random.default_rng(window[2].start)
    shape = tuple(w.stop - w.start for w in window)
    held = np.floor(rng.random(shape[::-1]) * 4000.0)  # laid out last axis first
    values = held.transpose(2, 1, 0)
    assert not values.flags.c_contiguous
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=2)
    kwargs = dict(
        shape=(13, 7, 10),
        chunks=(4, 3, 1),
        dtype=dtype,
        fill_value=fill,
        filters=[numcodecs.Blosc("lz4", 1, numcodecs.Blosc.SHUFFLE), numcodecs.Fletcher32()],
        compressors=None,
        config={"write_empty_chunks": True},
    )
    by_zarr = root.create_array("by_zarr", **kwargs)
    by_us = root.create_array("by_us", **kwargs)
    by_zarr[window] = values
    write_region(by_us, window, values)
    assert (ordered[-1] is not None) == (shape[2] > 1)
    assert _stored(tmp_path / "g.zarr", "by_us") == _stored(tmp_path / "g.zarr", "by_zarr")
    np.testing.assert_array_equal(by_us[window], values.astype(dtype))


@pytest.mark.parametrize("length", [1, 2, 3, 719, 720, 721, 1441, 72929, 177120])
def test_the_checksum_is_numcodecs_fletcher32(length: int) -> None:
    """Fletcher-32 taken by imagecodecs (``_encoded``) gives numcodecs' bytes: lengths odd and
    even, across its blocks of 360 words, on random bytes, mostly zeros, all ones (sums of
    multiples of 65535, which HDF5 leaves as 65535, not 0) and zeros."""
    from accumulus.accumulation.build.encoded_chunks import _encoded

    codec = numcodecs.Fletcher32()
    rng = np.random.default_rng(length)
    sparse = rng.integers(0, 256, length, dtype="u1") * (rng.random(length) < 0.01)
    for data in (
        rng.integers(0, 256, length, dtype="u1").tobytes(),
        sparse.astype("u1").tobytes(),
        b"\xff" * length,
        bytes(length),
    ):
        assert _encoded(codec, data) == bytes(codec.encode(data))
