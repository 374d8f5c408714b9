"""A chunk past the array's end along time is decoded only as far as the array holds
(``partial_decode``): for random shapes, dtypes, chunkings, Blosc compressors, shuffles and
block sizes, in Zarr v2 and v3, what the reader returns equals the data written, zarr's own
whole-chunk decode and xarray's reading, exactly; and a chunk holding little of its declared
length decodes only the blocks that hold it. A chunk asked for with the box a query reads of
it (``ChunkRequest.needed``) gives that box exactly, behind fletcher32 too, decoding only
its blocks while the checksum still covers the whole chunk."""

from __future__ import annotations

import os
import struct
import time
from math import prod

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st
from zarr.codecs import BloscCodec, BytesCodec

from accumulus import chunk_reader, partial_decode
from accumulus.accumulation.build import placement
from accumulus.accumulation.build.encoded_chunks import encode_chunk
from accumulus.chunk_reader import (
    ChunkReadError,
    ChunkRequest,
    ReadCounts,
    read_chunks,
    read_region,
)
from accumulus.ingest import layout
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from accumulus.stores.safe_reads import regular_file_version
from rewrites import WAYS, rewrite

DTYPES = ["i1", "u2", "<i2", ">i2", "<f4", ">f4", "<f8", "i8", "u4"]
SHUFFLES = {0: "noshuffle", 1: "shuffle", 2: "bitshuffle"}


def blosc_array(path, zarr_format, shape, chunks, dtype, cname, clevel, shuffle, blocksize):
    """Array ``a`` of a group at ``path``, compressed by Blosc alone (v2: the compressor with
    no filters; v3: ``bytes`` then ``blosc``), with xarray's dimension names."""
    dims = [f"d{i}" for i in range(len(shape))]
    group = zarr.open_group(path, mode="w", zarr_format=zarr_format)
    if zarr_format == 2:
        compressor = numcodecs.Blosc(
            cname=cname, clevel=clevel, shuffle=shuffle, blocksize=blocksize
        )
        array = group.create_array(
            "a", shape=shape, chunks=chunks, dtype=dtype, compressors=compressor,
            filters=None, attributes={"_ARRAY_DIMENSIONS": dims},
        )  # fmt: skip
    else:
        endian = "big" if dtype.startswith(">") else "little"
        array = group.create_array(
            "a", shape=shape, chunks=chunks, dtype=dtype.lstrip("<>"),
            serializer=BytesCodec(endian=endian),
            compressors=BloscCodec(cname=cname, clevel=clevel, shuffle=SHUFFLES[shuffle],
                                   blocksize=blocksize, typesize=np.dtype(dtype).itemsize),
            dimension_names=dims,
        )  # fmt: skip
    return array


def read_last(array: zarr.Array, coords: tuple[int, ...] | None = None) -> np.ndarray:
    """The chunk at ``coords`` (the first chunk by default) as the reader hands it over."""
    got: list[np.ndarray] = []
    coords = coords or (0,) * array.ndim
    read_chunks([ChunkRequest(array, coords)], lambda _, chunk: got.append(chunk))
    return got[0]


def random_values(rng, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        values = rng.normal(0, 1e3, size=shape)
    else:
        info = np.iinfo(dtype)
        values = rng.integers(info.min, info.max, size=shape, endpoint=True)
    values = values.astype(dtype)
    values.flat[:: max(1, values.size // 7)] = 0  # runs that compress, beside noise
    return values


@settings(max_examples=60, deadline=None)
@given(
    zarr_format=st.sampled_from([2, 3]),
    dtype=st.sampled_from(DTYPES),
    rest=st.lists(st.integers(1, 9), max_size=2),
    chunk_rows=st.integers(2, 300),
    full_chunks=st.integers(0, 2),
    data=st.data(),
    cname=st.sampled_from(["lz4", "zstd", "blosclz", "zlib"]),
    clevel=st.sampled_from([0, 1, 5]),
    shuffle=st.sampled_from([0, 1, 2]),
    blocksize=st.sampled_from([0, 128, 256, 1000]),
    seed=st.integers(0, 2**16),
)
def test_partial_last_chunk_reads_as_the_whole_decode(
    tmp_path_factory, zarr_format, dtype, rest, chunk_rows, full_chunks, data, cname, clevel,
    shuffle, blocksize, seed,
):  # fmt: skip
    held = data.draw(st.integers(1, chunk_rows - 1))
    shape = (full_chunks * chunk_rows + held, *rest)
    chunks = (chunk_rows, *(data.draw(st.integers(1, n)) for n in rest))
    path = tmp_path_factory.mktemp("partial") / "a.zarr"
    array = blosc_array(path, zarr_format, shape, chunks, dtype, cname, clevel, shuffle, blocksize)
    values = random_values(np.random.default_rng(seed), shape, dtype)
    array[...] = values

    got = read_region(array, [slice(0, n) for n in shape])
    np.testing.assert_array_equal(got, values, strict=False)
    np.testing.assert_array_equal(got, array[...])
    with xr.open_zarr(path, consolidated=False, mask_and_scale=False) as opened:
        np.testing.assert_array_equal(got, opened["a"].values)

    # The last chunk alone: the held rows, equal to the whole decode's first rows.
    last = (full_chunks, *(0 for _ in rest))
    chunk = read_last(array, last)
    assert chunk.shape in ((chunk_rows, *chunks[1:]), (held, *chunks[1:]))
    whole = np.asarray(
        array[tuple(slice(k * c, (k + 1) * c) for k, c in zip(last, chunks, strict=True))]
    )
    np.testing.assert_array_equal(chunk[:held], whole[:held])


def test_a_chunk_holding_little_decodes_only_its_blocks(tmp_path, monkeypatch):
    """31 steps of a 405-step chunk (the vendored CO2 cube's layout), both formats: the
    reader decodes the blocks of the 31 steps, not the chunk, and answers as before."""
    rng = np.random.default_rng(34)
    for zarr_format in (2, 3):
        path = tmp_path / f"v{zarr_format}.zarr"
        array = blosc_array(path, zarr_format, (31, 81, 160), (405, 81, 160), "<i2", "lz4", 5, 1, 0)
        values = random_values(rng, (31, 81, 160), "<i2")
        array[...] = values
        stored = (path / "a" / ("0.0.0" if zarr_format == 2 else "c/0/0/0")).read_bytes()
        declared = 405 * 81 * 160 * 2
        decoded = partial_decode.decoded_bytes(array, (0, 0, 0), (405, 81, 160), stored)
        assert 31 * 81 * 160 * 2 <= decoded < declared / 4

        assert read_last(array).shape == (31, 81, 160)
        np.testing.assert_array_equal(read_last(array), values)
        monkeypatch.setattr(partial_decode, "ENABLED", False)
        assert partial_decode.decoded_bytes(array, (0, 0, 0), (405, 81, 160), stored) == declared
        assert read_last(array).shape == (405, 81, 160)
        np.testing.assert_array_equal(read_last(array)[:31], values)
        monkeypatch.setattr(partial_decode, "ENABLED", True)


@pytest.mark.parametrize(
    "compressors",
    [numcodecs.Zstd(), None],
    ids=["zstd", "uncompressed"],
)
def test_other_codecs_decode_the_whole_chunk(tmp_path, compressors):
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=(5, 4), chunks=(50, 4), dtype="f8", zarr_format=2,
        compressors=compressors,
    )  # fmt: skip
    array[...] = np.arange(20.0).reshape(5, 4)
    assert read_last(array).shape == (50, 4)
    np.testing.assert_array_equal(read_last(array)[:5], np.arange(20.0).reshape(5, 4))


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_through_the_event_loop(tmp_path, zarr_format):
    """A store read through zarr's event loop (object storage, counting wrappers) gets the
    held steps alike."""
    path = tmp_path / "c.zarr"
    array = blosc_array(path, zarr_format, (20, 33, 7), (300, 33, 7), ">f8", "zstd", 5, 1, 256)
    values = random_values(np.random.default_rng(3), (20, 33, 7), ">f8")
    array[...] = values
    store = CountingStore(open_store(str(path)))
    opened = zarr.open_array(store, path="a", mode="r")
    chunk = read_last(opened)
    assert chunk.shape == (20, 33, 7)
    np.testing.assert_array_equal(chunk, values)


def test_a_cut_chunk_fails_as_before(tmp_path):
    """A partial last chunk whose file was cut short is not cut further: the whole decode
    fails on it, named by its chunk, as it did."""
    path = tmp_path / "c.zarr"
    array = blosc_array(path, 2, (31, 81, 160), (405, 81, 160), "<i2", "lz4", 5, 1, 0)
    array[...] = random_values(np.random.default_rng(9), (31, 81, 160), "<i2")
    stored = path / "a" / "0.0.0"
    stored.write_bytes(stored.read_bytes()[:-1000])
    with pytest.raises(ChunkReadError, match=r"a/0\.0\.0"):
        read_last(array)


def checksummed_array(path, shape, chunks, dtype, blocksize):
    """An accumulation-like v2 array: Blosc (LZ4, byte shuffle) as a filter, then
    ``fletcher32`` over the compressed bytes (``chunk_check.checksummed_codecs``)."""
    group = zarr.open_group(path, mode="w", zarr_format=2)
    filters = [
        numcodecs.Blosc("lz4", 1, numcodecs.Blosc.SHUFFLE, blocksize),
        numcodecs.Fletcher32(),
    ]
    return group.create_array(
        "a", shape=shape, chunks=chunks, dtype=dtype, filters=filters, compressors=None,
        attributes={"_ARRAY_DIMENSIONS": [f"d{i}" for i in range(len(shape))]},
    )  # fmt: skip


def read_needed(array: zarr.Array, coords: tuple[int, ...], needed) -> np.ndarray:
    got: list[np.ndarray] = []
    request = ChunkRequest(array, coords, needed=needed)
    read_chunks([request], lambda _, chunk: got.append(chunk))
    return got[0]


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["v2", "v3", "checksummed", "verified"]),
    dtype=st.sampled_from(["<f8", "u2", "<i4", ">f4"]),
    shape=st.lists(st.integers(1, 40), min_size=1, max_size=3),
    blocksize=st.sampled_from([0, 256, 1000]),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_the_part_a_reader_needs_reads_as_the_whole_decode(
    tmp_path_factory, kind, dtype, shape, blocksize, data, seed
):
    """A chunk asked for with ``needed`` (a box of it): that box equals the data, whatever
    blocks it spans (a frame of any run of blocks, the last and shorter one too), for Blosc
    alone (v2, v3) and Blosc behind fletcher32, verified as it is read or (``verified``) a
    local file's version verified before, read by byte ranges of the blocks needed."""
    chunks = tuple(data.draw(st.integers(1, n)) for n in shape)
    path = tmp_path_factory.mktemp("needed") / "a.zarr"
    if kind in ("checksummed", "verified"):
        array = checksummed_array(path, shape, chunks, dtype, blocksize)
    else:
        array = blosc_array(path, 2 if kind == "v2" else 3, shape, chunks, dtype, "lz4", 1, 1,
                            blocksize)  # fmt: skip
    values = random_values(np.random.default_rng(seed), shape, dtype)
    array[...] = values
    coords = tuple(
        data.draw(st.integers(0, -(-n // c) - 1)) for n, c in zip(shape, chunks, strict=True)
    )
    held = [min(c, n - k * c) for n, c, k in zip(shape, chunks, coords, strict=True)]
    needed = []
    for n in held:
        lo = data.draw(st.integers(0, n - 1))
        needed.append(slice(lo, data.draw(st.integers(lo + 1, n))))
    if kind == "verified":
        array = zarr.open_array(open_store(str(path)), path="a")
        with pytest.MonkeyPatch.context() as patch:
            _settle(patch, 0)  # every file settled: remembered
            patch.setattr(partial_decode, "RANGED_FROM", 0)
            chunk_reader._VERIFIED.clear()
            read_needed(array, coords, tuple(needed))  # read whole, verified
            chunk = read_needed(array, coords, tuple(needed))
    else:
        chunk = read_needed(array, coords, tuple(needed))
    start = [k * c for k, c in zip(coords, chunks, strict=True)]
    want = values[tuple(slice(a + s.start, a + s.stop) for a, s in zip(start, needed, strict=True))]
    np.testing.assert_array_equal(chunk[tuple(needed)], want, strict=False)


def test_a_few_rows_of_a_checksummed_chunk_decode_few_blocks(tmp_path, monkeypatch):
    """Two rows of a 64-row accumulation-like chunk: only the Blosc blocks holding them are
    decoded (Blosc is handed a frame of them), and a changed byte anywhere in the
    chunk still fails its checksum, named by its chunk."""
    array = checksummed_array(tmp_path / "c.zarr", (64, 512), (64, 512), "<f8", 4096)
    values = random_values(np.random.default_rng(5), (64, 512), "<f8")
    array[...] = values
    decoded: list[int] = []
    decompress = partial_decode.decompress

    def counting(source, dest=None):
        result = decompress(source, dest)
        decoded.append(len(dest) if dest is not None else len(result))
        return result

    monkeypatch.setattr(partial_decode, "decompress", counting)
    chunk = read_needed(array, (0, 0), (slice(10, 12), slice(0, 512)))
    np.testing.assert_array_equal(chunk[10:12], values[10:12])
    stored = tmp_path / "c.zarr" / "a" / "0.0"
    blocksize = int.from_bytes(stored.read_bytes()[8:12], "little")  # Blosc's own choice
    first, last = 10 * 512 * 8 // blocksize, (12 * 512 * 8 - 1) // blocksize
    assert decoded == [(last - first + 1) * blocksize]  # the blocks of rows 10 and 11 alone
    assert decoded[0] <= 64 * 512 * 8 // 4
    corrupt = bytearray(stored.read_bytes())
    corrupt[-100] ^= 0xFF  # in a block the query does not decode
    stored.write_bytes(bytes(corrupt))
    with pytest.raises(ChunkReadError, match=r"a/0\.0"):
        read_needed(array, (0, 0), (slice(10, 12), slice(0, 512)))


def test_blocks_stored_out_of_order_decode_as_the_whole(tmp_path):
    """c-blosc compressing with several threads (numcodecs' Blosc in the main thread) stores
    the blocks in the order the threads finish, not always in block order: every run of
    blocks cut out of such a frame still decodes to the data."""
    # zstd: c-blosc keeps its block size (LZ4 with a shuffle takes 64 KiB blocks at least).
    array = blosc_array(tmp_path / "t.zarr", 2, (256, 64), (256, 64), "<f8", "zstd", 1, 1, 1024)
    values = random_values(np.random.default_rng(3), (256, 64), "<f8").round(1)
    kept = numcodecs.blosc.get_nthreads()
    numcodecs.blosc.use_threads, previous = True, numcodecs.blosc.use_threads
    numcodecs.blosc.set_nthreads(4)
    try:
        frames = [numcodecs.Blosc("zstd", 1, 1, 1024).encode(values) for _ in range(20)]
    finally:
        numcodecs.blosc.set_nthreads(kept)
        numcodecs.blosc.use_threads = previous
    table = [np.frombuffer(f, "<i4", count=128, offset=16) for f in frames]
    shuffled = [f for f, t in zip(frames, table, strict=True) if np.any(np.diff(t) < 0)]
    if not shuffled:
        pytest.skip("c-blosc's threads stored every block in order this time")
    (tmp_path / "t.zarr" / "a" / "0.0").write_bytes(shuffled[0])
    for rows in [(0, 3), (5, 9), (100, 140), (250, 256), (1, 255)]:
        needed = (slice(*rows), slice(0, 64))
        chunk = read_needed(array, (0, 0), needed)
        np.testing.assert_array_equal(chunk[needed], values[slice(*rows)])


def test_a_local_chunk_is_read_by_byte_ranges_of_the_blocks_needed(tmp_path, monkeypatch):
    """A chunk of a local directory asked for in two parts apart (a range's two ends): only
    its header and the compressed blocks holding each part are read from the file (three
    reads, far fewer bytes than it stores), and those parts equal the data; a chunk not
    stored is its fill value; behind fletcher32 (a checksum over the whole stored chunk) it
    is read whole (the first time this process reads its file: ``test_checked_chunks_*``),
    and a changed byte anywhere still fails it."""
    monkeypatch.setattr(partial_decode, "RANGED_FROM", 0)
    written = blosc_array(tmp_path / "r.zarr", 2, (1024, 512), (512, 512), "<f8", "lz4", 5, 1, 8192)
    values = random_values(np.random.default_rng(8), (1024, 512), "<f8")
    written[:512] = values[:512]
    array = zarr.open_array(open_store(str(tmp_path / "r.zarr")), path="a")
    ends = ((slice(1, 3), slice(0, 512)), (slice(500, 502), slice(0, 512)))
    got: list[np.ndarray] = []
    request = ChunkRequest(array, (0, 0), needed=(slice(1, 502), slice(0, 512)), regions=ends)
    counts = read_chunks([request], lambda _, chunk: got.append(chunk))
    for end in ends:
        np.testing.assert_array_equal(got[0][end], values[end])
    stored = (tmp_path / "r.zarr" / "a" / "0.0").stat().st_size
    assert counts.requests == 3
    assert counts.bytes < stored / 8
    got.clear()
    request = ChunkRequest(array, (1, 0), needed=ends[0])
    assert read_chunks([request], lambda _, chunk: got.append(chunk)).requests == 1
    missing = got[0]
    assert np.isnan(missing).all() or (missing == array.metadata.fill_value).all()

    checked = checksummed_array(tmp_path / "c.zarr", (512, 512), (512, 512), "<f8", 8192)
    checked[...] = values[:512]
    checked = zarr.open_array(open_store(str(tmp_path / "c.zarr")), path="a")
    got.clear()
    request = ChunkRequest(checked, (0, 0), needed=(slice(1, 502), slice(0, 512)), regions=ends)
    counts = read_chunks([request], lambda _, chunk: got.append(chunk))
    np.testing.assert_array_equal(got[0][ends[1]], values[ends[1]])
    assert counts.requests == 1
    assert counts.bytes == (tmp_path / "c.zarr" / "a" / "0.0").stat().st_size
    path = tmp_path / "c.zarr" / "a" / "0.0"
    corrupt = bytearray(path.read_bytes())
    corrupt[-100] ^= 0xFF
    path.write_bytes(bytes(corrupt))
    with pytest.raises(ChunkReadError, match=r"a/0\.0"):
        read_needed(checked, (0, 0), ends[0])


def _settle(patch: pytest.MonkeyPatch, margin_ns: int) -> None:
    """Files remembered (verified, their headers) once they last changed ``margin_ns`` ago."""
    for memo in (chunk_reader._VERIFIED, chunk_reader._HEADS):
        patch.setattr(memo, "settled_ns", margin_ns)


def _settled_checked_chunk(tmp_path, monkeypatch):
    """A series-like accumulation chunk (``placement.codecs``: bit-shuffled Blosc in blocks
    of 16 KiB, then Fletcher-32; 8 blocks, the last shorter) in a local file that changed
    long enough ago to be remembered once verified (``VersionMemo.settled_ns``, shortened
    to 50 ms here); its array opened as a query opens it, its values and its path."""
    _settle(monkeypatch, 50_000_000)
    chunk_reader._VERIFIED.clear()
    chunk_reader._HEADS.clear()
    group = zarr.open_group(tmp_path / "c.zarr", mode="w", zarr_format=2)
    written = group.create_array(
        "a", shape=(240, 64), chunks=(240, 64), dtype="<f8",
        attributes={"_ARRAY_DIMENSIONS": ["t", "y"]}, **placement.codecs(2, True, True),
    )  # fmt: skip
    values = random_values(np.random.default_rng(11), (240, 64), "<f8").round(2).cumsum(axis=1)
    path = tmp_path / "c.zarr" / "a" / "0.0"
    path.write_bytes(encode_chunk(written.metadata, np.dtype("<f8"), values))
    array = zarr.open_array(open_store(str(tmp_path / "c.zarr")), path="a")
    time.sleep(0.1)
    return array, values, path


def _read_counted(array: zarr.Array, needed) -> tuple[np.ndarray, ReadCounts]:
    return _read_counted_at(array, (0, 0), needed)


def _read_counted_at(array: zarr.Array, coords, needed) -> tuple[np.ndarray, ReadCounts]:
    got: list[np.ndarray] = []
    counts = read_chunks(
        [ChunkRequest(array, coords, needed=needed)], lambda _, chunk: got.append(chunk)
    )
    return got[0], counts


def test_checked_chunks_are_verified_once_then_read_by_the_blocks_needed(tmp_path, monkeypatch):
    """A checksummed chunk of a local file is read whole and verified the first time; later
    reads of the same version of its file read its header and the blocks holding the part
    needed (the last, shorter block alone too), and give the data; once its header was
    read, the blocks alone."""
    array, values, path = _settled_checked_chunk(tmp_path, monkeypatch)
    stored = path.stat().st_size
    blocks = int.from_bytes(path.read_bytes()[8:12], "little")
    assert blocks == placement.SERIES_BLOCK  # as asked: 32-byte elements keep it
    for rows in [(3, 5), (60, 62), (238, 240), (1, 239), (0, 240)]:
        needed = (slice(*rows), slice(0, 64))
        chunk, counts = _read_counted(array, needed)
        np.testing.assert_array_equal(chunk[needed], values[slice(*rows)])
        # The first read of the file (whole, verified), the whole chunk (read whole), and
        # every block (read whole, its header known already).
        if rows in ((3, 5), (0, 240), (1, 239)):
            assert (counts.requests, counts.bytes) == (1, stored)
        elif rows == (60, 62):  # its header and table, then the blocks holding the rows
            assert counts.requests == 2 and counts.bytes < stored / 3
        else:  # the blocks holding the rows: this version's header is remembered
            assert counts.requests == 1 and counts.bytes < stored / 3


@pytest.mark.parametrize("how", WAYS)
def test_a_chunk_changed_after_its_header_was_read_is_read_with_its_new_header(
    tmp_path, monkeypatch, how
):
    """A chunk of a local file read in part once its Blosc header is remembered (that
    version of the file), then rewritten with other values compressed into other block
    sizes (in place: a new change time; or replaced: another inode): the next read reads
    the new header and table, and gives the new values."""
    _settle(monkeypatch, 50_000_000)
    monkeypatch.setattr(partial_decode, "RANGED_FROM", 0)  # (a small chunk is read whole)
    chunk_reader._HEADS.clear()
    written = blosc_array(tmp_path / "c.zarr", 2, (240, 64), (240, 64), "<f8", "lz4", 1, 1, 2048)
    rng = np.random.default_rng(5)
    smooth = np.arange(240 * 64, dtype="<f8").reshape(240, 64)
    written[...] = smooth
    array = zarr.open_array(open_store(str(tmp_path / "c.zarr")), path="a")
    path = tmp_path / "c.zarr" / "a" / "0.0"
    time.sleep(0.1)
    needed = (slice(200, 202), slice(0, 64))
    for requests in (2, 1):  # its header and the blocks; then the blocks alone
        chunk, counts = _read_counted(array, needed)
        assert counts.requests == requests
        np.testing.assert_array_equal(chunk[needed], smooth[200:202])
    noisy = rng.normal(size=(240, 64))
    stored = bytes(written.metadata.compressor.encode(noisy))
    assert stored[:16] != path.read_bytes()[:16]  # other sizes in its header
    rewrite(path, stored, how)
    time.sleep(0.1)
    chunk, counts = _read_counted(array, needed)
    assert counts.requests == 2
    np.testing.assert_array_equal(chunk[needed], noisy[200:202])


def test_a_small_chunk_read_whole_once_is_read_by_its_blocks_after(tmp_path, monkeypatch):
    """A chunk stored in fewer than ``RANGED_FROM`` bytes is read whole (one read) while its
    header is not known, and its header and block table are remembered from those bytes:
    its next reads in part read only the blocks holding the part (one read, a few of its
    bytes) and give the same values. Fails when the header is not kept from a whole read."""
    _settle(monkeypatch, 50_000_000)
    chunk_reader._HEADS.clear()
    # Counts growing like an accumulation's, in blocks of 256 bytes: 43 KB stored.
    written = blosc_array(tmp_path / "s.zarr", 2, (240, 64), (240, 64), "<f8", "lz4", 1, 1, 256)
    steps = np.random.default_rng(3).integers(0, 4, 240 * 64)
    values = np.cumsum(steps).reshape(240, 64).astype("<f8")
    written[...] = values
    array = zarr.open_array(open_store(str(tmp_path / "s.zarr")), path="a")
    stored = (tmp_path / "s.zarr" / "a" / "0.0").stat().st_size
    assert stored < partial_decode.RANGED_FROM
    time.sleep(0.1)
    needed = (slice(200, 202), slice(0, 64))
    chunk, counts = _read_counted(array, needed)
    assert (counts.requests, counts.bytes) == (1, stored)
    np.testing.assert_array_equal(chunk[needed], values[200:202])
    for _ in range(2):
        chunk, counts = _read_counted(array, needed)
        assert counts.requests == 1 and counts.bytes < stored / 8
        np.testing.assert_array_equal(chunk[needed], values[200:202])


@pytest.mark.parametrize("how", ["in place", "replaced", "same size and times"])
def test_a_checked_chunk_changed_after_it_was_verified_fails_named(tmp_path, monkeypatch, how):
    """Bytes changed after a chunk's file was verified, in a block a query does not read:
    written in place (the same inode, new change time) or replaced by a new file (another
    inode), the next read verifies the whole chunk again and fails, named. Only a change
    that keeps the file's inode, size and both times (which no write through the file system
    does: the kernel sets the change time, and no call sets it back) is not seen: that
    reads the blocks needed, unchanged, and gives the data."""
    array, values, path = _settled_checked_chunk(tmp_path, monkeypatch)
    needed = (slice(3, 5), slice(0, 64))
    read_needed(array, (0, 0), needed)  # verified, remembered
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF  # in the last block, which rows 3 and 4 do not need
    if how == "in place":
        with open(path, "r+b") as file:
            file.seek(len(data) - 100)
            file.write(bytes(data[-100:-99]))
    elif how == "replaced":
        path.with_suffix(".new").write_bytes(bytes(data))
        os.replace(path.with_suffix(".new"), path)
    else:  # what the memo remembers, kept: as if the file system had not changed its times
        path.write_bytes(bytes(data))
        version = regular_file_version(str(path), "a/0.0")
        assert version is not None
        _settle(monkeypatch, 0)
        chunk_reader._VERIFIED.put((version.device, version.inode), version, True)
        np.testing.assert_array_equal(read_needed(array, (0, 0), needed)[needed], values[3:5])
        return
    with pytest.raises(ChunkReadError, match=r"a/0\.0.*[Cc]hecksum"):
        read_needed(array, (0, 0), needed)


def test_a_chunk_changed_just_now_is_verified_at_every_read(tmp_path, monkeypatch):
    """A file that changed within ``SETTLED_NS`` of a read is not remembered: a write
    within the same tick of the file system's clock could keep its times, so every read
    verifies it whole."""
    array, values, path = _settled_checked_chunk(tmp_path, monkeypatch)
    _settle(monkeypatch, 3600 * 10**9)
    needed = (slice(3, 5), slice(0, 64))
    stored = path.stat().st_size
    for _ in range(2):
        chunk, counts = _read_counted(array, needed)
        assert (counts.requests, counts.bytes) == (1, stored)
        np.testing.assert_array_equal(chunk[needed], values[3:5])
    assert not chunk_reader._VERIFIED


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(["<f4", "<f8", "<i2", "u1", ">f4"]),
    step=st.sampled_from([(128, 128), (180, 360), (64, 100), (7, 9)]),
    steps=st.integers(2, 12),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_blocks_of_whole_steps_read_one_step_as_its_own_blocks(dtype, step, steps, data, seed):
    """A raw chunk as ``append`` compresses it (Blosc LZ4 level 5, byte shuffle, blocks of
    whole steps: ``layout.step_blocksize``): its Blosc blocks hold whole steps, and a
    range's two ends (a step or a few at each) read by byte ranges (``decode_ranges``) equal
    the data, reading the header and only the blocks of those steps (one block per step
    where a step fills 64 KiB)."""
    shape = (steps, *step)
    itemsize = np.dtype(dtype).itemsize
    values = random_values(np.random.default_rng(seed), shape, dtype)
    blocksize = layout.step_blocksize(shape, itemsize)
    assert blocksize is not None
    compressor = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, blocksize)
    stored = bytes(compressor.encode(values))
    step_bytes = prod(step) * itemsize
    block = partial_decode._HEADER.unpack_from(stored)[5]
    assert block % step_bytes == 0 or block == len(values.tobytes())
    assert block == max(step_bytes, min(-(-(2**16) // step_bytes) * step_bytes, values.nbytes))
    first = data.draw(st.integers(0, steps - 1))
    ends = [(first, data.draw(st.integers(first + 1, steps)))]
    if data.draw(st.booleans()):
        lo = data.draw(st.integers(0, steps - 1))
        ends.append((lo, data.draw(st.integers(lo + 1, steps))))
    regions = tuple((slice(a, b), slice(None), slice(None)) for a, b in ends)
    reads: list[tuple[int, int]] = []

    def read(start: int, stop: int) -> bytes:
        reads.append((start, stop))
        return stored[start:stop]

    group = zarr.open_group(zarr.storage.MemoryStore(), zarr_format=2)
    array = group.create_array(
        "a", shape=shape, chunks=shape, dtype=dtype, compressors=compressor, filters=None
    )
    spec = chunk_reader._chunk_spec(array.metadata, (0, 0, 0))
    chain = partial_decode.blosc_chain(array.metadata)
    assert chain is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(partial_decode, "RANGED_FROM", 0)
        spans = partial_decode.region_spans(regions, spec.shape, values.itemsize)
        got = partial_decode.decode_ranges(chain, spec, spans, read, len(stored))
    if got is None:  # too few blocks left out to cut (``_block_runs``): read whole instead
        return
    for region in regions:
        np.testing.assert_array_equal(got[region], values[region])
    read_bytes = sum(stop - start for start, stop in reads[1:])
    if partial_decode._HEADER.unpack_from(stored)[2] & partial_decode._MEMCPYED:
        # Incompressible, stored as it is: the steps' own bytes.
        assert read_bytes == sum((b - a) * step_bytes for a, b in ends)
        return
    kept = {k for a, b in ends for k in range(a * step_bytes // block, -(-b * step_bytes // block))}
    table = struct.unpack_from(f"<{-(-values.nbytes // block)}i", stored, 16)
    ends_of = {k: min((o for o in table if o > table[k]), default=len(stored)) for k in kept}
    assert read_bytes == sum(ends_of[k] - table[k] for k in kept)


def test_remembered_headers_are_bounded(tmp_path, monkeypatch):
    """At most ``HEADS_FILES`` headers are remembered: past it, all are forgotten at once
    and the next is remembered alone; every read still gives the data."""
    _settle(monkeypatch, 50_000_000)
    monkeypatch.setattr(chunk_reader._HEADS, "files", 2)
    monkeypatch.setattr(partial_decode, "RANGED_FROM", 0)
    chunk_reader._HEADS.clear()
    written = blosc_array(tmp_path / "c.zarr", 2, (720, 64), (240, 64), "<f8", "lz4", 1, 1, 2048)
    values = np.random.default_rng(3).normal(size=(720, 64))
    written[...] = values
    array = zarr.open_array(open_store(str(tmp_path / "c.zarr")), path="a")
    time.sleep(0.1)
    needed = (slice(100, 102), slice(0, 64))
    for k, remembered in enumerate([1, 2, 1]):  # the third chunk's: the first two forgotten
        chunk, _ = _read_counted_at(array, (k, 0), needed)
        np.testing.assert_array_equal(chunk[needed], values[240 * k + 100 : 240 * k + 102])
        assert len(chunk_reader._HEADS) == remembered
