"""``stat="var"``/``"std"``: xarray's ``weighted(w).var/std`` (ddof 0), from the sums of
squares ``accumulate(stats=["var"])`` stores, or exactly from raw chunks without them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from statistics_helpers import (
    DIMS,
    TEN_YEARS,
    build,
    cases,
    expected,
    expected_trend,
    magnitude,
    same,
    sizes,
    ten_year_cube,
)

import accumulus
from accumulus.accumulation.model import spec
from accumulus.errors import AccumulusError
from cubes import VAR, labels, synthetic_dataset, write_cube
from properties import case_dataset, cube_property, drawn_ranges


@cube_property(25)
@given(
    offset=st.sampled_from([0.0, 280.0]),
    case=cases(sizes(st.integers(1, 9), st.integers(1, 9), st.integers(1, 9))),
    data=st.data(),
)
def test_var_and_std_equal_xarray(tmp_path_factory, offset, case, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    ds = case_dataset(case)
    ds[VAR] = ds[VAR] + np.float32(offset)
    write_cube(ds, path, case["chunks"])
    build(path, weights=case["weights"], minimal=case["layout"] == "minimal")
    for _ in range(3):
        over = data.draw(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3, unique=True))
        stat = data.draw(st.sampled_from(["var", "std"]))
        ranges, isel = drawn_ranges(data, ds, DIMS, case["sizes"])
        want = expected(ds[VAR].isel(isel), over, case["weights"], stat)
        for use_accumulation in (True, False):
            got = accumulus.average(
                str(path), VAR, over, ranges, stat=stat, weights=case["weights"],
                use_accumulation=use_accumulation,
            )  # fmt: skip
            same(got, want, scale=magnitude(ds[VAR]))


@pytest.mark.parametrize("weights", ["area", "none"])
@pytest.mark.parametrize("minimal", [True, False])
def test_aligned_maps_and_series_read_no_raw_chunk(tmp_path, weights, minimal):
    ds = synthetic_dataset({"time": 24, "lat": 9, "lon": 8}, seed=5, nan_fraction=0.2)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 3, "lon": 4})
    built = build(path, weights=weights, minimal=minimal)
    assert built.group.reference is not None
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    squares = {a.arrays[spec.SUMSQ] for a in built.group.accumulations if spec.SUMSQ in a.arrays}
    assert squares and squares <= set(report.checked)
    # Every combination asked for can give them (itself, or a sibling of its dimensions).
    held = {a.dims for a in built.group.accumulations if spec.SUMSQ in a.arrays}
    assert held == {a.dims for a in built.group.chosen}
    for over, box in [(["time"], {"time": (4, 20)}), (["lat", "lon"], {"lat": (3, 9)})]:
        ranges = {d: labels(ds, d, *r) for d, r in box.items()}
        selection = ds[VAR].isel({d: slice(*r) for d, r in box.items()})
        for stat in ("var", "std"):
            # The accumulation plan asked for: on a cube this small the planner may rightly
            # find a scan faster (it measures this machine's speeds, which load moves).
            got = accumulus.average(
                str(path), VAR, over, ranges, stat=stat, weights=weights, plan="accumulation"
            )
            same(got, expected(selection, over, weights, stat), rtol=1e-9)
            assert got.attrs["raw_chunks_read"] == 0
            assert got.attrs["accumulation_chunks_read"] > 0


def test_the_default_build_stores_no_squares(tmp_path):
    """Extra sums are asked for: the default build's arrays do not grow."""
    ds = synthetic_dataset({"time": 12, "lat": 5, "lon": 4}, seed=2)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 5, "lon": 4})
    plain = accumulus.accumulate(str(path), VAR)
    assert all(spec.SUMSQ not in a.arrays for a in plain.group.accumulations)
    assert plain.group.reference is None
    # Without them, var is still exact: from the raw chunks, and the answer says so.
    result = accumulus.query(str(path), VAR, ["time"], stat="var")
    same(result.data, expected(ds[VAR], ["time"], "area", "var"), rtol=1e-9)
    assert result.stats.raw_chunks_read > 0 and "raw" in result.note
    with pytest.raises(AccumulusError, match=r"asked for .*, stats var. Add --rebuild"):
        build(path)  # other sums than the group's: a rebuild, not a silent change
    with_squares = build(path, rebuild=True)
    held = {a.dims for a in with_squares.group.accumulations if spec.SUMSQ in a.arrays}
    assert held == {a.dims for a in plain.group.accumulations}
    # Re-running keeps them (what the group was built with), as it keeps everything else.
    assert accumulus.accumulate(str(path), VAR).action == "up to date"


def test_unknown_stats_are_refused(tmp_path):
    ds = synthetic_dataset({"time": 4, "lat": 3, "lon": 2}, seed=2)
    write_cube(ds, tmp_path / "c.zarr", {"time": 2, "lat": 3, "lon": 2})
    with pytest.raises(AccumulusError, match="no sums to build for 'median'"):
        build(tmp_path / "c.zarr", stats=["median"])


@pytest.mark.parametrize(("mean", "spread"), [(280.0, 5.0), (1.0e5, 0.1)])
@pytest.mark.parametrize("minimal", [True, False])
def test_large_mean_small_spread(tmp_path, mean, spread, minimal):
    """Ten years daily around a large mean: Σx² − n·m² would cancel most digits; sums
    about the group's reference (the first chunk's mean) keep var within 1e-7 of xarray's
    two-pass float64 var, for maps over short periods late in the record (a difference of
    two long prefix sums) and over all of it."""
    rng = np.random.default_rng(7)
    time = TEN_YEARS
    values = mean + spread * rng.standard_normal((time.size, 3, 4))
    values[rng.random(values.shape) < 0.1] = np.nan
    path = tmp_path / "cube.zarr"
    ds = ten_year_cube(path, values)
    build(path, minimal=minimal)
    for period in [("2010-12-01", "2010-12-31"), ("2001-01-01", "2010-12-31")]:
        for over in (["time"], ["time", "lat", "lon"]):
            got = accumulus.average(str(path), VAR, over, {"time": period}, stat="var")
            want = expected(ds[VAR].sel(time=slice(*period)), over, "area", "var")
            same(got, want, rtol=1e-7)


def test_the_default_layout_keeps_the_squares_at_chunk_ends_and_months(tmp_path):
    """Beside the default layout's sums every 2 days and at every cell, the sums of squares sit at
    chunk ends (and months, along time) only: a few entries, not one per day; the mean
    keeps its layout, and whole months and whole chunks read no raw chunk."""
    ds = synthetic_dataset({"time": 90, "lat": 6, "lon": 8}, seed=4, nan_fraction=0.1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 20, "lat": 3, "lon": 4})
    built = build(path, stats=["var"])
    assert spec.layout_name(built.group) == "default"
    info = accumulus.inspect(str(path))
    [group] = info["accumulation_groups"]
    where = {(tuple(a["dims"]), a["at"]): a for a in group["accumulations"]}
    assert set(where) == {
        (("time",), "time=month+2"), (("lat", "lon"), "lat=1,lon=1"),
        (("time",), "time=chunk"), (("time",), "time=month"),
        (("lat", "lon"), "lat=1,lon=chunk"),
    }  # fmt: skip
    for (dims, at), described in where.items():
        chosen = at in ("time=month+2", "lat=1,lon=1")
        assert (spec.SUMSQ in described["arrays"]) != chosen, (dims, at)
    assert where[("time",), "time=chunk"]["entries"] == {"time": 5}  # 20, 40, 60, 80, 90
    assert where[("time",), "time=month"]["entries"] == {"time": 3}  # Jan, Feb, Mar
    # Rows of latitude (area weights vary along it), entries at the longitude chunks' ends.
    assert where[("lat", "lon"), "lat=1,lon=chunk"]["entries"] == {"lon": 2}
    for period in [("2001-02-01", "2001-03-31"), ("2001-01-21", "2001-03-21")]:  # months, chunks
        got = accumulus.average(str(path), VAR, ["time"], {"time": period}, stat="var",
                                plan="accumulation")  # fmt: skip
        same(got, expected(ds[VAR].sel(time=slice(*period)), ["time"], "area", "var"), rtol=1e-9)
        assert got.attrs["raw_chunks_read"] == 0, period
    # A series over any band of latitudes and whole longitude chunks reads no raw chunk;
    # other longitudes read their boundary chunks raw.
    for lon, raw in [((0, 7), False), ((1, 6), True)]:
        box = {"lat": (float(ds.lat[1]), float(ds.lat[4])),
               "lon": (float(ds.lon[lon[0]]), float(ds.lon[lon[1]]))}  # fmt: skip
        got = accumulus.average(str(path), VAR, ["lat", "lon"], box, stat="std",
                                plan="accumulation")  # fmt: skip
        want = expected(
            ds[VAR].sel({d: slice(*r) for d, r in box.items()}), ["lat", "lon"], "area", "std"
        )
        same(got, want, rtol=1e-9)
        assert (got.attrs["raw_chunks_read"] > 0) == raw, (lon, got.attrs)


@pytest.mark.parametrize("minimal", [True, False])
def test_appends_keep_the_extra_sums_current(tmp_path, minimal):
    ds = synthetic_dataset({"time": 75, "lat": 4, "lon": 3}, seed=9, nan_fraction=0.1)
    path = tmp_path / "cube.zarr"
    write_cube(ds.isel(time=slice(0, 12)), path, {"time": 8, "lat": 4, "lon": 3})
    first = build(path, minimal=minimal, stats=["var", "trend"])
    ds.isel(time=slice(12, 75)).to_zarr(path, append_dim="time")
    updated = accumulus.accumulate(str(path), VAR)
    # Grown by xarray, not ``accumulus append`` (which marks the dimension it grows): the
    # default layout's sums of squares at the old last chunk's end were final, and moved.
    assert updated.action == ("updated" if minimal else "rebuilt")
    assert updated.group.reference == first.group.reference
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    # The whole record, and whole chunks.
    whole = ds.isel(time=slice(0, 72))
    period = {"time": (str(whole.time.values[0])[:10], str(whole.time.values[-1])[:10])}
    for data, ranges in ((ds, {}), (whole, period)):
        got = accumulus.average(str(path), VAR, ["time"], ranges, stat="var", plan="accumulation")
        same(got, expected(data[VAR], ["time"], "area", "var"), rtol=1e-9)
        assert got.attrs["raw_chunks_read"] == 0
        trend = accumulus.average(
            str(path), VAR, ["time"], ranges, stat="trend", plan="accumulation"
        )
        np.testing.assert_allclose(trend.values, expected_trend(data[VAR]).values, rtol=1e-7)
        assert trend.attrs["raw_chunks_read"] == got.attrs["raw_chunks_read"]


def test_units_are_squared(tmp_path):
    ds = synthetic_dataset({"time": 4, "lat": 3, "lon": 2}, seed=2)
    write_cube(ds, tmp_path / "c.zarr", {"time": 2, "lat": 3, "lon": 2})
    got = accumulus.average(str(tmp_path / "c.zarr"), VAR, ["time"], stat="var")
    assert got.attrs["units"] == "(mm/day)^2"
    got = accumulus.average(str(tmp_path / "c.zarr"), VAR, ["time"], stat="std")
    assert got.attrs["units"] == "mm/day"
