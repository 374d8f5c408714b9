"""Chunks that fit any grid: along the append dimension, a calendar month of the archive's
steps within 10-100 MiB, so a small grid never gets chunks of hundreds of thousands of
steps, and yearly data not chunks of one step."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest

import accumulus
from accumulus.ingest.cadence import step_seconds, steps_per_month, steps_per_year, unit_seconds
from accumulus.ingest.layout import ArraySpec, choose_chunks
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store

from .layouts import imerg_series


def store_bytes(path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_48_imerg_granules_make_a_small_store(tmp_path):
    files = imerg_series(tmp_path / "in", dt.datetime(2000, 6, 1), 49)  # the 10 x 10 cut
    path = tmp_path / "imerg.zarr"
    created = accumulus.append(str(path), files[:48])
    # A month of half hours is 1461 steps, 0.6 MiB: a chunk holds 10 MiB of them.
    assert "time=26215" in created.chunking.reason
    before = store_bytes(path)
    assert before <= 2 * 2**20

    counting = CountingStore(open_store(str(path), "r+"))
    accumulus.append(counting, files[48])
    written = counting.counts.write_bytes
    assert store_bytes(path) - before <= 2**20
    assert written <= 2**20, f"one granule wrote {written} bytes"


@pytest.mark.parametrize(
    ("units", "times", "bounds", "year"),
    [
        ("seconds since 1980-01-06 00:00:00 UTC", [0, 1800, 3600], None, 17532),  # IMERG HHR
        ("seconds since 1980-01-06 00:00:00 UTC", [0], [[0, 1800]], 17532),  # one granule
        ("days since 1978-01-01 12:00:00", [0, 1, 2], None, 365),  # OISST
        ("hours since 1900-01-01 00:00:00.0", [0, 6, 12], None, 1461),  # ERA5 6-hourly
        ("minutes since 2000-06-01 00:30:00", [0, 60], None, 8766),  # MERRA-2 hourly
        ("days since 2000-01-01", [0, 31, 60, 91], None, 12),  # monthly means
        ("days since 2000-01-01", [0, 3653], None, 1),  # a step of ten years
    ],
)
def test_a_year_of_steps(units, times, bounds, year):
    assert steps_per_year(step_seconds(np.array(times), units, bounds)) == year


def test_no_cadence_without_time_units():
    assert unit_seconds("meters") is None
    assert step_seconds(np.array([0, 1]), "1", None) is None
    assert step_seconds(np.array([5]), "days since 2000-01-01", None) is None  # one step
    assert steps_per_year(None) is None


def test_the_byte_target_still_rules_large_grids():
    """A 0.1 degree global step of float32 is 24.7 MiB: 4 steps make the 100 MiB target,
    far below a year of half hours, and a chunk holds 4."""
    specs = {"precipitation": ArraySpec(("time", "lon", "lat"), (1, 3600, 1800), 4, False)}
    choice = choose_chunks(specs, "time", month=1461)
    assert choice.chunks["precipitation"] == (4, 3600, 1800)
    small = {"precipitation": ArraySpec(("time", "lon", "lat"), (1, 10, 10), 4, False)}
    assert choose_chunks(small, "time", month=1461).chunks["precipitation"][0] == 26215  # 10 MiB
    assert choose_chunks(small, "time").chunks["precipitation"][0] == 262144  # bytes alone
    given = choose_chunks(small, "time", {"time": 48}, month=1461)
    assert given.chunks["precipitation"][0] == 48  # a user's rule wins


@pytest.mark.parametrize(
    ("grid", "itemsize", "month", "steps"),
    [
        ((180, 360), 4, 1, 41),  # yearly 1-degree maps: 10 MiB of steps, not one step
        ((180, 360), 4, 1, 41),  # monthly: 3.4 years a chunk, not one
        ((180, 360), 4, 30, 41),  # daily: 10 MiB (41 days), not a year (95 MB)
        ((161, 320), 2, 122, 122),  # 6-hourly ECMWF MACC CO2: a month (12 MiB)
        ((721, 1440), 4, 1, 3),  # yearly 0.25-degree maps: 3 steps make 10 MiB
        ((480, 1440), 4, 243, 37),  # 3-hourly TRMM: the 100 MiB target first
    ],
)
def test_a_chunk_is_a_month_of_steps_within_10_to_100_mib(grid, itemsize, month, steps):
    specs = {"v": ArraySpec(("time", "lat", "lon"), (1, *grid), itemsize, False)}
    assert choose_chunks(specs, "time", month=month).chunks["v"][0] == steps


@pytest.mark.parametrize(
    ("units", "times", "month"),
    [
        ("hours since 1900-01-01 00:00:00.0", [0, 6, 12], 122),  # 6-hourly: 30.4 days
        ("days since 2000-01-01", [0, 1, 2], 30),
        ("days since 2000-01-01", [0, 365, 730], 1),  # yearly: at least one step
    ],
)
def test_a_month_of_steps(units, times, month):
    assert steps_per_month(step_seconds(np.array(times), units, None)) == month
