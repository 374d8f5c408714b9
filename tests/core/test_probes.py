"""The probes of a careless operator (issue 12): damaged stores and absurd options. Each is a
one-line error with exit status 2 and nothing written, not a traceback. The command runs
in-process through its real entry point (``accumulus.cli.main``), which is what the console
script calls; the damaged stores are built here."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import zarr

from accumulus.demo import DemoConfig, map_period
from command_line import files, refused, run
from cubes import VAR, synthetic_dataset, write_cube


@pytest.fixture
def cube(tmp_path: Path) -> Path:
    """An accumulated v2 cube with a string variable beside its data."""
    ds = synthetic_dataset({"time": 20, "lat": 8, "lon": 10}, seed=3)
    ds["station"] = (("lat", "lon"), np.full((8, 10), "name"))
    ds["observed"] = (("time",), pd.date_range("1990-01-01", periods=20, freq="D"))
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 5, "lat": 4, "lon": 5})
    from accumulus import api

    api.accumulate(str(path), VAR, minimal=True)  # ZEP 5 as written: its arrays are edited
    return path


def test_a_corrupt_zip_store(capsys, monkeypatch, cube, tmp_path):
    archive = Path(shutil.make_archive(str(tmp_path / "cube"), "zip", cube))
    data = bytearray(archive.read_bytes())
    data[-100:] = bytes(100)  # the central directory is gone
    archive.write_bytes(bytes(data))
    for command in (["inspect"], ["average", "--over", "lat,lon"], ["verify"]):
        args = [command[0], str(archive), *([VAR] if command[0] != "inspect" else [])]
        message = refused(capsys, monkeypatch, *args, *command[1:])
        assert str(archive) in message and "not a readable zip archive" in message


def test_s3_without_credentials(capsys, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance credentials either
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    message = refused(
        capsys, monkeypatch, "inspect", "s3://bucket/cube.zarr", "--endpoint-url",
        "http://127.0.0.1:9",
    )  # fmt: skip
    assert "cannot read s3://bucket/cube.zarr: Unable to locate credentials" in message


def test_convert_of_a_truncated_netcdf_file(capsys, monkeypatch, tmp_path):
    whole = tmp_path / "granule.nc"
    synthetic_dataset({"time": 4, "lat": 8, "lon": 10}).to_netcdf(whole)
    truncated = tmp_path / "truncated.nc"
    truncated.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    message = refused(capsys, monkeypatch, "convert", str(truncated), str(tmp_path / "out.zarr"))
    assert "truncated.nc: cannot be read as NetCDF4/HDF5" in message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["granule.nc", "truncated.nc"]


def test_rebuild_over_a_group_whose_attributes_are_not_json(capsys, monkeypatch, cube):
    (cube / f"{VAR}_accumulation_group" / ".zattrs").write_text('{"broken')
    before = files(cube)
    message = refused(capsys, monkeypatch, "accumulate", str(cube), VAR, "--rebuild")
    assert f"{VAR}_accumulation_group/.zattrs is not valid JSON" in message
    assert files(cube) == before


def test_average_after_the_accumulation_dimensions_were_permuted(capsys, monkeypatch, cube):
    group = cube / f"{VAR}_accumulation_group"
    for attrs in group.glob("*lat_lon/.zattrs"):
        document = json.loads(attrs.read_text())
        document["_ARRAY_DIMENSIONS"] = document["_ARRAY_DIMENSIONS"][::-1]
        document["_ACCUMULATION_STRIDE"] = document["_ACCUMULATION_STRIDE"][::-1]
        attrs.write_text(json.dumps(document))
    zarr.consolidate_metadata(str(cube))
    message = refused(capsys, monkeypatch, "average", str(cube), VAR, "--over", "lat,lon")
    assert "does not fit its _ARRAY_DIMENSIONS" in message and "--rebuild" in message
    # What the message says to do works.
    assert run(capsys, monkeypatch, "accumulate", str(cube), VAR, "--rebuild")[0] == 0
    assert run(capsys, monkeypatch, "average", str(cube), VAR, "--over", "lat,lon")[0] == 0


@pytest.mark.parametrize(("variable", "says"), [("station", "strings"), ("observed", "dates")])
def test_strings_and_dates_are_neither_accumulated_nor_averaged(
    capsys, monkeypatch, cube, variable, says
):
    before = files(cube)
    message = refused(capsys, monkeypatch, "accumulate", str(cube), variable)
    assert f"cannot use {variable!r} as a variable to accumulate" in message and says in message
    message = refused(capsys, monkeypatch, "average", str(cube), variable, "--over", "time")
    assert f"cannot use {variable!r} as a variable to average" in message
    message = refused(
        capsys, monkeypatch, "average", str(cube), VAR, "--over", "lat", "--weights", "observed"
    )
    assert "weights must be numbers" in message
    assert files(cube) == before


def test_an_absurd_stride_is_refused(capsys, monkeypatch, cube):
    before = files(cube)
    message = refused(
        capsys, monkeypatch, "accumulate", str(cube), VAR, "--stride", "time=99999999999",
        "--rebuild",
    )  # fmt: skip
    assert "stride 99999999999 for 'time' is larger than any archive's chunk count" in message
    assert files(cube) == before


def test_other_scripts_digits_are_not_numbers(capsys, monkeypatch, cube):
    message = refused(
        capsys, monkeypatch, "average", str(cube), VAR, "--over", "time",
        "--range", "lat=\u0661\u0660/\u0662\u0660",
    )  # fmt: skip
    assert "is not a number" in message


def test_the_demo_chooses_its_map_period_from_the_cube(capsys, monkeypatch, tmp_path):
    assert map_period(DemoConfig(days=1461)) == ("2001-03-01", "2003-02-28")
    assert map_period(DemoConfig(days=425)) == ("2000-05-01", "2000-11-30")
    code, out, err = run(
        capsys, monkeypatch, "demo", "--days", "425", "--resolution", "6", "--dir",
        str(tmp_path),
    )  # fmt: skip
    assert code == 0, err
    assert "time-averaged map, 2000-05-01 to 2000-11-30" in out
    assert "time-averaged map, 2000-05-28 to 2000-10-07 (day-precise ends)" in out
    # The layout it used is named: the default, entries every 2 days and at every cell.
    assert "time at time=month+2, lat+lon at lat=1,lon=1" in " ".join(out.split())
    # The series over a box and whole months: no raw chunk; day-precise ends (both off an
    # entry here): a day at each end, read raw.
    answers = out.split("accumulus: ")[1:]
    assert len(answers) == 3
    for answer in answers[:2]:
        assert " accumulation + 0 raw chunks" in answer, answer
    assert re.search(r"\d+ accumulation \+ [12] raw chunks", answers[2]), answers[2]
    for png in ("timeseries.png", "map.png", "map-days.png"):
        assert (tmp_path / png).stat().st_size > 0
