"""xarray-native use (issue 37): ``accumulus.average`` of an opened ``Dataset`` or
``DataArray`` (the store it was read from is asked), ranges as ``slice`` or tuples, the
accessor ``da.accumulus.mean/sum/count(dims, time=slice(...))``, ``__version__`` and
``accumulus --version``, and a public namespace without stray names. Answers equal xarray's
on the raw data over random ranges."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.errors import AccumulusError, ParameterError
from cubes import VAR, labels, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 90, "lat": 12, "lon": 16}
OVERS = (["lat", "lon"], ["time"], ["time", "lat", "lon"], ["lon"])


@pytest.fixture(scope="module")
def cube(tmp_path_factory) -> tuple[xr.Dataset, Path]:
    ds = synthetic_dataset(SIZES, seed=37)
    path = tmp_path_factory.mktemp("xarray") / "cube.zarr"
    write_cube(ds, path, {"time": 20, "lat": 5, "lon": 6})
    accumulus.accumulate(str(path), VAR)
    return ds, path


def random_box(rng: np.random.Generator, ds: xr.Dataset) -> dict[str, slice]:
    """Inclusive label slices over random index ranges (now and then an open end)."""
    box = {}
    for dim, n in SIZES.items():
        lo = int(rng.integers(0, n - 1))
        hi = int(rng.integers(lo + 1, n + 1))
        start, stop = labels(ds, dim, lo, hi)
        box[dim] = slice(None if lo == 0 and rng.random() < 0.5 else start, stop)
    return box


@pytest.mark.parametrize("opened_with", ["open_zarr", "open_dataset"])
def test_opened_datasets_and_their_variables_answer_as_xarray(cube, opened_with):
    ds, path = cube
    if opened_with == "open_zarr":
        opened = xr.open_zarr(path)
    else:  # no Dask: xarray's lazy arrays
        opened = xr.open_dataset(path, engine="zarr", chunks=None)
    rng = np.random.default_rng(3)
    for case in range(8):
        box = random_box(rng, ds)
        over = OVERS[case % len(OVERS)]
        data = ds[VAR].sel(box)
        expected = xarray_reference(data, over, "area", "mean")
        as_tuples = {d: (s.start, s.stop) for d, s in box.items()}
        for got in (
            accumulus.average(opened, VAR, over, box),
            accumulus.average(opened[VAR], over=over, ranges=as_tuples),
            opened[VAR].accumulus.mean(over, **box),
        ):
            np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
            assert got.dims == expected.dims
            assert {"raw_chunks_read", "accumulation_chunks_read", "bytes_read"} <= set(got.attrs)
        total = opened[VAR].accumulus.sum(over, **box)
        np.testing.assert_allclose(
            total.values, xarray_reference(data, over, "area", "sum").values, rtol=1e-9
        )
        counted = opened[VAR].accumulus.count(over, weights="none", **box)
        np.testing.assert_array_equal(counted.values, data.count(over).values)


def test_the_accessor_is_average_with_its_attrs(cube):
    ds, path = cube
    opened = xr.open_zarr(path)
    box = {"time": slice("2001-01-05", "2001-02-27"), "lat": slice(-30, 50)}
    got = opened[VAR].accumulus.mean("lat,lon", **box)
    same = accumulus.average(str(path), VAR, ["lat", "lon"], box)
    xr.testing.assert_identical(got.drop_attrs(), same.drop_attrs())
    assert got.attrs["raw_chunks_read"] == same.attrs["raw_chunks_read"]
    # No dimension: every one, as DataArray.mean() reduces them all.
    whole = opened[VAR].accumulus.mean()
    assert whole.ndim == 0
    expected = xarray_reference(ds[VAR], ["time", "lat", "lon"], "area", "mean")
    np.testing.assert_allclose(whole.values, expected.values, rtol=1e-9)
    # A dimension named like an option is given through ranges=.
    by_mapping = opened[VAR].accumulus.mean("lat,lon", ranges=box)
    np.testing.assert_array_equal(by_mapping.values, got.values)


def test_what_is_not_a_stored_variable_is_refused_in_one_line(cube):
    _, path = cube
    opened = xr.open_zarr(path)
    lazy = xr.open_dataset(path, engine="zarr", chunks=None)
    refusals = {
        "computed": lambda: accumulus.average(opened[VAR] * 2, over="time"),
        "selected": lambda: opened[VAR].sel(lat=slice(0, 40)).accumulus.mean("time"),
        "selected lazily": lambda: lazy[VAR].isel(lat=slice(0, 2)).accumulus.mean("time"),
        "in memory": lambda: (lazy[VAR] + 0).accumulus.mean("time"),
        "never stored": lambda: accumulus.average(xr.Dataset({"a": ("x", [1.0])}), "a", "x"),
    }
    for name, ask in refusals.items():
        with pytest.raises(AccumulusError) as raised:
            ask()
        message = str(raised.value)
        assert "\n" not in message, name
        assert ("as stored" in message) or ("not read from a store" in message), message
    with pytest.raises(ParameterError, match="a step does not average"):
        opened[VAR].accumulus.mean("time", time=slice("2001-01-01", "2001-02-01", 2))
    with pytest.raises(ParameterError, match=r"give \(start, end\) or slice"):
        accumulus.average(str(path), VAR, "time", {"time": "2001-01-01"})
    with pytest.raises(ParameterError, match="name the variable"):
        accumulus.average(opened, over="time")
    with pytest.raises(ParameterError, match="over"):
        accumulus.average(str(path), VAR)


def test_a_dataset_loaded_into_memory_asks_its_source(cube):
    ds, path = cube
    loaded = xr.open_zarr(path).load()
    got = accumulus.average(loaded, VAR, "time", {"lat": slice(-20, 20)})
    expected = xarray_reference(ds[VAR].sel(lat=slice(-20, 20)), ["time"], "area", "mean")
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def test_version_and_namespace():
    assert accumulus.__version__ == version("accumulus")
    run = subprocess.run(
        [sys.executable, "-m", "accumulus", "--version"], capture_output=True, text=True
    )
    assert run.returncode == 0 and run.stdout == f"accumulus {version('accumulus')}\n"
    public = [n for n in dir(accumulus) if not n.startswith("__")]
    assert public == sorted(accumulus.__all__)
    assert all(callable(getattr(accumulus, n)) for n in public)


def test_the_accessor_is_there_whichever_is_imported_first():
    for order in ("import accumulus, xarray", "import xarray, accumulus"):
        code = (
            f"{order}\nimport sys\n"
            "assert 'accumulus.api' not in sys.modules  # registered without the API\n"
            "print(hasattr(xarray.DataArray, 'accumulus'))"
        )
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert run.stdout.strip() == "True", (order, run.stderr)
