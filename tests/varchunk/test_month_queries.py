"""A monthly-chunked daily cube answers whole-month ranges from prefix sums alone and reads
raw chunks only where a range cuts a month, in the standard, noleap and 360-day calendars.
Answers are checked against xarray on the raw data."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
import xarray as xr

import accumulus
from accumulus.grid import ChunkBounds
from accumulus.raw_cube import RawCube

from .conftest import CALENDARS, VAR, daily_dataset, period_counts, write_regular


def _label(value) -> str:
    if isinstance(value, np.datetime64):
        return str(pd.Timestamp(value).date())
    return value.strftime("%Y-%m-%d")  # cftime


def _expected(ds: xr.Dataset, lo: int, hi: int, over: list[str]) -> xr.DataArray:
    data = ds[VAR].isel(time=slice(lo, hi)).astype("f8")
    return data.weighted(np.cos(np.deg2rad(ds["lat"]))).mean(over)


@pytest.fixture(scope="module", params=CALENDARS, ids=[c[0] for c in CALENDARS])
def cubes(request, tmp_path_factory):
    """(dataset, daily cube with 7-day chunks, the same rechunked by month), accumulated."""
    calendar, start, days = request.param
    ds = daily_dataset(calendar, start, days, seed=len(calendar))
    folder = tmp_path_factory.mktemp(calendar)
    daily, monthly = folder / "daily.zarr", folder / "monthly.zarr"
    write_regular(ds, daily, time_chunk=7)
    accumulus.accumulate(str(daily), VAR, [("time",), ("lat", "lon")], weights="area")
    accumulus.rechunk(str(daily), str(monthly), "time=month")
    return ds, daily, monthly


def test_chunks_are_the_calendar_months(cubes):
    ds, _, monthly = cubes
    bounds = RawCube.open(str(monthly)).variable(VAR).bounds[0]
    assert list(bounds.sizes) == period_counts(ds["time"].values, "MS")


def test_whole_month_ranges_read_no_raw_chunk(cubes):
    ds, daily, monthly = cubes
    edges = RawCube.open(str(monthly)).variable(VAR).bounds[0].edges
    times = ds["time"].values
    raw_reads_on_daily_chunks = 0
    for lo, hi in itertools.combinations(edges, 2):  # every run of whole months
        ranges = {"time": (_label(times[lo]), _label(times[hi - 1]))}
        result = accumulus.query(str(monthly), VAR, "time", ranges, plan="accumulation")
        assert result.stats.raw_chunks_read == 0, ranges
        assert 0 < result.stats.accumulation_chunks_read <= 4
        expected = _expected(ds, lo, hi, ["time"])
        np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9, atol=1e-12)
        raw_reads_on_daily_chunks += accumulus.query(
            str(daily), VAR, "time", ranges, plan="accumulation"
        ).stats.raw_chunks_read
    # The same ranges on 7-day chunks: month ends fall inside chunks, which are read raw.
    assert raw_reads_on_daily_chunks > 0


def test_unaligned_ranges_read_only_the_months_they_cut(cubes):
    ds, _, monthly = cubes
    bounds: ChunkBounds = RawCube.open(str(monthly)).variable(VAR).bounds[0]
    times = ds["time"].values
    rng = np.random.default_rng(7)
    for _ in range(25):
        lo = int(rng.integers(0, len(times) - 1))
        hi = int(rng.integers(lo + 1, len(times) + 1))
        cut = {
            bounds.chunk_of(edge)[0]
            for edge, at_edge in ((lo, lo in bounds.edges), (hi - 1, hi in bounds.edges))
            if not at_edge
        }
        ranges = {"time": (_label(times[lo]), _label(times[hi - 1]))}
        result = accumulus.query(str(monthly), VAR, "time", ranges, plan="accumulation")
        # Each raw chunk here is one month by the whole lat x lon plane.
        assert result.stats.raw_chunks_read == len(cut), (lo, hi)
        for read in result.plan.raw_reads:
            assert set(bounds.chunks_overlapping(*read.box["time"])) <= cut
        expected = _expected(ds, lo, hi, ["time"])
        np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9, atol=1e-12)


def test_area_averaged_series_over_a_month(cubes):
    ds, _, monthly = cubes
    bounds = RawCube.open(str(monthly)).variable(VAR).bounds[0]
    times = ds["time"].values
    lo, hi = bounds.edges[2], bounds.edges[3]
    ranges = {"time": (_label(times[lo]), _label(times[hi - 1])), "lat": (-30, 60)}
    result = accumulus.query(str(monthly), VAR, ["lat", "lon"], ranges)
    data = ds[VAR].isel(time=slice(lo, hi)).sel(lat=slice(-30, 60)).astype("f8")
    expected = data.weighted(np.cos(np.deg2rad(data["lat"]))).mean(["lat", "lon"])
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9, atol=1e-12)
