"""``accumulate`` with no options builds the default layout (time at month ends and every 2
days of each month, latitude+longitude at every cell): series over any box and maps over whole
months read no raw chunk, maps over other days at most a day at each end, and all equal
xarray's answers on the raw data. ``minimal`` builds ZEP 5 as
written; ``inspect`` names which."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest

import accumulus
from accumulus.accumulation.model import spec
from cubes import VAR, area_weights, synthetic_dataset, write_cube

CHUNKS = {"time": 40, "lat": 6, "lon": 8}  # a few big chunks: every range below cuts them


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    path = tmp_path_factory.mktemp("default") / "c.zarr"
    ds = synthetic_dataset({"time": 90, "lat": 6, "lon": 8}, seed=11)
    write_cube(ds, path, CHUNKS)
    result = accumulus.accumulate(str(path), VAR)
    return path, ds, result


def test_the_default_layout_is_every_two_days_and_every_cell(built):
    path, _, result = built
    keys = {a.key for a in result.group.accumulations}
    assert keys == {"time@month_2", "lat,lon@1,1"}
    assert result.group.weights == "area"
    assert spec.layout_name(result.group) == "default"
    [group] = accumulus.inspect(str(path))["accumulation_groups"]
    assert group["layout"] == "default"


@pytest.mark.parametrize(
    ("over", "ranges", "raw_days"),
    [
        (
            ["lat", "lon"],
            {"time": ("2001-01-03", "2001-02-17"), "lat": (-50, 30), "lon": (2, 12)},
            0,
        ),
        (["lat", "lon"], {"lat": (-20, 70), "lon": (5, 15)}, 0),
        (["time"], {"time": ("2001-01-01", "2001-02-28")}, 0),  # whole months
        # The data's last day ends a 2-day step short: provisional (more days may come).
        (["time"], {"time": ("2001-03-01", "2001-03-31")}, 1),
        (["time"], {"time": ("2001-01-05", "2001-03-08")}, 0),  # ends on entries
        (["time"], {"time": ("2001-01-06", "2001-03-09")}, 2),  # a day off at each end
        (["time"], {"time": ("2001-01-05", "2001-01-05")}, 1),  # one day
    ],
)
def test_common_questions_read_no_raw_chunk(built, over, ranges, raw_days):
    path, ds, _ = built
    # The accumulations' plan (on a cube this small a scan may be the cheaper one).
    result = accumulus.query(str(path), VAR, over, ranges, plan="accumulation")
    # Each end off an entry reads its day from the raw chunk holding it.
    assert (result.stats.raw_chunks_read > 0) == (raw_days > 0)
    assert result.stats.raw_chunks_read <= raw_days
    # (A single day is read raw alone: no entry falls inside it.)
    start, end = ranges.get("time", ("", "-"))
    assert (result.stats.accumulation_chunks_read > 0) == (start != end)
    got = result.data
    data = ds[VAR].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
    expected = data.weighted(area_weights(data)).mean(over)
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def test_minimal_is_zep5_as_written(tmp_path):
    path = tmp_path / "c.zarr"
    write_cube(synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=12), path, CHUNKS)
    result = accumulus.accumulate(str(path), VAR, minimal=True)
    assert all(a.is_zep5 for a in result.group.accumulations)
    assert {a.dims for a in result.group.accumulations} == {
        ("time",),
        ("lat",),
        ("lon",),
        ("lat", "lon"),
    }
    assert spec.layout_name(result.group) == "ZEP 5"


def test_without_latitudes_and_longitudes_the_default_is_zep5():
    combos, at = spec.default_layout(("time", "x"), ())
    assert combos == [("time",), ("x",)] and at == {}
    combos, at = spec.default_layout(("time", "lat", "lon"), ("lat", "lon"), ("time",))
    assert combos == [("time",), ("lat", "lon")]
    assert at == {"time": "month+2", "lat": 1, "lon": 1}


def test_a_dimension_without_dates_has_an_entry_at_every_element(tmp_path):
    path = tmp_path / "c.zarr"
    ds = synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=13)
    ds = ds.assign_coords(time=np.arange(30.0))  # hours since an unnamed origin: no dates
    write_cube(ds, path, CHUNKS)
    result = accumulus.accumulate(str(path), VAR)
    assert {a.key for a in result.group.accumulations} == {"time@1", "lat,lon@1,1"}
    assert spec.layout_name(result.group) == "default"


def test_where_a_raw_day_is_not_read_alone_the_default_is_every_day(tmp_path):
    """zlib chunks (as NetCDF4 granules carry) decode whole: a day at a map's end would cost
    its chunk, so the default keeps an entry at every day there."""
    path = tmp_path / "c.zarr"
    ds = synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=14)
    chunks = tuple(CHUNKS[d] for d in ds[VAR].dims)
    encoding = {VAR: {"chunks": chunks, "compressors": [numcodecs.Zlib(4)]}}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True, encoding=encoding)
    result = accumulus.accumulate(str(path), VAR)
    assert {a.key for a in result.group.accumulations} == {"time@1", "lat,lon@1,1"}
    assert spec.layout_name(result.group) == "default"
