"""IMERG half-hourly granules (issue 34 items 6 and 10): variables in the group ``/Grid``,
``(time, lon, lat)``, a julian calendar. ``append --virtual`` did not look in the group
(``no dimension 'time' to append along; its dimensions are []``) and ignored ``--group``;
``verify --sources`` on a grouped cube printed xarray's consolidated-metadata warning.

Two granules: the vendored one and the next half hour's, made from it by moving its time and
time bounds 1800 s on (h5py, in place: the same layout, chunks and compression)."""

from __future__ import annotations

import json
from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr

from ingest.helpers import cli

from .commands import answer, assert_close, copy, cos_weighted_mean, ok

FILE = "GPM_3IMERGHH_bounds.nc4"


@pytest.fixture
def granules(tmp_path) -> list[Path]:
    first = copy(FILE, tmp_path, "3B-HHR.20200101-S120000.nc4")
    second = copy(FILE, tmp_path, "3B-HHR.20200101-S123000.nc4")
    with h5py.File(second, "r+") as file:
        for name in ("Grid/time", "Grid/time_bnds"):
            file[name][...] = file[name][...] + 1800
    return [first, second]


def grid(granules: list[Path]) -> xr.Dataset:
    parts = [xr.open_dataset(g, group="Grid") for g in granules]
    return xr.concat(parts, dim="time", data_vars="minimal", coords="minimal", compat="override")


def check_answers(capsys, monkeypatch, cube: Path, granules: list[Path], *extra: str) -> None:
    theirs = grid(granules)["precipitationCal"]
    series, _ = answer(
        capsys, monkeypatch, str(cube), "precipitationCal", "--over", "lat,lon", *extra
    )
    assert_close(series, cos_weighted_mean(theirs, ["lat", "lon"], "lat"))
    time_map, document = answer(
        capsys, monkeypatch, str(cube), "precipitationCal", "--over", "time", *extra
    )
    assert document["dims"] == ["lon", "lat"]
    assert_close(time_map, theirs.astype("f8").mean("time").values)
    subtitle = document["titles"]["subtitle"]
    assert "30.05°N–44.95°N, 29.95°W–15.05°W" in subtitle, subtitle


@pytest.mark.parametrize("group", [[], ["--group", "Grid"]], ids=["found", "named"])
def test_virtual_append_finds_the_group(granules, group, tmp_path, capsys, monkeypatch):
    refs = tmp_path / "imerg.json"
    side = tmp_path / "side.zarr"
    out = ok(capsys, monkeypatch, "append", str(refs), str(granules[0]), "--virtual", *group)
    assert "time 0 → 1 steps" in out
    out = ok(capsys, monkeypatch, "append", str(refs), str(granules[1]), "--virtual", *group)
    assert "time 1 → 2 steps" in out
    ok(capsys, monkeypatch, "accumulate", str(refs), "precipitationCal", "--into", str(side))
    check_answers(capsys, monkeypatch, refs, granules, "--accumulations", str(side))
    keys = json.loads(refs.read_text())["refs"]
    assert "Grid/precipitationCal/zarr.json" in keys  # the group kept at its place
    assert "precipitationCal/zarr.json" not in keys


def test_virtual_append_into_another_group_is_refused(granules, tmp_path, capsys, monkeypatch):
    from command_line import refused

    refs = tmp_path / "imerg.json"
    ok(capsys, monkeypatch, "append", str(refs), str(granules[0]), "--virtual")
    message = refused(
        capsys, monkeypatch, "append", str(refs), str(granules[1]), "--virtual", "--group", "/"
    )
    assert "references the granules' group 'Grid'" in message
    message = refused(
        capsys, monkeypatch, "append", str(tmp_path / "b.json"), str(granules[0]), "--virtual",
        "--group", "Nowhere",
    )  # fmt: skip
    assert "no group 'Nowhere'" in message and not (tmp_path / "b.json").exists()


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
@pytest.mark.parametrize("virtual", [False, True], ids=["copied", "virtual"])
def test_verify_sources_of_a_grouped_cube_prints_no_warning(granules, virtual, tmp_path):
    """Through the real console entry point, where Python prints warnings to stderr."""
    cube = tmp_path / ("imerg.json" if virtual else "imerg.zarr")
    made = cli("append", str(cube), *map(str, granules), *(["--virtual"] if virtual else []))
    assert made.returncode == 0, made.stderr
    result = cli("verify", str(cube), "--sources", *map(str, granules))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # no "Failed to open Zarr store with consolidated metadata"
    lines = result.stdout.strip().splitlines()
    assert lines == [f"{g}: OK (7 variables, 1 steps as xarray decodes the file)" for g in granules]


def test_copied_cube(granules, tmp_path, capsys, monkeypatch):
    cube = tmp_path / "imerg.zarr"
    ok(capsys, monkeypatch, "append", str(cube), *map(str, granules), "--chunks", "time=1")
    ok(capsys, monkeypatch, "accumulate", str(cube), "precipitationCal")
    check_answers(capsys, monkeypatch, cube, granules)
    times = xr.open_zarr(cube, group="Grid", consolidated=False)["time"].values
    assert [t.isoformat() for t in times] == ["2020-01-01T12:00:00", "2020-01-01T12:30:00"]
    assert np.all(grid(granules)["time"].values == times)
