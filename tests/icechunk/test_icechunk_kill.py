"""kill -9 at random moments of ``accumulus append`` into an icechunk repository (12 trials):
each time the branch is at the old commit or the new one (never between: what readers see is
whole, accumulations matching the data), and re-running the same command completes the work
in one more commit, every granule once, ``verify`` passing."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

import accumulus
import icechunk
from cubes import xarray_reference
from ingest.helpers import VAR, cli, cli_env, truth, write_granules

TRIALS = 12
PER_GRANULE = 3
STEPS = 60


def branch_head(path: Path) -> tuple[str, dict]:
    """The commit branch main is at, and the journal it carries."""
    repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
    head = repo.lookup_branch("main")
    root = repo.readonly_session(snapshot_id=head).store.get(
        "zarr.json", default_buffer_prototype()
    )
    objects = json.loads(sync(root).to_bytes())["attributes"]["accumulus_objects"]
    return head, json.loads(objects[".accumulus/journal.json"])


def chunk_objects(path: Path) -> int:
    return sum(1 for p in (path / "chunks").rglob("*") if p.is_file())


def started_append(path: Path, granules: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "accumulus", "append", f"icechunk://{path}", *granules],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def check_at_head(path: Path, t, steps: int) -> None:
    url = f"icechunk://{path}"
    cube = accumulus.open(url).snapshot().cube
    assert cube.variable(VAR).shape[0] == steps
    expected = t.decoded(steps)
    np.testing.assert_allclose(cube.decoded[VAR].values, expected[VAR].values, rtol=1e-12)
    for over in (("lat", "lon"), ("time",)):
        got = accumulus.average(url, VAR, over)
        want = xarray_reference(expected[VAR], over, "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
    reports = accumulus.verify(url, VAR)
    assert reports and all(r.ok for r in reports), [r.problems for r in reports]


@pytest.mark.slow
def test_kill_minus_9_at_random_moments(tmp_path):
    t = truth(STEPS, nlat=12, nlon=16)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, PER_GRANULE)]
    base = tmp_path / "base"
    accumulus.append(f"icechunk://{base}", granules[0], chunks={"time": 4})
    accumulus.accumulate(f"icechunk://{base}", VAR, ["time", "lat,lon"])
    old, _ = branch_head(base)
    base_chunks = chunk_objects(base)

    # How long a whole run takes, start-up included: kills are drawn over all of it.
    calibration = tmp_path / "calibration"
    shutil.copytree(base, calibration)
    started = time.perf_counter()
    assert started_append(calibration, granules).wait(timeout=600) == 0
    whole = time.perf_counter() - started
    assert branch_head(calibration)[1]["extent"] == STEPS

    rng = random.Random(7)
    killed_while_writing = 0
    for trial in range(TRIALS):
        path = tmp_path / f"trial{trial}"
        shutil.copytree(base, path)
        process = started_append(path, granules)
        time.sleep(rng.uniform(0.3 * whole, whole))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()

        head, journal = branch_head(path)
        if head == old:  # killed before its commit: the old cube, whole
            assert journal["extent"] == PER_GRANULE
            check_at_head(path, t, PER_GRANULE)
            killed_while_writing += chunk_objects(path) > base_chunks
        else:  # the commit landed: all of it
            assert journal["extent"] == STEPS
            check_at_head(path, t, STEPS)

        rerun = cli("append", f"icechunk://{path}", *granules)
        assert rerun.returncode == 0, f"trial {trial}: {rerun.stderr}"
        head, journal = branch_head(path)
        assert [[g["start"], g["stop"]] for g in journal["granules"]] == [
            [s, s + PER_GRANULE] for s in range(0, STEPS, PER_GRANULE)
        ]
        check_at_head(path, t, STEPS)
        repo = icechunk.Repository.open(icechunk.local_filesystem_storage(str(path)))
        ancestry = [c.id for c in repo.ancestry(branch="main")]
        assert ancestry[1] == old, f"trial {trial}: not one commit after the old one"
        shutil.rmtree(path)

    # The trials mean something only if many kills hit a run that had written chunks.
    assert killed_while_writing >= TRIALS // 4, f"only {killed_while_writing} mid-write"
