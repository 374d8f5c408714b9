"""Issue 19, remaining part 1: a reader that fetched a shard's index can race an append
that rewrites that shard (the cube's last, partial shard). The race is made deterministic
by interposing on the store: right after the reader's index request for the partial shard
is answered, the shard object is replaced by the one the append writes. The reader holds
the old metadata snapshot (7 steps) and must answer as xarray does on those 7 steps —
neither fail nor return values of the new file read with the old index."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import xarray as xr
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
            path.write_bytes(self.new)
        return value


@pytest.mark.xfail(
    strict=True,
    reason="issue 19 part 1 not fixed yet: old index + rewritten shard -> decode error",
)
def test_reader_holding_an_old_index_while_an_append_rewrites_the_shard(tmp_path):
    t = truth(12)
    old = tmp_path / "old.zarr"
    accumulus.append(
        str(old), write_granule(tmp_path / "a.nc", t, 0, 7), chunks=CHUNKS, shards=SHARDS
    )
    new = tmp_path / "new.zarr"
    shutil.copytree(old, new)
    accumulus.append(str(new), write_granule(tmp_path / "b.nc", t, 7, 12))
    rewritten = (new / PARTIAL).read_bytes()
    assert rewritten != (old / PARTIAL).read_bytes()

    expected = xr.open_zarr(old)[VAR].load()  # the 7 steps the reader's snapshot holds
    want = xarray_reference(expected, ("time",), "area", "mean")
    store = RewriteAfterIndex(LocalStore(old, read_only=True), rewritten)
    got = accumulus.average(store, VAR, ("time",), {}, use_accumulation=False)
    assert store.swapped  # the race happened: ranges were read from the rewritten shard
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
