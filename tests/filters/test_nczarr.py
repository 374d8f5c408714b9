"""netcdf-c interop: stores we write open in netcdf-c; NCZarr stores netcdf-c writes open
through zarr/xarray; our codec JSON equals what netcdf-c writes for the same settings."""

from __future__ import annotations

import json

import h5py
import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

from accumulus.filters import dataset_pipeline, hdf5_to_codec, join_v2, pipeline_to_codecs
from accumulus.ingest.convert import convert
from accumulus.stores.nczarr_compat import NCZarrCompatStore, normalize_zarray

from .samples import NETCDF_COMPRESSION, sample, write_granule

SETTINGS = list(NETCDF_COMPRESSION)


def _netcdf_c_codecs(store) -> list[dict]:
    """The codec chain netcdf-c wrote into the store's .zarray, in encoding order."""
    zarray = json.loads((store / "v" / ".zarray").read_text())
    return join_v2(zarray["filters"], zarray["compressor"])


# The parameters netcdf-c's nc_def_var_* calls hand to HDF5 (user form) for each setting.
NETCDF_C_USER_PARAMS = {
    "deflate_shuffle": [(2, ()), (1, (4,))],
    "zstd": [(32015, (5,))],
    "bzip2": [(307, (7,))],
    "blosc": [(32001, (0, 0, 0, 0, 5, 1, 1))],
    "blosc_zstd_bitshuffle": [(32001, (0, 0, 0, 0, 3, 2, 5))],
}


@pytest.mark.parametrize("setting", SETTINGS)
def test_our_json_equals_netcdf_c_json(setting, nczarr_stores, netcdf_files):
    written = _netcdf_c_codecs(nczarr_stores[setting])
    # From the user-form parameters: exactly netcdf-c's JSON, shuffle's "elementsize": 0 too.
    ours = [hdf5_to_codec(i, p) for i, p in NETCDF_C_USER_PARAMS[setting]]
    assert ours == written
    # From the stored parameters of the NetCDF4 file written with the same settings: the same
    # JSON once netcdf-c's dtype-relative shuffle size is made explicit.
    with h5py.File(netcdf_files[setting]) as file:
        from_file = pipeline_to_codecs(dataset_pipeline(file["v"]))
    filters, compressor = from_file[:-1] or None, from_file[-1]
    zarray = {"dtype": "<f4", "filters": filters, "compressor": compressor}
    netcdf_c = json.loads((nczarr_stores[setting] / "v" / ".zarray").read_text())
    normalized = normalize_zarray(netcdf_c)
    assert join_v2(filters, compressor) == join_v2(normalized["filters"], normalized["compressor"])
    assert normalize_zarray(zarray) == zarray


@pytest.mark.parametrize("setting", SETTINGS)
def test_netcdf_c_stores_open_in_zarr_and_xarray(setting, nczarr_stores):
    store = NCZarrCompatStore(LocalStore(nczarr_stores[setting], read_only=True))
    np.testing.assert_array_equal(zarr.open_array(store, path="v", mode="r")[:], sample())
    dataset = xr.open_zarr(store, consolidated=False)
    np.testing.assert_array_equal(dataset.v.values, sample())
    assert dataset.v.dims == ("y", "x") and dataset.v.attrs["units"] == "K"


def test_netcdf_c_shuffle_json_misleads_plain_zarr(nczarr_stores):
    """Why NCZarrCompatStore exists: zarr-python alone reads elementsize 0 as no shuffle."""
    plain = zarr.open_array(nczarr_stores["deflate_shuffle"], path="v", mode="r")
    assert not np.array_equal(plain[:], sample())


def test_appending_to_a_netcdf_c_store_through_the_wrapper(nczarr_stores, tmp_path):
    import shutil

    path = tmp_path / "copy.zarr"
    shutil.copytree(nczarr_stores["deflate_shuffle"], path)
    array = zarr.open_array(NCZarrCompatStore(LocalStore(path)), path="v", mode="r+")
    array.resize((36, 10))
    array[24:] = sample((12, 10)) + 100
    # Rewritten metadata carries the explicit element size, which netcdf-c reads too.
    assert json.loads((path / "v" / ".zarray").read_text())["filters"] == [
        {"id": "shuffle", "elementsize": 4}
    ]
    with netCDF4.Dataset(f"file://{path}#mode=zarr,file") as ds:
        np.testing.assert_array_equal(ds["v"][:24], sample())
        np.testing.assert_array_equal(ds["v"][24:], sample((12, 10)) + 100)


@pytest.fixture(scope="module")
def our_store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ours")
    write_granule(folder / "granule.nc4")
    convert(folder / "granule.nc4", folder / "cube.zarr")
    return folder / "granule.nc4", folder / "cube.zarr"


def _same_attributes(ours, theirs) -> None:
    # Strings are stored as UTF-8 bytes with xarray's _Encoding marker; netcdf-c shows it.
    assert sorted(set(ours.ncattrs()) - {"_Encoding"}) == sorted(theirs.ncattrs())
    for name in theirs.ncattrs():
        np.testing.assert_array_equal(ours.getncattr(name), theirs.getncattr(name))


@pytest.mark.parametrize("mode", ["zarr", "nczarr"])
def test_our_stores_open_in_netcdf_c(our_store, mode):
    source, store = our_store
    with (
        netCDF4.Dataset(source) as original,
        netCDF4.Dataset(f"file://{store}#mode={mode},file") as ours,
    ):
        for group_name in (None, "ancillary"):
            theirs_group = original if group_name is None else original.groups[group_name]
            ours_group = ours if group_name is None else ours.groups[group_name]
            _same_attributes(ours_group, theirs_group)
            for name, variable in theirs_group.variables.items():
                if variable.ndim == 0:
                    # A known netcdf-c limitation: it skips Zarr 0-d arrays (shape []); its own
                    # scalars are shape [1] with NCZarr-private metadata, which we do not fake.
                    assert name not in ours_group.variables
                    continue
                mine = ours_group.variables[name]
                assert mine.dimensions == variable.dimensions, name
                assert mine.filters() == variable.filters() or variable.dtype is str, name
                _same_attributes(mine, variable)
                np.testing.assert_array_equal(mine[...], variable[...], err_msg=name)


def _write_nczarr_cube(path, options) -> np.ndarray:
    """A small time/lat/lon cube written by netcdf-c in NCZarr format."""
    data = (np.arange(8 * 4 * 6) % 13).reshape(8, 4, 6).astype("f4")
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as ds:
        for name, size in (("time", 8), ("lat", 4), ("lon", 6)):
            ds.createDimension(name, size)
        ds.createVariable("time", "f8", ("time",))[:] = np.arange(8)
        ds["time"].units = "days since 2000-01-01"
        ds.createVariable("lat", "f4", ("lat",))[:] = [-45, -15, 15, 45]
        ds.createVariable("lon", "f4", ("lon",))[:] = np.arange(6) * 60
        var = ds.createVariable("v", "f4", ("time", "lat", "lon"), chunksizes=(4, 4, 6), **options)
        var[:] = data
    return data


@pytest.mark.parametrize("setting", ["deflate_shuffle", "zstd", "bzip2", "blosc"])
def test_netcdf_c_stores_accumulate_and_average(setting, tmp_path):
    from accumulus import api

    data = _write_nczarr_cube(tmp_path / "cube.zarr", NETCDF_COMPRESSION[setting])
    store = NCZarrCompatStore(LocalStore(tmp_path / "cube.zarr"))
    api.accumulate(store, "v", dims=["time"], weights="none")
    mean = api.average(
        store, "v", over="time", ranges={"time": ("2000-01-03", "2000-01-06")}, weights="none"
    )
    np.testing.assert_allclose(mean.values, data[2:6].mean(axis=0), rtol=1e-6)
