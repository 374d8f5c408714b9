"""``accumulus verify CUBE --sources FILES…``: the cube compared with its sources as xarray
decodes them, differences by variable and index range, exit 1 on any."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr

import accumulus
from accumulus.ingest.convert import convert
from ingest.helpers import FILL, VAR, cli, truth, write_granule


@pytest.fixture
def appended(tmp_path):
    t = truth(12, nlat=6, nlon=8)  # 9 steps in the cube, 3 more in no granule
    (tmp_path / "in").mkdir()
    granules = [write_granule(tmp_path / "in" / f"g{s}.nc", t, s, s + 3) for s in (0, 3, 6)]
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules, chunks={"time": 4})
    return store, granules, t


def test_an_appended_cube_matches_each_of_its_sources(appended):
    store, granules, _ = appended
    reports = accumulus.verify_sources(str(store), granules)
    assert [r.ok for r in reports] == [True] * 3
    assert [r.steps for r in reports] == [3, 3, 3]
    assert set(reports[0].variables) == {VAR, "time", "time_bnds", "lat", "lon"}
    # One source alone is found where it lies in the cube.
    [report] = accumulus.verify_sources(str(store), granules[1:2])
    assert report.ok


def test_a_changed_value_is_reported_at_its_index(appended):
    """Two values changed in the cube, at (4, 2, 3) (a valid value made missing) and
    (5, 4, 6): the second granule (steps 3-5) reports both, in one box; the others none."""
    store, granules, t = appended
    array = zarr.open_array(store, path=VAR, mode="r+")
    assert t.packed[4, 2, 3] != FILL
    array[4, 2, 3] = FILL
    array[5, 4, 6] = t.packed[5, 4, 6] + 1 if t.packed[5, 4, 6] != FILL else 7
    reports = accumulus.verify_sources(str(store), granules)
    assert [r.ok for r in reports] == [True, False, True]
    [difference] = reports[1].differences
    assert difference.variable == VAR and difference.count == 2
    assert difference.region == ((4, 6), (2, 5), (3, 7))
    assert difference.describe().startswith(f"{VAR} [time 4:6, lat 2:5, lon 3:7]: 2 values differ")
    assert "first at (4, 2, 3): cube nan, source " in difference.detail

    result = cli("verify", str(store), "--sources", *map(str, granules))
    assert result.returncode == 1
    assert result.stdout.count(": OK (5 variables, 3 steps") == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"{granules[1]}: {VAR} [time 4:6, lat 2:5, lon 3:7]: 2 values differ")


def test_sources_the_cube_does_not_hold_are_reported(appended, tmp_path):
    store, _, t = appended
    extra = write_granule(tmp_path / "all.nc", t, 0, 12)
    [report] = accumulus.verify_sources(str(store), [extra])
    problems = [d.describe() for d in report.differences]
    assert problems == [
        "time: 3 of the source's 12 steps are not in the cube (first: 2000-03-02 15:00:00)"
    ]  # 2000-03-01 12:00 + 9 steps of 3 hours
    assert report.steps == 9


def test_a_converted_file_with_groups(tmp_path):
    source = tmp_path / "groups.h5"
    with h5py.File(source, "w") as file:
        x = file.create_dataset("x", data=np.arange(5.0))
        x.make_scale("x")
        inner = file.create_group("inner")
        y = inner.create_dataset("y", data=np.arange(2.0))
        y.make_scale("y")
        data = inner.create_dataset("t", data=np.arange(10, dtype="i2").reshape(5, 2))
        data.dims[0].attach_scale(x)
        data.dims[1].attach_scale(y)
        data.attrs["_FillValue"] = np.int16(3)
    convert(source, tmp_path / "groups.zarr")
    [report] = accumulus.verify_sources(str(tmp_path / "groups.zarr"), [source])
    assert report.ok and "inner/t" in report.variables and report.steps is None
    zarr.open_array(tmp_path / "groups.zarr", path="inner/t", mode="r+")[4, 1] = 3
    [report] = accumulus.verify_sources(str(tmp_path / "groups.zarr"), [source])
    [difference] = report.differences
    assert difference.describe() == (
        "inner/t [x 4:5, y 1:2]: 1 values differ (first at (4, 1): cube nan, source 9.0)"
    )


def test_bad_requests_are_one_line_errors(appended, tmp_path):
    store = appended[0]
    result = cli("verify", str(store), "--sources", str(tmp_path / "nope.nc"))
    assert result.returncode == 2 and "nope.nc" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    result = cli("verify", str(store), VAR, "time")
    assert result.returncode == 2 and "--sources" in result.stderr
