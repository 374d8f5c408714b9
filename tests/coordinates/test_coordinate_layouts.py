"""A property test over the ways files lay out latitudes and longitudes (issue 34): as dimension
coordinates, as differently named 1-D variables (recognised by ``standard_name``, units,
``axis``, the ``coordinates`` attribute or the name), as 2-D variables of a curvilinear grid
(rotated-pole or projected in metres as ORNL's ABoVE grids, or on dimensions without labels),
or not at all; latitudes ascending or
descending; longitudes -180..180, 0..360, -0.5..359.5 and -180..180 repeating their first
column, either way round. Weights and ranges always equal xarray's on the same values
(rtol 1e-9, cos(latitude) in float64: the latitudes made the dimensions' coordinates, the
repeated column dropped, longitudes selected modulo 360), or the query is refused in one
line naming what is missing."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.errors import AccumulusError

from .test_real_layouts import modulo_360

VAR = "field"
LAYOUTS = ("dimension", "named", "curvilinear", "rotated", "projected", "bare")
# Longitudes: first label, and whether the last column repeats the first a turn later.
CONVENTIONS = {"-180..180": (-180.0, False), "0..360": (0.0, False),
               "-0.5..359.5": (-0.5, True), "-180..180 repeated": (-180.0, True)}  # fmt: skip
# How a 1-D variable on another dimension says it holds latitudes (longitudes alike).
SIGNS = {
    "standard_name": ({"standard_name": "latitude"}, {"standard_name": "longitude"}),
    "units": ({"units": "degrees_north"}, {"units": "degree_E"}),
    "axis": ({"axis": "Y", "units": "degrees"}, {"axis": "X", "units": "degrees"}),
    "name": ({}, {}),  # named lat and lon, nothing else (the ZEP 5 generator's way)
}


@dataclass(frozen=True)
class Case:
    layout: str
    ny: int
    nx: int  # distinct longitudes
    convention: str
    lat_descending: bool
    lon_descending: bool
    sign: str
    listed: bool  # lat/lon named in the variable's coordinates attribute
    chunks: tuple[int, int, int]
    seed: int

    @property
    def repeated(self) -> bool:
        return CONVENTIONS[self.convention][1]

    @property
    def positions(self) -> bool:
        """Whether the grid's dimensions have positions only (no variable labels them)."""
        return self.layout in ("bare", "curvilinear")

    @property
    def dims(self) -> tuple[str, str]:
        return {"dimension": ("lat", "lon"), "named": ("latitude", "longitude"),
                "curvilinear": ("y", "x"), "rotated": ("rlat", "rlon"),
                "projected": ("y", "x"), "bare": ("lat", "lon")}[self.layout]  # fmt: skip


@st.composite
def cases(draw) -> Case:
    ny, nx = draw(st.integers(2, 7)), draw(st.integers(4, 12))
    convention = draw(st.sampled_from(sorted(CONVENTIONS)))
    columns = nx + CONVENTIONS[convention][1]
    return Case(
        layout=draw(st.sampled_from(LAYOUTS)),
        ny=ny,
        nx=nx,
        convention=convention,
        lat_descending=draw(st.booleans()),
        lon_descending=draw(st.booleans()),
        sign=draw(st.sampled_from(sorted(SIGNS))),
        listed=draw(st.booleans()),
        chunks=(draw(st.integers(1, 4)), draw(st.integers(1, ny)), draw(st.integers(1, columns))),
        seed=draw(st.integers(0, 2**16)),
    )


def grid(case: Case) -> tuple[np.ndarray, np.ndarray]:
    """1-D latitudes (to 0.1°, so that no range bound below falls on one) and longitudes."""
    lat = np.round(np.linspace(-85, 85, case.ny) + 0.3, 1)
    start, repeated = CONVENTIONS[case.convention]
    lon = start + 360.0 / case.nx * np.arange(case.nx + repeated)
    return (lat[::-1] if case.lat_descending else lat), (lon[::-1] if case.lon_descending else lon)


def dataset(case: Case) -> tuple[xr.Dataset, xr.DataArray | None, xr.DataArray]:
    """The file's dataset, and its latitudes and longitudes as the reference sees them (on
    the dataset's dimensions; None for latitudes it does not have)."""
    rng = np.random.default_rng(case.seed)
    lat, lon = grid(case)
    ydim, xdim = case.dims
    values = rng.uniform(-5, 30, (4, lat.size, lon.size)).astype("f4")
    values[rng.random(values.shape) < 0.15] = np.nan
    if case.repeated:  # the repeated column holds its twin's values, as such files do
        values[..., -1] = values[..., 0]
    time = pd.date_range("2001-01-01", periods=4, freq="D")
    ds = xr.Dataset({VAR: (("time", ydim, xdim), values, {"units": "K"})}, coords={"time": time})
    lat_values = xr.DataArray(lat, dims=ydim)
    lon_values = xr.DataArray(lon, dims=xdim)
    lat_attrs, lon_attrs = SIGNS[case.sign]
    if case.layout == "dimension":
        ds = ds.assign_coords({ydim: lat, xdim: lon})
        ds[ydim].attrs.update(units="degrees_north")
        ds[xdim].attrs.update(units="degrees_east")
    elif case.layout == "named":  # lat(latitude), lon(longitude), as NCAR's STR SST
        ds["lat"] = lat_values.assign_attrs(lat_attrs)
        ds["lon"] = lon_values.assign_attrs(lon_attrs)
    elif case.layout in ("curvilinear", "rotated", "projected"):
        rows, cols = np.meshgrid(np.arange(lat.size), np.arange(lon.size), indexing="ij")
        lat2d = lat[:, None] + 2.0 * np.sin(cols)  # rows bend: no latitude is 1-D
        lon2d = lon[None, :] + 3.0 * np.cos(rows)
        ds["lat"] = ((ydim, xdim), lat2d, {"standard_name": "latitude", "units": "degrees_north"})
        ds["lon"] = ((ydim, xdim), lon2d, {"standard_name": "longitude", "units": "degrees_east"})
        lat_values = ds["lat"]
        if case.layout == "rotated":  # rotated coordinates, which are no latitudes
            ds = ds.assign_coords({ydim: np.round(np.linspace(-9, 9, lat.size), 1),
                                   xdim: np.round(np.linspace(-12, 12, lon.size), 1)})  # fmt: skip
            for dim, name in ((ydim, "grid_latitude"), (xdim, "grid_longitude")):
                ds[dim].attrs.update(standard_name=name, units="degrees")
        if case.layout == "projected":  # as ORNL's ABoVE grids: metres, north up, a crs
            ds = ds.assign_coords({ydim: 4.2e6 - 30_000.0 * np.arange(lat.size),
                                   xdim: -2.1e6 + 30_000.0 * np.arange(lon.size)})  # fmt: skip
            for dim, name in ((ydim, "projection_y_coordinate"), (xdim, "projection_x_coordinate")):
                ds[dim].attrs.update(standard_name=name, units="m")
            ds["crs"] = ((), 0, {"grid_mapping_name": "albers_conical_equal_area"})
            ds[VAR].attrs["grid_mapping"] = "crs"
    else:  # bare: positions only, whatever the dimensions are called
        lat_values = None
    if case.listed and case.layout in ("named", "curvilinear", "rotated", "projected"):
        ds = ds.set_coords(["lat", "lon"])  # xarray writes coordinates="lat lon" (or lon lat)
    return ds, lat_values, lon_values


def write(ds: xr.Dataset, case: Case, path) -> None:
    encoding = {VAR: {"chunks": case.chunks, "_FillValue": np.float32(-9999)}}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True, encoding=encoding)


# --------------------------------------------------------------------------------------------
# The reference: xarray on the same values


def selected(
    case: Case, ds: xr.Dataset, lat: xr.DataArray | None, lon: xr.DataArray, ranges: dict
) -> xr.DataArray:
    """xarray's selection: latitudes and longitudes made the coordinates of 1-D grids'
    dimensions, the repeated column dropped, latitudes sliced by value, longitudes selected
    modulo 360 (labelled by how far east of the range's west edge they are), positions (a
    dimension without labels) and rotated coordinates sliced as labels are; cos(latitude)
    in float64 as the coordinate ``weights``, where there are latitudes."""
    ydim, xdim = case.dims
    data = ds[VAR].astype("f8")
    if lat is not None:
        data = data.assign_coords(weights=np.cos(np.deg2rad(lat.astype("f8"))))
    one_d = case.layout in ("dimension", "named")
    if one_d:
        data = data.assign_coords({ydim: lat.values, xdim: lon.values})
    else:  # positions, or the rotated coordinates: labels of the dimensions themselves
        data = data.assign_coords({d: ds[d].values if d in ds else np.arange(ds.sizes[d])
                                   for d in (ydim, xdim)})  # fmt: skip
    if case.repeated and one_d:  # a curvilinear grid's columns are not a circle of labels
        data = data.isel({xdim: slice(0, -1)})
    for dim, (a, b) in ranges.items():
        if dim == xdim and one_d:
            data = modulo_360(data, xdim, a, b)
        else:
            a, b = sorted((a, b))
            index = data.indexes[dim]
            data = data.sel({dim: slice(a, b) if index.is_monotonic_increasing else slice(b, a)})
    return data


def reduced(data: xr.DataArray, over: list[str], stat: str) -> xr.DataArray:
    """The statistic, weighted by cos(latitude) where there are latitudes."""
    weighted = data.weighted(data["weights"]) if "weights" in data.coords else None
    if stat == "count":
        return data.notnull().sum(over) if weighted is None else weighted.sum_of_weights(over)
    return data.mean(over) if weighted is None else weighted.mean(over)


def draw_ranges(data, case: Case, ds: xr.Dataset) -> dict:
    """Ranges as a user writes them: latitudes, rotated and projected coordinates by value
    (reaching past them too), longitudes in any convention (across the seam or the date line
    too), positions on dimensions without labels. Bounds end in .37, which no label does."""
    ranges = {}
    for dim, name in zip(case.dims, ("y range", "x range"), strict=True):
        if not data.draw(st.booleans(), label=name):
            continue
        if case.positions:
            bounds = [data.draw(st.integers(0, ds.sizes[dim] - 1)) for _ in "ab"]
        elif dim == case.dims[1] and case.layout in ("dimension", "named"):
            bounds = [data.draw(st.integers(-200, 400)) + 0.37 for _ in "ab"]
        else:
            labels = ds[dim].values if dim in ds else ds["lat"].values  # named: lat(latitude)
            step = float(np.abs(np.diff(labels)).max())
            lo, hi = int(labels.min() - step), int(labels.max() + step)
            bounds = [data.draw(st.integers(lo, hi)) + 0.37 for _ in "ab"]
        ranges[dim] = tuple(bounds)
    return ranges


# --------------------------------------------------------------------------------------------
# The property


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=cases(), data=st.data())
def test_weights_and_ranges_equal_xarray_or_are_refused(tmp_path_factory, case, data):
    path = str(tmp_path_factory.mktemp("cube") / "cube.zarr")
    ds, lat, lon = dataset(case)
    write(ds, case, path)
    ydim, xdim = case.dims
    if lat is None:
        with pytest.raises(AccumulusError) as refusal:
            accumulus.accumulate(path, VAR, weights="area")
        assert_one_line(refusal, "weights 'area' need latitudes", f"{ydim!r}", "no values")
    if case.positions:
        with pytest.raises(AccumulusError) as refusal:
            accumulus.average(path, VAR, ["time"], {ydim: (-30.37, 30.37)})
        assert_one_line(refusal, f"{ydim!r} has no coordinate values", "'-30.37' is not one")
    built = accumulus.accumulate(path, VAR)
    assert built.group.weights == ("none" if lat is None else "area")
    if lat is not None:  # the latitudes' and longitudes' dimensions accumulated together
        assert (ydim, xdim) in [acc.dims for acc in built.group.accumulations]
    for _ in range(3):
        over = data.draw(st.sampled_from(
            [[ydim, xdim], ["time"], [ydim], [xdim], ["time", ydim, xdim]]
        ), label="over")  # fmt: skip
        stat = data.draw(st.sampled_from(["mean", "count"]), label="stat")
        plan = data.draw(st.sampled_from(["cheaper", "accumulation"]), label="plan")
        ranges = draw_ranges(data, case, ds)
        cells = selected(case, ds, lat, lon, ranges)
        try:
            got = accumulus.average(path, VAR, over, ranges, stat=stat, plan=plan)
        except AccumulusError as refusal:
            empty = [d for d in ranges if cells.sizes[d] == 0]
            assert empty, refusal  # only a range that holds no cell is refused, naming it
            assert_one_line(refusal, f"range {empty[0]}=", "selects nothing")
            continue
        assert_same(got, reduced(cells, over, stat), case, ranges)


def assert_same(got: xr.DataArray, expected: xr.DataArray, case: Case, ranges: dict) -> None:
    """Equal values and labels. The reference of a longitude range is sorted by how far east
    of the range's west edge each cell is, and so compared (the answer keeps the grid's
    direction: west to east on an ascending grid, across its seam too, unless it holds every
    cell); every other kept dimension in the grid's order."""
    xdim = case.dims[1]
    got = got.transpose(*expected.dims)
    if xdim in got.dims and xdim in ranges and case.layout in ("dimension", "named"):
        east_of_west = (got[xdim].values - ranges[xdim][0]) % 360
        if not case.lon_descending and got.sizes[xdim] < case.nx:  # (all: the grid's order)
            assert (np.diff(east_of_west) > 0).all(), got[xdim].values
        order = np.argsort(east_of_west)
        got = got.isel({xdim: order})
        np.testing.assert_allclose(east_of_west[order], expected[xdim].values, atol=1e-9)
    elif xdim in got.dims or case.dims[0] in got.dims:
        for dim in set(got.dims) - {"time"}:
            np.testing.assert_allclose(got[dim].values, expected[dim].values)
    values = np.asarray(expected.values, dtype="f8")
    scale = float(np.nanmax(np.abs(values))) if np.isfinite(values).any() else 0.0
    np.testing.assert_allclose(got.values, values, rtol=1e-9, atol=1e-12 * scale, equal_nan=True)


def assert_one_line(refusal, *words: str) -> None:
    message = str(refusal.value) if hasattr(refusal, "value") else str(refusal)
    assert "\n" not in message, message
    for word in words:
        assert word in message, message
