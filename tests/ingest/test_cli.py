"""The ``accumulus append`` command: what it prints when it creates, appends, skips."""

from __future__ import annotations

import re

import pytest

from .helpers import cli, truth, write_granules


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_create_then_rerun(tmp_path):
    t = truth(9, nlat=60, nlon=80)
    granules = list(map(str, write_granules(tmp_path / "in", t, 3)))
    store = str(tmp_path / "cube.zarr")

    created = cli("append", store, *granules[:2], "--dim", "time")

    assert created.returncode == 0, created.stderr
    text = " ".join(created.stdout.split())
    # One step of precip is 60 x 80 int16 = 9.4 KiB; a calendar month of 3-hourly steps
    # (30.44 x 8 = 243) is 2.2 MiB, so a chunk holds the 1093 steps that make 10 MiB.
    assert "created " in text and "chunks time=1093, lat=60, lon=80" in text
    assert "one time step of precip is 9.4 KiB; a calendar month of steps (243) makes " in text
    assert "less than 10 MiB, so a chunk holds 1093 steps, 10.0 MiB" in text
    assert re.search(r"appended 2 granule\(s\): time 0 → 6 steps in 1 commit\(s\)", text)

    again = cli("append", store, *granules, "--chunks", "time=1093")

    assert again.returncode == 0, again.stderr
    lines = again.stdout.splitlines()
    assert sum("already ingested" in line for line in lines) == 2
    assert any("appended 1 granule(s): time 6 → 9 steps" in line for line in lines)

    done = cli("append", store, *granules)
    assert "nothing to append; time has 9 steps" in done.stdout


def test_chunks_option_is_checked(tmp_path):
    t = truth(3)
    granule = str(write_granules(tmp_path / "in", t, 3)[0])
    run = cli("append", str(tmp_path / "cube.zarr"), granule, "--chunks", "time=forty")
    assert run.returncode == 2
    assert "--chunks time must be a positive integer, got 'forty'" in run.stderr
    assert not (tmp_path / "cube.zarr").exists()
