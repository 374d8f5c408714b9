"""``season=``: only the season's days count. A map (time among ``over``): the mean over all
of them in the range, as ``sel.where(month in season).weighted(w).mean("time")``; a series:
one value per season-year (DJF of year Y is December Y-1 with January and February Y), as
xarray's ``groupby`` of that year."""

from __future__ import annotations

import numpy as np
import pytest
import shapely
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


def test_a_seasonal_series_is_one_batch_of_reads(cube):
    """Every season-year's reads are one plan, each in its year's slot: each chunk read
    once, however many years' entries it holds."""
    _, path = cube
    result = accumulus.query(path, VAR, ["lat", "lon"], {"time": RANGE}, season="DJF")
    years = result.data.sizes["year"]
    assert result.plan.slots == years == 3
    assert {read.slot for read in result.plan.reads} == set(range(years))
    stats = result.stats
    assert stats.requests == stats.accumulation_chunks_read + stats.raw_chunks_read


def test_a_series_without_the_seasons_days_has_integer_years(cube):
    """A range holding none of the season's days: an empty series, its years int64 as
    every series' are."""
    _, path = cube
    got = accumulus.average(path, VAR, ["lat", "lon"], {"time": ("2001-03-01", "2001-04-30")},
                            season="JJA")  # fmt: skip
    assert got.dims == ("year",) and got.sizes["year"] == 0
    assert got["year"].dtype == np.int64


def test_answers_over_whole_axes_have_coordinates_of_their_own(cube):
    """A whole axis' coordinate is made once per snapshot (a series over the whole record's
    years too), but each answer's is its own: attributes set on one answer's coordinates
    are not another's, and their labels are the cube's."""
    ds, path = cube
    opened = accumulus.open(path)
    jja = ds["time"].dt.month.isin((6, 7, 8)).values
    asked = (
        (["time"], {}, {"lat": ds["lat"].values, "lon": ds["lon"].values}),  # a map
        (["lat", "lon"], {"season": "JJA"}, {"year": np.unique(ds["time"].dt.year[jja])}),
    )
    for over, options, labels in asked:
        first = opened.average(VAR, over, **options)
        for name in first.coords:
            first[name].attrs["marked"] = True
        second = opened.average(VAR, over, **options)
        assert all("marked" not in second[name].attrs for name in second.coords)
        for name, values in labels.items():
            assert list(first[name].values) == list(second[name].values) == list(values)


def test_bad_seasons_are_refused(cube):
    _, path = cube
    with pytest.raises(AccumulusError, match="unknown season 'JJX'"):
        accumulus.average(path, VAR, ["time"], season="JJX")
    with pytest.raises(AccumulusError, match="takes stat mean, sum, count, var, std, trend"):
        accumulus.average(path, VAR, ["time"], season="JJA", stat="corr", with_=VAR)


@pytest.fixture(scope="module")
def summed(tmp_path_factory):
    """The season cube with the sums of var and trend (default layout: beside it at chunk
    ends and months)."""
    ds = synthetic_dataset({"time": 800, "lat": 5, "lon": 4}, seed=3, nan_fraction=0.3)
    path = tmp_path_factory.mktemp("season") / "cube.zarr"
    write_cube(ds, path, {"time": 30, "lat": 5, "lon": 2})
    accumulus.accumulate(str(path), VAR, stats=["var", "trend"])
    return ds, str(path)


@pytest.mark.parametrize("season", ["DJF", "JJA", "MAR"])
@pytest.mark.parametrize("stat", ["var", "std"])
def test_seasonal_variability_equals_xarray(summed, season, stat):
    """var and std of a season's days: the map over all of them, and one value per
    season-year, as xarray's weighted var of the same days (ddof 0); read from the sums
    (whole months: no raw chunk) and from the raw chunks alike."""
    ds, path = summed
    w = area_weights(ds)
    days = _season(ds, season)
    for use_accumulation in (True, False):
        asked = {"season": season, "stat": stat, "use_accumulation": use_accumulation}
        got = accumulus.average(path, VAR, ["time"], {"time": RANGE}, **asked)
        want = getattr(days.weighted(w), stat)("time")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9)
        assert got.attrs["units"] == ("(mm/day)^2" if stat == "var" else "mm/day")
        december = (days.time.dt.month == 12) & (season == "DJF")
        year = days.time.dt.year + december
        grouped = days.assign_coords(year=("time", year.values)).groupby("year")
        want = grouped.map(lambda g: getattr(g.weighted(w), stat)(["time", "lat", "lon"]))
        got = accumulus.average(path, VAR, ["lat", "lon"], {"time": RANGE}, **asked)
        np.testing.assert_array_equal(got["year"].values, want["year"].values)
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9)
    # Whole months of a season over whole years: entries only.
    result = accumulus.query(
        path, VAR, ["time"], {"time": ("2001-01-01", "2002-12-31")}, season=season, stat=stat,
        plan="accumulation",
    )  # fmt: skip
    assert result.stats.raw_chunks_read == 0 and result.stats.accumulation_chunks_read > 0


def test_a_seasonal_trend_equals_a_fit_of_its_days(summed):
    """trend over a season's days: the least-squares slope of those days (years since the
    cube's first day), as NumPy's polyfit of them cell by cell."""
    ds, path = summed
    days = _season(ds, "JJA")
    got = accumulus.average(path, VAR, ["time"], {"time": RANGE}, season="JJA", stat="trend")
    years = ((days.time - ds.time[0]) / np.timedelta64(1, "D")).values / 365.25
    values = days.transpose("time", ...).values.reshape(days.sizes["time"], -1)
    want = np.full(values.shape[1], np.nan)
    for cell in range(values.shape[1]):
        valid = ~np.isnan(values[:, cell])
        if valid.sum() >= 2:
            want[cell] = np.polyfit(years[valid], values[valid, cell], 1)[0]
    np.testing.assert_allclose(got.transpose("lat", "lon").values.ravel(), want, rtol=1e-7)


@pytest.mark.parametrize("stat", ["mean", "var"])
def test_seasons_over_a_shape_equal_xarray(cube, stat):
    """A season over a shape (the cells whose centres lie in a polygon): the series by
    season-year and the map of the season's days, as xarray's over those cells."""
    ds, path = cube
    polygon = shapely.box(1.0, -50.0, 6.0, 50.0)
    inside = (ds.lat > -50) & (ds.lat < 50) & (ds.lon > 1) & (ds.lon < 6)
    days = _season(ds, "JJA").where(inside)
    w = area_weights(ds)
    handle = accumulus.open(path)

    def reduce(data, dims):
        weighted = data.weighted(w)
        return weighted.mean(dims) if stat == "mean" else weighted.var(dims)

    ranges = {"time": RANGE}
    got = handle.query(VAR, ["lat", "lon"], ranges, season="JJA", shape=polygon, stat=stat)
    expected = days.groupby("time.year").map(lambda g: reduce(g, ["time", "lat", "lon"]))
    assert got.plan.slots == expected.sizes["year"]
    np.testing.assert_array_equal(got.data["year"].values, expected["year"].values)
    np.testing.assert_allclose(got.data.values, expected.values, rtol=1e-9)

    got = handle.query(VAR, ["time"], ranges, season="JJA", shape=polygon, stat=stat).data
    # (the map of the shape's bounding box of cells)
    expected = reduce(days, "time").where(inside).sel(lat=got.lat, lon=got.lon)
    np.testing.assert_allclose(got.transpose(*expected.dims).values, expected.values, rtol=1e-9)


@pytest.mark.parametrize("season", ["DJF", "JJA"])
def test_weights_along_time_weigh_each_runs_days(tmp_path, season):
    """Weights that vary along time, the first dimension of the accumulations a series reads
    (their entries along latitude and longitude, their slabs along time weighed as they are
    read): every run's slabs weighed by their own days' weights, in a seasonal series and in
    a series keeping time, as xarray weighs them."""
    ds = synthetic_dataset({"time": 800, "lat": 5, "lon": 4}, seed=9, nan_fraction=0.2)
    rng = np.random.default_rng(4)
    ds["w"] = (("time", "lat"), rng.uniform(0.5, 3.0, (800, 5)))
    path = str(tmp_path / "cube.zarr")
    write_cube(ds, path, {"time": 30, "lat": 2, "lon": 2})
    accumulus.accumulate(path, VAR, ["lat,lon"], weights="w", at={"lat": 1, "lon": 1})
    w = ds["w"].sel(time=slice(*RANGE))
    days = _season(ds, season)
    december = (days.time.dt.month == 12) & (season == "DJF")
    year = days.time.dt.year + december
    expected = days.assign_coords(year=("time", year.values)).groupby("year")
    expected = expected.map(lambda g: g.weighted(w.sel(time=g.time)).mean(["time", "lat", "lon"]))
    asked = {"season": season, "plan": "accumulation"}
    result = accumulus.query(path, VAR, ["lat", "lon"], {"time": RANGE}, **asked)
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)

    data = ds[VAR].astype("f8").sel(time=slice(*RANGE))
    kept = accumulus.query(path, VAR, ["lat", "lon"], {"time": RANGE}, plan="accumulation")
    assert kept.stats.raw_chunks_read == 0
    np.testing.assert_allclose(
        kept.data.values, data.weighted(w).mean(["lat", "lon"]).values, rtol=1e-9
    )
