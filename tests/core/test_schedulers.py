"""Builds on other Dask schedulers: worker processes and a distributed cluster."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from distributed import LocalCluster

import accumulus
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference


@pytest.fixture
def cube(tmp_path):
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset({"time": 24, "lat": 8, "lon": 9}, seed=21)
    write_cube(ds, path, {"time": 6, "lat": 4, "lon": 9})
    return path, ds


def check(path, ds):
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    got = accumulus.average(str(path), VAR, ["lat", "lon"])
    np.testing.assert_allclose(got, xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean"))


def test_build_on_a_distributed_local_cluster(cube):
    path, ds = cube
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        reports = []
        result = accumulus.accumulate(
            str(path),
            VAR,
            scheduler=cluster.scheduler_address,
            progress=lambda done, total: reports.append((done, total)),
        )
    assert result.action == "built"
    assert reports[-1][0] == reports[-1][1] > 0
    check(path, ds)


def test_build_with_worker_processes(cube):
    path, ds = cube
    accumulus.accumulate(str(path), VAR, scheduler="processes")
    check(path, ds)


def test_unreachable_cluster_is_a_clear_error(cube):
    path, _ = cube
    with pytest.raises(accumulus.AccumulusError, match="cannot reach the Dask scheduler"):
        accumulus.accumulate(str(path), VAR, scheduler="tcp://127.0.0.1:9")
    assert not (path / f"{VAR}_accumulation_group").exists()


def stored_files(root: Path) -> dict[str, bytes]:
    """Every object of the accumulation group under ``root``, by key."""
    group = root / f"{VAR}_accumulation_group"
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in group.rglob("*") if p.is_file()}


def test_a_cluster_builds_the_same_bytes_as_this_process(tmp_path):
    """Scale-out stays exact: the default groups (every day, every cell) built on a
    distributed cluster of 2 worker processes are, object for object and byte for byte,
    those the threads of this process build."""
    ds = synthetic_dataset({"time": 40, "lat": 8, "lon": 9}, seed=39)
    local, remote = tmp_path / "local.zarr", tmp_path / "cluster.zarr"
    for path in (local, remote):
        write_cube(ds, path, {"time": 7, "lat": 4, "lon": 5})
    accumulus.accumulate(str(local), VAR)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as cluster:
        accumulus.accumulate(str(remote), VAR, scheduler=cluster.scheduler_address)
    here, there = stored_files(local), stored_files(remote)
    assert len(here) > 20 and here.keys() == there.keys()
    assert [key for key in here if here[key] != there[key]] == []
