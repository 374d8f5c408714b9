"""``rechunk``: regular ↔ variable chunks, formats, what is kept, bad input, interop."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.model.groups import read_group
from accumulus.errors import AccumulusError
from accumulus.raw_cube import RawCube
from accumulus.stores.locations import StoreNotFoundError
from accumulus.stores.opening import open_store

from .conftest import VAR, daily_dataset, period_counts, run_cli, write_regular

COMBINATIONS = [("time",), ("lat", "lon")]
# The module, not the function ``accumulus.rechunk`` that shadows its name in the package.
rechunk_module = importlib.import_module("accumulus.rechunk")


@pytest.fixture(scope="module")
def daily_cube(tmp_path_factory) -> tuple[xr.Dataset, Path]:
    """A standard-calendar daily cube (Zarr v2, 10-day chunks) with accumulations."""
    ds = daily_dataset("standard", "2003-12-01", 120, seed=5)
    path = tmp_path_factory.mktemp("daily") / "daily.zarr"
    write_regular(ds, path, time_chunk=10)
    accumulus.accumulate(str(path), VAR, COMBINATIONS, weights="area", strides={"time": 1})
    return ds, path


def _raw(path: Path) -> xr.Dataset:
    return xr.open_zarr(path, decode_cf=False)


def _v3_codecs_as_v2(path: Path, name: str) -> list[dict]:
    """The codecs of a v3 array's zarr.json, but its serializer, as numcodecs JSON."""
    codecs = json.loads((path / name / "zarr.json").read_text())["codecs"]
    return [
        {"id": c["name"].removeprefix("numcodecs."), **c.get("configuration", {})}
        for c in codecs
        if c["name"] != "bytes"
    ]


def test_daily_to_monthly_keeps_everything_but_the_chunks(daily_cube, tmp_path):
    ds, source = daily_cube
    out = tmp_path / "monthly.zarr"
    result = accumulus.rechunk(str(source), str(out), "time=month")

    months = tuple(period_counts(ds["time"].values, "MS"))
    assert result.zarr_format == 3  # v2 cannot hold them
    assert result.chunks[VAR] == {"time": months, "lat": (6,), "lon": (5,)}
    assert result.chunks["time"] == {"time": months}
    assert result.accumulated == (VAR,)

    # xarray reads the same dataset, decoded and raw (time encoding, fill values, attrs).
    xr.testing.assert_identical(xr.open_zarr(out), xr.open_zarr(source))
    xr.testing.assert_identical(_raw(out), _raw(source))
    decoded = xr.open_zarr(out)
    assert decoded[VAR].chunks[0] == months
    for name in (VAR, "time"):
        before, after = xr.open_zarr(source)[name].encoding, decoded[name].encoding
        for key in ("dtype", "units", "calendar", "_FillValue"):
            assert before.get(key) == after.get(key), (name, key)
    zarray = json.loads((source / VAR / ".zarray").read_text())
    assert zarray["filters"] is None
    assert _v3_codecs_as_v2(out, VAR) == [zarray["compressor"]]

    # zarr-python alone reads the values and the rectilinear grid.
    array = zarr.open_array(out / VAR, mode="r")
    assert array.read_chunk_sizes == (months, (6,), (5,))
    np.testing.assert_array_equal(array[:], zarr.open_array(source / VAR, mode="r")[:])
    assert array.metadata.dimension_names == ("time", "lat", "lon")
    assert json.loads((out / VAR / "zarr.json").read_text())["chunk_grid"]["name"] == "rectilinear"
    assert zarr.open_group(out, mode="r").attrs["title"] == "test cube"

    # Accumulations rebuilt with the source's configuration, and right.
    old, new = RawCube.open(str(source)), RawCube.open(str(out))
    assert read_group(new, VAR).config() == read_group(old, VAR).config()
    assert new.consolidated
    assert all(report.ok for report in accumulus.verify(str(out)))


def test_monthly_back_to_regular_zarr_v2(daily_cube, tmp_path):
    _, source = daily_cube
    monthly = tmp_path / "monthly.zarr"
    accumulus.rechunk(str(source), str(monthly), {"time": "month"})
    back = tmp_path / "back.zarr"
    result = accumulus.rechunk(str(monthly), str(back), "time=10", zarr_format=2)
    assert result.zarr_format == 2
    xr.testing.assert_identical(xr.open_zarr(back), xr.open_zarr(source))
    xr.testing.assert_identical(_raw(back), _raw(source))
    for name in (VAR, "time", "lat"):
        zarray = json.loads((back / name / ".zarray").read_text())
        original = json.loads((source / name / ".zarray").read_text())
        if name == "time":  # xarray wrote the coordinate in one chunk; the rule cut it too
            assert zarray.pop("chunks") == [10] and original.pop("chunks") == [120]
        assert zarray == original, name
        assert json.loads((back / name / ".zattrs").read_text()) == json.loads(
            (source / name / ".zattrs").read_text()
        )
    assert all(report.ok for report in accumulus.verify(str(back)))


def test_explicit_lists_on_several_dimensions(daily_cube, tmp_path):
    _, source = daily_cube
    out = tmp_path / "lists.zarr"
    sizes = [31, 31, 29, 29]  # December, January, February 2004 (leap), 29 days of March
    spec = "time=" + ",".join(map(str, sizes)) + ",lat=2,4,lon=4"
    result = accumulus.rechunk(str(source), str(out), spec)
    assert result.chunks[VAR] == {"time": tuple(sizes), "lat": (2, 4), "lon": (4, 1)}
    assert xr.open_zarr(out)[VAR].chunks == (tuple(sizes), (2, 4), (4, 1))
    xr.testing.assert_identical(xr.open_zarr(out), xr.open_zarr(source))


def test_regular_months_stay_in_zarr_v2(tmp_path):
    """360-day months are all 30 days: a regular grid, which Zarr v2 expresses."""
    ds = daily_dataset("360_day", "2003-01-01", 95)
    source = tmp_path / "src.zarr"
    write_regular(ds, source, time_chunk=7)
    result = accumulus.rechunk(str(source), str(tmp_path / "out.zarr"), "time=month")
    assert result.zarr_format == 2
    zarray = json.loads((tmp_path / "out.zarr" / VAR / ".zarray").read_text())
    assert zarray["chunks"] == [30, 6, 5]
    xr.testing.assert_identical(xr.open_zarr(tmp_path / "out.zarr"), xr.open_zarr(source))


def test_memory_destination(daily_cube):
    _, source = daily_cube
    accumulus.rechunk(str(source), "memory://rechunk-test", "time=month")
    ds_out = xr.open_zarr(open_store("memory://rechunk-test"))
    xr.testing.assert_identical(ds_out, xr.open_zarr(source))
    with pytest.raises(AccumulusError, match="destination exists"):
        accumulus.rechunk(str(source), "memory://rechunk-test", "time=month")


# --------------------------------------------------------------------------------------------
# Bad input: one clear error, nothing written


@pytest.mark.parametrize(
    ("chunks", "zarr_format", "message"),
    [
        ("time=month", 2, "Zarr v2 cannot store variable chunk sizes.*use --zarr-format 3"),
        ("lat=2,4", 2, "Zarr v2 cannot store.*'lat'.*use --zarr-format 3"),
        ("time=30,30", None, "add up to 60, but dimension 'time' has length 120"),
        ("lat=31,29,31,29", None, "add up to 120, but dimension 'lat' has length 6"),
        ("time=0", None, "positive integers, got 0"),
        ("time=-7", None, "positive integers, got -7"),
        ("time=31,0,89", None, "positive integers, got 0"),
        ("lat=month", None, "needs a CF time coordinate"),
        ("level=3", None, r"dimension\(s\) \['level'\] that no array has"),
        ("time=per-granule", None, "applies to appends"),
        ("time=month", 4, "--zarr-format must be 2 or 3"),
    ],
)
def test_bad_input_writes_nothing(daily_cube, tmp_path, chunks, zarr_format, message):
    _, source = daily_cube
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(AccumulusError, match=message):
        accumulus.rechunk(str(source), str(out / "dest.zarr"), chunks, zarr_format)
    assert list(out.iterdir()) == []


def test_existing_destination_or_the_source_itself(daily_cube, tmp_path):
    _, source = daily_cube
    (tmp_path / "taken.zarr").mkdir()
    (tmp_path / "taken.zarr" / "file").write_text("x")
    with pytest.raises(AccumulusError, match="destination exists"):
        accumulus.rechunk(str(source), str(tmp_path / "taken.zarr"), "time=month")
    with pytest.raises(AccumulusError, match="destination exists"):
        accumulus.rechunk(str(source), str(source), "time=month")


def test_a_failure_while_writing_removes_everything(daily_cube, tmp_path, monkeypatch):
    _, source = daily_cube

    def broken(*args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(rechunk_module, "accumulate", broken)
    out = tmp_path / "out"
    out.mkdir()
    with pytest.raises(RuntimeError, match="disk full"):
        accumulus.rechunk(str(source), str(out / "dest.zarr"), "time=month")
    assert list(out.iterdir()) == []
    with pytest.raises(RuntimeError, match="disk full"):
        accumulus.rechunk(str(source), "memory://rechunk-broken", "time=month")
    with pytest.raises(StoreNotFoundError):
        open_store("memory://rechunk-broken")


# --------------------------------------------------------------------------------------------
# The command line


def test_cli_rechunk_then_average_reads_no_raw_chunk(daily_cube, tmp_path):
    _, source = daily_cube
    out = tmp_path / "monthly.zarr"
    done = run_cli("rechunk", str(source), str(out), "--chunks", "time=month")
    assert done.returncode == 0, done.stderr
    assert "precip: time 31,31,29,29 (4 chunks), lat 6 (1 chunk), lon 5 (1 chunk)" in done.stdout
    assert "Zarr v3" in done.stdout and "accumulations rebuilt for precip" in done.stdout
    average = run_cli(
        "average",
        str(out),
        VAR,
        "--over",
        "time",
        "--range",
        "time=2004-02-01/2004-02-29",
        "--plan",
        "accumulation",
        "--json",
    )
    assert average.returncode == 0, average.stderr
    answer = json.loads(average.stdout)
    assert answer["plan"]["raw_chunks_read"] == 0 and answer["plan"]["accumulation_chunks_read"]
    ds = xr.open_zarr(source)
    expected = ds[VAR].sel(time=slice("2004-02-01", "2004-02-29")).astype("f8").mean("time")
    np.testing.assert_allclose(np.array(answer["values"], dtype="f8"), expected.values, rtol=1e-9)


def test_cli_error_is_one_line_and_exit_2(daily_cube, tmp_path):
    _, source = daily_cube
    out = tmp_path / "v2.zarr"
    failed = run_cli(
        "rechunk", str(source), str(out), "--chunks", "time=month", "--zarr-format", "2"
    )
    assert failed.returncode == 2
    lines = failed.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--zarr-format 3" in lines[0]
    assert not out.exists()
