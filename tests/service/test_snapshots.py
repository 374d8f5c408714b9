"""Snapshots, dataset names and the answer cache: an append is seen as a whole or not at all,
and makes older answers unreachable."""

from __future__ import annotations

import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zarr
from fastapi.testclient import TestClient
from service_cubes import CHUNKS, append_days, area_mean, dataset, write_cube

from accumulus import api
from accumulus.accumulation.model.groups import read_group
from accumulus.datacube import DatacubeSnapshot
from accumulus.raw_cube import RawCube
from accumulus.service import create_app
from accumulus.service.answers import Answer
from accumulus.service.cache import AnswerCache, entry_bytes
from accumulus.service.datasets import Dataset, DatasetSnapshot, dataset_names
from accumulus.service.parameters import AverageParameters, AverageRequest, check_average_request
from accumulus.stores.opening import open_store
from accumulus.stores.snapshot import PinnedMetadataStore, read_snapshot

NEXT_DAYS = dict(start="2001-02-10", ntime=8, nlat=12, nlon=16, seed=1)


@pytest.fixture
def fresh_cube(tmp_path: Path, cube_data) -> Path:
    """A cube of its own, for tests that append to it."""
    return write_cube(tmp_path / "growing.zarr", cube_data, CHUNKS)


@pytest.mark.parametrize(
    ("zarr_format", "consolidated"), [(3, True), (2, True), (2, False), (3, False)]
)
def test_a_pinned_cube_keeps_its_snapshot_while_an_append_lands(
    tmp_path: Path, cube_data, zarr_format, consolidated
):
    path = write_cube(
        tmp_path / "c.zarr",
        cube_data,
        CHUNKS,
        zarr_format=zarr_format,
        consolidated=consolidated,
        accumulate=False,
    )
    store = open_store(str(path))
    before = read_snapshot(store)
    assert before.complete is not consolidated
    assert read_snapshot(store).token == before.token  # nothing written, same token

    append_days(path, dataset(**NEXT_DAYS))

    after = read_snapshot(store)
    assert after.token != before.token
    assert RawCube(PinnedMetadataStore(store, after)).variable("tas").shape == (48, 12, 16)
    # A cube opened now on the snapshot read before the append (a request that read the
    # token just before a writer finished) sees 40 days, and answers as the data was.
    pinned = RawCube(PinnedMetadataStore(store, before))
    assert pinned.variable("tas").shape == (40, 12, 16)
    assert len(pinned.index("time")) == 40
    series = api.average(pinned, "tas", "lat,lon")
    np.testing.assert_allclose(
        series.values, area_mean(cube_data, ["lat", "lon"]).values, rtol=1e-10
    )


def test_a_complete_snapshot_hides_arrays_written_after_it(tmp_path: Path, cube_data):
    path = write_cube(
        tmp_path / "c.zarr", cube_data, CHUNKS, zarr_format=2, consolidated=False, accumulate=False
    )
    store = open_store(str(path))
    before = read_snapshot(store)
    api.accumulate(str(path), "tas")  # writes a group of new arrays
    pinned = RawCube(PinnedMetadataStore(store, before))
    assert read_group(pinned, "tas") is None
    assert read_group(RawCube(PinnedMetadataStore(store, read_snapshot(store))), "tas") is not None


def test_a_dataset_reuses_its_cube_until_the_metadata_changes(fresh_cube: Path):
    growing = Dataset("growing", str(fresh_cube))
    first = growing.snapshot()
    assert growing.snapshot() is first
    append_days(fresh_cube, dataset(**NEXT_DAYS))
    second = growing.snapshot()
    assert second.token != first.token and second.generation > first.generation
    assert second.cube.variable("tas").shape[0] == 48
    assert growing.snapshot() is second


def test_a_writer_at_work_leaves_the_last_consolidated_snapshot_in_place(fresh_cube: Path):
    growing = Dataset("growing", str(fresh_cube))
    first = growing.snapshot()
    # Writers open the store without consolidated metadata and rewrite the root document
    # without it while they work (xarray's append does, and so does accumulate).
    root = zarr.open_group(str(fresh_cube), mode="r+", use_consolidated=False)
    root.attrs["history"] = "being appended to"
    assert read_snapshot(open_store(str(fresh_cube))).complete  # no consolidated metadata now
    assert growing.snapshot() is first
    zarr.consolidate_metadata(str(fresh_cube))
    assert growing.snapshot().cube.raw.attrs["history"] == "being appended to"


def test_a_removed_store_is_reported_not_served_from_memory(fresh_cube: Path):
    client = TestClient(create_app([str(fresh_cube)]))
    assert client.get("/api/health").json()["status"] == "ok"
    shutil.rmtree(fresh_cube)
    health = client.get("/api/health").json()
    assert health["status"] == "degraded"
    assert "no Zarr metadata any more" in health["datasets"]["growing"]
    answer = client.get("/api/datasets/growing/tas/average?over=lat,lon")
    assert answer.status_code == 503 and "no Zarr metadata" in answer.json()["error"]


def test_answers_come_from_raw_data_when_accumulations_cannot_be_read(fresh_cube: Path):
    client = TestClient(create_app([str(fresh_cube)]))
    url = "/api/datasets/growing/tas/average?over=lat,lon&lat=-80/80&lon=-150/150"
    before = client.get(url).json()
    assert before["plan"]["accumulation_chunks_read"] > 0 and before["note"] == ""
    # As while `accumulate` rebuilds the group the published snapshot points to.
    # Every array's chunks, positioned ones in their subgroup too.
    for chunks in list((fresh_cube / "tas_accumulation_group").glob("**/c")):
        shutil.rmtree(chunks)
    # A service started now (nothing cached) reads the same snapshot.
    during = TestClient(create_app([str(fresh_cube)])).get(url).json()
    assert during["plan"]["accumulation_chunks_read"] == 0
    assert during["note"].startswith("accumulations could not be read (")
    assert during["note"].endswith("); answered from the raw data")
    np.testing.assert_allclose(during["values"], before["values"], rtol=1e-10)


def test_dataset_names_are_unique_base_names():
    names = dataset_names(
        ["/data/cube.zarr", "/other/cube.zarr/", "s3://bucket/x/cube.zarr", "a b!.zarr", "t.zip"]
    )
    assert list(names) == ["cube", "cube-2", "cube-3", "a_b", "t"]
    assert names["cube-2"] == "/other/cube.zarr/"


def test_cached_answers_end_with_their_snapshot(fresh_cube: Path):
    client = TestClient(create_app([str(fresh_cube)]))
    url = "/api/datasets/growing/tas/average?over=lat,lon&lat=0/90"
    first = client.get(url)
    again = client.get(url)
    assert first.headers["X-Accumulus-Cache"] == "miss"
    assert again.headers["X-Accumulus-Cache"] == "hit"
    assert again.content == first.content
    assert again.headers["X-Accumulus-Snapshot"] == first.headers["X-Accumulus-Snapshot"]

    append_days(fresh_cube, dataset(**NEXT_DAYS))
    after = client.get(url)
    assert after.headers["X-Accumulus-Cache"] == "miss"
    assert after.headers["X-Accumulus-Snapshot"] != first.headers["X-Accumulus-Snapshot"]
    assert len(after.json()["coords"]["time"]) == 48
    assert len(after.json()["values"]) == 48


def test_answers_are_cached_by_every_field_of_their_query(cube: Path):
    """Spellings of one question share an entry; a question that differs in any field of its
    ``Query`` (even one the service does not take, such as the plan) has its own."""
    snapshot = Dataset("surface", str(cube)).snapshot()
    parameters = AverageParameters(over="lat,lon", stat="sum")

    def key(**changes) -> tuple:
        checked = check_average_request(
            snapshot, "tas", parameters, query=[("time", "2001-01-01/2001-01-09")], max_cells=99
        )
        resolved = replace(checked.query, query=replace(checked.query.query, **changes))
        return AverageRequest(resolved, "json").key

    assert (
        key()
        == key(over=("lon", "lat"))
        == key(ranges={"time": ("2001-01-01T00:00", "2001-01-09")})
    )
    for change in ({"stat": "mean"}, {"plan": "accumulation"}, {"use_accumulation": False}):
        assert key(**change) != key(), change


def _snapshot(token: str, generation: int) -> DatasetSnapshot:
    current = DatacubeSnapshot(token, generation, cube=None, groups=None)  # type: ignore[arg-type]
    return DatasetSnapshot("d", current)


def test_answer_cache_keeps_recent_answers_within_its_bytes():
    now = _snapshot("a", 1)
    one = entry_bytes(("a", now.token, ("x",)), Answer(b"1234", "text/plain"))
    cache = AnswerCache(max_bytes=2 * one + 1)
    for key in ("x", "y", "z"):
        cache.put(now, (key,), Answer(b"1234", "text/plain"))
    assert cache.get(now, ("x",)) is None  # pushed out: three entries do not fit
    assert cache.get(now, ("z",)) == Answer(b"1234", "text/plain")
    cache.put(now, ("big",), Answer(b"x" * (2 * one), "text/plain"))
    assert cache.get(now, ("big",)) is None


def test_answer_cache_drops_and_refuses_older_snapshots():
    cache = AnswerCache(max_bytes=10_000)
    old, new = _snapshot("a", 1), _snapshot("b", 2)
    cache.put(old, ("q",), Answer(b"old", "text/plain"))
    assert cache.get(old, ("q",)) is not None
    assert cache.get(new, ("q",)) is None  # seeing the newer snapshot drops the old answers
    assert len(cache) == 0
    cache.put(old, ("q",), Answer(b"old", "text/plain"))  # computed by a slow request
    assert len(cache) == 0


def test_whether_a_question_is_a_scan_is_known_per_snapshot(tmp_path: Path, cube_data):
    """The service remembers whether a kind of question can only be answered by a scan, per
    snapshot: a cube served before its accumulations exist scans (in the scans' queue);
    once ``accumulate`` has published them, the same question, on the new snapshot, is
    answered from them, and its answer is xarray's either way."""
    path = write_cube(tmp_path / "later.zarr", cube_data, CHUNKS, accumulate=False)
    app = create_app([str(path)])
    service = app.state.service
    client = TestClient(app)
    url = "/api/datasets/later/tas/average?over=lat,lon&time=2001-01-03/2001-01-20"
    before = client.get(url)
    assert before.status_code == 200, before.text
    assert before.json()["plan"]["accumulation_chunks_read"] == 0
    assert list(service._scans.values()) == [True]

    api.accumulate(str(path), "tas")
    after = client.get(url)
    assert after.headers["X-Accumulus-Snapshot"] != before.headers["X-Accumulus-Snapshot"]
    assert after.headers["X-Accumulus-Cache"] == "miss"
    assert after.json()["plan"]["accumulation_chunks_read"] > 0
    assert sorted(service._scans.values()) == [False, True]  # one per snapshot
    want = area_mean(cube_data, ["lat", "lon"], time=slice("2001-01-03", "2001-01-20"))
    for answer in (before, after):
        np.testing.assert_allclose(answer.json()["values"], want.values, rtol=1e-9)
