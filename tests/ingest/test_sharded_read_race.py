"""Issue 19, remaining part 1: a reader that fetched a shard's index can race an append
that rewrites that shard (the cube's last, partial shard). The race is made deterministic
by interposing on the store: right after the reader's index request for the partial shard
is answered, the shard object is replaced by the one the append writes. The reader holds
the old metadata snapshot (7 steps) and must answer as xarray does on those 7 steps —
neither fail nor return values of the new file read with the old index. Fixed twice: by
the append's shard layout (``stores/stable_shards.py``: old inner chunks keep their offsets,
so any reader, xarray's too, reads right values), and, for shards rewritten by other
writers, by accumulus checking the index of a partial shard again after reading from it
(``chunk_reader``)."""

from __future__ import annotations

import shutil

import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import SuffixByteRequest
from zarr.storage import LocalStore, WrapperStore

import accumulus
from cubes import xarray_reference

from .helpers import VAR, truth, write_granule

CHUNKS = {"time": 2, "lat": 3}
SHARDS = {"time": 6, "lat": 6}
PARTIAL = f"{VAR}/c/1/0/0"  # the shard holding step 6 of 7 (time 6..11)


class RewriteAfterIndex(WrapperStore[LocalStore]):
    """Answers the first index request for ``PARTIAL`` from the old shard, then puts the
    rewritten shard (``new``) in its place, as an append landing at that moment would."""

    def __init__(self, store, new: bytes) -> None:
        super().__init__(store)
        self.new = new
        self.swapped = False

    def _with_store(self, store):
        view = super()._with_store(store)
        view.new, view.swapped = self.new, self.swapped
        return view

    async def get(self, key, prototype, byte_range=None):
        value = await self._store.get(key, prototype, byte_range)
        if key == PARTIAL and isinstance(byte_range, SuffixByteRequest) and not self.swapped:
            self.swapped = True
            path = self._store.root / PARTIAL
            # Replaced in one piece, as the append does (other threads read it meanwhile).
            path.with_suffix(".new").write_bytes(self.new)
            path.with_suffix(".new").replace(path)
        return value


def race(tmp_path, rewrite: str):
    """A cube of 7 steps and the bytes of its partial last shard once steps 7..11 are
    appended: by ``accumulus.append`` (``rewrite="accumulus"``) or written into the array
    by zarr-python itself ("zarr", which lays the shard out afresh). Also the values the
    7-step snapshot holds, as xarray reads them before any rewrite."""
    t = truth(12)
    old = tmp_path / "old.zarr"
    accumulus.append(
        str(old), write_granule(tmp_path / "a.nc", t, 0, 7), chunks=CHUNKS, shards=SHARDS
    )
    new = tmp_path / "new.zarr"
    shutil.copytree(old, new)
    accumulus.append(str(new), write_granule(tmp_path / "b.nc", t, 7, 12))
    if rewrite == "zarr":
        stored = zarr.open_array(new / VAR, mode="r")[7:12]
        shutil.rmtree(new)
        shutil.copytree(old, new)
        array = zarr.open_array(new / VAR, mode="r+")
        array.resize((12, *array.shape[1:]))
        array[7:12] = stored
    rewritten = (new / PARTIAL).read_bytes()
    assert rewritten != (old / PARTIAL).read_bytes()
    return old, rewritten, xr.open_zarr(old)[VAR].load()


def test_reader_holding_an_old_index_while_an_append_rewrites_the_shard(tmp_path):
    old, rewritten, expected = race(tmp_path, "accumulus")
    want = xarray_reference(expected, ("time",), "area", "mean")
    store = RewriteAfterIndex(LocalStore(old, read_only=True), rewritten)
    got = accumulus.average(store, VAR, ("time",), {}, use_accumulation=False)
    assert store.swapped  # the race happened: ranges were read from the rewritten shard
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


def test_xarray_holding_an_old_index_while_an_append_rewrites_the_shard(tmp_path):
    """The rewritten shard keeps every old inner chunk in place: readers other than
    accumulus (zarr-python, through xarray) read the old snapshot right too."""
    old, rewritten, expected = race(tmp_path, "accumulus")
    store = RewriteAfterIndex(LocalStore(old, read_only=True), rewritten)
    got = xr.open_zarr(store)[VAR].load()
    assert store.swapped
    xr.testing.assert_identical(got, expected)


def test_reader_reads_again_when_another_writer_moved_the_inner_chunks(tmp_path):
    """A shard rewritten by zarr-python itself (inner chunks moved): accumulus sees the
    index changed and reads again with the new one, which holds the old snapshot's values
    at the same places (an append changes nothing before its start)."""
    old, rewritten, expected = race(tmp_path, "zarr")
    want = xarray_reference(expected, ("time",), "area", "mean")
    store = RewriteAfterIndex(LocalStore(old, read_only=True), rewritten)
    got = accumulus.average(store, VAR, ("time",), {}, use_accumulation=False)
    assert store.swapped
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


class OldIndexOnce(WrapperStore[LocalStore]):
    """Answers the first index request for ``key`` with the index of ``old`` (the shard's
    bytes before a rewrite): the reader fetched it just before the rewrite landed."""

    def __init__(self, store, key: str, old: bytes) -> None:
        super().__init__(store)
        self.key, self.old, self.served = key, old, False

    def _with_store(self, store):
        view = super()._with_store(store)
        view.key, view.old, view.served = self.key, self.old, self.served
        return view

    async def get(self, key, prototype, byte_range=None):
        if key == self.key and isinstance(byte_range, SuffixByteRequest) and not self.served:
            self.served = True
            return prototype.buffer.from_bytes(self.old[-byte_range.suffix :])
        return await self._store.get(key, prototype, byte_range)


def test_an_old_index_on_a_rewritten_shard_gives_no_wrong_values(tmp_path):
    """Uncompressed inner chunks of one size, written by xarray: zarr lays them out in Morton
    order, so after an append the old index's ranges fall exactly on *other* inner chunks of
    the rewritten shard. Nothing fails to decode there: only the index check tells."""
    values = np.random.default_rng(0).normal(size=(8, 8))
    coords = {"lat": np.arange(8.0)}

    def steps(start: int, stop: int) -> xr.Dataset:
        times = np.arange(start, stop).astype("datetime64[D]")
        return xr.Dataset({VAR: (("time", "lat"), values[start:stop])}, {"time": times, **coords})

    encoding = {VAR: {"chunks": (2, 2), "shards": (8, 8), "compressors": None}}
    old = tmp_path / "old.zarr"
    steps(0, 3).to_zarr(old, zarr_format=3, encoding=encoding, consolidated=False)
    new = tmp_path / "new.zarr"
    shutil.copytree(old, new)
    steps(3, 8).to_zarr(new, append_dim="time", consolidated=False)
    key = f"{VAR}/c/0/0"
    before = (old / key).read_bytes()
    (old / key).write_bytes((new / key).read_bytes())  # the rewrite, under the old metadata

    store = OldIndexOnce(LocalStore(old, read_only=True), key, before)
    got = accumulus.average(store, VAR, ("lat",), {}, use_accumulation=False)
    assert store.served
    weights = np.cos(np.deg2rad(coords["lat"]))  # area weights, the default
    want = (values[:3] * weights).sum(axis=1) / weights.sum()
    np.testing.assert_allclose(got.values, want, rtol=1e-12)
