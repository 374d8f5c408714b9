"""kill -9 at random moments of ``accumulus append`` (24 trials, 12 more into a sharded
cube, 8 more under the month rule, and 8 while the first infinities add tallies to a
group): each time the store opens, readers see a prefix of the data whose averages
(accumulations included) equal xarray's, and re-running the same command completes the
work, every granule once, ``verify`` passing."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.grid import declared_chunk_sizes
from accumulus.raw_cube import RawCube
from accumulus.stores.lock import LOCK_KEY
from cubes import xarray_reference
from varchunk.conftest import daily_times, period_counts

from .helpers import VAR, check_visible, cli, cli_env, truth, write_granules
from .test_variable_chunks import daily

TRIALS = 24
PER_GRANULE = 3
STEPS = 60


def started_append(store: Path, granules: list[str]) -> tuple[subprocess.Popen, float]:
    """``accumulus append`` of ``granules`` into ``store`` started, and the moment its lock
    appeared (or it ended): what comes before is starting Python and importing."""
    lock = store / LOCK_KEY
    process = subprocess.Popen(
        [sys.executable, "-m", "accumulus", "append", str(store), *granules],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while not lock.exists() and process.poll() is None:
        time.sleep(0.002)
    return process, time.perf_counter()


def killed_appends(base: Path, granules: list[str], trials: int, seed: int) -> Iterator[Path]:
    """Copies of the store ``base``, one per trial, each left by ``accumulus append`` of
    ``granules`` killed -9 at a random moment while it holds the store's lock (deleted once
    the caller has checked it). The moment is drawn from the time a whole run holds the lock,
    counted from when the lock appears, so a loaded machine's slow start-up does not move
    the kills outside the append."""
    calibration = base.with_name("calibration.zarr")
    shutil.copytree(base, calibration)
    process, locked = started_append(calibration, granules)
    assert process.wait(timeout=600) == 0
    held = time.perf_counter() - locked

    rng = random.Random(seed)
    for trial in range(trials):
        store = base.with_name(f"trial{trial}.zarr")
        shutil.copytree(base, store)
        process, _ = started_append(store, granules)
        time.sleep(rng.uniform(0, held))
        if process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
        process.wait()
        yield store
        shutil.rmtree(store)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("layout", "trials"),
    [
        ({"chunks": {"time": 4}}, TRIALS),
        # Shards of 8 steps (4 inner chunks of 2 x 6 x 16), granules of 3: most kills land
        # while a shard the last commit left partial is being rewritten.
        ({"chunks": {"time": 2, "lat": 6}, "shards": {"time": 8, "lat": 12}}, TRIALS // 2),
        # Chunks along time that grow with the cube (a rectilinear grid).
        ({"chunking": "grow"}, TRIALS // 2),
    ],
    ids=["chunks", "shards", "growing"],
)
@pytest.mark.usefixtures("rectilinear_chunks")
def test_kill_minus_9_at_random_moments(tmp_path, layout, trials):
    t = truth(STEPS, nlat=12, nlon=16)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, PER_GRANULE)]
    base = tmp_path / "base.zarr"
    accumulus.append(str(base), granules[0], **layout)
    accumulus.accumulate(str(base), VAR, ["time", "lat,lon"])
    boundaries = set(range(PER_GRANULE, STEPS + 1, PER_GRANULE))
    expected_ranges = [[s, s + PER_GRANULE] for s in range(0, STEPS, PER_GRANULE)]
    shards = (8, 12, 16) if "shards" in layout else None

    killed_mid_append = 0
    for trial, store in enumerate(killed_appends(base, granules, trials, seed=3)):
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
        assert zarr.open_array(store / VAR, mode="r").shards == shards

    # The trials are meaningful only if many kills hit a run between its first and last commit.
    assert killed_mid_append >= trials // 4, f"only {killed_mid_append} kills landed mid-append"


MONTH_TRIALS = 8
DAYS_PER_GRANULE = 3


@pytest.fixture
def rectilinear_chunks():
    """zarr and xarray read the month grid themselves in this test: zarr's setting on for
    them (accumulus turns it on for its own calls only)."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


@pytest.mark.slow
@pytest.mark.usefixtures("rectilinear_chunks")
def test_kill_minus_9_during_month_appends(tmp_path):
    """Daily granules appended under ``--chunking month`` (a noleap calendar): after each
    kill the visible cube is whole granules, accumulations agreeing, and a re-run ends with
    the chunks an uninterrupted run makes, one per month, no stored chunk having changed."""
    ds = daily("noleap", "2003-12-21", 180)  # through June 15, 2004: 7 months, 60 granules
    times = ds["time"].values
    starts = range(0, len(times), DAYS_PER_GRANULE)
    granules = []
    for start in starts:
        path = tmp_path / "in" / f"day{start:03d}.nc"
        path.parent.mkdir(exist_ok=True)
        ds.isel(time=slice(start, start + DAYS_PER_GRANULE)).to_netcdf(path)
        granules.append(str(path))
    base = tmp_path / "base.zarr"
    accumulus.append(str(base), granules[0], chunking="month")
    accumulus.accumulate(str(base), VAR, ["time", "lat,lon"])
    boundaries = {min(s + DAYS_PER_GRANULE, len(times)) for s in starts}
    # Months as declared whole: December from the 21st, then January to June.
    months = tuple(period_counts(daily_times("noleap", "2003-12-21", 192), "MS"))

    def check(store) -> int:
        cube = RawCube.open(str(store))
        n = cube.variable(VAR).shape[0]
        assert n in boundaries, f"{n} days visible: not the end of a granule"
        expected = ds[VAR].isel(time=slice(0, n))
        xr.testing.assert_identical(xr.open_zarr(store)[VAR].load(), expected)
        got = accumulus.average(cube, VAR, "time")
        want = xarray_reference(expected, ["time"], "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9)
        declared = declared_chunk_sizes(zarr.open_array(store / VAR, mode="r"), 0)
        assert declared == months[: len(declared)]  # whole months, none ever resized
        return n

    killed_mid_append = 0
    for trial, store in enumerate(killed_appends(base, granules, MONTH_TRIALS, seed=5)):
        visible = check(store)
        assert all(r.ok for r in accumulus.verify(str(store), VAR)), trial
        killed_mid_append += DAYS_PER_GRANULE < visible < len(times)

        rerun = cli("append", str(store), *granules)
        assert rerun.returncode == 0, f"trial {trial}: {rerun.stderr}"
        assert check(store) == len(times)
        assert declared_chunk_sizes(zarr.open_array(store / VAR, mode="r"), 0) == months
        journal = json.loads((store / ".accumulus" / "journal.json").read_text())
        assert [g["start"] for g in journal["granules"]] == list(starts)
        assert all(r.ok for r in accumulus.verify(str(store), VAR)), trial

    assert killed_mid_append >= 2, f"only {killed_mid_append} kills landed mid-append"


INFINITE_TRIALS = 8


@pytest.mark.slow
def test_kill_minus_9_while_the_first_infinity_rebuilds_the_group(tmp_path):
    """A group built without tallies (no infinity yet) meets its first infinities in an
    append, which adds its tally arrays (0 before them) and updates it: after each kill the
    visible cube's averages equal xarray's, and a re-run ends with tallies, verify passing."""
    from core.test_infinities import check_answers, infinite_dataset

    ds = infinite_dataset(seed=6)  # +inf at step 8, -inf at step 12, of 20
    name = next(iter(ds.data_vars))
    granules = []
    for start in range(0, ds.sizes["time"], 2):
        path = tmp_path / "in" / f"g{start:02d}.nc"
        path.parent.mkdir(exist_ok=True)
        ds.isel(time=slice(start, start + 2)).to_netcdf(path)
        granules.append(str(path))
    base = tmp_path / "base.zarr"
    accumulus.append(str(base), granules[0], chunks={"time": 4, "lat": 3, "lon": 5})
    assert accumulus.accumulate(str(base), name).group.infinities is False

    killed_mid_append = 0
    # Up to twice the trials until a kill has landed between the first and the last commit
    # (the first commit, rebuilding the group, holds most of the lock's time).
    trials = killed_appends(base, granules, 2 * INFINITE_TRIALS, seed=7)
    for trial, store in enumerate(trials):
        if trial >= INFINITE_TRIALS and killed_mid_append:
            break
        n = RawCube.open(str(store)).variable(name).shape[0]
        assert n % 2 == 0, f"trial {trial}: {n} steps visible, not whole granules"
        killed_mid_append += 2 < n < ds.sizes["time"]
        for over in (("lat", "lon"), ("time",)):
            got = accumulus.average(str(store), name, over)
            want = xarray_reference(ds[name].isel(time=slice(0, n)), over, "area", "mean")
            np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)

        rerun = cli("append", str(store), *granules)
        assert rerun.returncode == 0, f"trial {trial}: {rerun.stderr}"
        group = accumulus.open(str(store)).snapshot().groups.group(name)
        assert group is not None and group.infinities is True, f"trial {trial}"
        check_answers(str(store), ds)
        (report,) = accumulus.verify(str(store), name)
        assert report.ok, (trial, report.problems)
    # A kill between the first and the last commit must happen at least once (under the slow
    # suite's load most runs start late, and 8 trials left no room once: more are run then).
    assert killed_mid_append >= 1, "no kill landed mid-append"
