"""kill -9 at random moments of ``accumulus append`` (24 trials): each time the store opens,
readers see a prefix of the data whose averages (accumulations included) equal xarray's, and
re-running the same command completes the work, every granule once, ``verify`` passing."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

import pytest

import accumulus

from .helpers import VAR, check_visible, cli, cli_env, truth, write_granules

TRIALS = 24
PER_GRANULE = 3
STEPS = 60


def timed_run(args: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(args, env=cli_env(), check=True, capture_output=True, timeout=600)
    return time.perf_counter() - started


@pytest.mark.slow
def test_kill_minus_9_at_random_moments(tmp_path):
    t = truth(STEPS, nlat=12, nlon=16)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, PER_GRANULE)]
    base = tmp_path / "base.zarr"
    accumulus.append(str(base), granules[0], chunks={"time": 4})
    accumulus.accumulate(str(base), VAR, ["time", "lat,lon"])
    boundaries = set(range(PER_GRANULE, STEPS + 1, PER_GRANULE))
    expected_ranges = [[s, s + PER_GRANULE] for s in range(0, STEPS, PER_GRANULE)]

    def command(store) -> list[str]:
        return [sys.executable, "-m", "accumulus", "append", str(store), *granules]

    # How long a run takes, and how much of it is starting Python: kills land in between.
    startup = timed_run([sys.executable, "-m", "accumulus", "--help"])
    calibration = tmp_path / "calibration.zarr"
    shutil.copytree(base, calibration)
    whole = timed_run(command(calibration))

    rng = random.Random(3)
    killed_mid_append = 0
    for trial in range(TRIALS):
        store = tmp_path / f"trial{trial}.zarr"
        shutil.copytree(base, store)
        process = subprocess.Popen(
            command(store), env=cli_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(rng.uniform(0.8 * startup, whole))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()

        visible = check_visible(store, t, boundaries)  # opens; a prefix; averages agree
        committed = json.loads((store / ".accumulus" / "journal.json").read_text())["extent"]
        killed_mid_append += PER_GRANULE < committed < STEPS or visible < committed

        rerun = cli("append", str(store), *granules)
        assert rerun.returncode == 0, f"trial {trial}: {rerun.stderr}"
        assert check_visible(store, t, {STEPS}) == STEPS
        journal = json.loads((store / ".accumulus" / "journal.json").read_text())
        assert [[g["start"], g["stop"]] for g in journal["granules"]] == expected_ranges
        reports = accumulus.verify(str(store), VAR)
        assert reports and all(r.ok for r in reports), (trial, [r.problems for r in reports])
        shutil.rmtree(store)

    # The trials are meaningful only if many kills hit a run between its first and last commit.
    assert killed_mid_append >= TRIALS // 4, f"only {killed_mid_append} kills landed mid-append"
