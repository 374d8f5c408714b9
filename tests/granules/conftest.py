"""Series of granules in NASA (and ECMWF, NOAA) layouts, written once per test session."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from .layouts import (
    ImergGrid,
    imerg_series,
    write_era5,
    write_merra2,
    write_oisst,
)

START = dt.datetime(2000, 6, 1)


@pytest.fixture(scope="session")
def imerg_hhr(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """12 half-hourly IMERG granules on a 20 x 10 global grid (18 degree cells)."""
    directory = tmp_path_factory.mktemp("imerg-hhr")
    return imerg_series(directory, START, 12, grid=ImergGrid.regular(20, 10))


@pytest.fixture(scope="session")
def imerg_day(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("imerg-day")
    return imerg_series(directory, START, 9, daily=True, grid=ImergGrid.regular(20, 10), seed=50)


@pytest.fixture(scope="session")
def merra2(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("merra2")
    return [write_merra2(directory, START.date() + dt.timedelta(days=k), seed=k) for k in range(3)]


@pytest.fixture(scope="session")
def era5(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("era5")
    return [write_era5(directory, START.date() + dt.timedelta(days=k), seed=k) for k in range(5)]


@pytest.fixture(scope="session")
def oisst(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    directory = tmp_path_factory.mktemp("oisst")
    return [write_oisst(directory, START.date() + dt.timedelta(days=k), seed=k) for k in range(8)]
