"""Packed integers (scale_factor, add_offset, _FillValue, missing_value) summed as integers
(``sums.reduce_packed``) equal xarray's decoded values summed: random cubes end to end, and
the sums alone against the float64 path they replace, masks of a shape included."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from hypothesis import given
from hypothesis import strategies as st

from accumulus.accumulation.model.sums import reduce_packed, reduce_terms
from accumulus.accumulation.query import execute
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.raw_cube import Decoder, RawCube
from cubes import xarray_reference
from properties import cube_property

VAR = "packed"
DTYPES = ("i1", "i2", "i4", "u1", "u2", "u4")


@st.composite
def packed_cubes(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    info = np.iinfo(dtype)
    sizes = {"time": draw(st.integers(1, 9)), "lat": draw(st.integers(1, 6)), "lon": 3}
    mark = st.one_of(st.none(), st.sampled_from([int(info.min), int(info.max), 1]))
    return {
        "dtype": dtype,
        "sizes": sizes,
        "chunks": {d: draw(st.integers(1, n)) for d, n in sizes.items()},
        "scale": draw(st.sampled_from([None, 0.0013179950193703076, 2.5, -1e-4])),
        "offset": draw(st.sampled_from([None, 389.63283727841815, -7.25])),
        "fill": draw(mark),
        "missing": draw(mark),
        "seed": draw(st.integers(0, 2**16)),
    }


def packed_dataset(case) -> xr.Dataset:
    """Random integers over the whole range of the type, a third of them the marks."""
    rng = np.random.default_rng(case["seed"])
    info = np.iinfo(case["dtype"])
    shape = tuple(case["sizes"].values())
    values = rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=case["dtype"])
    marks = [m for m in (case["fill"], case["missing"]) if m is not None]
    if marks:
        hit = rng.random(shape) < 0.3
        values[hit] = rng.choice(marks, size=shape)[hit]
    attrs = {}
    for name in ("scale", "offset", "missing"):
        if case[name] is not None:
            key = {"scale": "scale_factor", "offset": "add_offset"}.get(name, "missing_value")
            attrs[key] = case[name]
    sizes = case["sizes"]
    coords = {
        "time": pd.date_range("2001-01-01", periods=sizes["time"], freq="D"),
        "lat": np.linspace(-70, 70, sizes["lat"]) if sizes["lat"] > 1 else np.array([10.0]),
        "lon": np.arange(sizes["lon"], dtype="f8") * 2.5,
    }
    return xr.Dataset({VAR: (list(sizes), values, attrs)}, coords=coords)


@pytest.mark.filterwarnings("ignore:variable .* has multiple fill values")
@cube_property(25)
@given(case=packed_cubes(), data=st.data())
def test_packed_answers_equal_xarray(tmp_path_factory, case, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    raw = packed_dataset(case)
    encoding = {VAR: {"chunks": tuple(case["chunks"].values())}}
    if case["fill"] is not None:
        encoding[VAR]["_FillValue"] = case["fill"]
    raw.to_zarr(path, mode="w", zarr_format=2, consolidated=True, encoding=encoding)
    decoded = xr.open_zarr(path)[VAR].load().astype("f8")
    cube = RawCube.open(str(path))
    assert cube.variable(VAR).decoder.packing(np.dtype(case["dtype"])) is not None
    for _ in range(3):
        over = data.draw(st.lists(st.sampled_from(list(case["sizes"])), min_size=1, unique=True))
        stat = data.draw(st.sampled_from(["mean", "sum", "count"]))
        weights = data.draw(st.sampled_from(["area", "none"]))
        query = Query(VAR, tuple(over), {}, stat=stat, weights=weights, use_accumulation=False)
        got = run_query(cube, query).data
        try:
            execute.SUM_PACKED = False
            before = run_query(cube, query).data
        finally:
            execute.SUM_PACKED = True
        expected = xarray_reference(decoded, over, weights, stat)
        got = got.transpose(*expected.dims)
        # Σ of values up to |scale|·2^32 + |offset| in float64: what rounding leaves of them.
        scale = abs(case["scale"] or 1.0) * 2.0**32 + abs(case["offset"] or 0.0)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-13 * scale)
        np.testing.assert_allclose(
            got.values, before.transpose(*expected.dims).values, rtol=1e-12, atol=1e-15 * scale
        )


@given(
    dtype=st.sampled_from(DTYPES),
    seed=st.integers(0, 2**16),
    axes=st.sampled_from([(0,), (1,), (0, 1), (0, 2), (0, 1, 2)]),
    shaped=st.booleans(),
    weighted=st.booleans(),
)
def test_packed_sums_equal_the_decoded_values_sums(dtype, seed, axes, shaped, weighted):
    """``reduce_packed`` against ``reduce_terms`` of xarray's decoded values, masks of a
    shape (``inside``) and weights varying along latitude included."""
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    x = rng.integers(info.min, info.max, size=(5, 4, 3), endpoint=True, dtype=dtype)
    x[rng.random(x.shape) < 0.3] = info.max
    attrs = {"_FillValue": info.max, "scale_factor": 0.01, "add_offset": -3.5}
    decoder = Decoder(VAR, ("time", "lat", "lon"), attrs)
    packing = decoder.packing(x.dtype)
    assert packing is not None
    inside = rng.random((1, 4, 3)) < 0.6 if shaped else None
    w = np.cos(np.deg2rad(rng.uniform(-80, 80, (1, 4, 1)))) if weighted else 1.0
    terms = ["wsum", "wcount", "sum", "count", "posinf", "neginf"]
    values = decoder.values(x)
    if inside is not None:
        values = np.where(inside, values, np.nan)
    want = reduce_terms(values, w, terms, axes)
    got = reduce_packed(x, packing.marks, packing.scale, packing.offset, w, terms, axes, inside)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12 * 0.01 * 2.0**32)


@pytest.mark.parametrize(
    ("dtype", "attrs"),
    [
        ("f4", {"scale_factor": 2.0}),  # floats are decoded by xarray
        ("i8", {"scale_factor": 2.0}),  # 64-bit sums could overflow
        ("i2", {"scale_factor": np.float32(0.5)}),  # xarray decodes in float32
        ("i2", {"_Unsigned": "true"}),
        ("i2", {"scale_factor": [0.5, 1.0]}),
    ],
)
def test_what_is_not_summed_packed(dtype, attrs):
    assert Decoder(VAR, ("time",), attrs).packing(np.dtype(dtype)) is None
