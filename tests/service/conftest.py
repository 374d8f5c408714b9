"""Fixtures of the service tests: a small accumulated cube and a client of an app serving it."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import xarray as xr
from fastapi.testclient import TestClient
from service_cubes import CHUNKS, dataset, write_cube

from accumulus.service import create_app


@pytest.fixture(autouse=True)
def _quiet_consolidation_warnings():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        yield


@pytest.fixture(scope="session")
def cube_data() -> xr.Dataset:
    return dataset("2001-01-01", 40, 12, 16)


@pytest.fixture(scope="session")
def cube(tmp_path_factory: pytest.TempPathFactory, cube_data: xr.Dataset) -> Path:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        return write_cube(tmp_path_factory.mktemp("cubes") / "surface.zarr", cube_data, CHUNKS)


@pytest.fixture(scope="session")
def client(cube: Path) -> TestClient:
    return TestClient(create_app([str(cube)], max_cells=10_000))
