"""Which variables hold the latitudes and longitudes of a variable's grid, found the way CF
(sections 4.1, 4.2 and 5) and xarray find them, whatever the variables are called.

A variable ``V`` on dimensions ``D`` may have its latitudes in:

- a dimension coordinate: a 1-D variable named as its dimension (``lat(lat)``);
- another 1-D variable on one of ``D`` (``lat(latitude)``, the NCAR/CDC files' layout), or
  one that ``V``'s ``coordinates`` attribute names;
- a 2-D variable on two of ``D`` (``lat(rlat, rlon)`` of a rotated-pole or projected grid,
  named in ``coordinates``): a curvilinear grid.

A variable is a latitude when its ``standard_name`` is ``latitude``, its units are
``degrees_north`` (or a CF spelling of it), its ``_CoordinateAxisType`` is ``Lat``, its
``axis`` is ``Y`` with units in degrees, or its name is ``lat``/``latitude``/... with units
in degrees or none (what the ZEP 5 reference generator writes). A ``standard_name`` that
says otherwise (``grid_latitude`` of a rotated grid, ``projection_y_coordinate``) wins over
everything else. Longitudes likewise (``degrees_east``, ``Lon``, ``X``).

Where several variables qualify, the simplest wins: a dimension coordinate, then a 1-D
variable (those named in ``coordinates`` first), then a 2-D one. A dimension with no
variable holding its values has no latitude, whatever it is called: its cells are only
positions, and nothing here guesses degrees from them.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import xarray as xr

Kind = Literal["latitude", "longitude"]
KINDS: tuple[Kind, Kind] = ("latitude", "longitude")

_UNITS = {
    "latitude": {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"},
    "longitude": {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"},
}
_NAMES = {
    "latitude": {"lat", "latitude", "nav_lat", "y_lat"},
    "longitude": {"lon", "long", "longitude", "nav_lon", "x_lon"},
}
_AXIS = {"latitude": "Y", "longitude": "X"}
_AXIS_TYPE = {"latitude": "lat", "longitude": "lon"}  # netCDF-Java's _CoordinateAxisType
# Angles without a direction: CF allows them where ``axis`` or the name says which.
_DEGREES = {"degree", "degrees", "deg", "degs", "degrees_true"}


@dataclass(frozen=True)
class Coordinate:
    """The variable ``name`` holding a grid's latitudes or longitudes, on ``dims`` (one
    dimension, or two for a curvilinear grid), in its own order."""

    name: str
    dims: tuple[str, ...]

    @property
    def curvilinear(self) -> bool:
        return len(self.dims) > 1


def is_kind(ds: xr.Dataset, name: Hashable, kind: Kind) -> bool:
    """Whether variable ``name`` of ``ds`` holds latitudes (or longitudes), by its
    attributes, or by its name where its units allow."""
    attrs = ds.variables[name].attrs
    standard = str(attrs.get("standard_name", "")).strip().lower()
    if standard:
        return standard == kind
    units = str(attrs.get("units", "")).strip().lower()
    if units in _UNITS[kind]:
        return True
    if units and units not in _DEGREES:
        return False  # metres of a projection, a rotated grid's "degrees_north"-less units
    if str(attrs.get("_CoordinateAxisType", "")).strip().lower() == _AXIS_TYPE[kind]:
        return True
    if units and str(attrs.get("axis", "")).strip().upper() == _AXIS[kind]:
        return True
    return named_like(name, kind)


def named_like(name: Hashable, kind: Kind) -> bool:
    """Whether ``name`` is one a latitude (or longitude) usually has: ``lat``, ``latitude``..."""
    return str(name).lower() in _NAMES[kind]


def find(
    ds: xr.Dataset, dims: Sequence[Hashable], kind: Kind, variable: Hashable | None = None
) -> Coordinate | None:
    """The latitude (or longitude) coordinate of a variable on ``dims`` (``variable``, when
    given, for its ``coordinates`` attribute), or None when no variable holds them."""
    for name in _candidates(ds, dims, variable):
        if is_kind(ds, name, kind):
            return Coordinate(str(name), tuple(str(d) for d in ds.variables[name].dims))
    return None


def labels_of(ds: xr.Dataset, dim: Hashable) -> str | None:
    """The variable whose values label ``dim``: its dimension coordinate, else the one 1-D
    latitude or longitude variable on it (``lat(latitude)``) when its values are monotonic,
    else None (positions only). Scattered points (``lat(obs)``, unordered, or with
    ``lon(obs)`` beside it) label nothing: their coordinates do not order the dimension."""
    if dim in ds.variables and ds.variables[dim].dims == (dim,):
        return str(dim)
    found = {
        str(name)
        for name, var in ds.variables.items()
        if var.dims == (dim,) and var.dtype.kind in "iuf"
        for kind in KINDS
        if is_kind(ds, name, kind)
    }
    if len(found) != 1:
        return None
    (name,) = found
    steps = np.diff(np.asarray(ds.variables[name].values, dtype="f8"))
    return name if (steps > 0).all() or (steps < 0).all() else None


def _candidates(
    ds: xr.Dataset, dims: Sequence[Hashable], variable: Hashable | None
) -> list[Hashable]:
    """Variables that may hold coordinates of a variable on ``dims``, simplest first."""
    within = set(dims)
    named = []
    if variable is not None and variable in ds.variables:
        var = ds.variables[variable]
        listed = var.attrs.get("coordinates", var.encoding.get("coordinates", ""))
        named = [n for n in str(listed).split() if n in ds.variables]

    def fits(name: Hashable, ndim: int) -> bool:
        var = ds.variables[name]
        return (
            name != variable
            and var.ndim == ndim
            and len(set(var.dims)) == ndim
            and set(var.dims) <= within
            and var.dtype.kind in "iuf"
        )

    own = [d for d in dims if d in ds.variables and ds.variables[d].dims == (d,)]
    others = sorted((n for n in ds.variables if n not in named), key=str)
    found: list[Hashable] = [d for d in own if fits(d, 1)]
    for ndim in (1, 2):
        found += [n for n in (*named, *others) if n not in found and fits(n, ndim)]
    return found
