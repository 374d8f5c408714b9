"""Data holding +inf and -inf (issue 12): answers equal xarray's whatever the path.

Sums hold finite values only and infinities are counted apart (tallies), so a range that
does not hold an infinity is unaffected by one elsewhere, and one that does is inf, -inf or
NaN exactly as xarray says. Each probe of the issue is here: the range that excludes the
infinite day, verify's false mismatch, JSON against CSV; and every path: appends, sidecars,
positioned accumulations, a group built before tallies existed, integer data.
"""

from __future__ import annotations

import io
import json
import sys

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from fastapi.testclient import TestClient

import accumulus
from accumulus.accumulation.model import spec
from accumulus.cli import main
from accumulus.service import create_app
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

RANGES = [
    ("2001-01-01", "2001-01-03"),  # before both infinities
    ("2001-01-01", "2001-01-10"),  # holds the +inf day
    ("2001-01-06", "2001-01-14"),  # holds the +inf day only
    ("2001-01-11", "2001-01-20"),  # holds the -inf day only
    ("2001-01-01", "2001-01-20"),  # holds both
    ("2001-01-17", "2001-01-20"),  # after both
]


def infinite_dataset(seed: int = 1) -> xr.Dataset:
    ds = synthetic_dataset({"time": 20, "lat": 6, "lon": 5}, seed=seed)
    ds[VAR].values[8, 2, 1] = np.inf
    ds[VAR].values[12, 2, 1] = -np.inf
    ds[VAR].values[8, 4, 3] = np.inf
    return ds


def check_answers(store, ds: xr.Dataset, **options) -> None:
    """Every statistic, weighting and range, over time, space and both, equal to xarray's
    and to the raw data's answer."""
    for over in (["time"], ["lat", "lon"], ["time", "lat", "lon"]):
        for stat in ("mean", "sum", "count"):
            for weights in ("area", "none"):
                for rng in RANGES:
                    ranges = {"time": rng}
                    got = accumulus.average(
                        store, VAR, over, ranges, stat=stat, weights=weights, **options
                    )
                    expected = xarray_reference(ds[VAR].sel(time=slice(*rng)), over, weights, stat)
                    got = got.transpose(*expected.dims).values
                    np.testing.assert_allclose(got, expected.values, rtol=1e-9, atol=1e-12)
                    raw = accumulus.average(
                        store, VAR, over, ranges, stat=stat, weights=weights,
                        use_accumulation=False, **options,
                    )  # fmt: skip
                    np.testing.assert_allclose(raw.transpose(*expected.dims).values, got)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_answers_with_infinities_equal_xarray(tmp_path, zarr_format):
    ds = infinite_dataset()
    path = str(tmp_path / "c.zarr")
    write_cube(ds, path, {"time": 5, "lat": 3, "lon": 5}, zarr_format=zarr_format)
    built = accumulus.accumulate(path, VAR)
    assert built.group.infinities is True
    assert all(set(spec.TALLIES) <= set(acc.arrays) for acc in built.group.accumulations)
    check_answers(path, ds)
    (report,) = accumulus.verify(path)
    assert report.ok, report.problems


def test_the_probe_a_range_without_the_infinite_day(tmp_path, capsys, monkeypatch):
    """The issue's probe: +inf at one day, a range that excludes it answered 1.0 by xarray
    (was null from the accumulations, and verify said `stored inf, recomputed inf`)."""
    ds = synthetic_dataset({"time": 10, "lat": 2, "lon": 2}, nan_fraction=0.0)
    ds[VAR].values[:] = 1.0
    ds[VAR].values[7, 0, 0] = np.inf
    path = str(tmp_path / "c.zarr")
    write_cube(ds, path, {"time": 2, "lat": 2, "lon": 2})
    accumulus.accumulate(path, VAR)
    before = accumulus.average(
        path, VAR, ["time"], {"time": ("2001-01-01", "2001-01-06")}, plan="accumulation"
    )
    assert (before.values == 1.0).all()
    assert before.attrs["raw_chunks_read"] == 0
    over = accumulus.average(path, VAR, ["time"], {"time": ("2001-01-01", "2001-01-10")})
    assert over.values.tolist() == [[np.inf, 1.0], [1.0, 1.0]]

    def cli(*args: str) -> str:
        monkeypatch.setattr(sys, "argv", ["accumulus", *args])
        with pytest.raises(SystemExit) as stopped:
            main()
        out, err = capsys.readouterr()
        assert stopped.value.code in (0, None), err
        return out

    assert cli("verify", path).startswith(f"{VAR}: OK")
    # JSON has no number for infinities: the strings CSV's cells hold ("inf", "-inf"); a
    # missing value is null in JSON and an empty cell in CSV.
    common = [path, VAR, "--over", "time", "--range", "time=2001-01-04/2001-01-10"]
    answer = json.loads(cli("average", *common, "--json"))
    assert answer["values"] == [["inf", 1.0], [1.0, 1.0]]
    table = pd.read_csv(io.StringIO(cli("average", *common, "--csv")), keep_default_na=False)
    assert table[VAR].astype(str).tolist() == ["inf", "1.0", "1.0", "1.0"]
    # The service answers the same bodies.
    client = TestClient(create_app([path]))
    url = f"/api/datasets/c/{VAR}/average?over=time&time=2001-01-04/2001-01-10"
    assert client.get(url).json()["values"] == [["inf", 1.0], [1.0, 1.0]]
    assert client.get(url + "&format=csv").text == cli("average", *common, "--csv")
    ds[VAR].values[7, 0, 1] = -np.inf
    nan_and_inf = ds.isel(time=[7]).assign_coords(time=[np.datetime64("2001-01-08")])
    nan_and_inf[VAR].values[0, 1, 1] = np.nan
    nan_and_inf.to_zarr(tmp_path / "day.zarr", mode="w", consolidated=True)
    day = [str(tmp_path / "day.zarr"), VAR, "--over", "time"]
    assert json.loads(cli("average", *day, "--json"))["values"] == [["inf", "-inf"], [1.0, None]]
    table = pd.read_csv(io.StringIO(cli("average", *day, "--csv")), keep_default_na=False)
    assert table[VAR].astype(str).tolist() == ["inf", "-inf", "1.0", ""]


def test_appends_keep_the_tallies_current(tmp_path):
    ds = infinite_dataset(seed=4)
    first, second = ds.isel(time=slice(0, 7)), ds.isel(time=slice(7, 20))
    path = str(tmp_path / "c.zarr")
    accumulus.append(path, first, chunks={"time": 3, "lat": 3, "lon": 5})
    built = accumulus.accumulate(path, VAR)
    assert built.group.infinities is False  # the first days hold none: no tally written
    assert not _tally_arrays(built.group)
    assert not [n for n in zarr.open_group(path)[spec.group_name(VAR)] if "inf" in n]
    accumulus.append(path, second)  # the first infinity: built again, with tallies
    group = accumulus.open(path).snapshot().groups.group(VAR)
    assert group is not None and group.infinities is True
    assert len(_tally_arrays(group)) == 2 * len(group.accumulations)
    check_answers(path, ds)
    (report,) = accumulus.verify(path)
    assert report.ok, report.problems


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_sidecar_and_positioned_accumulations(tmp_path):
    ds = infinite_dataset(seed=5)
    source, side = str(tmp_path / "c.zarr"), str(tmp_path / "side.zarr")
    write_cube(ds, source, {"time": 5, "lat": 3, "lon": 5})
    accumulus.accumulate(source, VAR, [("time",), ("lat", "lon")], at={"time": 1}, into=side)
    check_answers(side, ds)
    check_answers(source, ds, accumulations=side)
    (report,) = accumulus.verify(side)
    assert report.ok, report.problems
    positioned = str(tmp_path / "p.zarr")
    write_cube(ds, positioned, {"time": 5, "lat": 3, "lon": 5}, zarr_format=3)
    accumulus.accumulate(positioned, VAR, [("time",), ("lat", "lon")], at="time=month")
    accumulus.accumulate(positioned, VAR, [("lat", "lon")], at={"lat": 1, "lon": 1}, rebuild=True)
    check_answers(positioned, ds)
    (report,) = accumulus.verify(positioned)
    assert report.ok, report.problems


def test_a_group_built_before_tallies_answers_from_the_raw_data(tmp_path, monkeypatch):
    """A group of an older accumulus holds infinities in its sums and has no tallies:
    queries whose entries meet an infinity answer from the raw data and say so; verify names
    the cause; --rebuild adds the tallies."""
    from accumulus.accumulation.model import statistics

    ds = infinite_dataset(seed=6)
    path = str(tmp_path / "c.zarr")
    write_cube(ds, path, {"time": 5, "lat": 3, "lon": 5})
    with monkeypatch.context() as m:
        m.setattr(statistics, "can_be_infinite", lambda dtype: False)  # no tallies
        old = accumulus.accumulate(path, VAR, ["time"], weights="area")
    assert old.group.infinities is None
    # Its sums as the older build summed them: every infinity in (NaN where both met).
    values = np.where(np.isnan(ds[VAR].values), 0.0, ds[VAR].values.astype("f8"))
    weights = np.cos(np.deg2rad(ds.lat.values))[None, :, None]
    root = zarr.open_group(path, mode="r+")
    with np.errstate(invalid="ignore"):
        for name, summands in (("acc_time", values * weights), ("acc_uw_time", values)):
            root[f"{spec.group_name(VAR)}/{name}"][...] = np.cumsum(summands, axis=0)[4::5]
    check_answers(path, ds)
    query = accumulus.query(path, VAR, ["time"], {"time": ("2001-01-01", "2001-01-20")})
    assert "holds infinities" in query.note and "answered from the raw data" in query.note
    (report,) = accumulus.verify(path)
    assert any("tallied them apart" in p for p in report.problems), report.problems
    assert accumulus.accumulate(path, VAR, ["time"]).action == "up to date"
    rebuilt = accumulus.accumulate(path, VAR, ["time"], rebuild=True)
    assert rebuilt.group.infinities is True
    (report,) = accumulus.verify(path)
    assert report.ok, report.problems


def test_integer_data_keeps_no_tallies(tmp_path):
    ds = synthetic_dataset({"time": 12, "lat": 4, "lon": 3}, nan_fraction=0.0)
    ds[VAR] = (ds[VAR] * 10).astype("i4")
    path = str(tmp_path / "c.zarr")
    write_cube(ds, path, {"time": 5, "lat": 2, "lon": 3}, fill_value=None)
    built = accumulus.accumulate(path, VAR)
    assert built.group.infinities is None
    assert not any(t in acc.arrays for acc in built.group.accumulations for t in spec.TALLIES)
    got = accumulus.average(path, VAR, ["time"], {"time": ("2001-01-02", "2001-01-11")})
    expected = xarray_reference(ds[VAR].isel(time=slice(1, 11)), ["time"], "area", "mean")
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def _tally_arrays(group: spec.AccumulationGroup) -> set[str]:
    return {n for acc in group.accumulations for t, n in acc.arrays.items() if t in spec.TALLIES}
