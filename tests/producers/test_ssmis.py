"""RSS SSMIS daily grids (issue 34 item 2): int16 values with float32 ``scale_factor``, and
``sst_dtime``, the time of each observation packed as int16 tenths of an hour with time
units. The cube once stored the integers with the time units: every time 10x too late.

Two days are appended: the vendored file (2020-01-02) and the next day's, which RSS writes
in the same layout with its times counted from its own midnight (made here from the
vendored one by changing those units, as ``ncatted`` would)."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr

from command_line import files, refused

from .commands import answer, assert_close, copy, cos_weighted_mean, ok

FILE = "f16_ssmis_20200102v7_subset.nc"


@pytest.fixture
def days(tmp_path) -> list[Path]:
    first = copy(FILE, tmp_path, "f16_ssmis_20200102v7.nc")
    second = copy(FILE, tmp_path, "f16_ssmis_20200103v7.nc")
    with netCDF4.Dataset(second, "a") as file:
        for name in ("time", "sst_dtime"):
            file[name].units = "hours since 2020-01-03T00:00:00Z"
    return [first, second]


def sources(days: list[Path]) -> xr.Dataset:
    return xr.concat([xr.open_dataset(d) for d in days], dim="time")


def test_packed_times_decode_as_in_the_files(days, tmp_path, capsys, monkeypatch):
    cube = tmp_path / "ssmis.zarr"
    ok(capsys, monkeypatch, "append", str(cube), *map(str, days), "--chunks", "time=1")
    theirs = sources(days)
    ours = xr.open_zarr(cube)
    # The same instants, to the nanosecond, NaT where the file has none.
    np.testing.assert_array_equal(ours["sst_dtime"].values, theirs["sst_dtime"].values)
    hours = (ours["sst_dtime"] - np.datetime64("2020-01-02")) / np.timedelta64(1, "h")
    assert float(hours.min()) >= 0 and float(hours.max()) < 2 * 24 + 2  # not 10x too late
    np.testing.assert_array_equal(ours["time"].values, theirs["time"].values)

    out = ok(capsys, monkeypatch, "verify", str(cube), "--sources", *map(str, days))
    assert out.count("OK (8 variables, 2 steps as xarray decodes the file)") == 2, out


def test_averages_of_packed_values_equal_xarrays(days, tmp_path, capsys, monkeypatch):
    cube = tmp_path / "ssmis.zarr"
    ok(capsys, monkeypatch, "append", str(cube), *map(str, days), "--chunks", "time=1")
    ok(capsys, monkeypatch, "accumulate", str(cube), "wind_speed")
    theirs = sources(days)["wind_speed"]

    series, document = answer(
        capsys, monkeypatch, str(cube), "wind_speed", "--over", "latitude,longitude",
        "--plan", "accumulation",
    )  # fmt: skip
    assert document["plan"]["accumulation_chunks_read"] > 0
    assert_close(series, cos_weighted_mean(theirs, ["latitude", "longitude"], "latitude"))

    box = theirs.sel(latitude=slice(-5, 5), longitude=slice(10, 30))
    series, _ = answer(
        capsys, monkeypatch, str(cube), "wind_speed", "--over", "latitude,longitude",
        "--range", "latitude=-5/5", "--range", "longitude=10/30",
    )  # fmt: skip
    assert_close(series, cos_weighted_mean(box, ["latitude", "longitude"], "latitude"))

    time_map, _ = answer(capsys, monkeypatch, str(cube), "wind_speed", "--over", "time")
    assert_close(time_map, theirs.astype("f8").mean("time").values)


def decoded_as_the_references_read(path: Path) -> xr.Dataset:
    """xarray on the file's stored numbers with float64 packing attributes: what a virtual
    cube holds (it references the bytes; Zarr gives attributes back as JSON numbers)."""
    raw = xr.open_dataset(path, decode_cf=False)
    for var in raw.variables.values():
        for key in ("scale_factor", "add_offset"):
            if key in var.attrs:
                var.attrs[key] = float(var.attrs[key])
    return xr.decode_cf(raw)


def test_virtual_cube_says_once_why_decoded_values_differ(days, tmp_path, capsys, monkeypatch):
    refs = tmp_path / "ssmis.json"
    ok(capsys, monkeypatch, "append", str(refs), str(days[0]), "--virtual")

    out = ok(capsys, monkeypatch, "verify", str(refs), "--sources", str(days[0]))
    lines = out.strip().splitlines()
    assert len(lines) == 2, out  # OK, and one note: not a million differences
    assert "except as noted below" in lines[0]
    assert "the cube stores the source's values exactly" in lines[1]
    assert "wind_speed" in lines[1] and "sst_dtime" in lines[1]

    side = tmp_path / "side.zarr"
    ok(capsys, monkeypatch, "accumulate", str(refs), "wind_speed", "--into", str(side))
    theirs = decoded_as_the_references_read(days[0])["wind_speed"]
    series, _ = answer(
        capsys, monkeypatch, str(refs), "wind_speed", "--over", "latitude,longitude",
        "--accumulations", str(side),
    )  # fmt: skip
    assert_close(series, cos_weighted_mean(theirs, ["latitude", "longitude"], "latitude"))
    # ... which is xarray's float32 decoding of the file to float32 precision.
    float32 = cos_weighted_mean(
        xr.open_dataset(days[0])["wind_speed"], ["latitude", "longitude"], "latitude"
    )
    np.testing.assert_allclose(series, float32, rtol=1e-6)


def test_virtual_cube_refuses_times_in_other_units(days, tmp_path, capsys, monkeypatch):
    """The next day's ``sst_dtime`` counts from its own midnight: referenced as stored, it
    would read a day early, so the virtual cube refuses it and stays as it was."""
    refs = tmp_path / "ssmis.json"
    ok(capsys, monkeypatch, "append", str(refs), str(days[0]), "--virtual")
    before = files(tmp_path)
    message = refused(capsys, monkeypatch, "append", str(refs), str(days[1]), "--virtual")
    assert "'sst_dtime' holds times (units, calendar)" in message
    assert "2020-01-03" in message and "append without --virtual" in message
    assert files(tmp_path) == before
