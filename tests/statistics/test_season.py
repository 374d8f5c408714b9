"""``season=``: only the season's days count. A map (time among ``over``): the mean over all
of them in the range, as ``sel.where(month in season).weighted(w).mean("time")``; a series:
one value per season-year (DJF of year Y is December Y-1 with January and February Y), as
xarray's ``groupby`` of that year."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.errors import AccumulusError
from cubes import VAR, area_weights, synthetic_dataset, write_cube

MONTHS = {"DJF": (12, 1, 2), "MAM": (3, 4, 5), "JJA": (6, 7, 8), "SON": (9, 10, 11), "MAR": (3,)}
RANGE = ("2001-02-10", "2003-01-20")  # partial seasons at both ends


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    ds = synthetic_dataset({"time": 800, "lat": 5, "lon": 4}, seed=3, nan_fraction=0.3)
    path = tmp_path_factory.mktemp("season") / "cube.zarr"
    write_cube(ds, path, {"time": 30, "lat": 5, "lon": 2})
    accumulus.accumulate(str(path), VAR)
    return ds, str(path)


def _season(ds: xr.Dataset, season: str) -> xr.DataArray:
    data = ds[VAR].astype("f8").sel(time=slice(*RANGE))
    return data.where(data.time.dt.month.isin(MONTHS[season]), drop=True)


@pytest.mark.parametrize("season", list(MONTHS))
@pytest.mark.parametrize("weights", ["area", "none"])
@pytest.mark.parametrize("use_accumulation", [True, False])
def test_seasons_equal_xarray(cube, season, weights, use_accumulation):
    ds, path = cube
    w = area_weights(ds) if weights == "area" else xr.DataArray(1.0)
    days = _season(ds, season)
    asked = {"season": season, "weights": weights, "use_accumulation": use_accumulation}
    got = accumulus.average(path, VAR, ["time"], {"time": RANGE}, **asked)
    np.testing.assert_allclose(got.values, days.weighted(w).mean("time").values, rtol=1e-9)

    december = (days.time.dt.month == 12) & (season == "DJF")
    year = days.time.dt.year + december
    expected = days.assign_coords(year=("time", year.values)).groupby("year")
    expected = expected.map(lambda g: g.weighted(w).mean(["time", "lat", "lon"]))
    got = accumulus.average(path, VAR, ["lat", "lon"], {"time": RANGE}, **asked)
    assert got.dims == ("year",)
    np.testing.assert_array_equal(got["year"].values, expected["year"].values)
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def test_a_seasonal_series_reads_entries_only(cube):
    """With the default layout a seasonal series over N years reads O(N) accumulation
    chunks and no raw chunk."""
    _, path = cube
    result = accumulus.query(
        path, VAR, ["lat", "lon"], {"time": RANGE}, season="JJA", plan="accumulation"
    )
    assert result.stats.raw_chunks_read == 0
    assert 0 < result.stats.accumulation_chunks_read <= 4 * result.data.sizes["year"]


def test_bad_seasons_are_refused(cube):
    _, path = cube
    with pytest.raises(AccumulusError, match="unknown season 'JJX'"):
        accumulus.average(path, VAR, ["time"], season="JJX")
    with pytest.raises(AccumulusError, match="takes stat mean, sum or count"):
        accumulus.average(path, VAR, ["time"], season="JJA", stat="var")
