"""``stat="corr", with_=VAR2``: Pearson's r of two variables' valid pairs, as
``xr.corr(a, b, dim=over)``, read from the raw chunks of both (their sums are not built)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.errors import AccumulusError
from cubes import VAR, labels, synthetic_dataset

DIMS = ("time", "lat", "lon")


def _two_variables(sizes, seed, nan_fraction, offset=0.0):
    ds = synthetic_dataset(sizes, seed=seed, nan_fraction=nan_fraction)
    other = synthetic_dataset(sizes, seed=seed + 1, nan_fraction=nan_fraction, var="tas")
    ds["tas"] = other["tas"] + 0.5 * ds[VAR] + np.float32(offset)
    return ds


@settings(
    max_examples=15,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    sizes=st.fixed_dictionaries({d: st.integers(1, 8) for d in DIMS}),
    seed=st.integers(0, 2**16),
    nan_fraction=st.sampled_from([0.0, 0.3, 0.8]),
    data=st.data(),
)
def test_corr_equals_xarray(tmp_path_factory, sizes, seed, nan_fraction, data):
    ds = _two_variables(sizes, seed, nan_fraction, offset=280.0)
    chunks = {v: tuple(data.draw(st.integers(1, sizes[d])) for d in DIMS) for v in (VAR, "tas")}
    path = tmp_path_factory.mktemp("corr") / "cube.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True,
               encoding={v: {"chunks": c} for v, c in chunks.items()})  # fmt: skip
    over = data.draw(st.lists(st.sampled_from(DIMS), min_size=1, max_size=3, unique=True))
    lo = data.draw(st.integers(0, sizes["time"] - 1))
    hi = data.draw(st.integers(lo + 1, sizes["time"]))
    got = accumulus.average(
        str(path), VAR, over, {"time": labels(ds, "time", lo, hi)}, stat="corr", with_="tas"
    )
    selected = ds.isel(time=slice(lo, hi)).astype("f8")
    want = xr.corr(selected[VAR], selected["tas"], dim=over)
    got = got.transpose(*want.dims)
    np.testing.assert_array_equal(np.isnan(got.values), np.isnan(want.values))
    np.testing.assert_allclose(got.values, want.values, rtol=1e-7, atol=1e-9)


def test_corr_is_asked_for_with_a_second_variable(tmp_path):
    ds = _two_variables({"time": 6, "lat": 3, "lon": 2}, 1, 0.0)
    ds["other_grid"] = (("lat",), np.arange(3.0))
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=2, consolidated=True)
    path = str(tmp_path / "c.zarr")
    with pytest.raises(AccumulusError, match="needs --with VAR2"):
        accumulus.average(path, VAR, ["time"], stat="corr")
    with pytest.raises(AccumulusError, match="needs --with VAR2"):
        accumulus.average(path, VAR, ["time"], with_="tas")
    with pytest.raises(AccumulusError, match="no such data variable"):
        accumulus.average(path, VAR, ["time"], stat="corr", with_="nothing")
    with pytest.raises(AccumulusError, match="differ from"):
        accumulus.average(path, VAR, ["time"], stat="corr", with_="other_grid")


def test_the_accessor_asks_the_statistics(tmp_path):
    ds = _two_variables({"time": 40, "lat": 4, "lon": 3}, 5, 0.2)
    ds.to_zarr(tmp_path / "c.zarr", zarr_format=2, consolidated=True)
    opened = xr.open_zarr(tmp_path / "c.zarr")
    data, other = ds[VAR].astype("f8"), ds["tas"].astype("f8")
    w = np.cos(np.deg2rad(ds["lat"]))
    np.testing.assert_allclose(
        opened[VAR].accumulus.corr("tas").values, xr.corr(data, other, dim="time").values
    )
    np.testing.assert_allclose(
        opened[VAR].accumulus.std("time").values, data.weighted(w).std("time").values
    )
    january = data.where(data.time.dt.month == 1, drop=True).weighted(w).mean(DIMS)
    got = opened[VAR].accumulus.mean(["lat", "lon"], season="JAN")
    np.testing.assert_allclose(got.values, [january.item()])
