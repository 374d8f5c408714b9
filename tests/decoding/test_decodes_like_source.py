"""The guarantee: a cube holds exactly what xarray decodes from its sources.

For CF-encoded files written by netCDF4, scipy and h5py over the whole grid of encodings
(``cf_files``), ``xr.open_zarr(cube)`` equals ``xr.open_dataset(source)`` value for value,
NaN for NaN, after ``append`` and after ``convert``; fill values no stored value equals are
dropped with a warning naming the file, the variable and the value; and ``average`` equals
xarray's weighted mean on the source. The default suite runs a bounded number of examples;
``make test-slow`` runs many more.
"""

from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import xarray as xr
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.errors import AccumulusWarning
from accumulus.ingest.convert import convert

from .cf_files import CFFile, Variable, cf_files, unholdable, write

# xarray's own notes on the sources' fill values (and the cubes', which keep them) are
# expected; scipy's reader casts a NaN fill value to the type when it closes a file.
pytestmark = [
    pytest.mark.filterwarnings("ignore::xarray.SerializationWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered in cast:RuntimeWarning"),
]

FEW = settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
MANY = settings(FEW, max_examples=300)


def open_source(path: Path) -> xr.Dataset:
    """The source as xarray decodes it (its own warnings about fill values are expected)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)
        with xr.open_dataset(path) as ds:
            return ds.load()


def assert_same_decoding(cube: xr.Dataset, source: xr.Dataset, label: str) -> None:
    """Same variables, same values, missing at the same places (dtypes may differ: xarray
    widens integers to float when a fill value is declared, even one that marks nothing)."""
    assert set(cube.variables) == set(source.variables), label
    for name in source.variables:
        want, got = source[name].values, cube[name].values
        assert got.shape == want.shape, f"{label}: {name}"
        missing_want, missing_got = _missing(want), _missing(got)
        where = np.argwhere(missing_want != missing_got)
        assert not where.size, (
            f"{label}: {name}: {len(where)} values missing in one but not the other, first at "
            f"{tuple(where[0])}: cube {got[tuple(where[0])]!r}, source {want[tuple(where[0])]!r}"
        )
        equal = got[~missing_got] == want[~missing_want]
        bad = np.argwhere(~np.asarray(equal))
        assert not bad.size, (
            f"{label}: {name}: {len(bad)} values differ, e.g. cube "
            f"{got[~missing_got][bad[0][0]]!r} source {want[~missing_want][bad[0][0]]!r}"
        )


def _missing(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "mM":
        return np.isnat(values)
    return np.zeros(values.shape, dtype=bool)


def assert_warned(caught: list[warnings.WarningMessage], spec: CFFile, path: Path) -> None:
    """One warning per fill value that marks nothing, naming the file, variable and value;
    and none for the others (where xarray compares in float32, a value of the type can mark
    nothing too: see ``masks_in_float32``)."""
    ours = [str(w.message) for w in caught if issubclass(w.category, AccumulusWarning)]
    for name, var in spec.variables.items():
        about = [m for m in ours if f"variable {name!r}" in m]
        for attribute, value in var.unholdable:
            texts = {f"{attribute} {shown!r}" for shown in _written_forms(value)}
            assert any(path.name in m and any(t in m for t in texts) for m in about), (
                f"no warning for {name} {texts}: {ours}\n{spec.describe()}"
            )
        if not var.masks_in_float32:
            assert len(about) == len(var.unholdable), f"{about}\n{spec.describe()}"


def _written_forms(value: Any) -> list[Any]:
    """How a fill value can be named: as drawn, or, when it is a whole number, as the
    integer a writer stores it as (netCDF casts ``_FillValue`` to the variable's type:
    16777217.0 drawn for an int32 variable is the file's 16777217)."""
    drawn = np.asarray(value).item()
    if isinstance(drawn, float) and np.isfinite(drawn) and drawn.is_integer():
        return [drawn, int(drawn)]
    return [drawn]


def weighted_reference(source: xr.Dataset, name: str, over: list[str], box: dict) -> np.ndarray:
    """xarray's area-weighted mean on the source, in float64."""
    data = source[name].astype("f8").sel(box)
    weights = np.cos(np.deg2rad(data["lat"].astype("f8")))
    return data.weighted(weights).mean(over).values


def check(spec: CFFile, zarr_format: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="cf-"))
    try:
        path = write(folder / "source.nc", spec)
        source = open_source(path)
        label = f"Zarr v{zarr_format}, {spec.describe()}"

        cube = folder / "appended.zarr"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            accumulus.append(str(cube), [path], dim="time", zarr_format=zarr_format)
        assert_warned(caught, spec, path)
        assert_same_decoding(xr.open_zarr(cube).load(), source, f"append\n{label}")

        converted = folder / "converted.zarr"
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            convert(path, converted, zarr_format=zarr_format)
        assert_warned(caught, spec, path)
        assert_same_decoding(xr.open_zarr(converted).load(), source, f"convert\n{label}")

        lat = source["lat"].values
        box = {"lat": slice(lat[1], lat[-1]), "lon": slice(None, source["lon"].values[-1])}
        for name in list(spec.variables)[:1]:  # accumulations cost; one variable tells
            accumulus.accumulate(str(cube), name, weights="area")
            series = accumulus.average(
                str(cube),
                name,
                ["lat", "lon"],
                {"lat": tuple(sorted((float(lat[1]), float(lat[-1])))), "lon": (None, None)},
            )
            want = weighted_reference(source, name, ["lat", "lon"], box)
            scale = np.nanmax(np.abs(source[name].values.astype("f8")), initial=0.0)
            # Prefix sums cancel: their rounding is relative to the data, not the mean.
            np.testing.assert_allclose(
                series.values, want, rtol=1e-9, atol=1e-12 * scale, equal_nan=True, err_msg=label
            )
            mean_map = accumulus.average(str(cube), name, ["time"])
            want = weighted_reference(source, name, ["time"], {})
            np.testing.assert_allclose(
                mean_map.values, want, rtol=1e-9, atol=1e-12 * scale, equal_nan=True, err_msg=label
            )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _found(variables: dict[str, Variable], writer: str = "netcdf4") -> CFFile:
    """A case the long runs found, on a small grid."""
    times = np.asarray([0, 154, 206], dtype="i4")
    lat, lon = np.asarray([-60, 60], dtype="f4"), np.arange(5, dtype="f4") * 7.5 - 30
    return CFFile(writer, times, {"units": "days since 2000-01-01"}, lat, lon, variables)


_SWAPPED = np.zeros((3, 2, 5), dtype=">i2")
_SWAPPED[2, 1, 4], _SWAPPED[0, 0, 0] = 1778, -3578  # 1778 is 0x06F2; -3578 is 0xF206
# Big-endian in NetCDF-4 with _Unsigned: xarray casts the fill value in the file's byte order
# and views it in the machine's, so from the file it masks -3578, not 1778.
_UNSIGNED_BIG_ENDIAN = {"_Unsigned": "true", "_FillValue": np.int16(1778)}
# int32 decoded in float32: xarray casts the values to float32 before comparing them with a
# fill value, which then marks nothing (dropped with a warning) or several values.
_INT32_IN_FLOAT32 = {
    "scale_factor": np.float32(0.01),
    "missing_value": np.asarray([0, 599839454], "i4"),
}

# uint8 read as signed with a fill value: xarray casts the fill value to int8, which wraps a
# uint8 (Zarr v2's fill_value) but overflows on the plain int 201 it reads from Zarr v3.
_SIGNED_BYTES = np.zeros((3, 2, 5), dtype="u1")
_SIGNED_BYTES[1, 0, 1], _SIGNED_BYTES[2, 1, 3], _SIGNED_BYTES[0, 1, 2] = 201, 255, 90
_UNSIGNED_FALSE = {
    "_Unsigned": "false",
    "add_offset": np.float32(66825.5),
    "_FillValue": np.uint8(201),
}

# int32 decoded in float32 again: 2**31 - 1 becomes 2**31 in float32, so a _FillValue of
# 2147483648.0 (out of int32's range; scipy writes it as float64) marks it: nothing dropped.
_EDGES_IN_FLOAT32 = np.zeros((3, 2, 5), dtype="i4")
_EDGES_IN_FLOAT32[0, 0, :2], _EDGES_IN_FLOAT32[2, 1, 4] = [2**31 - 1, 2**31 - 128], -(2**31)
_OUT_OF_INT32_IN_FLOAT32 = {
    "scale_factor": np.float32(0.01),
    "_FillValue": np.float64(2**31),
}

# int32 with a float32 scale and offset is unpacked to float64 (not float32: xarray's
# _choose_float_dtype), so a missing_value of 2**24 + 1 marks exactly its values, warned of by
# nothing (the test once expected a warning; the cube did as xarray does).
_NEAR_2_24 = np.zeros((3, 2, 5), dtype="i4")
_NEAR_2_24[0, 0, :3], _NEAR_2_24[2, 1, 4] = [2**24 + 1, 2**24, 2**24 + 2], 2**24 + 1
_UNSIGNED_PACKED_IN_FLOAT64 = {
    "_Unsigned": "true",
    "scale_factor": np.float32(0.01),
    "add_offset": np.float32(66825.5),
    "missing_value": np.int32(2**24 + 1),
}

# int32 decoded in float32 with a float64 _FillValue of 2**24 + 1, which netCDF stores as the
# int32 16777217: in float32 it is 2**24, which xarray does not take as a fill value of the
# int32 values, so it marks nothing; the warning names it as the file holds it.
_NEAR_2_24_FILL = np.zeros((3, 2, 5), dtype="i4")
_NEAR_2_24_FILL[0, 0, :3] = [2**24 + 1, 2**24, 2**24 - 1]
_FILL_2_24_IN_FLOAT32 = {"scale_factor": np.float32(0.01), "_FillValue": np.float64(2**24 + 1)}


@FEW
@example(_found({"v": Variable(np.dtype(">i2"), _SWAPPED, _UNSIGNED_BIG_ENDIAN)}), 2)
@example(
    _found(
        {
            "v": Variable(
                np.dtype("<i4"),
                _NEAR_2_24,
                _UNSIGNED_PACKED_IN_FLOAT64,
                unholdable(_UNSIGNED_PACKED_IN_FLOAT64, np.dtype("i4"), np.dtype("u4")),
            )
        }
    ),
    2,
)
@example(
    _found(
        {"v": Variable(np.dtype("<i4"), np.full((3, 2, 5), 599839454, "i4"), _INT32_IN_FLOAT32)}
    ),
    3,
)
@example(_found({"v": Variable(np.dtype("u1"), _SIGNED_BYTES, _UNSIGNED_FALSE)}), 3)
@example(
    _found({"v": Variable(np.dtype("<i4"), _EDGES_IN_FLOAT32, _OUT_OF_INT32_IN_FLOAT32)}, "scipy"),
    2,
)
@example(
    _found(
        {
            "v": Variable(
                np.dtype("<i4"),
                _NEAR_2_24_FILL,
                _FILL_2_24_IN_FLOAT32,
                unholdable(_FILL_2_24_IN_FLOAT32, np.dtype("i4"), np.dtype("i4")),
            )
        },
        "netcdf4-classic",
    ),
    2,
)
@given(cf_files(), st.sampled_from([2, 3]))
def test_cube_decodes_like_its_source(spec, zarr_format):
    check(spec, zarr_format)


@pytest.mark.slow
@MANY
@given(cf_files(), st.sampled_from([2, 3]))
def test_cube_decodes_like_its_source_long_run(spec, zarr_format):
    check(spec, zarr_format)
