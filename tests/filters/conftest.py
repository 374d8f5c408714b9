"""Real files for the filter tests: HDF5 written by h5py + hdf5plugin, NetCDF4 written by
netCDF4 (netcdf-c), and NCZarr stores written by netcdf-c."""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest

from .samples import CHUNKS, HDF5_FILTERS, NETCDF_COMPRESSION, sample, write_netcdf


@pytest.fixture(scope="session")
def hdf5_file(tmp_path_factory) -> Path:
    """One dataset per entry of HDF5_FILTERS, 2-D float32, chunked."""
    path = tmp_path_factory.mktemp("h5") / "filters.h5"
    with h5py.File(path, "w") as file:
        for name, options in HDF5_FILTERS.items():
            file.create_dataset(name, data=sample(), chunks=CHUNKS, **options)
    return path


@pytest.fixture(scope="session")
def netcdf_files(tmp_path_factory) -> dict[str, Path]:
    """A NetCDF4 file per entry of NETCDF_COMPRESSION."""
    folder = tmp_path_factory.mktemp("nc")
    paths = {}
    for name, options in NETCDF_COMPRESSION.items():
        paths[name] = folder / f"{name}.nc"
        write_netcdf(paths[name], options)
    return paths


@pytest.fixture(scope="session")
def nczarr_stores(tmp_path_factory) -> dict[str, Path]:
    """An NCZarr store written by netcdf-c per entry of NETCDF_COMPRESSION."""
    folder = tmp_path_factory.mktemp("nczarr")
    paths = {}
    for name, options in NETCDF_COMPRESSION.items():
        paths[name] = folder / f"{name}.zarr"
        write_netcdf(f"file://{paths[name]}#mode=nczarr,file", options)
    return paths
