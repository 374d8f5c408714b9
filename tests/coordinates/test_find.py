"""Which variables hold a grid's latitudes and longitudes (``accumulus.coordinates``), rule by
rule, on datasets shaped like the producers' headers."""

from __future__ import annotations

import numpy as np
import xarray as xr

from accumulus.coordinates import Coordinate, find, is_kind, labels_of


def dataset(**variables) -> xr.Dataset:
    ds = xr.Dataset({"v": (("time", "y", "x"), np.zeros((2, 3, 4)))})
    for name, (dims, attrs) in variables.items():
        shape = [ds.sizes[d] for d in dims]
        ds[name] = (dims, np.arange(np.prod(shape), dtype="f8").reshape(shape), attrs)
    return ds


def test_what_says_latitude():
    ds = dataset(
        a=(("y",), {"standard_name": "latitude"}),
        b=(("y",), {"units": "degrees_N"}),
        c=(("y",), {"_CoordinateAxisType": "Lat"}),
        d=(("y",), {"axis": "Y", "units": "degree"}),
        lat=(("y",), {}),  # the ZEP 5 generator's: a name, no attribute
        rlat=(("y",), {"standard_name": "grid_latitude", "units": "degrees", "axis": "Y"}),
        latitude=(("y",), {"units": "m"}),  # named so, but in metres
        e=(("y",), {"axis": "Y"}),  # an axis without degrees: a projection's y
        f=(("y",), {"standard_name": "projection_y_coordinate", "units": "degrees_north"}),
    )
    found = {n for n in ds.variables if is_kind(ds, n, "latitude")}
    assert found == {"a", "b", "c", "d", "lat"}
    assert not any(is_kind(ds, n, "longitude") for n in ds.variables)


def test_the_simplest_holder_wins():
    # A dimension coordinate, then 1-D (those the coordinates attribute lists first), then 2-D.
    two_d = {"standard_name": "latitude"}
    ds = dataset(lat2d=(("y", "x"), two_d), other=(("y",), two_d), listed=(("y",), two_d))
    assert find(ds, ("time", "y", "x"), "latitude") == Coordinate("listed", ("y",))
    ds["v"].attrs["coordinates"] = "listed"
    assert find(ds, ("time", "y", "x"), "latitude", "v") == Coordinate("listed", ("y",))
    ds["v"].attrs["coordinates"] = "other"
    assert find(ds, ("time", "y", "x"), "latitude", "v") == Coordinate("other", ("y",))
    ds = ds.assign_coords(y=("y", [10.0, 20.0, 30.0], {"units": "degrees_north"}))
    assert find(ds, ("time", "y", "x"), "latitude", "v") == Coordinate("y", ("y",))
    curvilinear = dataset(lat=(("y", "x"), two_d))
    assert find(curvilinear, ("time", "y", "x"), "latitude").curvilinear
    # Not on the variable's dimensions (bounds), or the variable itself: not its latitudes.
    bounds = dataset().assign(lat_bnds=(("y", "nv"), np.zeros((3, 2)), two_d))
    assert find(bounds, ("time", "y", "x"), "latitude") is None
    assert find(bounds, ("y", "nv"), "latitude", "lat_bnds") is None


def test_what_labels_a_dimension():
    lat = {"units": "degrees_north"}
    ds = dataset(lat=(("y",), lat))
    assert labels_of(ds, "y") == "lat" and labels_of(ds, "x") is None
    assert labels_of(ds, "time") is None  # no variable: positions
    scattered = dataset(lat=(("y",), lat))
    scattered["lat"].values[:] = [10.0, -5.0, 30.0]
    assert labels_of(scattered, "y") is None
    points = dataset(lat=(("y",), lat), lon=(("y",), {"units": "degrees_east"}))
    assert labels_of(points, "y") is None
