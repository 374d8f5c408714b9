"""Property test: accumulation-backed answers equal xarray's on the raw data.

Random shapes, chunkings (partial last chunks, rectilinear grids in Zarr v3), strides,
accumulated combinations, NaN and _FillValue masks, weights, statistics and ranges (aligned,
unaligned, single element, full extent). The reference is computed by xarray from the
in-memory data, independently of the store.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

import accumulus
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.raw_cube import RawCube
from cubes import VAR, labels, synthetic_dataset, write_cube, xarray_reference
from properties import case_dataset, cube_property

DIM_POOL = ("time", "lat", "lon", "level")


@st.composite
def chunk_spec(draw, size: int, rectilinear: bool):
    if rectilinear and draw(st.booleans()):
        sizes = []
        left = size
        while left:
            sizes.append(draw(st.integers(1, left)))
            left -= sizes[-1]
        return sizes
    return draw(st.integers(1, size))


@st.composite
def cubes(draw):
    ndim = draw(st.integers(1, 3))
    dims = draw(st.permutations(DIM_POOL).map(lambda p: list(p[:ndim])))
    sizes = {d: draw(st.integers(1, 9)) for d in dims}
    zarr_format = draw(st.sampled_from([2, 3]))
    chunks = {d: draw(chunk_spec(sizes[d], zarr_format == 3)) for d in dims}
    rectilinear = any(isinstance(c, list) for c in chunks.values())
    combos = [c for r in range(1, ndim + 1) for c in itertools.combinations(dims, r)]
    chosen = draw(st.lists(st.sampled_from(combos), min_size=1, max_size=4, unique=True))
    strides = {d: draw(st.integers(1, 3)) for d in dims}
    weights = draw(st.sampled_from(["area", "none"] if "lat" in dims else ["none"]))
    return {
        "sizes": sizes,
        "chunks": chunks,
        "zarr_format": zarr_format,
        "fill_value": None if rectilinear else draw(st.sampled_from([None, -9999.0])),
        "nan_fraction": draw(st.sampled_from([0.0, 0.2, 0.9])),
        "inf_fraction": draw(st.sampled_from([0.0, 0.0, 0.02, 0.1])),
        "descending_lat": draw(st.booleans()),
        "combos": chosen,
        "strides": strides,
        "weights": weights,
        "seed": draw(st.integers(0, 2**16)),
    }


@st.composite
def index_range(draw, size: int, edges: list[int]):
    kind = draw(st.sampled_from(["full", "aligned", "random", "single"]))
    if kind == "full":
        return 0, size
    if kind == "aligned" and len(edges) > 1:
        a, b = sorted(draw(st.lists(st.sampled_from(edges), min_size=2, max_size=2, unique=True)))
        return a, b
    if kind == "single":
        i = draw(st.integers(0, size - 1))
        return i, i + 1
    lo = draw(st.integers(0, size - 1))
    return lo, draw(st.integers(lo + 1, size))


def _edges(chunk, size):
    if isinstance(chunk, list):
        return list(itertools.accumulate([0, *chunk]))
    return sorted({*range(0, size, chunk), size})


@cube_property(80)
@given(case=cubes(), data=st.data())
def test_average_equals_xarray(tmp_path_factory, case, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    ds = case_dataset(case, descending_lat=case["descending_lat"])
    write_cube(
        ds, path, case["chunks"], zarr_format=case["zarr_format"], fill_value=case["fill_value"]
    )
    accumulus.accumulate(
        str(path), VAR, case["combos"], weights=case["weights"], strides=case["strides"]
    )
    cube = RawCube.open(str(path))
    dims = list(case["sizes"])
    for _ in range(4):
        over = data.draw(
            st.lists(st.sampled_from(dims), min_size=1, max_size=len(dims), unique=True)
        )
        stat = data.draw(st.sampled_from(["mean", "sum", "count"]))
        ranges, isel = {}, {}
        for dim in dims:
            size = case["sizes"][dim]
            lo, hi = data.draw(index_range(size, _edges(case["chunks"][dim], size)))
            if (lo, hi) != (0, size) or data.draw(st.booleans()):
                ranges[dim] = labels(ds, dim, lo, hi)
            isel[dim] = slice(lo, hi)
        result = run_query(cube, Query(VAR, tuple(over), ranges, stat=stat))
        expected = xarray_reference(ds[VAR].isel(isel), over, case["weights"], stat)
        got = result.data.transpose(*expected.dims)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-12)
        scan = Query(VAR, tuple(over), ranges, stat=stat, use_accumulation=False)
        full_scan = run_query(cube, scan)
        np.testing.assert_allclose(full_scan.data.values, got.values, rtol=1e-9, atol=1e-12)
        assert full_scan.stats.accumulation_chunks_read == 0


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_weighted_and_unweighted_from_one_build(tmp_path, zarr_format):
    ds = synthetic_dataset({"time": 20, "lat": 9, "lon": 8}, seed=3)
    write_cube(ds, tmp_path / "c.zarr", {"time": 6, "lat": 4, "lon": 3}, zarr_format=zarr_format)
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, weights="area")
    for weights in ("area", "none"):
        for stat in ("mean", "sum", "count"):
            got = accumulus.average(
                str(tmp_path / "c.zarr"), VAR, ["lat", "lon"], weights=weights, stat=stat
            )
            expected = xarray_reference(ds[VAR], ["lat", "lon"], weights, stat)
            np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
            assert got.attrs["raw_chunks_read"] == 0


def test_weights_from_an_array_of_the_dataset(tmp_path):
    """--weights NAME: any array broadcastable to the variable, e.g. cell areas on (lat, lon)."""
    ds = synthetic_dataset({"time": 14, "lat": 9, "lon": 8}, seed=8)
    rng = np.random.default_rng(1)
    ds["cell_area"] = (("lat", "lon"), rng.uniform(0.5, 2.0, (9, 8)))
    write_cube(ds, tmp_path / "c.zarr", {"time": 5, "lat": 4, "lon": 3})
    built = accumulus.accumulate(str(tmp_path / "c.zarr"), VAR, weights="cell_area")
    assert built.group.weights == "array:cell_area"
    box = {"lat": (float(ds.lat[1]), float(ds.lat[7])), "time": ("2001-01-02", "2001-01-12")}
    selected = ds[VAR].sel(lat=slice(*box["lat"]), time=slice(*box["time"])).astype("f8")
    for stat, reduce in (("mean", "mean"), ("sum", "sum"), ("count", "sum_of_weights")):
        got = accumulus.average(str(tmp_path / "c.zarr"), VAR, ["lat", "lon"], box, stat=stat)
        expected = getattr(selected.weighted(ds["cell_area"]), reduce)(["lat", "lon"])
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
        assert got.attrs["weights"] == "array:cell_area"


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_weights_stored_packed_are_decoded_as_xarray_decodes_them(tmp_path, zarr_format):
    """A weights array stored as scaled integers (CF scale_factor, add_offset, _FillValue),
    chunked unlike the variable, weighs raw reads (no accumulation holds these weights) as
    its decoded values: the weights a raw chunk needs are read through the store the query
    reads its chunks from."""
    ds = synthetic_dataset({"time": 12, "lat": 9, "lon": 8}, seed=11)
    rng = np.random.default_rng(2)
    ds["w"] = (("time", "lat"), rng.uniform(0.5, 3.0, (12, 9)).round(2))
    ds["w"].encoding = {"dtype": "i2", "scale_factor": 0.01, "add_offset": 0.5,
                        "_FillValue": -1, "chunks": (5, 4)}  # fmt: skip
    write_cube(ds, tmp_path / "c.zarr", {"time": 5, "lat": 4, "lon": 3}, zarr_format=zarr_format)
    accumulus.accumulate(str(tmp_path / "c.zarr"), VAR)
    decoded = xr.open_zarr(tmp_path / "c.zarr")
    assert decoded.w.encoding["dtype"] == "i2"  # stored packed
    box = {"time": ("2001-01-02", "2001-01-10"), "lat": (float(ds.lat[1]), float(ds.lat[6]))}
    selected = decoded[VAR].sel(time=slice(*box["time"]), lat=slice(*box["lat"])).astype("f8")
    got = accumulus.average(str(tmp_path / "c.zarr"), VAR, ["time", "lat"], box, weights="w")
    expected = selected.weighted(decoded.w.astype("f8")).mean(["time", "lat"])
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-12)
    assert got.attrs["raw_chunks_read"] > 0
