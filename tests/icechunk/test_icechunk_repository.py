"""icechunk repositories as stores: ``icechunk://PATH`` created by the first append, one
commit per append (data, journal and accumulations together) and per ``accumulate``, read
back by xarray through icechunk's own session store, and by accumulus at any ref.

(This folder has no ``__init__.py``: a package named ``icechunk`` on the tests' path would
hide the library.)"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import accumulus
import icechunk
from accumulus.errors import AccumulusError
from accumulus.ingest.append.run import AppendResult
from accumulus.stores.opening import open_store
from accumulus.stores.transactional import (
    METADATA_KEY,
    OBJECTS_ATTRIBUTE,
    SUMMARY_KEY,
    history,
)
from cubes import xarray_reference
from ingest.helpers import VAR, check_visible, cli, truth, write_granules

PER_GRANULE = 3


def seen(url: str, t, steps: int, ref: str | None = None) -> None:
    """At ``ref`` the repository holds the first ``steps`` steps of the truth: same times and
    values, averages (accumulations used where they reach) equal to xarray's."""
    cube = accumulus.open(url, ref=ref).snapshot().cube
    expected = t.decoded(steps)
    np.testing.assert_array_equal(cube.decoded["time"].values, expected["time"].values)
    np.testing.assert_allclose(cube.decoded[VAR].values, expected[VAR].values, rtol=1e-12)
    for over in (("lat", "lon"), ("time",)):
        got = accumulus.average(url, VAR, over, ref=ref)
        want = xarray_reference(expected[VAR], over, "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


def repository(path: Path) -> icechunk.Repository:
    return icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))


def commits(path: Path) -> list[icechunk.SnapshotInfo]:
    """The commits of branch main, newest first, without the repository's first."""
    return list(repository(path).ancestry(branch="main"))[:-1]


def journal_of(path: Path, info: icechunk.SnapshotInfo) -> dict:
    """The append journal the commit ``info`` carries (in its root group's attributes), which
    its metadata sums up."""
    session = repository(path).readonly_session(snapshot_id=info.id)
    objects = json.loads(
        sync(session.store.get("zarr.json", default_buffer_prototype())).to_bytes()
    )
    journal = json.loads(objects["attributes"][OBJECTS_ATTRIBUTE][".accumulus/journal.json"])
    summary = info.metadata[SUMMARY_KEY]
    assert summary == {"granules": len(journal["granules"]), "extent": journal["extent"]}
    assert METADATA_KEY not in info.metadata  # not copied into the repository's ``repo`` object
    return journal


@pytest.fixture
def granules(tmp_path) -> list[str]:
    return [str(p) for p in write_granules(tmp_path / "in", truth(24), PER_GRANULE)]


def test_one_commit_per_append_holding_data_journal_and_accumulations(tmp_path, granules):
    t = truth(24)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    first = accumulus.append(url, granules[:4], chunks={"time": 4})
    assert first.created and first.snapshot is not None
    built = accumulus.accumulate(url, VAR, ["time", "lat,lon"])
    assert built.action == "built"
    second = accumulus.append(url, granules[4:6])
    third = accumulus.append(url, granules[6:])
    assert second.accumulations == third.accumulations == (VAR,)

    log = commits(path)
    assert [c.id for c in log] == [third.snapshot, second.snapshot, log[2].id, first.snapshot]
    assert log[2].message == f"accumulate {VAR}: built"
    for info, names in ((log[0], granules[6:]), (log[1], granules[4:6]), (log[3], granules[:4])):
        assert all(name in info.message for name in names), info.message
    # Each commit carries the journal of the data it holds.
    assert [journal_of(path, c)["extent"] for c in log] == [24, 18, 12, 12]

    # Every commit read on its own: a prefix of the granules, its accumulations agreeing
    # with the data (verify recomputes them), averages equal to xarray's.
    for info, steps in zip(log, (24, 18, 12, 12), strict=True):
        seen(url, t, steps, ref=info.id)
        reports = accumulus.verify(url, VAR, ref=info.id)
        assert all(r.ok for r in reports), [r.problems for r in reports]
    assert accumulus.verify(url, VAR) and all(r.ok for r in accumulus.verify(url, VAR))


def test_xarray_reads_the_repository_through_icechunk(tmp_path, granules):
    path = tmp_path / "repo"
    accumulus.append(f"icechunk://{path}", granules, chunks={"time": 4})
    session = repository(path).readonly_session(branch="main")
    ds = xr.open_zarr(session.store, consolidated=False)
    xr.testing.assert_allclose(ds[VAR].load(), truth(24).decoded()[VAR], rtol=1e-12)


def test_time_travel_answers_as_of_a_commit(tmp_path, granules):
    t = truth(24)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    old = accumulus.append(url, granules[:2], chunks={"time": 2}).snapshot
    accumulus.accumulate(url, VAR, ["time", "lat,lon"])
    accumulus.append(url, granules[2:])
    repository(path).create_tag("first-week", old)
    for ref, steps in ((old, 6), ("first-week", 6), ("main", 24), (None, 24)):
        got = accumulus.average(url, VAR, "time", ref=ref)
        want = xarray_reference(t.decoded(steps)[VAR], ["time"], "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)

    listed = history(open_store(url))
    assert [c.extent for c in listed] == [24, 6, 6, 0]  # append, accumulate, append, init
    assert [c.granules for c in listed] == [8, 2, 2, 0]


def racing_appends(
    url: str, granules: list[str], mine: list[str]
) -> tuple[AppendResult, AppendResult]:
    """The first two granules appended; then ``mine`` appended while, as soon as it
    runs, another append of the next two lands first. Both results."""
    accumulus.append(url, granules[:2], chunks={"time": 3})
    other = []

    def meanwhile(done: int, total: int) -> None:
        if not other:
            other.append(accumulus.append(url, granules[2:4]))

    return accumulus.append(url, mine, progress=meanwhile), other[0]


def test_concurrent_appends_of_other_granules_both_land(tmp_path, granules):
    """A second append lands while the first is writing: the first's commit is refused
    (its branch moved) and the run is done again on the new head, so both land, once."""
    t = truth(24)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    result, other = racing_appends(url, granules, granules[4:])
    assert other.appended == tuple(granules[2:4])
    assert result.appended == tuple(granules[4:])
    assert check_visible(url, t, {24}) == 24
    assert [journal_of(path, c)["extent"] for c in commits(path)] == [24, 12, 6]


def test_concurrent_appends_of_the_same_granules_land_once(tmp_path, granules):
    t = truth(24)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    result, _ = racing_appends(url, granules, granules[2:4])
    assert result.appended == () and len(result.skipped) == 2
    assert check_visible(url, t, {12}) == 12
    assert len(commits(path)) == 2


def test_a_session_store_is_read_and_not_written(tmp_path, granules):
    """icechunk's own store of a session is read as the repository's URL is; writing into it
    is refused (accumulus commits what it writes, so it needs the repository)."""
    t = truth(24)
    path = tmp_path / "repo"
    accumulus.append(f"icechunk://{path}", granules[:2], chunks={"time": 3})
    store = repository(path).readonly_session(branch="main").store
    got = accumulus.average(store, VAR, "time")
    want = xarray_reference(t.decoded(6)[VAR], ["time"], "area", "mean")
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
    writable = repository(path).writable_session("main").store
    with pytest.raises(AccumulusError, match="by its URL"):
        accumulus.append(writable, granules[2:3])
    with pytest.raises(AccumulusError, match="session's store is read here"):
        accumulus.accumulate(writable, VAR)
    assert len(commits(path)) == 1


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_the_command_line(tmp_path, granules):
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    done = cli("append", url, *granules[:3], "--chunks", "time=3")
    assert done.returncode == 0, done.stderr
    assert "created" in done.stdout
    log = commits(path)
    assert len(log) == 1 and granules[2] in log[0].message and log[0].id in done.stdout
    assert cli("accumulate", url, VAR).returncode == 0
    assert cli("append", url, *granules[3:6]).returncode == 0
    old = log[0].id

    history = cli("inspect", url, "--json")
    assert history.returncode == 0, history.stderr
    listed = json.loads(history.stdout)["history"]
    assert [(c["granules"], c["extent"]) for c in listed] == [(6, 18), (3, 9), (3, 9), (0, 0)]
    assert listed[2]["snapshot"] == old
    at_old = json.loads(cli("inspect", url, "--json", "--ref", old).stdout)
    assert at_old["dimensions"]["time"] == 9 and len(at_old["history"]) == 2
    assert cli("verify", url, "--ref", old).returncode == 0
    assert cli("verify", url).returncode == 0
    answer = cli("average", url, VAR, "--over", "time,lat,lon", "--ref", old, "--json")
    assert answer.returncode == 0, answer.stderr
    want = xarray_reference(truth(24).decoded(9)[VAR], ["time", "lat", "lon"], "area", "mean")
    np.testing.assert_allclose(json.loads(answer.stdout)["values"], want.values, rtol=1e-9)

    wrong = cli("average", url, VAR, "--over", "time", "--ref", "nope")
    assert wrong.returncode == 2
    assert wrong.stderr.strip().count("\n") == 0 and "not a branch, tag or snapshot" in wrong.stderr


def test_mistakes_are_one_line_and_write_nothing(tmp_path, granules):
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    with pytest.raises(AccumulusError, match="Zarr v3 only"):
        accumulus.append(url, granules[:1], zarr_format=2)
    with pytest.raises(AccumulusError, match="no icechunk repository"):
        accumulus.average(url, VAR, "time")
    with pytest.raises(AccumulusError, match="does not exist"):
        accumulus.append(f"icechunk://{tmp_path}/missing/repo", granules[:1])
    accumulus.append(url, granules[:1])
    with pytest.raises(AccumulusError, match="not a branch, tag or snapshot"):
        accumulus.average(url, VAR, "time", ref="no-such-ref")
    with pytest.raises(AccumulusError, match="not a branch of"):
        accumulus.accumulate(url, VAR, ref=commits(path)[0].id)
    assert len(commits(path)) == 1
    with pytest.raises(AccumulusError, match="not an icechunk repository"):
        accumulus.average(str(tmp_path / "plain.zarr"), VAR, "time", ref="main")


def test_an_accumulate_whose_branch_moved_is_built_again_on_the_new_head(tmp_path, granules):
    """An append lands while ``accumulate`` builds: the accumulate's commit is refused (its
    branch moved) and it is built again on the new head, so the group covers both."""
    t = truth(24)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    accumulus.append(url, granules[:4], chunks={"time": 3})
    other = []

    def meanwhile(*_: object) -> None:
        if not other:
            other.append(accumulus.append(url, granules[4:]))

    accumulus.accumulate(url, VAR, ["time", "lat,lon"], progress=meanwhile)
    assert other and other[0].appended == tuple(granules[4:])
    log = commits(path)
    assert [c.message for c in log[:2]] == [f"accumulate {VAR}: built", log[1].message]
    assert all(name in log[1].message for name in granules[4:])
    assert all(r.ok for r in accumulus.verify(url, VAR))
    plan = accumulus.open(url).query(VAR, ["time"]).plan
    assert plan.reads and all(read.source for read in plan.reads)  # the group covers all 24
    seen(url, t, 24)


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_append_onto_a_branch(tmp_path, granules):
    """``append --ref BRANCH`` commits on that branch only; a tag or a snapshot is refused
    in one line, and so is a ref of a store that is not a repository."""
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    accumulus.append(url, granules[:2])
    accumulus.accumulate(url, VAR)
    repo = repository(path)
    head = repo.lookup_branch("main")
    repo.create_branch("dev", head)
    repo.create_tag("v1", head)
    done = cli("append", url, *granules[2:4], "--ref", "dev")
    assert done.returncode == 0, done.stderr
    dev = repo.lookup_branch("dev")
    assert repo.lookup_branch("main") == head and dev != head and dev in done.stdout
    t = truth(24)
    seen(url, t, 4 * PER_GRANULE, ref="dev")
    seen(url, t, 2 * PER_GRANULE)
    for ref in ("v1", head, "nope"):
        wrong = cli("append", url, granules[4], "--ref", ref)
        assert wrong.returncode == 2, wrong.stderr
        assert (
            wrong.stderr.strip().count("\n") == 0 and f"--ref {ref}: not a branch" in wrong.stderr
        )
    plain = cli("append", str(tmp_path / "plain.zarr"), granules[0], "--ref", "dev")
    assert plain.returncode == 2 and "not an icechunk repository" in plain.stderr
    assert not (tmp_path / "plain.zarr").exists()
    assert [repo.lookup_branch(b) for b in ("main", "dev")] == [head, dev]


def test_a_repository_whose_journal_is_in_the_commit_metadata_is_appended_to(tmp_path, granules):
    """Repositories written before the journal moved to the root group's attributes kept
    it in each commit's metadata: it is read from there, and the next commit moves it."""
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    accumulus.append(url, granules[:2])
    repo = repository(path)
    old = repo.writable_session("main")
    document = json.loads(sync(old.store.get("zarr.json", default_buffer_prototype())).to_bytes())
    objects = document["attributes"].pop(OBJECTS_ATTRIBUTE)
    data = default_buffer_prototype().buffer.from_bytes(json.dumps(document).encode())
    sync(old.store.set("zarr.json", data))
    old.commit("as written before", metadata={METADATA_KEY: objects})
    again = accumulus.append(url, granules[:4])  # the first two are in the journal: skipped
    assert again.appended == tuple(granules[2:4]) and again.extent == (6, 12)
    assert journal_of(path, commits(path)[0])["extent"] == 12
    seen(url, truth(24), 12)
