"""Helpers of the statistics tests: cubes with the sums of ``accumulate --stats`` built, and
xarray's answers on the raw data (the independent computation)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from hypothesis import strategies as st

import accumulus
from cubes import VAR, area_weights, write_cube

DIMS = ("time", "lat", "lon")


def sizes(
    time: st.SearchStrategy[int], lat: st.SearchStrategy[int], lon: st.SearchStrategy[int]
) -> st.SearchStrategy[dict[str, int]]:
    """Sizes of the dimensions, in the order ``DIMS`` (the order of the cube's dimensions)."""
    return st.tuples(time, lat, lon).map(lambda drawn: dict(zip(DIMS, drawn, strict=True)))


@st.composite
def cases(draw: st.DrawFn, sizes: st.SearchStrategy[dict[str, int]]) -> dict[str, Any]:
    """A random cube of ``sizes`` (``case_dataset``): its chunks, NaN and infinity
    fractions, weights, layout (default or minimal) and seed."""
    drawn = draw(sizes)
    return {
        "sizes": drawn,
        "chunks": {d: draw(st.integers(1, drawn[d])) for d in DIMS},
        "nan_fraction": draw(st.sampled_from([0.0, 0.3, 0.9])),
        "inf_fraction": draw(st.sampled_from([0.0, 0.0, 0.05])),
        "weights": draw(st.sampled_from(["area", "none"])),
        "layout": draw(st.sampled_from(["default", "minimal"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def build(path, dims=None, *, weights="area", stats=("var",), **options):
    """``accumulus.accumulate`` with the sums of ``stats``."""
    return accumulus.accumulate(str(path), VAR, dims, weights=weights, stats=stats, **options)


def expected(data: xr.DataArray, over: Sequence[str], weights: str, stat: str) -> xr.DataArray:
    """xarray's ``weighted(w).var/std`` (ddof 0) on the values as float64; NaN where the
    values hold an infinity (accumulus' choice: xarray's skipna drops the NaN of inf − inf
    and gives +inf or 0 there, neither a variance)."""
    data = data.astype("f8")
    w = area_weights(data) if weights == "area" else xr.DataArray(1.0)
    answer = getattr(data.weighted(w), stat)(list(over))
    answer = answer.where(~np.isinf(data).any(list(over)))
    answer.attrs["stat"] = stat
    return answer


def expected_trend(data: xr.DataArray) -> xr.DataArray:
    """The least-squares slope against time in years (days / 365.25) of each cell's valid
    values, by NumPy's ``polyfit`` cell by cell (xarray's fails on a single step or on
    infinities); NaN below 2 valid values or where one is infinite."""
    data = data.astype("f8").transpose("time", ...)
    years = ((data["time"] - data["time"][0]) / np.timedelta64(1, "D")).values / 365.25
    values = data.values.reshape(data.sizes["time"], -1)
    slopes = np.full(values.shape[1], np.nan)
    for cell in range(values.shape[1]):
        x = values[:, cell]
        valid = ~np.isnan(x)
        if valid.sum() >= 2 and np.isfinite(x[valid]).all():
            slopes[cell] = np.polyfit(years[valid], x[valid], 1)[0]
    rest = data.isel(time=0, drop=True)
    return rest.copy(data=slopes.reshape(rest.shape))


def magnitude(data: xr.DataArray) -> float:
    """The largest |x| of the finite values (0 without any)."""
    values = np.asarray(data.values, dtype="f8")
    finite = values[np.isfinite(values)]
    return float(np.abs(finite).max()) if finite.size else 0.0


def same(got: xr.DataArray, want: xr.DataArray, rtol: float = 1e-7, scale: float = 0.0) -> None:
    """Equal within ``rtol``, NaN where xarray's is NaN. ``scale``: the values' magnitude
    (max |x|): a variance that is 0 (one valid value) comes out as rounding noise of the
    sums it is a difference of, within 1e-12 of ``scale``² (a std within 1e-6 of it)."""
    got = got.transpose(*want.dims)
    np.testing.assert_array_equal(np.isnan(got.values), np.isnan(want.values))
    atol = 1e-12 * scale**2 if want.attrs.get("stat") != "std" else 1e-6 * scale
    np.testing.assert_allclose(got.values, want.values, rtol=rtol, atol=atol)


TEN_YEARS = pd.date_range("2001-01-01", "2010-12-31", freq="D")


def ten_year_cube(path: Path, values: np.ndarray) -> xr.Dataset:
    """``values`` (``TEN_YEARS`` x 3 x 4, kelvin) written at ``path`` in year-long chunks;
    the dataset written."""
    ds = xr.Dataset(
        {VAR: (("time", "lat", "lon"), values, {"units": "K"})},
        coords={"time": TEN_YEARS, "lat": [-30.0, 0.0, 30.0], "lon": [0.0, 90.0, 180.0, 270.0]},
    )
    ds["lat"].attrs.update(units="degrees_north", standard_name="latitude")
    write_cube(ds, path, {"time": 365, "lat": 3, "lon": 4})
    return ds
