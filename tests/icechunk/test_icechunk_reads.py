"""A read-only session of a local repository is read in the calling thread, from the
repository's files (``stores.transactional.SnapshotFiles``): the same bytes icechunk's store
returns, no read through icechunk once a snapshot's maps are known, and a Datacube on a
branch still moves to the branch's new commits between answers."""

from __future__ import annotations

import numpy as np
import pytest
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import accumulus
from accumulus.stores.base import reads_synchronously
from accumulus.stores.opening import open_store
from accumulus.stores.transactional import transaction_of
from cubes import xarray_reference
from ingest.helpers import VAR, truth, write_granules


@pytest.fixture
def archive(tmp_path) -> tuple[str, list[str]]:
    """A repository holding the first 12 of 24 steps (chunks of 4), accumulated; and the
    granules of all 24 (3 steps each)."""
    granules = [str(p) for p in write_granules(tmp_path / "in", truth(24), 3)]
    url = f"icechunk://{tmp_path / 'repo'}"
    accumulus.append(url, granules[:4], chunks={"time": 4})
    accumulus.accumulate(url, VAR, ["time", "lat,lon"])
    return url, granules


def test_only_a_local_read_only_session_reads_in_the_thread(archive):
    url, _ = archive
    assert reads_synchronously(open_store(url, "r"))
    assert not reads_synchronously(open_store(url, "r+"))  # its chunk map changes as it writes


def test_the_files_give_the_bytes_icechunk_gives(archive):
    url, _ = archive
    store = transaction_of(open_store(url, "r"))
    assert store is not None and store.files is not None
    prototype = default_buffer_prototype()
    keys = [
        "zarr.json",
        f"{VAR}/zarr.json",
        f"{VAR}/c/0/0/0",
        f"{VAR}/c/2/0/0",
        f"{VAR}/c/3/0/0",  # past the extent: never written
        f"{VAR}_accumulation_group/zarr.json",
        "time/c/0",
        "no/such/zarr.json",
    ]
    ranges = {
        None: slice(None),
        RangeByteRequest(2, 9): slice(2, 9),
        OffsetByteRequest(5): slice(5, None),
        SuffixByteRequest(4): slice(-4, None),
    }
    for key in keys:
        whole = sync(store.get(key, prototype))  # through icechunk
        for byte_range, part in ranges.items():
            got = store.read_sync(key, prototype, byte_range)
            if whole is None:
                assert got is None, key
            else:
                want = whole.to_bytes()[part]
                assert got is not None and got.to_bytes() == want, (key, byte_range)


def test_a_second_answer_reads_nothing_through_icechunk(archive, icechunk_gets):
    url, _ = archive
    cube = accumulus.open(url)
    box = {"lat": (-30, 30), "lon": (0, 180)}
    first = cube.average(VAR, "time", ranges=box)
    icechunk_gets.clear()  # what the second answer asks
    again = cube.average(VAR, "time", ranges=box)
    assert icechunk_gets == []
    np.testing.assert_array_equal(again.values, first.values)
    ds = truth(24).decoded(12)[VAR].sel(lat=slice(-30, 30), lon=slice(0, 180))
    want = xarray_reference(ds, ["time"], "area", "mean")
    np.testing.assert_allclose(first.values, want.values, rtol=1e-9, equal_nan=True)


def test_a_cube_on_a_branch_answers_its_new_commits(archive):
    url, granules = archive
    cube = accumulus.open(url)
    t = truth(24)
    for steps in (12, 24):
        if steps == 24:
            accumulus.append(url, granules[4:])  # a new commit while the cube is open
        got = cube.average(VAR, ["lat", "lon"])
        want = xarray_reference(t.decoded(steps)[VAR], ["lat", "lon"], "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
