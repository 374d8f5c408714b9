"""The store an xarray ``Dataset`` or ``DataArray`` was read from (``opened_store``), asked in
its place by ``api.query`` and ``average`` and by the accessor ``da.accumulus``.

A ``DataArray`` knows no path, but the lazy array xarray keeps behind a variable it opened
from Zarr (``open_zarr``, ``open_dataset(engine="zarr")``, chunked or not) is the zarr array
itself: its store and path are the store to ask. Values computed from a stored variable
(``ds.precip * 2``) or a selection of it (``ds.precip.sel(...)``) are not what the store holds,
so they are refused rather than answered for the variable as stored; ranges are given to the
question instead. A ``Dataset`` (or a variable whose data were loaded into memory) falls back
on ``encoding["source"]``, the path xarray opened it from.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import xarray as xr

from accumulus.errors import AccumulusError, ParameterError

if TYPE_CHECKING:
    from zarr import Array
    from zarr.abc.store import Store

# Names of the graph layers xarray gives a variable it opened with Dask (``open_dataset-…``,
# and ``original-open_dataset-…`` for the lazy array under it): anything else is a computation.
_OPENED_LAYERS = ("open_dataset-", "original-open_dataset-")


def opened_store(
    obj: xr.Dataset | xr.DataArray, variable: str | None
) -> tuple[str | Store, str | None, str]:
    """The store ``obj`` was read from (a path or URL, or a zarr ``Store``), the group of it
    holding the variable (None: let the store's layout say), and the variable's name."""
    if isinstance(obj, xr.DataArray):
        if obj.name is None:
            raise ParameterError("variable", "the DataArray has no name: it is no stored variable")
        if variable is not None and variable != obj.name:
            raise ParameterError(
                "variable", f"variable {variable!r} given with the DataArray {obj.name!r}"
            )
        variable, data, encoding = str(obj.name), obj, obj.encoding
    else:
        if variable is None:
            raise ParameterError("variable", "name the variable of the Dataset to average")
        if variable not in obj.data_vars:
            raise ParameterError(
                "variable", f"the Dataset has no data variable {variable!r}: {list(obj.data_vars)}"
            )
        data, encoding = obj[variable], obj.encoding
    array = _stored_array(data)
    if array is not None:
        store = array.store_path.store
        path = array.store_path.path
        group = path.rpartition("/")[0] or None
        root = getattr(store, "root", None)  # a local directory: its path, opened as ours
        return (str(root) if root is not None else store), group, variable
    source = encoding.get("source") or data.encoding.get("source")
    if not source:
        raise AccumulusError(
            f"{variable!r} was not read from a store (no zarr array behind it, no "
            "encoding['source']): give the store's path or URL instead"
        )
    return str(source), None, variable


def _stored_array(data: xr.DataArray) -> Array | None:
    """The zarr array behind ``data`` as xarray opened it (None: none, e.g. data in memory);
    refused when ``data`` holds other values than the array's (a computation, a selection)."""
    from dask.base import is_dask_collection

    held: Any = data.variable._data
    if is_dask_collection(held):
        layers = held.__dask_graph__().layers
        computed = [name for name in layers if not name.startswith(_OPENED_LAYERS)]
        opened = [layers[name] for name in layers if name.startswith(_OPENED_LAYERS[1])]
        if computed:
            _refuse(data, f"selected or computed: Dask's {computed[0].rpartition('-')[0]!r}")
        held = next((v for layer in opened for v in dict(layer).values()), None)
    array = _unwrapped(held)
    if array is not None and tuple(array.shape) != tuple(data.shape):
        _refuse(data, f"selected: {dict(data.sizes)} of a stored {list(array.shape)}")
    return array


def _unwrapped(held: Any) -> Array | None:
    """The zarr array at the end of xarray's lazy wrappers (decoding, copy-on-write, lazy
    indexing), if ``held`` is such a chain."""
    for _ in range(16):  # a handful of wrappers deep; never a cycle
        getter = getattr(held, "get_array", None)  # xarray.backends.zarr.ZarrArrayWrapper
        if getter is not None:
            from zarr import Array

            found = getter()
            return found if isinstance(found, Array) else None
        if not hasattr(held, "array"):
            return None
        held = held.array
    return None


def _refuse(data: xr.DataArray, why: str) -> None:
    raise AccumulusError(
        f"this DataArray is not {data.name!r} as stored ({why}): accumulus answers for stored "
        f"variables; ask ds.{data.name}.accumulus.mean(dims, time=slice(a, b), ...) with ranges"
    )
