"""Shared settings and builders for the filter tests."""

from __future__ import annotations

from pathlib import Path

import hdf5plugin
import netCDF4
import numpy as np

CHUNKS = (12, 5)
SHAPE = (24, 10)

# netCDF4-python compression options, as a user would pass them to createVariable.
NETCDF_COMPRESSION = {
    "deflate_shuffle": {"zlib": True, "complevel": 4, "shuffle": True},
    "zstd": {"compression": "zstd", "complevel": 5},
    "bzip2": {"compression": "bzip2", "complevel": 7},
    "blosc": {"compression": "blosc_lz4", "complevel": 5, "blosc_shuffle": 1},
    "blosc_zstd_bitshuffle": {"compression": "blosc_zstd", "complevel": 3, "blosc_shuffle": 2},
}

# h5py/hdf5plugin filter options for single-filter datasets.
HDF5_FILTERS = {
    "deflate": {"compression": "gzip", "compression_opts": 6},
    "shuffle_deflate_fletcher32": {"compression": "gzip", "shuffle": True, "fletcher32": True},
    "bzip2": dict(hdf5plugin.BZip2(blocksize=9)),
    "blosc": dict(hdf5plugin.Blosc(cname="zstd", clevel=3, shuffle=hdf5plugin.Blosc.BITSHUFFLE)),
    "blosc_lz4": dict(hdf5plugin.Blosc(cname="lz4", clevel=5, shuffle=hdf5plugin.Blosc.SHUFFLE)),
    "lz4": dict(hdf5plugin.LZ4()),
    "zstd": dict(hdf5plugin.Zstd(clevel=5)),
    "bitshuffle": dict(hdf5plugin.Bitshuffle(cname="lz4")),
    "lzf": {"compression": "lzf"},
}


def sample(shape=SHAPE, dtype="f4") -> np.ndarray:
    """Compressible but not constant data."""
    return (np.arange(np.prod(shape)) % 17).reshape(shape).astype(dtype)


def write_netcdf(path: Path | str, options: dict, *, data=None) -> None:
    with netCDF4.Dataset(path, "w") as ds:
        ds.createDimension("y", SHAPE[0])
        ds.createDimension("x", SHAPE[1])
        var = ds.createVariable("v", "f4", ("y", "x"), chunksizes=CHUNKS, **options)
        var.units = "K"
        var[:] = sample() if data is None else data
