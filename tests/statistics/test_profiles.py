"""Zonal means (``over=["lon"]`` or ``["lon", "time"]``) and vertical profiles (``over=["time",
"lat", "lon"]`` of a 4-D variable with a level dimension): xarray's answers on the raw data,
with the accumulations built (default and minimal layouts) and without them."""

from __future__ import annotations

import json

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st
from statistics_helpers import build, cases, expected, magnitude, same, sizes

import accumulus
from command_line import run
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference
from properties import case_dataset, cube_property, drawn_ranges

LEVELS = [1000.0, 850.0, 500.0, 250.0]
PROFILE = ["time", "lat", "lon"]


def selected(ds: xr.Dataset, ranges: dict[str, tuple]) -> xr.DataArray:
    """The variable within ``ranges``, as a user selects it in xarray (inclusive labels)."""
    return ds[VAR].sel({d: slice(*r) for d, r in ranges.items()})


def compare(path, ds, over, ranges, weights, stat) -> None:
    """accumulus' answer from its accumulations (if any) and from a scan, against xarray's."""
    data = selected(ds, ranges)
    if stat == "mean":
        want = xarray_reference(data, over, weights, stat)
    else:
        want = expected(data, over, weights, stat)
    for use_accumulation in (True, False):
        got = accumulus.average(
            str(path), VAR, over, ranges, stat=stat, weights=weights,
            use_accumulation=use_accumulation,
        )  # fmt: skip
        assert set(got.dims) == set(want.dims)
        if stat == "mean":
            got = got.transpose(*want.dims)
            np.testing.assert_allclose(got.values, want.values, rtol=1e-9, atol=1e-12)
        else:
            same(got, want, rtol=1e-9, scale=magnitude(data))


@cube_property(20)
@given(
    case=cases(sizes(st.integers(1, 8), st.integers(1, 6), st.integers(1, 8))),
    built=st.booleans(),
    data=st.data(),
)
def test_zonal_means_equal_xarray(tmp_path_factory, case, built, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    ds = case_dataset(case)
    write_cube(ds, path, case["chunks"])
    if built:
        build(path, weights=case["weights"], minimal=case["layout"] == "minimal")
    for _ in range(2):
        over = data.draw(st.sampled_from([["lon"], ["lon", "time"]]))
        stat = data.draw(st.sampled_from(["mean", "mean", "var", "std"]))
        ranges, _ = drawn_ranges(data, ds, case["sizes"], case["sizes"])
        compare(path, ds, over, ranges, case["weights"], stat)


def profile_cube(path, chunks, *, seed: int = 3) -> xr.Dataset:
    """A 4-D (time, level, lat, lon) variable with NaN holes written at ``path``."""
    ds = synthetic_dataset({"time": 10, "level": 4, "lat": 7, "lon": 6}, seed=seed)
    ds = ds.assign_coords(level=("level", LEVELS, {"units": "hPa"}))
    write_cube(ds, path, chunks)
    return ds


@pytest.mark.parametrize("layout", ["none", "default", "minimal"])
@pytest.mark.parametrize(
    "chunks",
    [{"time": 4, "level": 1, "lat": 3, "lon": 6}, {"time": 10, "level": 3, "lat": 7, "lon": 4}],
)
def test_vertical_profiles_equal_xarray(tmp_path, layout, chunks):
    path = tmp_path / "cube.zarr"
    ds = profile_cube(path, chunks)
    if layout != "none":
        built = build(path, minimal=layout == "minimal")
        assert "level" in built.group.variable_dims
    boxes = [{}, {"time": ("2001-01-03", "2001-01-09"), "lat": (-30.0, 60.0), "lon": (2.5, 10.0)}]
    for ranges in boxes:
        for weights in ("area", "none"):
            for stat in ("mean", "var", "std"):
                compare(path, ds, PROFILE, ranges, weights, stat)
    # With the sums built, a profile (or a zonal mean of the 4-D variable) over whole chunks
    # can be answered from them alone (the plan forced: on cubes this small the planner may
    # rightly estimate a scan faster, by rates it measures on the machine).
    if layout != "none":
        for over, kept in [(PROFILE, ("level",)), (["lon", "time"], ("level", "lat"))]:
            for stat in ("mean", "std"):
                got = accumulus.average(str(path), VAR, over, stat=stat, plan="accumulation")
                assert got.dims == kept and list(got["level"].values) == LEVELS
                assert got.attrs["raw_chunks_read"] == 0, (over, got.attrs)
                assert got.attrs["accumulation_chunks_read"] > 0
    if layout == "default":
        # The mean's sums at every step: any time range. A statistic's sums at chunk ends and
        # months (``spec.split_for_sums``): a period of whole chunks.
        days = chunks["time"]
        aligned = {"time": ("2001-01-01", f"2001-01-{days:02d}")}
        unaligned = {"time": ("2001-01-02", "2001-01-07")}
        for over in (PROFILE, ["lon", "time"]):
            for stat, period in (("mean", unaligned), ("std", aligned)):
                got = accumulus.average(
                    str(path), VAR, over, period, stat=stat, plan="accumulation"
                )
                assert got.attrs["raw_chunks_read"] == 0, (stat, over, got.attrs)


def test_a_vertical_profile_from_the_command_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "cube.zarr"
    ds = profile_cube(path, {"time": 5, "level": 2, "lat": 7, "lon": 3}, seed=8)
    want = xarray_reference(ds[VAR].sel(time=slice("2001-01-02", "2001-01-08")), PROFILE,
                            "area", "mean")  # fmt: skip
    for accumulated in (False, True):
        if accumulated:
            code, out, err = run(capsys, monkeypatch, "accumulate", str(path), VAR)
            assert code == 0 and "built" in out, err
        forced = ["--plan", "accumulation"] if accumulated else []  # not a scan estimated faster
        code, out, err = run(capsys, monkeypatch, "average", str(path), VAR,
                             "--over", "time,lat,lon", "--range", "time=2001-01-02/2001-01-08",
                             "--json", *forced)  # fmt: skip
        assert code == 0, err
        answer = json.loads(out)
        assert answer["dims"] == ["level"] and answer["coords"]["level"] == LEVELS
        np.testing.assert_allclose(answer["values"], want.values, rtol=1e-9)
        assert (answer["plan"]["accumulation_chunks_read"] > 0) == accumulated
