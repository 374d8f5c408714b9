"""Each product's granules appended, accumulated and averaged, against xarray on
``open_mfdataset`` of the same files (rtol 1e-9): averages over time, over boxes, over boxes
across 0° longitude, and over time ranges."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr

import accumulus

from .layouts import ERA5, IMERG_DAY, IMERG_HHR, MERRA2, OISST, Product

# Chunks along time small enough that the averages read accumulations.
CASES = {
    "imerg_hhr": (IMERG_HHR, {"time": 4}),
    "imerg_day": (IMERG_DAY, {"time": 2}),
    "merra2": (MERRA2, {"time": 12}),
    "era5": (ERA5, {"time": 4}),
    "oisst": (OISST, {"time": 3}),
}


def open_files(files: list[Path], product: Product) -> xr.Dataset:
    """The granules as xarray reads them, one after the other along time, decoded by
    xarray's own rules: OISST's int16 with a float32 ``scale_factor`` decodes to float32,
    which is what the cube holds (docs/decoding.md, "float32 packing")."""
    return xr.open_mfdataset(
        files,
        group=product.group,
        combine="nested",
        concat_dim="time",
        data_vars="minimal",
        coords="minimal",
        compat="override",
        engine="netcdf4",
    )


def reference(
    ds: xr.Dataset, product: Product, over: tuple[str, ...], box: Mapping[str, tuple[Any, Any]]
) -> xr.DataArray:
    """xarray's cos(latitude)-weighted mean of the cells whose labels lie in ``box``."""
    data = ds[product.variable]
    for dim, (lo, hi) in box.items():
        if dim == "time":
            data = data.sel(time=slice(lo, hi))
            continue
        labels = data[dim].values
        data = data.isel({dim: np.flatnonzero((labels >= lo) & (labels <= hi))})
    weights = np.cos(np.deg2rad(data[product.lat].astype("f8")))
    return data.astype("f8").weighted(weights).mean(over)


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory) -> tuple[Product, str, xr.Dataset]:
    product, chunks = CASES[request.param]
    files = request.getfixturevalue(request.param)
    store = str(tmp_path_factory.mktemp(product.name) / "cube.zarr")
    first = accumulus.append(store, files[: len(files) // 2], chunks=chunks)
    assert first.created
    accumulus.append(store, files)  # the rest, updating nothing yet accumulated
    accumulus.accumulate(store, product.variable, group=product.group)
    return product, store, open_files(files, product)


def boxes(product: Product, ds: xr.Dataset) -> list[dict[str, tuple[Any, Any]]]:
    """Boxes inside the grid, one across 0° where the grid has negative longitudes, and a
    time range that cuts chunks."""
    times = ds["time"].values
    lat_box = {product.lat: (-50.0, 70.0)}
    found = [
        {},
        {**lat_box, product.lon: (30.0, 200.0) if ds[product.lon].min() >= 0 else (-150, 60)},
        {"time": (times[1], times[-2]), **lat_box},
    ]
    if ds[product.lon].min() < 0:
        found.append({product.lon: (-40.0, 40.0), product.lat: (-90.0, 90.0)})
    return found


def test_averages_match_xarray(built):
    product, store, ds = built
    dims = ds[product.variable].dims
    space = (product.lat, product.lon)
    used_accumulations = 0
    for box in boxes(product, ds):
        for over in (("time",), space, dims):
            want = reference(ds, product, tuple(d for d in dims if d in over), box)
            got = accumulus.average(store, product.variable, over, box)
            assert got.dims == want.dims
            np.testing.assert_allclose(got.values, want.values, rtol=1e-9, atol=0)
            used_accumulations += got.attrs["accumulation_chunks_read"]
    assert used_accumulations > 0


def test_times_and_bounds_are_appended_with_the_data(built):
    product, store, ds = built
    cube = accumulus.open(store, group=product.group, variable=product.variable).cube
    np.testing.assert_array_equal(cube.decoded["time"].values, ds["time"].values)
    bounds = ds["time"].attrs.get("bounds") or ds["time"].encoding.get("bounds")
    if bounds:  # IMERG: time_bnds along time, appended with it
        np.testing.assert_array_equal(cube.decoded[bounds].values, ds[bounds].values)
