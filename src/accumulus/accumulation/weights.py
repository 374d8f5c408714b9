"""Which weights a variable is averaged with, and their values over any index box.

Three kinds, as ZEP 5 and Giovanni use them:
- "area": cos(latitude), the usual weight of a regular latitude/longitude grid;
- "none": every valid value weighs 1 (then Σw is a count);
- "array:<name>": an array of the dataset broadcastable to the variable (by dimension names).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.numeric import NUMERIC_KINDS

_LAT_UNITS = {"degrees_north", "degree_north", "degree_n", "degrees_n", "degreen", "degreesn"}
_LON_UNITS = {"degrees_east", "degree_east", "degree_e", "degrees_e", "degreee", "degreese"}
_LAT_NAMES = {"lat", "latitude", "nav_lat", "y_lat"}
_LON_NAMES = {"lon", "long", "longitude", "nav_lon", "x_lon"}


def _is_axis(ds: xr.Dataset, dim: str, standard_name: str, units: set, names: set) -> bool:
    coord = ds.variables.get(dim)
    attrs = coord.attrs if coord is not None else {}
    if attrs.get("standard_name") == standard_name:
        return True
    if str(attrs.get("units", "")).lower() in units:
        return True
    return dim.lower() in names


def find_latitude(ds: xr.Dataset, dims: Sequence[str]) -> str | None:
    """The latitude dimension among ``dims``, recognised by CF attributes or by name."""
    return next((d for d in dims if _is_axis(ds, d, "latitude", _LAT_UNITS, _LAT_NAMES)), None)


def find_longitude(ds: xr.Dataset, dims: Sequence[str]) -> str | None:
    return next((d for d in dims if _is_axis(ds, d, "longitude", _LON_UNITS, _LON_NAMES)), None)


def resolve_weights(ds: xr.Dataset, variable: str, weights: str | None) -> str:
    """Normalise a user's weights choice for ``variable``: None picks the default
    ("area" when a latitude dimension is recognised, else "none")."""
    dims = ds[variable].dims
    if weights is None:
        return "area" if find_latitude(ds, dims) else "none"
    if weights in ("none", "area"):
        if weights == "area" and find_latitude(ds, dims) is None:
            raise AccumulusError(
                f"weights 'area' need a latitude dimension, and {variable!r} has none among "
                f"{list(dims)} (recognised by standard_name/units degrees_north or the name)"
            )
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


def varying_dims(ds: xr.Dataset, weights: str, dims: Sequence[str]) -> tuple[str, ...]:
    """The dimensions among ``dims`` that weights (as ``resolve_weights`` names them) vary
    along: latitude for "area", none for "none", an array's own dimensions."""
    if weights == "none":
        return ()
    if weights == "area":
        lat = find_latitude(ds, dims)
        return (lat,) if lat else ()
    if weights.startswith("array:"):
        array_dims = ds[weights.removeprefix("array:")].dims
        return tuple(d for d in dims if d in array_dims)
    return tuple(dims)  # unknown weights: assume they vary along everything


def weight_values(
    ds: xr.Dataset,
    weights: str,
    dims: Sequence[str],
    box: Mapping[str, slice],
) -> np.ndarray | float:
    """Weights over an index box of a variable with dimensions ``dims``, as a float64 array
    broadcastable to the box (size-1 axes where the weights do not vary), or the scalar 1.0."""
    if weights == "none":
        return 1.0
    if weights == "area":
        lat = find_latitude(ds, dims)
        values = np.cos(np.deg2rad(np.asarray(ds[lat].values[box[lat]], dtype="f8")))
        shape = [values.size if d == lat else 1 for d in dims]
        return values.reshape(shape)
    if weights.startswith("array:"):
        name = weights.removeprefix("array:")
        array = ds[name]
        values = array.isel({d: box[d] for d in array.dims}).values.astype("f8")
        return arranged_weights(name, values, array.dims, dims)
    raise AccumulusError(f"cannot compute weights {weights!r} (accumulation group of another tool)")


def arranged_weights(
    name: str, values: np.ndarray, array_dims: Sequence[str], dims: Sequence[str]
) -> np.ndarray:
    """The values of the weights array ``name`` (axes ``array_dims``, float64), refused where
    missing, with their axes ordered like ``dims`` (a variable's) and size-1 axes added for
    the dimensions the array lacks."""
    if np.isnan(values).any():
        raise AccumulusError(f"weights array {name!r} has missing values; weights must not")
    order = [d for d in dims if d in array_dims]
    values = xr.DataArray(values, dims=array_dims).transpose(*order).values
    return values.reshape([values.shape[order.index(d)] if d in order else 1 for d in dims])
