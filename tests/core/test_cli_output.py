"""What the commands print (issue 37's smaller points): lines not wrapped when piped, a map
answered in words rather than a table of its polar rows, pictures in the format their name
asks for (or refused before the query), help that is not cut off and names the demo's
dimensions, variable chunks said to need zarr's setting, an append's progress in granules,
and a virtual append's reads against the granules' size."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.cli.ingest import _granule_reads, granules_counted
from command_line import files, refused, run
from cubes import VAR, synthetic_dataset, write_cube

COMMANDS = ("accumulate", "average", "inspect", "verify", "demo", "filters", "convert", "append",
            "rechunk", "serve")  # fmt: skip


@pytest.fixture(scope="module")
def cube(tmp_path_factory) -> Path:
    """A cube whose first and last latitude rows hold no value (as polar rows often do)."""
    ds = synthetic_dataset({"time": 70, "lat": 10, "lon": 12}, seed=8)
    ds[VAR][:, [0, -1], :] = np.nan
    path = tmp_path_factory.mktemp("output") / ("a-cube-with-a-rather-long-name-" * 3 + ".zarr")
    write_cube(ds, path, {"time": 10, "lat": 5, "lon": 6})
    accumulus.accumulate(str(path), VAR)
    return path


def cli(*args: str, columns: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    if columns:
        env["COLUMNS"] = columns
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, env=env
    )


def test_piped_lines_are_not_wrapped(cube):
    done = cli("inspect", str(cube))
    assert done.returncode == 0, done.stderr
    first = done.stdout.splitlines()[0]
    assert len(first) > 80 and first.rstrip().endswith("lon=12"), first
    group = next(line for line in done.stdout.splitlines() if "_accumulation_group" in line)
    assert "objects" in group  # the whole description on its line
    # COLUMNS, when set, is still obeyed.
    narrow = cli("inspect", str(cube), columns="60")
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 60


def test_a_map_is_summarised_not_tabled(cube, capsys, monkeypatch):
    code, out, err = run(capsys, monkeypatch, "average", str(cube), VAR, "--over", "time")
    assert code == 0, err
    assert "NaN" not in out and "nan" not in out
    data = accumulus.average(str(cube), VAR, "time")
    values = data.values[~np.isnan(data.values)]
    assert f"{VAR} (mean over time): lat 10 x lon 12 values" in out
    assert f"min {values.min():.6g}, median {np.median(values):.6g}, max {values.max():.6g}" in out
    assert "24 of 120 missing" in out and "--csv or --json" in out
    # A series is still a table, a single value a line.
    code, out, _ = run(capsys, monkeypatch, "average", str(cube), VAR, "--over", "lat,lon")
    assert "2001-01-01" in out


def test_a_picture_is_written_in_the_format_its_name_asks_for(cube, tmp_path, capsys, monkeypatch):
    magic = {
        "map.jpg": b"\xff\xd8\xff",
        "map.png": b"\x89PNG",
        "map.svg": b"<?xml",
        "map": b"\x89PNG",
    }
    for name, start in magic.items():
        args = ["average", str(cube), VAR, "--over", "time", "--png", str(tmp_path / name)]
        assert run(capsys, monkeypatch, *args)[0] == 0
        assert (tmp_path / name).read_bytes().startswith(start), name
    # A format matplotlib does not write is refused before the store is even opened.
    before = files(tmp_path)
    message = refused(capsys, monkeypatch, "average", str(tmp_path / "none.zarr"), VAR,
                      "--over", "time", "--png", str(tmp_path / "map.gif"))  # fmt: skip
    assert "map.gif" in message and ".jpg" in message
    assert files(tmp_path) == before


def test_help_is_not_cut_off_and_names_the_demos_dimensions():
    for command in COMMANDS:
        done = cli(command, "--help", columns="80")
        assert done.returncode == 0, done.stderr
        # rich cuts a word longer than its column with an ellipsis at the column's edge.
        assert not any(line.rstrip().endswith("… │") for line in done.stdout.splitlines()), (
            command,
            done.stdout,
        )
        assert "latitude,longitude" not in done.stdout.replace("\n", " "), command
    text = " ".join(cli("accumulate", "--help", columns="200").stdout.split())
    assert "E.g. --at time=month, --at lat=1,lon=1 (repeatable)." in text


def test_variable_chunks_say_how_xarray_reads_them(cube, tmp_path, capsys, monkeypatch):
    monthly = tmp_path / "monthly.zarr"
    code, out, err = run(
        capsys, monkeypatch, "rechunk", str(cube), str(monthly), "--chunks", "time=month"
    )
    assert code == 0, err
    assert "zarr.config.set({'array.rectilinear_chunks': True})" in out
    assert "ZARR_ARRAY__RECTILINEAR_CHUNKS=True" in out
    # What it says is so: xarray alone refuses, and reads it with the setting on.
    with pytest.raises(Exception, match="rectilinear"):
        xr.open_zarr(monthly)
    with zarr.config.set({"array.rectilinear_chunks": True}):
        ds = xr.open_zarr(monthly)
        assert ds[VAR].chunks[0] == (31, 28, 11)
        got = ds[VAR].accumulus.mean("lat,lon", time=slice("2001-01-03", "2001-02-05"))
    expected = accumulus.average(str(cube), VAR, "lat,lon", {"time": ("2001-01-03", "2001-02-05")})
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)
    # A regular rechunk says nothing of it.
    code, out, _ = run(
        capsys, monkeypatch, "rechunk", str(cube), str(tmp_path / "r.zarr"), "--chunks", "time=20"
    )
    assert code == 0 and "rectilinear" not in out


def test_an_append_counts_granules(tmp_path):
    ds = synthetic_dataset({"time": 30, "lat": 4, "lon": 5})
    granules = []
    for i in range(3):
        granules.append(str(tmp_path / f"g{i}.nc"))
        ds.isel(time=slice(10 * i, 10 * i + 10)).to_netcdf(granules[-1])
    done = cli("append", str(tmp_path / "cube.zarr"), *granules, "--dim", "time")
    assert done.returncode == 0, done.stderr
    assert "3/3 checked, 3/3 written or skipped" in done.stderr
    assert "6/6" not in done.stderr
    assert granules_counted(2, 6) == "2/3 granules checked"
    assert granules_counted(4, 6) == "3/3 checked, 1/3 written or skipped"


def test_a_virtual_append_says_its_reads_against_the_granules_size():
    small = _granule_reads(57 * 1024, 41 * 1024)
    assert "%" not in small and "1.4x their 41.0 KiB" in small and "more than once" in small
    assert _granule_reads(148 * 1024, 2400 * 1024) == "read 148.0 KiB of their 2.3 MiB (6.2%)"
