"""Decoded accumulation chunks kept per process (``decoded_chunks``) or shared by processes
(``shared_chunks``): served again only for the same version of the same file, bounded by
their decoded bytes, read-only, and the answers of queries read through them those of
xarray."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import zarr

import accumulus
from accumulus import chunk_reader, decoded_chunks
from accumulus.accumulation.build import placement
from accumulus.accumulation.build.encoded_chunks import encode_chunk
from accumulus.chunk_reader import ChunkRequest, ReadCounts, read_chunks
from accumulus.decoded_chunks import DecodedChunks
from accumulus.shared_chunks import HEADER_BYTES, SharedChunks
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.opening import open_store
from accumulus.stores.safe_reads import FileVersion
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference
from rewrites import WAYS, rewrite


@pytest.fixture(params=["private", "shared"])
def kept(request, monkeypatch, tmp_path):
    """A cache of 1 MB of its own as the process's (the service's tests may have set that
    one), in this process or shared (files in a directory), with files settled 50 ms after
    they were written (``SETTLED_NS``)."""
    monkeypatch.setattr(decoded_chunks, "SETTLED_NS", SETTLED_NS)
    cache = DecodedChunks(2**20)
    if request.param == "shared":
        (tmp_path / "shared").mkdir()
        cache.share(SharedChunks(tmp_path / "shared", 2**20))
    monkeypatch.setattr(chunk_reader, "DECODED", cache)
    return cache


SETTLED_NS = 50_000_000


def _version(inode: int, changed: int = 1) -> FileVersion:
    return FileVersion(1, inode, 100, 1, changed)


def test_kept_only_for_the_same_version_shape_and_type():
    cache = DecodedChunks(10_000)
    values = np.arange(100, dtype="<f8")
    cache.put(_version(1), values, now_ns=10**12)
    assert not values.flags.writeable  # shared from now on
    assert cache.get(_version(1), ((100,),), np.dtype("<f8")) is values
    assert cache.get(_version(1), ((50,), (100,)), np.dtype("<f8")) is values
    assert cache.get(_version(1, changed=2), ((100,),), np.dtype("<f8")) is None  # rewritten
    assert cache.get(_version(2), ((100,),), np.dtype("<f8")) is None  # another file
    assert cache.get(_version(1), ((10, 10),), np.dtype("<f8")) is None
    assert cache.get(_version(1), ((100,),), np.dtype("<f4")) is None
    assert (cache.hits, cache.misses) == (2, 4)


def test_every_read_is_counted_once_by_threads_reading_at_once(tmp_path):
    """Each read a hit or a miss, in this process and through a shared store alike, however
    many threads read at once (the counts are the service's, /api/health)."""
    (tmp_path / "shared").mkdir()
    for shared in (None, SharedChunks(tmp_path / "shared", 2**20)):
        cache = DecodedChunks(2**20)
        cache.share(shared)
        cache.put(_version(1), np.arange(100.0), now_ns=10**12)

        def read(cache: DecodedChunks, times: int = 500) -> None:
            for k in range(times):
                cache.get(_version(1 + k % 2), ((100,),), np.dtype("<f8"))

        threads = [threading.Thread(target=read, args=(cache,)) for _ in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert (cache.hits, cache.misses) == (2000, 2000)


def test_bounded_least_recently_used_first():
    cache = DecodedChunks(2000)  # two chunks of 100 float64
    for inode in (1, 2):
        cache.put(_version(inode), np.zeros(100), now_ns=10**12)
    cache.get(_version(1), ((100,),), np.dtype("f8"))  # 2 is now the least recently used
    cache.put(_version(3), np.zeros(100), now_ns=10**12)
    assert cache.held == 1600
    assert cache.get(_version(2), ((100,),), np.dtype("f8")) is None
    assert cache.get(_version(1), ((100,),), np.dtype("f8")) is not None
    cache.put(_version(4), np.zeros(1000), now_ns=10**12)  # larger than the limit: not kept
    assert cache.held == 1600
    cache.set_limit(1000)
    assert cache.held == 800
    cache.set_limit(0)
    assert cache.held == 0 and cache.get(_version(1), ((100,),), np.dtype("f8")) is None


def test_a_file_changed_just_now_is_not_kept():
    """A write within a tick of the file system's clock may leave its times as they were."""
    cache = DecodedChunks(10_000)
    cache.put(FileVersion(1, 1, 100, 10**12, 10**12), np.zeros(10), now_ns=10**12 + 10**6)
    assert cache.held == 0


def _accumulation_chunk(tmp_path, rows: int = 240):
    """A checksummed accumulation-like chunk of 240 x 64 (``placement.codecs``: Blosc in
    blocks, then Fletcher-32) in a local file, of an array of ``rows`` x 64, opened as a
    query opens it, and the chunk's values."""
    group = zarr.open_group(tmp_path / "c.zarr", mode="w", zarr_format=2)
    written = group.create_array(
        "a", shape=(rows, 64), chunks=(240, 64), dtype="<f8",
        attributes={"_ARRAY_DIMENSIONS": ["t", "y"]}, **placement.codecs(2, True, True),
    )  # fmt: skip
    values = np.random.default_rng(3).normal(size=(240, 64)).cumsum(axis=0)
    path = tmp_path / "c.zarr" / "a" / "0.0"
    path.write_bytes(encode_chunk(written.metadata, np.dtype("<f8"), values))
    time.sleep(2 * SETTLED_NS / 1e9)
    return zarr.open_array(open_store(str(tmp_path / "c.zarr")), path="a"), values, path


def _read(array, needed, keep=True, coords=(0, 0)) -> tuple[np.ndarray, ReadCounts]:
    got: list[np.ndarray] = []
    request = ChunkRequest(array, coords, needed=needed, keep=keep)
    counts = read_chunks([request], lambda _, chunk: got.append(chunk))
    return got[0], counts


def test_a_kept_chunk_is_read_again_only_when_its_file_changes(tmp_path, kept):
    """Read once (whole), a kept chunk serves any part of it without reading its bytes
    again; written anew (in place, or replaced by another file: another version), it is
    read again and gives the new values (not kept: that version has not settled)."""
    array, values, path = _accumulation_chunk(tmp_path)
    chunk, counts = _read(array, (slice(3, 5), slice(0, 64)))
    assert counts.bytes == path.stat().st_size  # decoded whole, to be kept
    np.testing.assert_array_equal(chunk, values)
    for rows in [(3, 5), (100, 200)]:
        needed = (slice(*rows), slice(0, 64))
        chunk, counts = _read(array, needed)
        assert counts.bytes == 0
        np.testing.assert_array_equal(chunk[needed], values[slice(*rows)])
    assert kept.hits == 2
    with pytest.raises(ValueError, match="read-only"):
        chunk[0, 0] = 1.0
    for how in WAYS:
        values = values + 1
        data = encode_chunk(array.metadata, np.dtype("<f8"), values)
        rewrite(path, data, how)
        chunk, counts = _read(array, (slice(0, 2), slice(0, 64)))
        assert counts.bytes > 0
        np.testing.assert_array_equal(chunk, values)


def test_a_kept_chunk_is_found_by_one_stat_of_its_file(tmp_path, kept, monkeypatch):
    """Read again, a kept chunk's file is not opened: one ``stat`` tells its version."""
    array, values, _ = _accumulation_chunk(tmp_path)
    _read(array, (slice(3, 5), slice(0, 64)))
    opened = []
    read_parts_sync = LeanLocalStore.read_parts_sync

    def counted(self, key, parts):
        opened.append(key)
        return read_parts_sync(self, key, parts)

    monkeypatch.setattr(LeanLocalStore, "read_parts_sync", counted)
    chunk, _ = _read(array, (slice(100, 200), slice(0, 64)))
    np.testing.assert_array_equal(chunk, values)
    assert opened == [] and kept.hits == 1


def test_a_chunk_past_the_arrays_end_is_kept_as_far_as_the_array_holds(tmp_path, kept):
    """A chunk longer than what the array holds (an accumulation sized for growth) is kept
    as decoded for that snapshot, and served again to it."""
    array, values, _ = _accumulation_chunk(tmp_path, rows=200)
    first, counts = _read(array, (slice(190, 200), slice(0, 64)))
    header = HEADER_BYTES if kept.shared else 0
    assert counts.bytes > 0 and kept.held == first.nbytes + header
    again, counts = _read(array, (slice(0, 5), slice(0, 64)))
    assert counts.bytes == 0 and again.shape == first.shape
    np.testing.assert_array_equal(again[:200], values[:200])


def test_each_chunk_of_an_array_is_kept_as_its_own_shape(tmp_path, kept):
    """The chunks of one array, the last past the array's end: each is served again as it
    was decoded (whole, or the last as far as the array holds), whichever is read first."""
    array, values, path = _accumulation_chunk(tmp_path, rows=400)  # the second holds 160
    path.with_name("1.0").write_bytes(encode_chunk(array.metadata, np.dtype("<f8"), values))
    time.sleep(2 * SETTLED_NS / 1e9)
    shapes: dict[int, tuple[int, ...]] = {}
    for order in [(1, 0), (0, 1)]:
        for c in order:
            chunk, counts = _read(array, (slice(0, 5), slice(0, 64)), coords=(c, 0))
            assert chunk.shape == shapes.setdefault(c, chunk.shape)
            assert chunk.shape in ([(240, 64)] if c == 0 else [(160, 64), (240, 64)])
            held = 240 if c == 0 else 160
            np.testing.assert_array_equal(chunk[:held], values[:held])
            assert (counts.bytes == 0) == (order == (0, 1))  # kept from the first round
    assert kept.hits == 2


def test_chunks_not_asked_to_be_kept_are_not(tmp_path, kept):
    array, values, _ = _accumulation_chunk(tmp_path)
    for _ in range(2):
        chunk, counts = _read(array, (slice(3, 5), slice(0, 64)), keep=False)
        assert counts.bytes > 0
        np.testing.assert_array_equal(chunk[3:5], values[3:5])
    assert kept.held == 0


def test_answers_read_through_kept_chunks_are_xarrays(tmp_path, kept, monkeypatch):
    """Series and maps over boxes and periods, asked twice with accumulation chunks kept
    (the default accumulations: time, and lat+lon at every cell): the second time from the
    cache, equal to the first and to xarray's on the raw data."""
    for memo in (chunk_reader._VERIFIED, chunk_reader._HEADS):
        monkeypatch.setattr(memo, "settled_ns", SETTLED_NS)
    ds = synthetic_dataset({"time": 60, "lat": 12, "lon": 16}, seed=5)
    path = str(tmp_path / "c.zarr")
    write_cube(ds, path, {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(path, VAR)
    time.sleep(2 * SETTLED_NS / 1e9)
    questions = [  # index ranges, and the dimensions averaged over
        ({"time": (3, 47), "lat": (1, 10), "lon": (2, 15)}, ["lat", "lon"]),
        ({"time": (12, 58), "lat": (0, 7), "lon": (5, 9)}, ["time"]),
        ({"time": (0, 59), "lat": (4, 11), "lon": (0, 15)}, ["time"]),
    ]
    kept.set_limit(64 * 2**20)

    def answers() -> list[np.ndarray]:
        out = []
        for box, over in questions:
            ranges = {d: (ds[d].values[lo], ds[d].values[hi]) for d, (lo, hi) in box.items()}
            got = accumulus.average(path, VAR, over, ranges)
            assert got.attrs["accumulation_chunks_read"] > 0
            isel = {d: slice(lo, hi + 1) for d, (lo, hi) in box.items()}
            expected = xarray_reference(ds[VAR].isel(isel), over, "area", "mean")
            np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
            out.append(got.values)
        return out

    first = answers()
    assert kept.held > 0
    hits, misses = kept.hits, kept.misses
    second = answers()
    assert kept.hits > hits and kept.misses == misses  # every chunk kept the first time
    for a, b in zip(first, second, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("damage", ["cut", "removed"])
def test_a_shared_entry_damaged_or_removed_is_read_and_decoded(tmp_path, monkeypatch, damage):
    """An entry of the shared store cut, or removed by another process, is a miss: the chunk
    is read and decoded again, its values the file's."""
    monkeypatch.setattr(decoded_chunks, "SETTLED_NS", SETTLED_NS)
    (tmp_path / "shared").mkdir()
    kept = DecodedChunks()
    kept.share(SharedChunks(tmp_path / "shared", 2**20))
    monkeypatch.setattr(chunk_reader, "DECODED", kept)
    array, values, _ = _accumulation_chunk(tmp_path)
    _read(array, (slice(3, 5), slice(0, 64)))
    (entry,) = [p for p in (tmp_path / "shared").iterdir() if not p.name.startswith(".")]
    if damage == "cut":
        entry.write_bytes(entry.read_bytes()[: HEADER_BYTES + 100])
    else:
        entry.unlink()
    chunk, counts = _read(array, (slice(3, 5), slice(0, 64)))
    assert counts.bytes > 0
    np.testing.assert_array_equal(chunk, values)
    again, counts = _read(array, (slice(100, 200), slice(0, 64)))  # kept again
    assert counts.bytes == 0
    np.testing.assert_array_equal(again, values)


def _forms_kept(kept: DecodedChunks) -> list[str]:
    """The derived forms ``kept`` holds (their names)."""
    if kept.shared is not None:
        names = [p.name for p in kept.shared.directory.iterdir() if not p.name.startswith(".")]
        return [name for name in names if "rows" in name]
    return [key[2] for key in kept._entries if key[2]]


@pytest.mark.parametrize("seed", range(3))
def test_series_summed_from_kept_row_prefix_sums_are_xarrays(tmp_path, kept, monkeypatch, seed):
    """Area-weighted series over boxes (the sums at every cell keep rows of latitude, weighed
    at a query) read through kept chunks are summed from each chunk's weighted prefix sums
    along its rows, kept in its place (``row_prefix``) and not beside the chunk itself: on
    random shapes and chunkings (the last chunk of rows cut short by the array's end), boxes
    within a chunk of rows and across chunks (a single row of a chunk too), equal to xarray's
    and, to a few ulps, to the same series summed row by row. A zonal mean (rows kept, not
    summed) reads the chunks as they are."""
    for memo in (chunk_reader._VERIFIED, chunk_reader._HEADS):
        monkeypatch.setattr(memo, "settled_ns", SETTLED_NS)
    rng = np.random.default_rng(seed)
    sizes = {"time": int(rng.integers(20, 50)), "lat": int(rng.integers(7, 20)), "lon": 12}
    ds = synthetic_dataset(sizes, seed=seed)
    path = str(tmp_path / "c.zarr")
    write_cube(
        ds, path, {"time": int(rng.integers(4, 15)), "lat": int(rng.integers(2, 7)), "lon": 5}
    )
    accumulus.accumulate(path, VAR)
    time.sleep(2 * SETTLED_NS / 1e9)
    boxes = []
    for _ in range(6):
        lat = sorted(int(k) for k in rng.choice(sizes["lat"], 2, replace=False))
        lon = sorted(int(k) for k in rng.choice(sizes["lon"], 2, replace=False))
        t0 = int(rng.integers(0, sizes["time"] - 1))
        boxes.append({"time": (t0, int(rng.integers(t0, sizes["time"]))), "lat": lat, "lon": lon})
    # The same chunks read for a single row and for several.
    boxes += [{**boxes[0], "lat": [2, 2]}, {**boxes[0], "lat": [0, 5]}]

    def answers(over: list[str]) -> list[np.ndarray]:
        out = []
        for box in boxes:
            ranges = {d: (ds[d].values[lo], ds[d].values[hi]) for d, (lo, hi) in box.items()}
            got = accumulus.average(path, VAR, over, ranges, plan="accumulation")
            assert got.attrs["raw_chunks_read"] == 0
            isel = {d: slice(lo, hi + 1) for d, (lo, hi) in box.items()}
            expected = xarray_reference(ds[VAR].isel(isel), over, "area", "mean")
            np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
            out.append(got.values)
        return out

    kept.set_limit(0)
    row_by_row = answers(["lat", "lon"])  # nothing kept: each slab's rows weighed and summed
    assert not _forms_kept(kept)
    kept.set_limit(64 * 2**20)
    first = answers(["lat", "lon"])
    assert _forms_kept(kept)
    if kept.shared is None:  # no file kept both as it is and as its prefix sums
        derived = {key[:2] for key in kept._entries if key[2]}
        assert not [key for key in kept._entries if not key[2] and key[:2] in derived]
    hits, misses = kept.hits, kept.misses
    second = answers(["lat", "lon"])
    assert kept.hits > hits and kept.misses == misses  # every form kept the first time
    for a, b, c in zip(row_by_row, first, second, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-13)
        np.testing.assert_array_equal(c, b)
    answers(["lon"])


@pytest.mark.parametrize("array", ["acc_uw_lat_lon", "acc_n_lat_lon"])
def test_a_missing_chunk_of_kept_row_prefix_sums_is_named(tmp_path, kept, array):
    """A chunk of the sums or of the counts missing is named as without the cache: its
    prefix sums are not summed into an answer (a missing chunk of counts reads as the
    type's largest value, not as counts)."""
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=2)
    path = tmp_path / "c.zarr"
    write_cube(ds, str(path), {"time": 10, "lat": 4, "lon": 5})
    accumulus.accumulate(str(path), VAR)
    time.sleep(2 * SETTLED_NS / 1e9)  # settled: kept
    kept.set_limit(64 * 2**20)
    ranges = {
        "lat": (ds.lat.values[1], ds.lat.values[6]),
        "lon": (ds.lon.values[2], ds.lon.values[8]),
    }
    accumulus.average(str(path), VAR, ["lat", "lon"], ranges, plan="accumulation")
    assert _forms_kept(kept)
    for chunk in (path / f"{VAR}_accumulation_group").glob(f"**/{array}*/[0-9]*"):
        chunk.unlink()
    with pytest.raises(accumulus.AccumulusError, match=rf"{array}.* has a missing chunk"):
        accumulus.average(str(path), VAR, ["lat", "lon"], ranges, plan="accumulation")
