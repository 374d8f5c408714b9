"""Accumulation groups in the layout of the ZEP 5 authors' reference generator (NASA GES DISC
zarr-accumulation-generation): float32 sums, arrays whose dimensions are permuted with the
accumulated ones first, strides of 2, and the ``accumulation_delta_filter`` codec storing
differences along the first accumulated axis of each chunk."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from numcodecs import Blosc

import accumulus
from accumulus.filters.accumulation_delta import AccumulationDeltaFilter

NLAT, NLON, NTIME = 24, 36, 40
CHUNKS = (6, 9, 10)  # latitude, longitude, time: exact multiples, as the generator requires
GROUP_DIMS = ("latitude", "longitude", "time")  # the generator's dimension indices 0, 1, 2
TREE = {
    "latitude": {
        "_DATA_WEIGHTED": "acc_lat",
        "_WEIGHTS": "acc_wt_lat",
        "longitude": {"_DATA_WEIGHTED": "acc_lat_lon", "_WEIGHTS": "acc_wt_lat_lon", "time": {}},
        "time": {},
    },
    "longitude": {"_DATA_WEIGHTED": "acc_lon", "_WEIGHTS": "acc_wt_lon", "time": {}},
    "time": {"_DATA_WEIGHTED": "acc_time", "_WEIGHTS": "acc_wt_time"},
}
# name: (array dimensions, strides, accumulated group-dimension indices, delta filter?)
LAYOUT = {
    "lat": (("latitude", "time", "longitude"), (2, 0, 0), (0,), True),
    "lon": (("longitude", "time", "latitude"), (2, 0, 0), (1,), True),
    "time": (("latitude", "time", "longitude"), (0, 2, 0), (2,), False),
    "lat_lon": (("latitude", "longitude", "time"), (2, 2, 0), (0, 1), False),
}


def expected_entries(values: np.ndarray, weights: np.ndarray, dims, strides):
    """Entries computed the plain way: sum over [0, end) for every end position."""
    data = np.where(np.isnan(values), 0.0, values * weights)
    wsum = np.where(np.isnan(values), 0.0, weights * np.ones_like(values))
    arrays = []
    for a in (data, wsum):
        out = xr.DataArray(a, dims=GROUP_DIMS)
        for dim, stride in zip(dims, strides, strict=True):
            if stride == 0:
                continue
            step = CHUNKS[GROUP_DIMS.index(dim)] * stride
            ends = range(step, out.sizes[dim] + 1, step)
            out = xr.concat([out.isel({dim: slice(0, e)}).sum(dim) for e in ends], dim=dim)
        arrays.append(out.transpose(*dims).values.astype("f4"))
    return arrays


@pytest.fixture(scope="module")
def generator_store(tmp_path_factory):
    path = tmp_path_factory.mktemp("generator") / "store.zarr"
    rng = np.random.default_rng(0)
    values = rng.random((NLAT, NLON, NTIME)).astype("f4")
    values[values < 0.2] = np.nan  # the generator's missing values
    lat = np.linspace(-57.5, 57.5, NLAT)
    ds = xr.Dataset(
        {"variable": (GROUP_DIMS, values)},
        coords={
            "latitude": ("latitude", lat, {"units": "degrees_north"}),
            "longitude": np.linspace(-175, 175, NLON),
            "time": pd.date_range("2000-06-01", periods=NTIME, freq="30min"),
        },
    )
    ds["variable"].encoding = {"chunks": CHUNKS, "_FillValue": -99.0}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=False)

    root = zarr.open_group(path, mode="r+", zarr_format=2)
    group = root.create_group(
        "variable_accumulation_group", attributes={"_ACCUMULATION_GROUP": TREE}
    )
    weights = np.cos(np.deg2rad(lat))[:, None, None]
    for suffix, (dims, strides, acc_index, delta) in LAYOUT.items():
        data, wsum = expected_entries(values.astype("f8"), weights, dims, strides)
        order = tuple(GROUP_DIMS.index(d) for d in dims)
        chunks = tuple(
            n if s else CHUNKS[GROUP_DIMS.index(d)]
            for d, s, n in zip(dims, strides, data.shape, strict=True)
        )
        filters = (
            [AccumulationDeltaFilter(acc_index, tuple(s for s in strides if s), order)]
            if delta
            else None
        )
        for name, entries, f in (
            (f"acc_{suffix}", data, filters),
            (f"acc_wt_{suffix}", wsum, None),
        ):
            array = group.create_array(
                name,
                shape=entries.shape,
                chunks=chunks,
                dtype="f4",
                filters=f,
                compressors=Blosc(cname="zstd", clevel=5, shuffle=Blosc.SHUFFLE),
                attributes={"_ARRAY_DIMENSIONS": list(dims), "_ACCUMULATION_STRIDE": list(strides)},
            )
            array[...] = entries
    zarr.consolidate_metadata(path)
    return path, ds


def reference(ds, over, **sel):
    data = ds["variable"].sel(**sel).astype("f8")
    return data.weighted(np.cos(np.deg2rad(data["latitude"]))).mean(over)


def test_delta_filter_round_trip_and_config():
    codec = AccumulationDeltaFilter((0,), (2,), (0, 2, 1))
    chunk = np.cumsum(np.arange(24, dtype="f4").reshape(2, 3, 4), axis=0)
    encoded = codec.encode(chunk)
    np.testing.assert_array_equal(encoded[1], chunk[1] - chunk[0])
    np.testing.assert_array_equal(codec.decode(encoded), chunk)
    assert codec.get_config() == {
        "id": "accumulation_delta_filter",
        "accumulation_dimension": [0],
        "accumulation_stride": [2],
        "accumulation_dim_order_idx": [0, 2, 1],
    }


def test_generator_group_is_read(generator_store):
    path, _ = generator_store
    info = accumulus.inspect(str(path))
    [group] = info["accumulation_groups"]
    assert group["producer"] == "foreign"
    assert {tuple(a["dims"]) for a in group["accumulations"]} == {
        ("latitude",),
        ("longitude",),
        ("time",),
        ("latitude", "longitude"),
    }
    [report] = accumulus.verify(str(path), "variable")
    assert report.ok, report.problems


def test_generator_group_answers_queries(generator_store):
    path, ds = generator_store
    lat, lon, times = ds.latitude.values, ds.longitude.values, ds.time.values
    # Aligned on the generator's stride-2 boundaries: accumulation only.
    box = {"latitude": (lat[0], lat[11]), "longitude": (lon[0], lon[17])}
    result = accumulus.query(str(path), "variable", ["latitude", "longitude"], box)
    assert result.stats.raw_chunks_read == 0
    expected = reference(ds, ["latitude", "longitude"], **{d: slice(*r) for d, r in box.items()})
    np.testing.assert_allclose(result.data.values, expected.values, rtol=2e-6)

    period = (str(times[0]), str(times[-1]))
    result = accumulus.query(str(path), "variable", ["time"], {"time": period})
    assert result.stats.raw_chunks_read == 0
    np.testing.assert_allclose(result.data.values, reference(ds, ["time"]).values, rtol=2e-6)

    # Unaligned at the start: latitude [12, 24) and longitude [18, 36) come from lat+lon sums,
    # the strips beside them from the latitude-only and longitude-only sums, and only the
    # corner [3, 12) x [4, 18) is read raw: 2 x 2 chunks at each of the 4 time chunks.
    box = {"latitude": (lat[3], lat[23]), "longitude": (lon[4], lon[35])}
    result = accumulus.query(str(path), "variable", ["latitude", "longitude"], box)
    assert result.stats.raw_chunks_read == 2 * 2 * 4
    expected = reference(ds, ["latitude", "longitude"], **{d: slice(*r) for d, r in box.items()})
    np.testing.assert_allclose(result.data.values, expected.values, rtol=2e-6)
