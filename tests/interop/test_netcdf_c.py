"""netcdf-c (through netCDF4) opens every store accumulus writes, with netcdf-c's own NCZarr
metadata: accumulate, append, convert, rechunk and the demo's cube. Values read by netcdf-c
equal what zarr-python reads; ``_ARRAY_DIMENSIONS`` and the ZEP 5 attributes stay as they
were and schema-valid; xarray and tensorstore still read the stores."""

from __future__ import annotations

import posixpath
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import tensorstore
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.model import spec
from accumulus.demo import DemoConfig, write_demo_cube
from accumulus.ingest.append import append
from accumulus.ingest.convert import convert
from accumulus.rechunk import rechunk
from accumulus.stores.arrays import consolidate
from accumulus.stores.nczarr_metadata import ArrayAxes, plan_dimensions, write_nczarr_metadata
from cubes import synthetic_dataset, write_cube
from filters.samples import write_granule
from ingest.helpers import truth, write_granules


def _zarr_arrays(path: Path) -> dict[str, np.ndarray]:
    root = zarr.open_group(path, mode="r", use_consolidated=False)
    arrays = {}
    for name, node in root.members(max_depth=None):
        if isinstance(node, zarr.Array) and node.ndim > 0:  # netcdf-c lists no 0-d arrays
            values = np.asarray(node[...])
            # netcdf-c returns text (UTF-8 "|S" arrays with _Encoding) as str.
            arrays[name] = np.char.decode(values, "utf-8") if values.dtype.kind == "S" else values
    return arrays


def _netcdf_arrays(path: Path, mode: str) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    with netCDF4.Dataset(f"file://{path}#mode={mode},file") as ds:
        ds.set_auto_maskandscale(False)  # the stored values, as zarr-python returns them

        def walk(group: netCDF4.Group, prefix: str) -> None:
            for name, variable in group.variables.items():
                out[posixpath.join(prefix, name)] = np.asarray(variable[...])
            for name, child in group.groups.items():
                walk(child, posixpath.join(prefix, name))

        walk(ds, "")
    return out


def _array_dimensions(path: Path) -> dict[str, list[str]]:
    root = zarr.open_group(path, mode="r", use_consolidated=False)
    return {
        name: list(node.attrs.get("_ARRAY_DIMENSIONS", []))
        for name, node in root.members(max_depth=None)
        if isinstance(node, zarr.Array)
    }


def _reused_name_lengths(path: Path) -> bool:
    """Whether some group uses one dimension name with two lengths (what netcdf-c's pure
    Zarr mode cannot represent)."""
    root = zarr.open_group(path, mode="r", use_consolidated=False)
    seen: dict[tuple[str, str], set[int]] = {}
    for name, node in root.members(max_depth=None):
        if isinstance(node, zarr.Array):
            for dim, size in zip(node.attrs["_ARRAY_DIMENSIONS"], node.shape, strict=True):
                seen.setdefault((posixpath.dirname(name), dim), set()).add(size)
    return any(len(sizes) > 1 for sizes in seen.values())


def check_store(path: Path) -> None:
    """What every store accumulus writes must satisfy."""
    expected = _zarr_arrays(path)
    by_nczarr = _netcdf_arrays(path, "nczarr")
    assert sorted(by_nczarr) == sorted(expected)
    for name, values in expected.items():
        np.testing.assert_array_equal(by_nczarr[name], values, err_msg=name)
    if _reused_name_lengths(path):
        # netcdf-c's pure Zarr mode reads _ARRAY_DIMENSIONS only, one length per name and
        # group; ZEP 5's layout needs two. Its documented way around: anonymous dimensions.
        with pytest.raises(OSError, match="Invalid dimension size"):
            _netcdf_arrays(path, "zarr")
        by_zarr_mode = _netcdf_arrays(path, "zarr,noxarray")
    else:
        by_zarr_mode = _netcdf_arrays(path, "zarr")
    for name, values in expected.items():
        np.testing.assert_array_equal(by_zarr_mode[name], values, err_msg=name)
    root = zarr.open_group(path, mode="r")
    for name, node in root.members(max_depth=None):
        if name.endswith(spec.GROUP_SUFFIX):
            spec.validate_group_attributes(dict(node.attrs), name)
            for array_name, array in node.arrays():
                if spec.EXTENSION_KEY in array.attrs:
                    continue  # positioned (--at): described by the group's attribute, not ZEP 5
                spec.validate_array_attributes(dict(array.attrs), f"{name}/{array_name}")
    # xarray still reads it, and hides netcdf-c's bookkeeping attributes.
    ds = xr.open_zarr(path)
    assert not [key for v in ds.variables.values() for key in v.attrs if key.startswith("_nc")]


def _accumulated_cube(path: Path) -> None:
    ds = synthetic_dataset({"time": 40, "lat": 12, "lon": 16})
    write_cube(ds, path, {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(str(path), "precip", strides={"time": 2})


def test_accumulate(tmp_path):
    path = tmp_path / "cube.zarr"
    _accumulated_cube(path)
    dims = _array_dimensions(path)
    check_store(path)
    # The accumulation group says which "time" is which: 2 entries (stride 2) or all 40.
    group = zarr.open_group(path / "precip_accumulation_group", mode="r")
    assert group.attrs["_nczarr_group"]["dimensions"] == {"lat_2": 2, "lon_2": 2, "time_2": 2}
    assert group["acc_time"].attrs["_nczarr_array"]["dimension_references"] == [
        "/precip_accumulation_group/time_2", "/lat", "/lon",
    ]  # fmt: skip
    for name, names in dims.items():  # ZEP 5's names, untouched
        assert names == (["time", "lat", "lon"] if "/" in name or name == "precip" else [name])
    # tensorstore reads the raw variable and its coordinates as zarr-python does. Its zarr
    # driver supports no v2 filters, so not the accumulation arrays (their checksum filter).
    for name in ("precip", "time", "lat"):
        spec_json = {"driver": "zarr", "kvstore": {"driver": "file", "path": str(path / name)}}
        values = tensorstore.open(spec_json).result().read().result()
        np.testing.assert_array_equal(values, zarr.open_array(path / name, mode="r")[...])
    acc = {
        "driver": "zarr",
        "kvstore": {"driver": "file", "path": str(path / "precip_accumulation_group/acc_time")},
    }
    with pytest.raises(ValueError, match="filters are not supported"):
        tensorstore.open(acc).result()


def test_append_then_accumulate_then_append(tmp_path):
    t = truth(12)
    granules = write_granules(tmp_path / "granules", t, per_granule=3)
    path = tmp_path / "cube.zarr"
    append(path, granules[:2], chunks={"time": 3})
    accumulus.accumulate(str(path), "precip", minimal=True)  # ZEP 5's arrays: time_4
    check_store(path)
    append(path, granules[2:])
    check_store(path)
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as ds:
        assert len(ds.dimensions["time"]) == 12
        assert len(ds["precip_accumulation_group"].dimensions["time_4"]) == 4


def test_convert(tmp_path):
    source = tmp_path / "granule.nc"
    write_granule(source)
    path = tmp_path / "cube.zarr"
    convert(source, path)
    check_store(path)


def test_rechunk(tmp_path):
    source = tmp_path / "cube.zarr"
    _accumulated_cube(source)
    path = tmp_path / "rechunked.zarr"
    rechunk(str(source), str(path), "time=20")
    check_store(path)
    assert _array_dimensions(path) == _array_dimensions(source)


def test_demo_cube(tmp_path):
    path = tmp_path / "demo.zarr"
    write_demo_cube(path, DemoConfig(days=60, resolution=30, chunks=(30, 3, 6)))
    accumulus.accumulate(str(path), "precip")
    check_store(path)


def _attributes(path: Path) -> dict[str, dict]:
    root = zarr.open_group(path, mode="r", use_consolidated=False)
    nodes = {"": root} | dict(root.members(max_depth=None))
    return {name: dict(node.attrs) for name, node in nodes.items()}


def test_nczarr_metadata_only_adds_its_own_attributes(tmp_path):
    path = tmp_path / "cube.zarr"
    write_cube(
        synthetic_dataset({"time": 8, "lat": 4, "lon": 6}), path, {"time": 4, "lat": 4, "lon": 6}
    )
    before = _attributes(path)
    write_nczarr_metadata(zarr.storage.LocalStore(path))
    after = _attributes(path)
    added = {
        name: {k: v for k, v in attrs.items() if k not in before[name]}
        for name, attrs in after.items()
    }
    assert {name: {k: after[name][k] for k in before[name]} for name in after} == before
    assert {key for attrs in added.values() for key in attrs} == {
        "_nczarr_superblock", "_nczarr_group", "_nczarr_array",
    }  # fmt: skip
    # A second pass finds everything in step and writes nothing.
    mtimes = {p: p.stat().st_mtime_ns for p in path.rglob(".zattrs")}
    write_nczarr_metadata(zarr.storage.LocalStore(path))
    assert {p: p.stat().st_mtime_ns for p in path.rglob(".zattrs")} == mtimes


def test_a_netcdf_c_store_keeps_its_unlimited_dimension(tmp_path):
    path = tmp_path / "nczarr.zarr"
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 3)
        ds.createVariable("v", "f4", ("time", "x"))[0:2, :] = np.ones((2, 3))
    consolidate(zarr.storage.LocalStore(path))
    root = zarr.open_group(path, mode="r")
    assert root.attrs["_nczarr_group"]["dimensions"]["time"] == {"size": 2, "unlimited": 1}
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as ds:
        assert ds.dimensions["time"].isunlimited() and ds["v"].shape == (2, 3)


def test_dimension_names_never_shadow_and_stay_unique():
    arrays = [
        ArrayAxes("precip", (40, 12), ("time", "lat")),
        ArrayAxes("time", (40,), ("time",)),
        ArrayAxes("g/acc_lat", (40, 2), ("time", "lat")),
        ArrayAxes("g/acc_time", (4, 12), ("time", "lat")),
        ArrayAxes("g/other", (7,), ("level",)),
        ArrayAxes("g/h/deep", (4, 3), ("time", "lat")),
        ArrayAxes("g/h/taken", (5,), ("time_4",)),
        ArrayAxes("flat", (6, 2), None),
    ]
    plan = plan_dimensions(["", "g", "g/h"], arrays)
    assert plan.groups == {
        "": {"time": 40, "lat": 12, "_Anonymous_Dim_6": 6, "_Anonymous_Dim_2": 2},
        "g": {"lat_2": 2, "time_4": 4, "level": 7},
        "g/h": {"lat_3": 3, "time_4_5": 5},
    }
    assert plan.references["g/acc_lat"] == ["/time", "/g/lat_2"]
    assert plan.references["g/acc_time"] == ["/g/time_4", "/lat"]
    assert plan.references["g/h/deep"] == ["/g/time_4", "/g/h/lat_3"]
    assert plan.references["g/h/taken"] == ["/g/h/time_4_5"]
    assert plan.references["flat"] == ["/_Anonymous_Dim_6", "/_Anonymous_Dim_2"]


def test_positioned_accumulations(tmp_path):
    """Accumulations at positions of the user's choosing (``--at``: maps at every day, series
    at every cell) are read by netcdf-c too: their checksum is Fletcher-32, as ZEP 5's."""
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset({"time": 40, "lat": 12, "lon": 16})
    write_cube(ds, path, {"time": 10, "lat": 6, "lon": 8})
    at = {"time": 1, "lat": 1, "lon": 1}
    accumulus.accumulate(str(path), "precip", ["time", "lat,lon"], weights="area", at=at)
    group = zarr.open_group(path / "precip_accumulation_group" / "accumulus_positions", mode="r")
    assert [n for n in group.array_keys() if "_at_" in n]
    check_store(path)


def test_series_chunks_in_small_blosc_blocks(tmp_path):
    """Series chunks of two Blosc blocks or more (here the sums, 730 x 12 float64; their
    counts are uint8, one block) are compressed as 32-byte elements, in blocks of 16 KiB
    (``placement.blosc_elements``): netcdf-c's Blosc filter reads them as zarr-python
    does."""
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset({"time": 730, "lat": 12, "lon": 4})
    write_cube(ds, path, {"time": 73, "lat": 6, "lon": 4})
    at = {"lat": 1, "lon": 1}
    accumulus.accumulate(str(path), "precip", ["lat,lon"], weights="area", at=at)
    series = path / "precip_accumulation_group" / "accumulus_positions"
    frames = [p.read_bytes() for p in series.glob("acc_uw_lat_lon_at_1_1/0.*")]
    assert frames and all(frame[3] == 32 for frame in frames)  # Blosc's element size
    check_store(path)
