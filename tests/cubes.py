"""Test cubes and the independent reference computation (xarray on the raw data)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr
import zarr

VAR = "precip"


def synthetic_dataset(
    sizes: Mapping[str, int],
    *,
    seed: int = 0,
    nan_fraction: float = 0.1,
    inf_fraction: float = 0.0,
    descending_lat: bool = False,
    dtype: str = "f4",
    var: str = VAR,
) -> xr.Dataset:
    """Positive random values with NaN holes (and +inf or -inf at ``inf_fraction`` of the
    cells, either sign alike); time daily from 2001-01-01, lat in [-80, 80]."""
    rng = np.random.default_rng(seed)
    dims = list(sizes)
    shape = [sizes[d] for d in dims]
    values = rng.uniform(0.1, 10.0, size=shape).astype(dtype)
    values[rng.random(shape) < nan_fraction] = np.nan
    if inf_fraction:
        infinite = rng.random(shape) < inf_fraction
        values[infinite] = np.where(rng.random(shape) < 0.5, np.inf, -np.inf)[infinite]
    coords = {}
    for dim, n in sizes.items():
        if dim == "time":
            coords[dim] = pd.date_range("2001-01-01", periods=n, freq="D")
        elif dim == "lat":
            lat = np.linspace(-80, 80, n) if n > 1 else np.array([10.0])
            coords[dim] = lat[::-1] if descending_lat else lat
        else:
            coords[dim] = np.arange(n, dtype="f8") * 2.5
    ds = xr.Dataset({var: (dims, values, {"units": "mm/day"})}, coords=coords)
    if "lat" in ds:
        ds["lat"].attrs.update(units="degrees_north", standard_name="latitude")
    return ds


def write_cube(
    ds: xr.Dataset,
    path: str | Path,
    chunks: Mapping[str, int | Sequence[int]],
    *,
    zarr_format: int = 2,
    fill_value: float | None = -9999.0,
    var: str = VAR,
    shards: Mapping[str, int] | None = None,
) -> None:
    """Write ``ds`` as a cube. Regular chunks go through xarray's ``to_zarr`` (``shards``:
    Zarr v3 shards of those chunks, as xarray writes them); chunk lists (rectilinear, Zarr
    v3) through zarr directly, with NaN stored as NaN."""
    dims = ds[var].dims
    if all(isinstance(chunks[d], int) for d in dims):
        encoding = {var: {"chunks": tuple(chunks[d] for d in dims)}}
        if shards is not None:
            encoding[var]["shards"] = tuple(shards[d] for d in dims)
        if fill_value is not None:
            encoding[var]["_FillValue"] = fill_value
        ds.to_zarr(path, mode="w", zarr_format=zarr_format, consolidated=True, encoding=encoding)
        return
    assert zarr_format == 3, "variable chunks need Zarr v3"
    ds.drop_vars(var).to_zarr(path, mode="w", zarr_format=3, consolidated=False)
    grid = [list(chunks[d]) if not isinstance(chunks[d], int) else chunks[d] for d in dims]
    # zarr writes rectilinear chunk grids only with this setting on (accumulus turns it on
    # for its own calls alone).
    with zarr.config.set({"array.rectilinear_chunks": True}):
        group = zarr.open_group(path, mode="r+")
        array = group.create_array(
            var,
            shape=ds[var].shape,
            chunks=[
                g if isinstance(g, list) else _regular_as_list(g, n)
                for g, n in zip(grid, ds[var].shape, strict=True)
            ],
            dtype=ds[var].dtype,
            fill_value=np.nan,
            dimension_names=dims,
            attributes=dict(ds[var].attrs),
        )
        array[...] = ds[var].values
        zarr.consolidate_metadata(path)


def _regular_as_list(chunk: int, size: int) -> list[int]:
    return [min(chunk, size - i) for i in range(0, size, chunk)] or [1]


def area_weights(ds: xr.DataArray | xr.Dataset) -> xr.DataArray:
    return np.cos(np.deg2rad(ds["lat"].astype("f8")))


def xarray_reference(
    data: xr.DataArray, over: Sequence[str], weights: str, stat: str
) -> xr.DataArray:
    """The same computation done by xarray on the raw data cast to float64."""
    data = data.astype("f8")
    if weights == "none":
        if stat == "mean":
            return data.mean(over, skipna=True)
        if stat == "sum":
            return data.sum(over, skipna=True)
        return data.count(over).astype("f8")
    weighted = data.weighted(area_weights(data))
    if stat == "mean":
        return weighted.mean(over, skipna=True)
    if stat == "sum":
        return weighted.sum(over, skipna=True)
    return weighted.sum_of_weights(over)


def labels(ds: xr.Dataset, dim: str, lo: int, hi: int) -> tuple:
    """Inclusive label range selecting indices [lo, hi) of ``dim`` (min label first)."""
    values = ds[dim].values
    a, b = values[lo], values[hi - 1]
    if dim == "time":
        return (str(pd.Timestamp(a).date()), str(pd.Timestamp(b).date()))
    return (min(a, b), max(a, b))
