"""``stat="trend"``: the least-squares slope per year of each cell's valid values, as
``polyfit(deg=1)`` against time in years, from the sums ``accumulate(stats=
["trend"])`` stores (Σt, Σt², Σt·x), or exactly from raw chunks without them."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st
from statistics_helpers import TEN_YEARS, build, cases, expected_trend, sizes, ten_year_cube

import accumulus
from accumulus.errors import AccumulusError
from cubes import VAR, labels, synthetic_dataset, write_cube
from properties import case_dataset, cube_property


def close(got: xr.DataArray, want: xr.DataArray, rtol: float = 1e-7) -> None:
    got = got.transpose(*want.dims)
    np.testing.assert_array_equal(np.isnan(got.values), np.isnan(want.values))
    # A slope of 0 (two equal values) comes out as rounding noise of its sums.
    np.testing.assert_allclose(got.values, want.values, rtol=rtol, atol=1e-9)


@cube_property(20)
@given(
    case=cases(sizes(st.integers(1, 30), st.integers(1, 4), st.just(3))),
    data=st.data(),
)
def test_trend_equals_xarray_polyfit(tmp_path_factory, case, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    ds = case_dataset(case)
    n = case["sizes"]["time"]
    ds[VAR] = ds[VAR] + np.float32(280) + np.linspace(0, 3, n, dtype="f4")[:, None, None]
    write_cube(ds, path, case["chunks"])
    build(path, weights=case["weights"], stats=["trend"], minimal=case["layout"] == "minimal")
    for _ in range(3):
        lo = data.draw(st.integers(0, n - 1))
        hi = data.draw(st.integers(lo + 1, n))
        ranges = {"time": labels(ds, "time", lo, hi)}
        want = expected_trend(ds[VAR].isel(time=slice(lo, hi)))
        for use_accumulation in (True, False):
            got = accumulus.average(
                str(path), VAR, ["time"], ranges, stat="trend", use_accumulation=use_accumulation
            )
            close(got, want)


@pytest.mark.parametrize("minimal", [True, False])
def test_ten_years_of_kelvin_maps_read_no_raw_chunk(tmp_path, minimal):
    """Temperatures (280 K, spread 5 K, +0.03 K a year) daily over ten years: trend maps
    over chunk-aligned periods from the entries alone, within 1e-7 of polyfit."""
    rng = np.random.default_rng(3)
    time = TEN_YEARS
    trend = 0.03 * np.arange(time.size) / 365.25
    values = 280 + trend[:, None, None] + 5 * rng.standard_normal((time.size, 3, 4))
    values[rng.random(values.shape) < 0.1] = np.nan
    path = tmp_path / "cube.zarr"
    ds = ten_year_cube(path, values)
    build(path, stats=["trend"], minimal=minimal)
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    for lo, hi in [(0, 3650), (365, 2920), (730, 1095)]:
        ranges = {"time": labels(ds, "time", lo, hi)}
        got = accumulus.average(str(path), VAR, ["time"], ranges, stat="trend", plan="accumulation")
        close(got, expected_trend(ds[VAR].isel(time=slice(lo, hi))))
        assert got.attrs["raw_chunks_read"] == 0
        assert got.attrs["units"] == "(K) per year"


def test_a_trend_needs_a_time_dimension(tmp_path):
    ds = synthetic_dataset({"lat": 4, "lon": 3}, seed=1)
    write_cube(ds, tmp_path / "c.zarr", {"lat": 2, "lon": 3})
    with pytest.raises(AccumulusError, match="one time dimension"):
        build(tmp_path / "c.zarr", stats=["trend"])
    with pytest.raises(AccumulusError, match="one time dimension"):
        accumulus.average(str(tmp_path / "c.zarr"), VAR, ["lat"], stat="trend")
