"""Keeping a repository small: manifests split along every dimension in a repository
accumulus creates (a commit rewrites the references of the splits it touched, not every
chunk reference of the arrays it changed), and ``accumulus expire`` (old snapshots expired,
the objects only they read deleted; branch tips and tags kept). Locally and on S3."""

from __future__ import annotations

import datetime
import itertools
from pathlib import Path

import numpy as np
import pytest

import accumulus
import icechunk
from accumulus.errors import AccumulusError
from accumulus.stores import transactional
from cubes import xarray_reference
from ingest.helpers import VAR, cli, truth, write_granules


def directory_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def answers(url: str, steps: int, ref: str | None = None, **opening) -> None:
    """At ``ref`` the repository answers as xarray does on the first ``steps`` steps."""
    for over in (("lat", "lon"), ("time",)):
        got = accumulus.average(url, VAR, over, ref=ref, **opening)
        want = xarray_reference(truth(24).decoded(steps)[VAR], over, "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


def test_manifests_are_split_so_an_append_rewrites_few_references(tmp_path, monkeypatch):
    monkeypatch.setattr(transactional, "MANIFEST_SPLIT", 2)
    granules = write_granules(tmp_path / "in", truth(24), 2)
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    for granule in granules:  # 12 appends of 2 steps, one step per chunk along time
        accumulus.append(url, [str(granule)], chunks={"time": 1, "lat": 4, "lon": 4})
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    log = [repo.list_manifest_files(info.id) for info in repo.ancestry(branch="main")][:-1]
    # Unsplit, one manifest would hold the 24 x 2 x 2 references of the data.
    assert max(m.num_chunk_refs for m in log[0]) <= 2 * 2 * 2
    written = [
        sum(m.num_chunk_refs for m in now if m.id not in {b.id for b in before})
        for now, before in itertools.pairwise(log)
    ]  # newest first: the references each append wrote, which do not grow with the cube
    # Each append fills one split along time (2 steps): the same references every day.
    assert len(set(written[:-1])) == 1, written
    assert written[0] <= 2 * 2 * 2 + 2 + 2  # the day's split of the data, time, its bounds
    answers(url, 24)


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_expire_keeps_tips_and_tags_and_frees_the_rest(tmp_path):
    granules = [str(p) for p in write_granules(tmp_path / "in", truth(24), 3)]
    path = tmp_path / "repo"
    url = f"icechunk://{path}"
    for k in range(0, 8, 2):  # four appends, each rewriting the partial last chunk
        assert cli("append", url, *granules[k : k + 2], "--chunks", "time=12").returncode == 0
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    kept = list(repo.ancestry(branch="main"))[2].id  # after the second append: 12 steps
    repo.create_tag("v1", kept)
    grown = directory_bytes(path)

    done = cli("expire", url, "--older-than", "0s")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("expired 2 snapshot(s)"), done.stdout  # not v1
    assert directory_bytes(path) < grown
    # The branch's history: its tip, then the repository's first snapshot.
    assert len(list(repo.ancestry(branch="main"))) == 2
    answers(url, 24)
    answers(url, 12, ref="v1")
    assert all(r.ok for r in accumulus.verify(url, ref="v1"))


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_expire_mistakes_are_one_line_and_delete_nothing(tmp_path):
    granules = [str(p) for p in write_granules(tmp_path / "in", truth(24), 3)]
    url = f"icechunk://{tmp_path / 'repo'}"
    accumulus.append(url, granules[:1])
    accumulus.append(url, granules[1:2])
    grown = directory_bytes(tmp_path / "repo")
    for args, said in (
        ([url, "--older-than", "7x"], "--older-than must be a duration"),
        ([url, "--older-than", "-1d"], "--older-than must be a duration"),
        ([url, "--older-than", "1e99d"], "--older-than must be a duration"),
        ([url, "--older-than", "400000d"], "longer than any archive"),
        ([str(tmp_path / "plain.zarr"), "--older-than", "1d"], "not an icechunk repository"),
        ([f"icechunk://{tmp_path / 'none'}", "--older-than", "1d"], "no icechunk repository"),
    ):
        done = cli("expire", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stderr.strip().count("\n") == 0 and said in done.stderr, done.stderr
    assert directory_bytes(tmp_path / "repo") == grown
    with pytest.raises(AccumulusError, match="time zone"):
        transactional.expire(url, datetime.datetime.now(), None)  # the mistake


def test_expire_on_s3(endpoint, bucket, tmp_path):
    granules = [str(p) for p in write_granules(tmp_path / "in", truth(24), 6)]
    url = f"icechunk+s3://{bucket}/archive"
    options = {"endpoint_url": endpoint}
    for granule in granules:
        accumulus.append(url, [granule], chunks={"time": 12}, storage_options=options)
    # The S3 endpoint keeps an object's last-modified time to the second: objects written in
    # this second are not yet older than now, and a run within one second collected none.
    later = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
    done = transactional.expire(url, later, options)
    assert done.snapshots == 3 and done.objects > 0 and done.bytes > 0
    answers(url, 24, storage_options=options)
