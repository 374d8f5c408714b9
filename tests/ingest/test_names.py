"""Hostile dimension and variable names (issue 35 item 5): ``..``, ``a/b``, 5,000
characters, control characters, a name of Zarr's own documents. They made cubes that
``accumulate`` broke on (tracebacks, partial groups; with ``a/b`` every later ``average``
and ``verify`` failed). Refused in one line at ``append`` (Zarr stores, HDF5 files, xarray
Datasets, ``--virtual``) and at ``accumulate`` of a cube another tool wrote, with nothing
written."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from command_line import files, refused

HOSTILE = {
    "dot-dot": ("..", "it starts with a dot"),
    "slash": ("a/b", "a path separator in it would make a group of it"),
    "long": ("x" * 5000, "it is 5000 bytes long, and a name may have 128"),
    "control": ("a\x07\nb", "it holds control characters"),
    "zarr document": (".zattrs", "it starts with a dot"),
    "zarr v3 document": ("zarr.json", "it is the name of a Zarr metadata document"),
}


def zarr_granule(path: Path, dim: str = "x", variable: str = "v") -> Path:
    """A granule as a Zarr store: only its metadata documents name the dimension."""
    root = zarr.open_group(path, mode="w", zarr_format=2)
    attrs = {"_ARRAY_DIMENSIONS": ["time"], "units": "days since 2000-01-01"}
    root.create_array("time", shape=(3,), dtype="f8", attributes=attrs)[:] = np.arange(3.0)
    values = root.create_array(
        variable, shape=(3, 4), dtype="f4", attributes={"_ARRAY_DIMENSIONS": ["time", dim]}
    )
    values[:] = 1.0
    zarr.consolidate_metadata(path)
    return path


def hdf5_granule(path: Path, variable: str) -> Path:
    """A NetCDF-4 file whose dimension scale (a coordinate variable) has the name."""
    with h5py.File(path, "w") as file:
        time = file.create_dataset("time", data=np.arange(3.0))
        time.attrs["units"] = "days since 2000-01-01"
        time.make_scale("time")
        scale = file.create_dataset(variable, data=np.arange(4.0))
        scale.make_scale(variable)
        values = file.create_dataset("v", data=np.ones((3, 4), "f4"), chunks=(1, 4))
        values.dims[0].attach_scale(time)
        values.dims[1].attach_scale(scale)
    return path


@pytest.mark.parametrize("case", list(HOSTILE), ids=list(HOSTILE))
def test_hostile_dimension_names_are_refused(case, tmp_path, capsys, monkeypatch):
    name, why = HOSTILE[case]
    granule = zarr_granule(tmp_path / "g.zarr", dim=name)
    before = files(tmp_path)
    message = refused(capsys, monkeypatch, "append", str(tmp_path / "cube.zarr"), str(granule))
    assert f"error: granule {granule}: dimension " in message and why in message
    assert "refused before anything is written" in message
    assert files(tmp_path) == before
    with pytest.raises(accumulus.AccumulusError, match="cannot be a name in a cube"):
        data = xr.Dataset({"v": (("time", name), np.ones((3, 4)))}, coords={"time": [0, 1, 2]})
        accumulus.append(str(tmp_path / "cube.zarr"), data)
    assert files(tmp_path) == before


@pytest.mark.parametrize("name", ["v\x07", ".accumulus"])
def test_hostile_variable_names_are_refused(name, tmp_path, capsys, monkeypatch):
    granule = zarr_granule(tmp_path / "g.zarr", variable=name)
    message = refused(capsys, monkeypatch, "append", str(tmp_path / "cube.zarr"), str(granule))
    assert f"variable {name!r} cannot be a name in a cube" in message
    assert not (tmp_path / "cube.zarr").exists()


@pytest.mark.parametrize("name", ["..", "a\x07b"])
def test_hostile_names_in_hdf5_files(name, tmp_path, capsys, monkeypatch):
    granule = hdf5_granule(tmp_path / "g.nc", name)
    before = files(tmp_path)
    for destination, options in (("cube.zarr", []), ("refs.json", ["--virtual"])):
        message = refused(
            capsys, monkeypatch, "append", str(tmp_path / destination), str(granule), *options
        )
        assert f"{name!r} cannot be a name in a cube" in message
    assert files(tmp_path) == before


def test_a_cube_another_tool_wrote_is_not_accumulated(tmp_path, capsys, monkeypatch):
    """xarray writes a dimension "a/b" without a word; accumulating it would make an array
    "acc_a/b" in a group "acc_a": refused, no group left, queries still answer."""
    cube = tmp_path / "cube.zarr"
    data = xr.Dataset(
        {"v": (("time", "a/b"), np.arange(12.0).reshape(3, 4))}, coords={"time": [0.0, 1.0, 2.0]}
    )
    data.to_zarr(cube, zarr_format=2, consolidated=True)
    message = refused(capsys, monkeypatch, "accumulate", str(cube), "v", "--dims", "time")
    assert message.startswith("error: cannot accumulate 'v': dimension 'a/b' cannot be a name")
    assert not (cube / "v_accumulation_group").exists()
    answer = accumulus.query(str(cube), "v", "time")
    np.testing.assert_allclose(answer.data.values, data["v"].mean("time").values, rtol=1e-12)


def test_names_that_make_too_long_array_names(tmp_path, capsys, monkeypatch):
    """Each name fits, but the accumulation array of three of them does not fit a path."""
    cube = tmp_path / "cube.zarr"
    dims = ("time", "y" * 126, "z" * 126)
    data = xr.Dataset({"v": (dims, np.ones((3, 2, 2)))}, coords={"time": [0.0, 1.0, 2.0]})
    data.to_zarr(cube, zarr_format=2, consolidated=True)
    message = refused(capsys, monkeypatch, "accumulate", str(cube), "v", "--dims", ",".join(dims))
    assert "a path component holds 255: refused before anything is written" in message
    assert not (cube / "v_accumulation_group").exists()
