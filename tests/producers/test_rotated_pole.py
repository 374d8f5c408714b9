"""A CF ``grid_mapping`` variable as xarray writes it (issue 34 item 4): the iris test file
of rotated-pole precipitation holds ``rotated_pole`` as a scalar char; rewritten by
``xr.open_dataset(f).to_netcdf(g)`` it is ``|S1`` on a dimension ``string1``, which
xarray decodes away. Every ``average`` on such a cube ended in ``KeyError: 'string1'``.

Averages over ``rlat,rlon`` are asked unweighted (``--weights none``): how a curvilinear
grid is weighted by default is another item of the issue."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr

from .commands import answer, assert_close, copy, ok

FILE = "small_rotPole_precipitation_subset.nc"


@pytest.fixture
def rewritten(tmp_path) -> Path:
    original = copy(FILE, tmp_path)
    path = tmp_path / "rewritten.nc"
    with xr.open_dataset(original) as dataset:
        dataset.to_netcdf(path)
    with netCDF4.Dataset(path) as file:  # the layout of the issue
        assert file["rotated_pole"].dimensions == ("string1",)
        assert file["rotated_pole"].dtype == np.dtype("S1")
    return path


def check_answers(capsys, monkeypatch, cube: Path, source: Path, *extra: str) -> None:
    theirs = xr.open_dataset(source)["pr"].astype("f8")
    series, _ = answer(
        capsys, monkeypatch, str(cube), "pr", "--over", "rlat,rlon", "--weights", "none", *extra
    )
    assert_close(series, theirs.mean(["rlat", "rlon"]).values)
    box = theirs.isel(rlat=slice(10, 40), rlon=slice(5, 50))
    lo, hi = float(box.rlat[0]), float(box.rlat[-1])
    west, east = float(box.rlon[0]), float(box.rlon[-1])
    series, _ = answer(
        capsys, monkeypatch, str(cube), "pr", "--over", "rlat,rlon", "--weights", "none",
        "--range", f"rlat={lo}/{hi}", "--range", f"rlon={west}/{east}", *extra,
    )  # fmt: skip
    assert_close(series, box.mean(["rlat", "rlon"]).values)
    time_map, _ = answer(capsys, monkeypatch, str(cube), "pr", "--over", "time", *extra)
    assert_close(time_map, theirs.mean("time").values)


def test_rewritten_by_xarray(rewritten, tmp_path, capsys, monkeypatch):
    cube = tmp_path / "cube.zarr"
    ok(capsys, monkeypatch, "append", str(cube), str(rewritten), "--chunks", "time=1")
    ok(capsys, monkeypatch, "accumulate", str(cube), "pr", "--weights", "none")
    check_answers(capsys, monkeypatch, cube, rewritten)
    series = tmp_path / "series.png"
    picture = tmp_path / "map.png"
    ok(capsys, monkeypatch, "average", str(cube), "pr", "--over", "rlat,rlon", "--png", str(series))
    ok(capsys, monkeypatch, "average", str(cube), "pr", "--over", "time", "--png", str(picture))
    assert series.read_bytes()[:4] == picture.read_bytes()[:4] == b"\x89PNG"
    out = ok(capsys, monkeypatch, "verify", str(cube), "--sources", str(rewritten))
    assert "OK (8 variables, 4 steps" in out
    assert "OK" in ok(capsys, monkeypatch, "verify", str(cube))


def test_rewritten_by_xarray_virtual(rewritten, tmp_path, capsys, monkeypatch):
    """Referenced in place; the file also holds ``time_bnds`` on a dimension of its own name,
    which netCDF-4 stores as ``_nc4_non_coord_time_bnds``: the cube names it ``time_bnds``."""
    refs = tmp_path / "refs.json"
    side = tmp_path / "side.zarr"
    ok(capsys, monkeypatch, "append", str(refs), str(rewritten), "--virtual")
    ok(capsys, monkeypatch, "accumulate", str(refs), "pr", "--weights", "none", "--into", str(side))
    check_answers(capsys, monkeypatch, refs, rewritten, "--accumulations", str(side))
    out = ok(capsys, monkeypatch, "verify", str(refs), "--sources", str(rewritten))
    assert out.strip() == f"{rewritten}: OK (8 variables, 4 steps as xarray decodes the file)"


def test_the_original_file(tmp_path, capsys, monkeypatch):
    original = copy(FILE, tmp_path)
    cube = tmp_path / "cube.zarr"
    ok(capsys, monkeypatch, "append", str(cube), str(original), "--chunks", "time=2")
    ok(capsys, monkeypatch, "accumulate", str(cube), "pr", "--weights", "none")
    check_answers(capsys, monkeypatch, cube, original)
