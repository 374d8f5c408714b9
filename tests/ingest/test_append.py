"""Appending: only new chunks and the rewritten partial chunk are written; values, times and
fill values arrive in the cube's encoding; re-runs are idempotent; overlaps are refused or
skipped; the journal says what was ingested."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store

from .helpers import VAR, snapshot, truth, write_granule, write_granules
from .test_create import assert_matches_truth

APPENDED = (VAR, "time", "time_bnds")


def chunk_keys(name: str, old: int, new: int, chunk: int, others: tuple[int, ...]) -> set[str]:
    """Keys of the chunks of ``name`` that hold indices [old, new) along its first axis."""
    rows = range(old // chunk, (new - 1) // chunk + 1)
    return {
        f"{name}/" + ".".join(map(str, (r, *rest))) for r in rows for rest in np.ndindex(*others)
    }


@pytest.mark.parametrize(
    ("old", "new"),
    [(10, 13), (8, 13), (10, 21), (12, 16)],
    ids=["inside-partial-chunk", "from-chunk-edge", "several-chunks", "fills-exactly"],
)
def test_append_writes_new_chunks_and_the_partial_chunk_only(tmp_path, old, new):
    t = truth(new, nlat=6)
    store = tmp_path / "cube.zarr"
    first = write_granule(tmp_path / "a.nc", t, 0, old)
    accumulus.append(str(store), first, chunks={"time": 4, "lat": 3})
    counting = CountingStore(open_store(store, "r+"))

    accumulus.append(counting, write_granule(tmp_path / "b.nc", t, old, new))

    written = {k for k in counting.counts.writes if not k.startswith(".accumulus/")}
    chunks = {k for k in written if not is_metadata_key(k)}
    coordinate = 2**20 // 4  # the 1-D time chunk
    assert chunks == (
        chunk_keys(VAR, old, new, 4, (2, 1))
        | chunk_keys("time", old, new, coordinate, ())
        | chunk_keys("time_bnds", old, new, coordinate // 2, (1,))
    )
    metadata = {k for k in written if is_metadata_key(k)}
    assert {k.split("/")[0] for k in metadata if "/" in k} == set(APPENDED)
    assert ".zmetadata" in metadata
    # The old partial chunk is read once (zarr merges it); nothing else of the data.
    partial = chunk_keys(VAR, old, old + 1, 4, (2, 1)) if old % 4 else set()
    data_read = {k for k in counting.counts.reads if k.startswith(f"{VAR}/")}
    assert {k for k in data_read if not is_metadata_key(k)} == partial
    assert_matches_truth(store, t)


def test_times_in_other_units_are_converted(tmp_path):
    t = truth(12)
    store = tmp_path / "cube.zarr"
    granules = [
        write_granule(tmp_path / "a.nc", t, 0, 4),
        write_granule(tmp_path / "b.nc", t, 4, 8, units="minutes since 2000-03-01 12:00:00"),
        write_granule(
            tmp_path / "c.nc", t, 8, 12, units="days since 2000-03-01 12:00:00", time_dtype="f8"
        ),
    ]
    accumulus.append(str(store), granules, chunks={"time": 5})
    assert_matches_truth(store, t)
    np.testing.assert_array_equal(zarr.open_array(store, path="time")[:], t.hours)


def test_times_the_cube_cannot_store_exactly_are_refused(tmp_path):
    t = truth(8)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 4), chunks={"time": 4})
    before = snapshot(store)
    half_hours = write_granule(
        tmp_path / "b.nc", t, 4, 8, units="minutes since 2000-03-01 12:00:00", hours_offset=0.5
    )
    with pytest.raises(accumulus.AccumulusError, match=r"b\.nc.*cannot be stored exactly"):
        accumulus.append(str(store), half_hours)
    assert snapshot(store) == before


def test_another_fill_value_is_mapped_to_the_cubes(tmp_path):
    t = truth(8)
    store = tmp_path / "cube.zarr"
    granules = [
        write_granule(tmp_path / "a.nc", t, 0, 4),
        write_granule(tmp_path / "b.nc", t, 4, 8, fill=-32768),
    ]
    accumulus.append(str(store), granules, chunks={"time": 4})
    assert_matches_truth(store, t)
    assert (zarr.open_array(store, path=VAR)[4:] == -32768).sum() == 0


def test_rerun_after_success_changes_nothing(tmp_path):
    t = truth(12)
    granules = write_granules(tmp_path / "in", t, 3)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules, chunks={"time": 5})
    before = snapshot(store)

    result = accumulus.append(str(store), granules)

    assert result.appended == () and len(result.skipped) == 4 and result.commits == 0
    assert all("already ingested" in why for _, why in result.skipped)
    assert snapshot(store) == before


def test_a_granule_given_twice_is_appended_once(tmp_path):
    t = truth(6)
    a, b = write_granules(tmp_path / "in", t, 3)
    store = tmp_path / "cube.zarr"
    result = accumulus.append(str(store), [a, b, a], chunks={"time": 4})
    assert result.appended == (str(a), str(b))
    assert result.skipped == ((str(a), f"the same as {a}"),)
    assert_matches_truth(store, t)


def test_overlaps_are_refused_or_skipped(tmp_path):
    t = truth(16)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 10), chunks={"time": 4})
    overlapping = write_granule(tmp_path / "b.nc", t, 8, 14)
    inside = write_granule(tmp_path / "c.nc", t, 2, 6)
    before = snapshot(store)

    with pytest.raises(accumulus.AccumulusError, match=r"b\.nc: time .* not after the end"):
        accumulus.append(str(store), overlapping)
    assert snapshot(store) == before

    result = accumulus.append(str(store), [inside, overlapping], skip_existing=True)

    assert [name for name, _ in result.skipped] == [str(inside)]
    assert result.appended == (str(overlapping),) and result.extent == (10, 14)
    journal = json.loads((store / ".accumulus" / "journal.json").read_text())
    assert [(g["start"], g["stop"]) for g in journal["granules"]] == [(0, 10), (10, 14)]
    assert_matches_truth(store, t, 14)


def test_granules_are_appended_in_time_order(tmp_path):
    t = truth(12)
    granules = write_granules(tmp_path / "in", t, 3)
    store = tmp_path / "cube.zarr"
    result = accumulus.append(str(store), list(reversed(granules)), chunks={"time": 4})
    assert result.appended == tuple(map(str, granules))
    assert_matches_truth(store, t)


def test_journal_records_each_granule(tmp_path):
    t = truth(10)
    granules = write_granules(tmp_path / "in", t, 4)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules, chunks={"time": 3})

    journal = json.loads((store / ".accumulus" / "journal.json").read_text())

    assert journal["dim"] == "time" and journal["state"] == "ready" and journal["extent"] == 10
    records = journal["granules"]
    assert [r["name"] for r in records] == list(map(str, granules))
    assert [(r["start"], r["stop"]) for r in records] == [(0, 4), (4, 8), (8, 10)]
    for record, path in zip(records, granules, strict=True):
        assert record["size"] == path.stat().st_size
        assert record["checksum"] == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert (records[0]["first"], records[-1]["last"]) == (
        "2000-03-01T12:00:00",
        "2000-03-02T15:00:00",
    )


def test_chunks_cannot_change_an_existing_cube(tmp_path):
    t = truth(8)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 4), chunks={"time": 4})
    b = write_granule(tmp_path / "b.nc", t, 4, 8)
    with pytest.raises(
        accumulus.AccumulusError, match="chunked time=4; --chunks and --chunking apply"
    ):
        accumulus.append(str(store), b, chunks={"time": 8})
    accumulus.append(str(store), b, chunks={"time": 4})  # the same chunks: fine
    assert_matches_truth(store, t)


def test_progress_reports_checking_and_writing(tmp_path):
    t = truth(9)
    granules = write_granules(tmp_path / "in", t, 3)
    calls = []
    accumulus.append(
        str(tmp_path / "cube.zarr"), granules, progress=lambda d, n: calls.append((d, n))
    )
    assert calls[-1] == (6, 6) and [d for d, _ in calls] == sorted(d for d, _ in calls)
