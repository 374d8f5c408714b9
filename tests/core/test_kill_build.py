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


def _built_again_whole(path: Path, expected) -> None:
    """The next build over what a stopped one left: a group verify passes, answering from
    accumulations alone, as xarray does (``expected``)."""
    assert accumulus.accumulate(str(path), VAR).action in ("built", "rebuilt")
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)


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

    _built_again_whole(path, expected)


def test_a_build_stopped_while_a_chunk_is_written_in_place(tmp_path, monkeypatch):
    """A new group's chunks are written in place (``stores.local.unpublished``), so a build
    stopped while writing one leaves that chunk cut short, in a group marked incomplete:
    readers ignore the group (they read the raw data), verify says it is incomplete, and the
    next build deletes it and writes it whole."""
    from accumulus.accumulation.model import spec
    from accumulus.stores import local

    ds = synthetic_dataset({"time": 40, "lat": 6, "lon": 10}, seed=5)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 5, "lat": 3, "lon": 5})
    expected = xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean")
    write_file = local.write_file
    written: list[str] = []

    def cut_short(target: str, data) -> None:
        written.append(target)
        if len(written) < 5:
            write_file(target, data)
            return
        write_file(target, memoryview(data).cast("B")[: len(memoryview(data).cast("B")) // 2])
        raise Stopped

    monkeypatch.setattr(local, "write_file", cut_short)
    with pytest.raises(Stopped):
        accumulus.accumulate(str(path), VAR)
    monkeypatch.undo()
    cut = Path(written[-1])
    assert cut.is_relative_to(path / spec.group_name(VAR)) and cut.stat().st_size > 0
    result = accumulus.query(str(path), VAR, ["lat", "lon"])
    assert result.stats.accumulation_chunks_read == 0
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)
    [report] = accumulus.verify(str(path), VAR)
    assert not report.ok and "incomplete" in " ".join(report.problems)

    _built_again_whole(path, expected)


def test_an_update_replaces_the_published_groups_chunks_whole(tmp_path, monkeypatch):
    """An update of a published group (the cube grown along time) writes into a group
    readers read meanwhile: its chunks are written as before (a temporary file renamed),
    never in place."""
    from accumulus.accumulation.model import spec
    from accumulus.stores import local

    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=7)
    cube = tmp_path / "cube.zarr"
    write_cube(ds.isel(time=slice(0, 10)), cube, {"time": 5, "lat": 4, "lon": 5})
    accumulus.accumulate(str(cube), VAR)
    ds.isel(time=slice(10, 20)).to_zarr(cube, append_dim="time", zarr_format=2, consolidated=True)
    calls: dict[str, list[str]] = {"in place": [], "atomic": []}
    write_file, write_file_atomically = local.write_file, local.write_file_atomically

    def in_place(target: str, data) -> None:
        calls["in place"].append(target)
        write_file(target, data)

    def atomic(target: str, data) -> None:
        calls["atomic"].append(target)
        write_file_atomically(target, data)

    monkeypatch.setattr(local, "write_file", in_place)
    monkeypatch.setattr(local, "write_file_atomically", atomic)
    assert accumulus.accumulate(str(cube), VAR).action == "updated"
    group = str(cube / spec.group_name(VAR))
    assert calls["in place"] == []
    assert any(target.startswith(group) for target in calls["atomic"])
    [report] = accumulus.verify(str(cube), VAR)
    assert report.ok, report.problems
