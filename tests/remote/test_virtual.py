"""Virtual cubes: kerchunk reference sets over NetCDF4/HDF5 granules, checked against
``xarray.open_mfdataset`` on the same files, read by xarray through fsspec's reference
filesystem exactly as the docs tell users to."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus import AccumulusError
from servers import http_server

from .granules import (
    FILL,
    LAT,
    LON,
    NLAT,
    NLON,
    VAR,
    h5py_granule,
    month_values,
    monthly_granules,
    netcdf4_granule,
    same_as_granules,
)


def open_references(path: Path, **options) -> xr.Dataset:
    """The reference set as the documentation tells users to open it."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        return xr.open_dataset(
            "reference://",
            engine="zarr",
            backend_kwargs={"consolidated": False, "storage_options": {"fo": str(path), **options}},
        ).load()


@pytest.mark.parametrize("writer", ["netcdf4", "h5py"])
def test_months_of_unequal_length_open_like_open_mfdataset(tmp_path, writer):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4], writer=writer)
    out = tmp_path / "virt.json"
    result = accumulus.append_virtual(out, granules)
    assert result.created and result.extent == (0, 31 + 28 + 31 + 30)
    assert result.zarr_format == 3
    assert 0 < result.bytes_read < result.granule_bytes
    same_as_granules(open_references(out), granules)
    metadata = json.loads(json.loads(out.read_text())["refs"][f"{VAR}/zarr.json"])
    assert metadata["chunk_grid"]["configuration"]["chunk_shapes"][0] == [31, 28, 31, 30]


def test_no_data_is_copied_chunks_are_byte_ranges(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    refs = json.loads(out.read_text())["refs"]
    chunks = {k: v for k, v in refs.items() if k.startswith(f"{VAR}/c/")}
    assert set(chunks) == {f"{VAR}/c/0/0/0", f"{VAR}/c/1/0/0"}
    for key, (url, offset, length) in chunks.items():
        index = int(key.split("/")[2])
        assert url == str(granules[index].resolve())
        assert offset > 0 and 0 < length < granules[index].stat().st_size
    # Everything else is small and inline: metadata and coordinates.
    inline = sum(len(v) for v in refs.values() if isinstance(v, str))
    assert inline < 20_000


def test_appending_adds_only_the_new_references_and_is_idempotent(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules[:2])
    before = json.loads(out.read_text())["refs"]
    result = accumulus.append_virtual(out, granules[1:])  # one already referenced
    assert result.appended == tuple(str(g) for g in granules[2:])
    assert [why for _, why in result.skipped] == ["already referenced"]
    after = json.loads(out.read_text())["refs"]
    old_chunks = {k: v for k, v in before.items() if isinstance(v, list)}
    assert {k: after[k] for k in old_chunks} == old_chunks
    added = {k for k, v in after.items() if isinstance(v, list)} - set(old_chunks)
    assert added == {f"{VAR}/c/2/0/0", f"{VAR}/c/3/0/0"}
    same_as_granules(open_references(out), granules)
    again = accumulus.append_virtual(out, granules)
    assert again.appended == () and out.read_text() == json.dumps(
        json.loads(out.read_text())
    )  # unchanged and still valid JSON
    assert json.loads(out.read_text())["refs"] == after


def test_granules_in_any_order_and_other_time_units(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    march = netcdf4_granule(folder / "c.nc", 2010, 3, seed=3, units="days since 2010-03-01")
    january = netcdf4_granule(folder / "a.nc", 2010, 1, seed=1)
    february = netcdf4_granule(folder / "b.nc", 2010, 2, seed=2, units="hours since 2000-01-01")
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, [march, january, february])
    virtual = open_references(out)
    with xr.open_mfdataset([january, february, march]) as expected:
        np.testing.assert_array_equal(virtual.time.values, expected.time.values)
        np.testing.assert_array_equal(virtual[VAR].values, expected[VAR].values)


def test_time_chunks_that_tile_a_month_give_a_regular_v2_cube(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3], chunk_time=1)
    out = tmp_path / "virt.json"
    result = accumulus.append_virtual(out, granules, zarr_format=2)
    assert result.zarr_format == 2
    refs = json.loads(out.read_text())["refs"]
    assert json.loads(refs[f"{VAR}/.zarray"])["chunks"] == [1, 18, 36]
    # Plain xarray (no rectilinear setting needed) reads it.
    virtual = xr.open_dataset(
        "reference://",
        engine="zarr",
        backend_kwargs={"consolidated": False, "storage_options": {"fo": str(out)}},
    ).load()
    same_as_granules(virtual, granules)


def test_average_over_a_virtual_cube_equals_xarray(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4, 5])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    with xr.open_mfdataset(granules) as ds:
        weights = np.cos(np.deg2rad(ds.lat.astype("f8")))
        box = ds[VAR].sel(time=slice("2010-02-03", "2010-04-20"), lat=slice(-30, 50))
        expected = box.astype("f8").weighted(weights).mean(["lat", "lon"]).values
        mean_map = ds[VAR].astype("f8").sel(time=slice("2010-01-10", "2010-05-02")).mean("time")
    series = accumulus.average(
        out, VAR, "lat,lon", {"time": ("2010-02-03", "2010-04-20"), "lat": ("-30", "50")}
    )
    np.testing.assert_allclose(series.values, expected, rtol=1e-9)
    mapped = accumulus.average(out, VAR, "time", {"time": ("2010-01-10", "2010-05-02")})
    np.testing.assert_allclose(mapped.values, mean_map.values, rtol=1e-9)


def test_granules_read_over_http(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    out = tmp_path / "virt.json"
    with http_server(tmp_path / "in") as (url, log):
        urls = [f"{url}/{g.name}" for g in granules]
        result = accumulus.append_virtual(out, urls)
        requested = [r for r in log.requests if r[0] == "GET"]
        assert requested and all(r[2] for r in requested)  # only range requests
        assert result.bytes_read < sum(g.stat().st_size for g in granules)
        refs = json.loads(out.read_text())["refs"]
        assert refs[f"{VAR}/c/0/0/0"][0] == urls[0]
        # A host is read only when the reader allows it (the set lives on the local disk).
        with pytest.raises(AccumulusError, match=f"reference {VAR}/c/0/0/0 points outside") as no:
            accumulus.average(out, VAR, "time")
        assert "127.0.0.1" not in str(no.value)
        mapped = accumulus.average(out, VAR, "time", allow_references=[f"{url}/"])
    with xr.open_mfdataset(granules) as ds:
        expected = ds[VAR].astype("f8").mean("time").values
    np.testing.assert_allclose(mapped.values, expected, rtol=1e-9)


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the granule, nothing written


def unchanged(path: Path) -> str | None:
    return path.read_text() if path.exists() else None


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chunk_lat": 6}, r"has chunks \(off 'time'\) of \[6, 36\], the cube's \[18, 36\]"),
        ({"dtype": "f8"}, "is stored as"),
        ({"zlib": False}, "is compressed with"),
        ({"extra_variable": True}, "that the cube does not have"),
        ({"fill_value": -1.0}, "marks missing values with"),
    ],
)
def test_a_granule_that_differs_is_refused(tmp_path, options, message):
    granules = monthly_granules(tmp_path / "in", [1, 2])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    before = unchanged(out)
    odd = netcdf4_granule(tmp_path / "odd.nc", 2010, 3, **options)
    with pytest.raises(AccumulusError, match=message) as error:
        accumulus.append_virtual(out, [odd])
    assert "odd.nc" in str(error.value)
    assert unchanged(out) == before


def test_overlapping_and_duplicate_times_are_refused(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    before = unchanged(out)
    copy = netcdf4_granule(tmp_path / "copy.nc", 2010, 2, seed=9)
    with pytest.raises(AccumulusError, match="overlaps the cube"):
        accumulus.append_virtual(out, [copy])
    assert unchanged(out) == before
    skipped = accumulus.append_virtual(out, [copy], skip_existing=True)
    assert skipped.appended == () and "already covered" in skipped.skipped[0][1]
    twin = netcdf4_granule(tmp_path / "twin.nc", 2010, 3, seed=4)
    third = netcdf4_granule(tmp_path / "third.nc", 2010, 3, seed=5)
    with pytest.raises(AccumulusError, match="overlaps"):
        accumulus.append_virtual(out, [twin, third])
    assert unchanged(out) == before


def test_padded_chunks_v2_grids_and_netcdf3_are_refused_clearly(tmp_path):
    out = tmp_path / "virt.json"
    padded = netcdf4_granule(tmp_path / "padded.nc", 2010, 2, chunk_time=10)  # 28 days
    with pytest.raises(AccumulusError, match="do not tile its 28 steps"):
        accumulus.append_virtual(out, [padded])
    months = monthly_granules(tmp_path / "in", [1, 2])
    with pytest.raises(AccumulusError, match="Zarr v2 needs one size"):
        accumulus.append_virtual(out, months, zarr_format=2)
    classic = tmp_path / "classic.nc"
    import netCDF4

    with netCDF4.Dataset(classic, "w", format="NETCDF3_CLASSIC") as ds:
        ds.createDimension("time", None)
        ds.createVariable("time", "f8", ("time",))[:] = [0.0]
    with pytest.raises(AccumulusError, match="not a NetCDF4/HDF5 file"):
        accumulus.append_virtual(out, [classic])
    assert not out.exists()


def test_a_granule_changed_after_it_was_referenced_is_refused(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1])
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    netcdf4_granule(granules[0], 2010, 1, seed=7, chunk_lat=9)  # rewritten in place
    with pytest.raises(AccumulusError, match="has changed since"):
        accumulus.append_virtual(out, granules)


def test_unreachable_and_missing_granule_urls(tmp_path):
    out = tmp_path / "virt.json"
    with http_server(tmp_path) as (url, _), pytest.raises(AccumulusError, match="not found"):
        accumulus.append_virtual(out, [f"{url}/missing.nc"])
    with pytest.raises(AccumulusError, match="cannot reach"):
        accumulus.append_virtual(out, ["http://127.0.0.1:9/granule.nc"])
    assert not out.exists()


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_the_cli_creates_and_extends_a_virtual_cube(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    out = tmp_path / "virt.json"
    run = [sys.executable, "-m", "accumulus", "append", str(out)]
    first = subprocess.run(
        [*run, *map(str, granules[:2]), "--virtual"], capture_output=True, text=True
    )
    assert first.returncode == 0, first.stderr
    assert "created" in first.stdout and "virtual" in first.stdout
    second = subprocess.run([*run, str(granules[2]), "--virtual"], capture_output=True, text=True)
    assert "extended" in second.stdout and "59 → 90" in second.stdout
    wrong = subprocess.run(
        [*run, str(granules[2]), "--virtual", "--chunking", "month"], capture_output=True, text=True
    )
    assert wrong.returncode == 2 and len(wrong.stderr.strip().splitlines()) == 1
    same_as_granules(open_references(out), granules)


def test_h5py_granules_with_fletcher32_keep_their_checksums(tmp_path):
    granule = h5py_granule(tmp_path / "one.nc", 2010, 2, seed=2)
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, [granule])
    codecs = json.loads(json.loads(out.read_text())["refs"][f"{VAR}/zarr.json"])["codecs"]
    assert [c["name"] for c in codecs] == [
        "bytes",
        "numcodecs.shuffle",
        "numcodecs.zlib",
        "numcodecs.fletcher32",
    ]
    same_as_granules(open_references(out), [granule])


def test_signed_bytes_stored_unsigned_with_a_fill_decode_as_xarray_decodes_them(tmp_path):
    """uint8 granules read as signed (``_Unsigned="false"``) with a fill value of 201 and a
    scale: xarray cannot cast that fill, read back from Zarr v3 as a plain 201, to int8, so
    the references type the bytes int8 (fill -55, no ``_Unsigned``): the same bytes, read
    by xarray and averaged by accumulus as ``open_mfdataset`` reads the granules."""
    granules = []
    for month in (1, 2, 3):
        days, values = month_values(2010, month, month)
        path = tmp_path / f"bytes-{month}.nc"
        with netCDF4.Dataset(path, "w") as ds:
            for dim, size in (("time", None), ("lat", NLAT), ("lon", NLON)):
                ds.createDimension(dim, size)
            time = ds.createVariable("time", "f8", ("time",))
            time.units, time[:] = "days since 2010-01-01", days
            ds.createVariable("lat", "f4", ("lat",))[:] = LAT
            ds.createVariable("lon", "f4", ("lon",))[:] = LON
            var = ds.createVariable(
                VAR, "u1", ("time", "lat", "lon"), zlib=True, shuffle=True, fill_value=201
            )
            var.setncattr("_Unsigned", "false")
            var.scale_factor = np.float32(0.5)
            var.set_auto_maskandscale(False)
            stored = (values * 4 - 60).astype("i1").view("u1")  # negative values too
            stored[values == FILL] = 201
            var[:] = stored
        granules.append(path)
    out = tmp_path / "virt.json"
    accumulus.append_virtual(out, granules)
    with xr.open_mfdataset(granules) as ds:
        expected = ds[VAR].load()
    virtual = open_references(out)[VAR]
    np.testing.assert_array_equal(virtual.values, expected.values)
    assert 0 < int(virtual.isnull().sum()) == int(expected.isnull().sum())
    assert (expected < 0).any()
    weights = np.cos(np.deg2rad(expected.lat.astype("f8")))
    series = accumulus.average(out, VAR, "lat,lon")
    wanted = expected.astype("f8").weighted(weights).mean(["lat", "lon"]).values
    np.testing.assert_allclose(series.values, wanted, rtol=1e-9)
