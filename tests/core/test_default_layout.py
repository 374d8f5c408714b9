"""``accumulate`` with no options builds the default layout (time at every element,
latitude+longitude at every cell): series over any box and maps over any period, day-precise,
read no raw chunk and equal xarray's answers on the raw data. ``minimal`` builds ZEP 5 as
written; ``inspect`` names which."""

from __future__ import annotations

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


def test_the_default_layout_is_every_day_and_every_cell(built):
    path, _, result = built
    keys = {a.key for a in result.group.accumulations}
    assert keys == {"time@1", "lat,lon@1,1"}
    assert result.group.weights == "area"
    assert spec.layout_name(result.group) == "default"
    [group] = accumulus.inspect(str(path))["accumulation_groups"]
    assert group["layout"] == "default"


@pytest.mark.parametrize(
    ("over", "ranges"),
    [
        (["lat", "lon"], {"time": ("2001-01-03", "2001-02-17"), "lat": (-50, 30), "lon": (2, 12)}),
        (["lat", "lon"], {"lat": (-20, 70), "lon": (5, 15)}),
        (["time"], {"time": ("2001-01-05", "2001-03-09")}),  # day-precise ends
        (["time"], {"time": ("2001-02-01", "2001-03-31")}),  # whole months
    ],
)
def test_common_questions_read_no_raw_chunk(built, over, ranges):
    path, ds, _ = built
    # The accumulations' plan (on a cube this small a scan may be the cheaper one).
    result = accumulus.query(str(path), VAR, over, ranges, plan="accumulation")
    assert result.stats.raw_chunks_read == 0
    assert result.stats.accumulation_chunks_read > 0
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
    combos, at = spec.default_layout(("time", "lat", "lon"), ("lat", "lon"))
    assert combos == [("time",), ("lat", "lon")] and at == {"time": 1, "lat": 1, "lon": 1}
