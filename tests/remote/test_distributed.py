"""`accumulate SOURCE VAR --into SIDE --scheduler tcp://…` over a remote or virtual source:
the build runs on the named Dask cluster (worker processes), the workers read the source by
URL, and SIDE holds exactly what a local build writes."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from distributed import Client, LocalCluster
from typer.testing import CliRunner

import accumulus
from accumulus.cli import app
from cubes import VAR
from servers import http_server

from .granules import monthly_granules
from .test_sidecar import MAP, expected_map, make_cube


def worker_state(dask_worker) -> tuple[int, int]:
    """Tasks a worker ran, and the HTTP file systems it opened (to read the source)."""
    from fsspec.implementations.http import HTTPFileSystem

    return dask_worker.state.executed_count, len(HTTPFileSystem._cache)


def same_groups(built: zarr.Group, reference: zarr.Group) -> None:
    name = f"{VAR}_accumulation_group"
    assert sorted(built[name].array_keys()) == sorted(reference[name].array_keys())
    for array in reference[name].array_keys():
        np.testing.assert_array_equal(built[name][array][...], reference[name][array][...])
    assert dict(built[name].attrs) == dict(reference[name].attrs)


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1", dashboard_address=None
    ) as running:
        yield running


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_a_cube_and_a_reference_set_behind_http_built_on_a_cluster(tmp_path, cluster):
    served = tmp_path / "served"
    make_cube(served)
    granules = monthly_granules(served, [1, 2, 3])  # 31, 28, 31 days: a rectilinear grid
    runner = CliRunner()
    with http_server(served) as (url, log):
        # The reference set is itself served, and points at the granules by URL.
        accumulus.append_virtual(served / "virt.json", [f"{url}/{g.name}" for g in granules])
        sources = {
            "cube": (f"{url}/cube.zarr", f"/cube.zarr/{VAR}/"),
            "virt": (f"{url}/virt.json", "/granule-"),
        }
        for name, (source, data_path) in sources.items():
            side = str(tmp_path / f"{name}-cluster.zarr")
            log.clear()
            built = runner.invoke(
                app,
                [
                    "accumulate",
                    source,
                    VAR,
                    "--into",
                    side,
                    "--scheduler",
                    cluster.scheduler_address,
                ],
            )
            assert built.exit_code == 0, built.output
            assert any(data_path in path for _, path, _ in log.requests), name
            accumulus.accumulate(source, VAR, into=str(tmp_path / f"{name}-local.zarr"))
            same_groups(
                zarr.open_group(side, mode="r"),
                zarr.open_group(tmp_path / f"{name}-local.zarr", mode="r"),
            )
        with Client(cluster) as client:
            states = client.run(worker_state)
        # The tasks ran on the workers, which read the source over HTTP themselves.
        assert sum(executed for executed, _ in states.values()) > 0
        assert all(opened for executed, opened in states.values() if executed)
        # The sidecar built on the cluster answers for its source.
        with xr.open_zarr(f"{url}/cube.zarr") as ds:
            expected = expected_map(ds)
        answer = accumulus.average(str(tmp_path / "cube-cluster.zarr"), VAR, "time", MAP)
        np.testing.assert_allclose(answer.values, expected, rtol=1e-9)
