"""Granules with their variables in groups: found, appended with their nested groups and
inherited coordinates, and queried from the group they are in."""

from __future__ import annotations

import datetime as dt
import shutil
from pathlib import Path

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
from fastapi.testclient import TestClient
from typer.testing import CliRunner

import accumulus
from accumulus.cli import app
from accumulus.errors import AccumulusError
from accumulus.ingest.convert import convert
from accumulus.service import create_app
from accumulus.stores import keys
from accumulus.stores.group import group_view
from accumulus.stores.opening import open_store
from ingest.helpers import cli
from ingest.test_s3 import objects

from .layouts import ImergGrid, imerg_series


@pytest.fixture(scope="module")
def imerg_cube(tmp_path_factory, imerg_hhr) -> str:
    """The half-hourly granules appended without naming a group: ``Grid`` is found."""
    store = str(tmp_path_factory.mktemp("imerg-cube") / "imerg.zarr")
    result = accumulus.append(store, imerg_hhr, chunks={"time": 4})
    assert result.appended and result.created
    accumulus.accumulate(store, "precipitation")
    accumulus.accumulate(store, "IRprecipitation")
    return store


def granule_tree(files: list[Path], group: str) -> xr.Dataset:
    """xarray's reading of the granules' ``group``, with the coordinates that ``Grid``
    defines for its dimensions (as xarray's DataTree inherits them)."""
    data = xr.open_mfdataset(files, group=group, combine="nested", concat_dim="time")
    grid = xr.open_mfdataset(files, group="Grid", combine="nested", concat_dim="time")
    return data.assign_coords(time=grid.time, lon=grid.lon, lat=grid.lat)


def area_mean(data: xr.DataArray, over: tuple[str, ...]) -> xr.DataArray:
    return data.astype("f8").weighted(np.cos(np.deg2rad(data["lat"].astype("f8")))).mean(over)


def test_the_cube_keeps_the_granules_groups(tmp_path, imerg_hhr):
    store = str(tmp_path / "tree.zarr")
    accumulus.append(store, imerg_hhr[:3])
    tree = xr.open_datatree(store, engine="zarr")
    assert set(tree.groups) == {"/", "/Grid", "/Grid/Intermediate"}
    grid = tree["Grid"]
    assert "precipitation" in grid.data_vars and "IRprecipitation" in tree["Grid/Intermediate"]
    # No copies of Grid's coordinates in the nested group: it inherits them.
    assert "time" not in tree["Grid/Intermediate"].to_dataset(inherit=False).variables
    source = xr.open_dataset(imerg_hhr[0], group="Grid")
    assert grid.attrs["GridHeader"] == source.attrs["GridHeader"]
    assert grid["time"].encoding["calendar"] == "julian"
    times = xr.open_mfdataset(imerg_hhr[:3], group="Grid", combine="nested", concat_dim="time")
    np.testing.assert_array_equal(grid["time"].values, times.time.values)  # julian dates
    np.testing.assert_array_equal(grid["time_bnds"].values, times.time_bnds.values)


@pytest.mark.parametrize(
    ("variable", "group"), [("precipitation", "Grid"), ("IRprecipitation", "Grid/Intermediate")]
)
def test_averages_of_each_group_match_xarray(imerg_cube, imerg_hhr, variable, group):
    data = granule_tree(imerg_hhr, group)[variable]
    box = {"lon": (-100.0, 100.0), "lat": (-60.0, 60.0)}
    for over in (("time",), ("lon", "lat")):
        got = accumulus.average(imerg_cube, variable, over)  # the group is found
        np.testing.assert_allclose(got.values, area_mean(data, over).values, rtol=1e-9)
        inside = data.sel(lon=slice(*box["lon"]), lat=slice(*box["lat"]))
        got = accumulus.average(imerg_cube, variable, over, box, group=group)
        np.testing.assert_allclose(got.values, area_mean(inside, over).values, rtol=1e-9)


def test_appends_update_the_accumulations_of_every_group(tmp_path, imerg_hhr):
    store = str(tmp_path / "c.zarr")
    accumulus.append(store, imerg_hhr[:6], chunks={"time": 4})
    accumulus.accumulate(store, "precipitation")
    accumulus.accumulate(store, "IRprecipitation")
    result = accumulus.append(store, imerg_hhr)
    assert set(result.accumulations) == {"precipitation", "Intermediate/IRprecipitation"}
    for variable in ("precipitation", "IRprecipitation"):
        (report,) = accumulus.verify(store, variable)
        assert report.ok and report.checked
        group = accumulus.open(store, variable=variable).accumulation_group(variable)
        assert group.coverage["time"] == 12  # every chunk of 4 complete, none provisional


def test_a_nested_group_appended_alone_brings_its_coordinates(tmp_path, imerg_hhr):
    store = str(tmp_path / "intermediate.zarr")
    accumulus.append(store, imerg_hhr, group="/Grid/Intermediate/", chunks={"time": 4})
    node = xr.open_dataset(store, engine="zarr", group="Grid/Intermediate")
    assert {"time", "lat", "lon", "time_bnds", "IRinfluence"} <= set(node.variables)
    data = granule_tree(imerg_hhr, "Grid/Intermediate")["MWprecipitation"]
    accumulus.accumulate(store, "MWprecipitation", group="Grid/Intermediate")
    got = accumulus.average(store, "MWprecipitation", "lon,lat")
    np.testing.assert_allclose(got.values, area_mean(data, ("lon", "lat")).values, rtol=1e-9)


def two_swaths(path: Path) -> Path:
    """A granule with two sibling groups along time (GPM's NS and MS swaths, say)."""
    with netCDF4.Dataset(path, "w") as nc:
        for name in ("NS", "MS"):
            group = nc.createGroup(name)
            group.createDimension("time", 2)
            group.createDimension("x", 3)
            time = group.createVariable("time", "i4", ("time",))
            time.units = "days since 2000-01-01"
            time[:] = [0, 1]
            group.createVariable("v", "f4", ("time", "x"))[:] = np.ones((2, 3))
    return path


def test_several_candidate_groups_are_listed_in_one_line(tmp_path):
    granule = two_swaths(tmp_path / "swaths.nc")
    store = tmp_path / "cube.zarr"
    with pytest.raises(AccumulusError, match=r"2 groups hold variables along 'time' \(MS, NS\)"):
        accumulus.append(str(store), granule)
    run = cli("append", str(store), str(granule))
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "choose one with --group" in run.stderr
    assert not store.exists()  # nothing written
    assert accumulus.append(str(store), granule, group="NS").extent == (0, 2)


def test_a_group_that_is_not_there_names_those_that_are(tmp_path, imerg_hhr):
    store = tmp_path / "cube.zarr"
    run = cli("append", str(store), str(imerg_hhr[0]), "--group", "Grd")
    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "no group 'Grd'; its groups are /, Grid, Grid/Intermediate" in run.stderr
    assert not store.exists()
    accumulus.append(str(store), imerg_hhr[:2])
    listed = r"no group 'Nowhere'; its groups are /, Grid, Grid/Intermediate"
    with pytest.raises(AccumulusError, match=listed):
        accumulus.inspect(str(store), group="Nowhere")
    with pytest.raises(AccumulusError, match=listed):
        accumulus.average(str(store), "precipitation", "time", group="Nowhere")
    with pytest.raises(AccumulusError, match=r"\(group Grid\): no variable 'IRinfluence'"):
        accumulus.accumulate(str(store), "IRinfluence", group="Grid")
    with pytest.raises(AccumulusError, match=r"no group holds a variable 'rain'; its groups are /"):
        accumulus.average(str(store), "rain", "time")
    with pytest.raises(
        AccumulusError,
        match=r"no variable has the dimension 'tme' to append along; dimensions by group: "
        r"Grid: lat, latv, lon, lonv, nv, time; Grid/Intermediate: lat, lon, time",
    ):
        accumulus.append(str(store), imerg_hhr[2], dim="tme")


def test_commands_on_a_cube_with_groups(tmp_path, imerg_hhr):
    store = str(tmp_path / "cube.zarr")
    accumulus.append(store, imerg_hhr[:4])
    with pytest.raises(AccumulusError, match=r"2 groups hold data variables \(Grid, Grid/Int"):
        accumulus.inspect(store)
    runner = CliRunner()
    run = runner.invoke(app, ["inspect", store, "--group", "Grid", "--json"])
    assert run.exit_code == 0 and '"precipitation"' in run.stdout
    assert runner.invoke(app, ["accumulate", store, "IRinfluence"]).exit_code == 0
    run = runner.invoke(app, ["verify", store, "--group", "Grid/Intermediate"])
    assert run.exit_code == 0 and "IRinfluence: OK" in run.stdout
    run = runner.invoke(app, ["average", store, "IRinfluence", "--over", "lon,lat", "--json"])
    assert run.exit_code == 0 and '"IRinfluence"' in run.stdout


def test_serve_a_group(imerg_cube):
    client = TestClient(create_app([imerg_cube], group="Grid"))
    listing = client.get("/api/datasets").json()
    assert "precipitation" in str(listing)
    answer = client.get(
        "/api/datasets/imerg/precipitation/average", params={"over": "lon,lat", "format": "json"}
    )
    assert answer.status_code == 200, answer.text
    want = accumulus.average(imerg_cube, "precipitation", "lon,lat")
    np.testing.assert_allclose(answer.json()["values"], want.values, rtol=1e-12)


def test_convert_one_group_keeps_its_place(tmp_path, imerg_hhr):
    plan = convert(imerg_hhr[0], tmp_path / "one.zarr", group="Grid/Intermediate")
    paths = {array.path for array in plan.arrays}
    assert "Grid/Intermediate/IRprecipitation" in paths and "Grid/time" in paths
    assert "Grid/precipitation" not in paths  # another variable of Grid, not converted
    node = xr.open_dataset(tmp_path / "one.zarr", engine="zarr", group="Grid/Intermediate")
    source = xr.open_dataset(imerg_hhr[0], group="Grid/Intermediate")
    xr.testing.assert_identical(
        node["IRprecipitation"].reset_coords(drop=True),
        source["IRprecipitation"].reset_coords(drop=True),
    )


def gpm_without_scales(directory: Path, day: int) -> Path:
    """A GPM-style grid granule whose dimensions are named only by ``DimensionNames``
    (no dimension scales: netCDF sees phony dimensions)."""
    path = directory / f"gpm-{day}.HDF5"
    rng = np.random.default_rng(day)
    with h5py.File(path, "w") as file:
        grid = file.create_group("Grid")
        for name, values, dims in (
            ("time", np.array([day * 86400], "i4"), "time"),
            ("lon", np.linspace(-150, 150, 6).astype("f4"), "nlon"),
            ("lat", np.linspace(-60, 60, 4).astype("f4"), "nlat"),
        ):
            data = grid.create_dataset(name, data=values)
            data.attrs["DimensionNames"] = np.bytes_(dims)
        grid["time"].attrs["units"] = np.bytes_("seconds since 1980-01-06 00:00:00 UTC")
        grid["lon"].attrs["units"] = np.bytes_("degrees_east")
        grid["lat"].attrs["units"] = np.bytes_("degrees_north")
        precipitation = grid.create_dataset("precipitation", data=rng.random((1, 6, 4), "f4"))
        precipitation.attrs["DimensionNames"] = np.bytes_("time,nlon,nlat")
        precipitation.attrs["coordinates"] = np.bytes_("time lon lat")
    return path


def test_dimensions_named_by_gpm_dimension_names(tmp_path):
    files = [gpm_without_scales(tmp_path, day) for day in range(3)]
    store = str(tmp_path / "cube.zarr")
    accumulus.append(store, files)
    cube = accumulus.open(store, variable="precipitation").cube
    assert cube.variable("precipitation").dims == ("time", "nlon", "nlat")
    got = accumulus.average(store, "precipitation", "time")
    values = np.concatenate([xr.open_dataset(f, group="Grid").precipitation.values for f in files])
    np.testing.assert_allclose(got.values, values.astype("f8").mean(axis=0), rtol=1e-12)


def test_a_granule_missing_a_variable_changes_nothing(tmp_path, imerg_hhr):
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), imerg_hhr[:2])
    before = {p: p.read_bytes() for p in store.rglob("*") if p.is_file()}
    broken = tmp_path / imerg_hhr[2].name
    shutil.copy(imerg_hhr[2], broken)
    with h5py.File(broken, "r+") as file:
        del file["Grid/Intermediate/IRinfluence"]
    with pytest.raises(AccumulusError, match=r"\['Intermediate/IRinfluence'\] missing"):
        accumulus.append(str(store), [imerg_hhr[3], broken])
    after = {p: p.read_bytes() for p in store.rglob("*") if p.is_file() and "lock" not in p.name}
    assert {p: b for p, b in before.items() if "lock" not in p.name} == after


def test_daily_granules_share_the_layout(tmp_path):
    files = imerg_series(tmp_path, dt.datetime(2001, 1, 1), 3, daily=True, grid=ImergGrid.regular())
    store = str(tmp_path / "day.zarr")
    result = accumulus.append(store, files)
    assert result.extent == (0, 3)
    assert "time=26215" in result.chunking.reason  # 10 MiB of half-hourly steps


@pytest.mark.slow
def test_groups_on_s3(endpoint, bucket, imerg_hhr):
    url = f"s3://{bucket}/imerg.zarr"
    options = {"endpoint_url": endpoint}
    accumulus.append(url, imerg_hhr[:3], storage_options=options)
    stored = objects(endpoint, bucket)
    assert "imerg.zarr/Grid/precipitation/.zarray" in stored
    assert "imerg.zarr/Grid/Intermediate/IRprecipitation/0.0.0" in stored
    assert not any("lock" in key for key in stored)  # released
    view = group_view(open_store(url, "r+", storage_options=options), "Grid")
    assert keys.create_exclusive(view, "probe", b"first")  # If-None-Match, in the group
    assert not keys.create_exclusive(view, "probe", b"second")
    assert "imerg.zarr/Grid/probe" in objects(endpoint, bucket)
    got = accumulus.average(url, "IRprecipitation", "time", storage_options=options)
    want = granule_tree(imerg_hhr[:3], "Grid/Intermediate")["IRprecipitation"]
    np.testing.assert_allclose(got.values, want.astype("f8").mean("time").values, rtol=1e-9)


def test_a_nested_group_at_months_is_updated_after_the_root_group(tmp_path, imerg_hhr):
    """While an append commits, the consolidated metadata still holds the root's shorter
    time: the nested group's update reads its inherited times as its own arrays are."""
    store = str(tmp_path / "c.zarr")
    accumulus.append(store, imerg_hhr[:6], chunks={"time": 4})
    for variable in ("precipitation", "IRprecipitation"):
        accumulus.accumulate(store, variable, dims=["time"], at={"time": "month"})
    result = accumulus.append(store, imerg_hhr)
    assert set(result.accumulations) == {"precipitation", "Intermediate/IRprecipitation"}
    (report,) = accumulus.verify(store, "IRprecipitation")
    assert report.ok and report.checked
