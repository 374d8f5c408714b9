"""How a cube stores a variable (``cf.stored_form``), case by case, and the rules of bad
input around it: attributes xarray cannot decode, granules whose valid values the cube would
read as missing."""

from __future__ import annotations

import warnings

import netCDF4
import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.ingest.cf import stored_form
from ingest.helpers import cli, snapshot

I2 = np.dtype("i2")


def test_nan_on_integers_is_dropped():
    form = stored_form("v", I2, {"_FillValue": np.float64(np.nan), "scale_factor": -0.5}, "f.nc")
    assert "_FillValue" not in form.attrs and not form.unpacked and form.masked == ()
    [dropped] = form.dropped
    assert dropped.describe() == "_FillValue nan marks no value (NaN, on int16 values)"


def test_values_out_of_range_or_not_integral_are_dropped_one_by_one():
    attrs = {"_FillValue": np.float64(1.5), "missing_value": np.asarray([7, 70000, -1])}
    form = stored_form("v", np.dtype("u2"), attrs, "f.nc")
    assert form.attrs == {"missing_value": 7} and form.masked == (7,)
    assert [d.describe() for d in form.dropped] == [
        "_FillValue 1.5 marks no value (no uint16 value equals it)",
        "missing_value 70000 marks no value (no uint16 value equals it)",
        "missing_value -1 marks no value (no uint16 value equals it)",
    ]


def test_a_float64_fill_value_no_float32_equals_is_dropped():
    form = stored_form("v", np.dtype("f4"), {"_FillValue": np.float64(0.1)}, "f.nc")
    assert "_FillValue" not in form.attrs and len(form.dropped) == 1
    form = stored_form("v", np.dtype("f4"), {"_FillValue": np.float64(0.5)}, "f.nc")
    assert form.attrs["_FillValue"] == np.float32(0.5) and not form.dropped


def test_unsigned_fill_values_are_cast_as_xarray_casts_them():
    """int8 with _Unsigned: xarray casts _FillValue to int8 and reads it unsigned; it
    compares missing_value with the unsigned values as it is."""
    attrs = {"_Unsigned": "true", "_FillValue": np.int8(-1), "missing_value": np.int16(200)}
    form = stored_form("v", np.dtype("i1"), attrs, "f.nc")
    assert form.attrs == {"_Unsigned": "true", "_FillValue": np.int8(-1), "missing_value": 200}
    assert form.masked == (-1, -56) and not form.dropped


def test_signed_reading_of_unsigned_values_with_a_fill_is_stored_decoded():
    """uint8 with _Unsigned="false": xarray casts _FillValue to int8, which overflows on the
    plain int Zarr v3 gives back (201), so the cube cannot keep the attributes."""
    attrs = {"_Unsigned": "false", "_FillValue": np.uint8(201)}
    form = stored_form("v", np.dtype("u1"), attrs, "f.nc")
    assert form.unpacked and form.dtype == np.float32 and np.isnan(form.fill_value)
    assert not form.dropped
    # Without a fill value there is nothing to cast: the values keep their type.
    form = stored_form("v", np.dtype("u1"), {"_Unsigned": "false"}, "f.nc")
    assert not form.unpacked and form.attrs == {"_Unsigned": "false"}
    # Where the bytes must stay the source's (a virtual cube): typed int8 as _Unsigned says.
    kept = stored_form("v", np.dtype("u1"), {**attrs, "scale_factor": 0.5}, "f.nc", unpack=False)
    assert not kept.unpacked and kept.dtype == np.int8 and kept.masked == (-55,)
    assert kept.attrs == {"_FillValue": np.int8(-55), "scale_factor": 0.5}


def test_float32_packing_is_stored_decoded_unless_every_value_decodes_alike():
    attrs = {
        "scale_factor": np.float32(0.01),
        "add_offset": np.float32(273.15),
        "_FillValue": np.int16(-32767),
        "valid_range": np.asarray([-1000, 2000], dtype="i2"),
        "units": "K",
    }
    form = stored_form("t", I2, attrs, "f.nc")
    assert form.unpacked and form.dtype == np.float32
    assert set(form.attrs) == {"units", "valid_range", "_FillValue"}
    assert np.isnan(form.attrs["_FillValue"])
    np.testing.assert_array_equal(
        form.attrs["valid_range"],
        np.asarray([-1000, 2000], "f4") * np.float32(0.01) + np.float32(273.15),
    )
    exact = stored_form("t", I2, {"scale_factor": np.float32(0.5)}, "f.nc")
    assert not exact.unpacked and exact.dtype == I2
    wide = stored_form("t", np.dtype("i4"), {"scale_factor": np.float32(0.5)}, "f.nc")
    assert wide.unpacked  # not every int32 can be tried: float32 decoding is kept exactly
    double = stored_form("t", I2, {"scale_factor": np.float64(0.01)}, "f.nc")
    assert not double.unpacked


def test_attributes_xarray_cannot_decode_are_a_one_line_error(tmp_path):
    path = tmp_path / "bad.nc"
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", 2)
        ds.createVariable("time", "i4", ("time",))[:] = [0, 1]
        ds["time"].units = "days since 2000-01-01"
        var = ds.createVariable("v", "i2", ("time",))
        var.set_auto_maskandscale(False)
        var.scale_factor = "ten"
        var[:] = [1, 2]
    store = tmp_path / "cube.zarr"
    result = cli("append", str(store), str(path))
    assert result.returncode == 2 and not store.exists()
    line = result.stderr.strip().splitlines()[-1]  # under the progress bar
    assert line.startswith("error: granule ") and "bad.nc" in line
    assert "variable 'v'" in line and "attribute 'scale_factor'" in line
    result = cli("convert", str(path), str(tmp_path / "converted.zarr"))
    assert result.returncode == 2 and "attribute 'scale_factor'" in result.stderr
    assert not (tmp_path / "converted.zarr").exists()


def granule(path, times, values, fill):
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("time", len(times))
        ds.createVariable("time", "i4", ("time",))[:] = times
        ds["time"].units = "days since 2000-01-01"
        var = ds.createVariable("v", "i2", ("time",), fill_value=fill)
        var.set_auto_maskandscale(False)
        var[:] = values
    return path


def test_fill_values_are_mapped_but_never_onto_a_valid_value(tmp_path):
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granule(tmp_path / "a.nc", [0, 1], [5, -999], fill=-999))
    # Another fill value: mapped to the cube's.
    accumulus.append(str(store), granule(tmp_path / "b.nc", [2, 3], [-1, 6], fill=-1))
    np.testing.assert_array_equal(xr.open_zarr(store)["v"].values, [5, np.nan, np.nan, 6])
    # A valid -999 would read back as missing: refused, nothing written.
    before = snapshot(store)
    bad = granule(tmp_path / "c.nc", [4, 5], [-999, 7], fill=-1)
    with pytest.raises(accumulus.AccumulusError) as error:
        accumulus.append(str(store), bad)
    assert str(error.value) == (
        f"granule {bad}: variable 'v' holds the valid value -999 (at index (0,)), which the "
        "cube reads as missing (its fill values are [-999]); it cannot be stored exactly"
    )
    assert snapshot(store) == before


def test_granules_with_the_same_unholdable_fill_append_quietly_after_the_first(tmp_path):
    """Each granule's dropped fill value is reported once, naming that granule."""
    import scipy.io

    paths = []
    for start in (0, 2):
        path = tmp_path / f"g{start}.nc"
        with scipy.io.netcdf_file(path, "w", version=2) as ds:
            ds.createDimension("time", 2)
            time = ds.createVariable("time", "i", ("time",))
            time[:] = [start, start + 1]
            time.units = "days since 2000-01-01"
            var = ds.createVariable("v", "h", ("time",))
            var[:] = [0, start]
            var._FillValue = np.float64(np.nan)
        paths.append(path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        accumulus.append(str(tmp_path / "cube.zarr"), paths)
    messages = sorted(str(w.message) for w in caught if w.category is accumulus.AccumulusWarning)
    assert [m.split(":")[0] for m in messages] == [f"granule {p}" for p in paths]
    np.testing.assert_array_equal(xr.open_zarr(tmp_path / "cube.zarr")["v"].values, [0, 0, 0, 2])
