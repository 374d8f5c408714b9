"""Which weights a variable is averaged with, and their values over any index box.

Three kinds, as ZEP 5 and Giovanni use them:
- "area": cos(latitude), the usual weight of a regular latitude/longitude grid, from the
  variable's latitudes wherever they are (``coordinates``: ``lat(latitude)``, or
  ``lat(rlat, rlon)`` of a curvilinear grid, whose weights then vary along both);
- "none": every valid value weighs 1 (then Σw is a count);
- "array:<name>": an array of the dataset broadcastable to the variable (by dimension names).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence

import numpy as np
import xarray as xr

from accumulus import coordinates
from accumulus.accumulation.model.spec import Weights
from accumulus.coordinates import Coordinate
from accumulus.errors import AccumulusError
from accumulus.numeric import NUMERIC_KINDS


def latitude_of(ds: xr.Dataset, variable: str) -> Coordinate | None:
    """The variable holding the latitudes of ``variable``'s grid (``coordinates.find``)."""
    return coordinates.find(ds, ds[variable].dims, "latitude", variable)


def cell_areas_of(ds: xr.Dataset, variable: str) -> str | None:
    """The array of cell areas ``variable``'s ``cell_measures`` attribute names (``area:
    NAME``), when the dataset holds it on the variable's dimensions."""
    measures = str(ds[variable].attrs.get("cell_measures", "")).split()
    for key, name in zip(measures[::2], measures[1::2], strict=False):
        if key == "area:" and name in ds.variables and name != variable:
            found = ds.variables[name]
            if set(found.dims) <= set(ds[variable].dims) and found.dtype.kind in NUMERIC_KINDS:
                return name
    return None


def resolve_weights(ds: xr.Dataset, variable: str, weights: Weights | None) -> Weights:
    """Normalise a user's weights choice for ``variable``: None picks the default (the cell
    areas its ``cell_measures`` names, else "area" when its latitudes are found, else
    "none")."""
    dims = ds[variable].dims
    if weights is None:
        areas = cell_areas_of(ds, variable)
        if areas is not None:
            return f"array:{areas}"
        return "area" if latitude_of(ds, variable) else "none"
    if weights in ("none", "area"):
        if weights == "area" and latitude_of(ds, variable) is None:
            raise AccumulusError(f"weights 'area' need latitudes: {no_latitude(ds, variable)}")
        return weights
    name = weights.removeprefix("array:")
    if name not in ds.variables:
        raise AccumulusError(
            f"weights {weights!r}: use 'area', 'none' or the name of an array in the dataset; "
            f"there is no array {name!r}"
        )
    if ds.variables[name].dtype.kind not in NUMERIC_KINDS:
        raise AccumulusError(
            f"weights {weights!r}: array {name!r} holds {ds.variables[name].dtype} values, "
            "and weights must be numbers"
        )
    extra = [d for d in ds.variables[name].dims if d not in dims]
    if extra:
        raise AccumulusError(
            f"weights array {name!r} has dimension(s) {extra} that {variable!r} does not have, "
            f"so it cannot be broadcast to {list(dims)}"
        )
    return f"array:{name}"


def no_latitude(ds: xr.Dataset, variable: str) -> str:
    """Why ``variable`` has no latitudes, naming what is missing."""
    dims = [str(d) for d in ds[variable].dims]
    bare = [d for d in dims if coordinates.labels_of(ds, d) is None]
    text = (
        f"no variable on the dimensions {dims} of {variable!r} holds latitudes (CF: "
        "standard_name latitude or units degrees_north, a dimension coordinate or one named "
        "in its coordinates attribute)"
    )
    if bare:
        text += f"; {', '.join(map(repr, bare))} {'has' if len(bare) == 1 else 'have'} no values"
    return text


def varying_dims(ds: xr.Dataset, weights: Weights, variable: str) -> tuple[str, ...]:
    """The dimensions of ``variable`` that weights (as ``resolve_weights`` names them) vary
    along, in its order: its latitude's for "area" (two on a curvilinear grid), none for
    "none", an array's own dimensions."""
    dims = [str(d) for d in ds[variable].dims]
    if weights == "none":
        return ()
    if weights == "area":
        lat = latitude_of(ds, variable)
        return tuple(d for d in dims if lat is not None and d in lat.dims)
    if weights.startswith("array:"):
        array_dims = ds[weights.removeprefix("array:")].dims
        return tuple(d for d in dims if d in array_dims)
    return tuple(dims)  # unknown weights: assume they vary along everything


def weight_values(
    ds: xr.Dataset,
    weights: Weights,
    variable: str,
    box: Mapping[str, slice],
) -> np.ndarray | float:
    """Weights over an index box of ``variable``, as a float64 array broadcastable to the box
    (size-1 axes where the weights do not vary), or the scalar 1.0."""
    dims = [str(d) for d in ds[variable].dims]
    if weights == "none":
        return 1.0
    if weights == "area":
        lat = latitude_of(ds, variable)
        if lat is None:
            raise AccumulusError(f"weights 'area' need latitudes: {no_latitude(ds, variable)}")
        latitudes = ds.variables[lat.name]
        values = latitudes[{d: box[d] for d in lat.dims}].values.astype("f8")
        if np.isnan(values).any():
            raise AccumulusError(f"latitude {lat.name!r} has missing values; area weights need all")
        return _in_variable_order(np.cos(np.deg2rad(values)), lat.dims, dims)
    if weights.startswith("array:"):
        name = weights.removeprefix("array:")
        array = ds[name]
        values = array.isel({d: box[str(d)] for d in array.dims}).values.astype("f8")
        return arranged_weights(name, values, array.dims, dims)
    raise AccumulusError(f"cannot compute weights {weights!r} (accumulation group of another tool)")


def arranged_weights(
    name: str, values: np.ndarray, array_dims: Sequence[Hashable], dims: Sequence[str]
) -> np.ndarray:
    """The values of the weights array ``name`` (axes ``array_dims``, float64), refused where
    missing, in the variable's order (``_in_variable_order``)."""
    if np.isnan(values).any():
        raise AccumulusError(f"weights array {name!r} has missing values; weights must not")
    return _in_variable_order(values, array_dims, dims)


def _in_variable_order(
    values: np.ndarray, own: Sequence[Hashable], dims: Sequence[str]
) -> np.ndarray:
    """``values`` on dimensions ``own``, with their axes in the variable's order and size-1
    axes for the dimensions they lack."""
    order = [d for d in dims if d in own]
    values = np.transpose(values, [list(map(str, own)).index(d) for d in order])
    return values.reshape([values.shape[order.index(d)] if d in order else 1 for d in dims])
