"""kill -9 during accumulate, at random moments: the raw data is untouched, queries stay
right (ignoring the unfinished group), and running accumulate again completes it."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import accumulus
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _content(path: Path) -> bytes:
    """A file's bytes; for attributes, without netcdf-c's NCZarr keys, which every write
    (the first build included) refreshes beside them (see ``accumulus.stores.nczarr_metadata``)."""
    if path.name != ".zattrs":
        return path.read_bytes()
    attrs = json.loads(path.read_text())
    return json.dumps({k: v for k, v in attrs.items() if not k.startswith("_nczarr")}).encode()


def raw_checksums(path: Path) -> dict[str, str]:
    """Every file but the accumulation group, the consolidated metadata (which lists it) and
    the writer's lock (a killed build leaves it; the next writer takes it over)."""
    return {
        str(p.relative_to(path)): hashlib.sha1(_content(p)).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
        and not p.relative_to(path).parts[0].endswith("_accumulation_group")
        and p.relative_to(path).parts[0] != ".accumulus"
        and p.name != ".zmetadata"
    }


@pytest.mark.slow
def test_kill_during_build(tmp_path):
    ds = synthetic_dataset({"time": 400, "lat": 36, "lon": 72}, seed=3)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 10, "lat": 6, "lon": 12})
    raw_before = raw_checksums(path)
    expected = xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean")
    rng = random.Random(0)
    env = {**os.environ, "PYTHONPATH": SRC}
    for trial in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-m", "accumulus", "accumulate", str(path), VAR, "--rebuild"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(rng.uniform(1.0, 4.0))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert raw_checksums(path) == raw_before, trial
        result = accumulus.query(str(path), VAR, ["lat", "lon"])
        np.testing.assert_allclose(result.data, expected, rtol=1e-9)
    assert accumulus.accumulate(str(path), VAR).action in ("built", "rebuilt", "up to date")
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)


class Stopped(Exception):
    """Where a kill -9 lands, made deterministic."""


def test_a_rebuild_stopped_once_the_old_group_is_deleted(tmp_path, monkeypatch):
    """The narrow window of a rebuild (or of an append meeting the first infinity): the
    old group's arrays deleted, the new group not yet written. Readers must not take the
    old group's chunks for missing ones: it is withdrawn first, so they read the raw data."""
    from accumulus.accumulation.build import accumulate

    ds = synthetic_dataset({"time": 40, "lat": 6, "lon": 10}, seed=4)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 5, "lat": 3, "lon": 5})
    accumulus.accumulate(str(path), VAR)
    expected = xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean")

    def deleted_then_killed(root, group):
        del root[group.path]
        raise Stopped

    monkeypatch.setattr(accumulate, "_create_group", deleted_then_killed)
    with pytest.raises(Stopped):
        accumulus.accumulate(str(path), VAR, rebuild=True)
    monkeypatch.undo()
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.accumulation_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)

    assert accumulus.accumulate(str(path), VAR).action in ("built", "rebuilt")
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)
