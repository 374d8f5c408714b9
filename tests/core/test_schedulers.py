"""Builds on other Dask schedulers: worker processes and a distributed cluster."""

from __future__ import annotations

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
