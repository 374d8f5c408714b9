"""Shared settings and builders for the filter tests."""

from __future__ import annotations

from pathlib import Path

import hdf5plugin
import netCDF4
import numpy as np

from accumulus.filters.builtin import load_hdf5plugin

# h5py must use hdf5plugin's filters, not the netCDF4 copies netCDF4's import may expose.
load_hdf5plugin()

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


def write_granule(path: Path | str) -> None:
    """A small NetCDF4 granule with what real ones have: an unlimited CF time axis,
    coordinates, packed integers, fill values, a string variable, a scalar, a subgroup,
    and a different compression per variable."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = "test granule"
        ds.history = np.array([1.5, 2.5])  # a numeric array attribute
        ds.version = np.int32(3)
        ds.createDimension("time", None)
        ds.createDimension("lat", 6)
        ds.createDimension("lon", 8)
        ds.createDimension("station", 3)
        time = ds.createVariable("time", "f8", ("time",))
        time.units = "days since 2000-01-01 00:00:00"
        time.calendar = "noleap"
        time[:] = [0.0, 1.0, 2.0, 3.0]
        lat = ds.createVariable("lat", "f4", ("lat",), zlib=True)
        lat.units = "degrees_north"
        lat[:] = np.linspace(-50, 50, 6)
        lon = ds.createVariable("lon", "f4", ("lon",))
        lon[:] = np.linspace(0, 315, 8)
        precip = ds.createVariable(
            "precip",
            "f4",
            ("time", "lat", "lon"),
            zlib=True,
            complevel=4,
            shuffle=True,
            chunksizes=(2, 3, 4),
            fill_value=-9999.0,
        )
        precip.units = "mm/day"
        precip.long_name = "precipitation"
        values = sample((4, 6, 8))
        values[1, 2, 3] = -9999.0
        precip[:] = values
        temp = ds.createVariable(
            "temp", "i2", ("time", "lat", "lon"), compression="zstd", complevel=3
        )
        temp.scale_factor = 0.01
        temp.add_offset = 273.15
        temp[:] = (sample((4, 6, 8)) * 100).astype("i2")
        name = ds.createVariable("station_name", str, ("station",))
        name[:] = np.array(["Greenbelt", "Boulder", "Pasadena"], dtype=object)
        crs = ds.createVariable("crs", "i4")
        crs.grid_mapping_name = "latitude_longitude"
        group = ds.createGroup("ancillary")
        group.source = "model"
        group.createDimension("level", 5)
        pressure = group.createVariable(
            "pressure", "f8", ("level", "lat"), compression="bzip2", complevel=9
        )
        pressure[:] = sample((5, 6), "f8") * 10
        # blosc refuses buffers it cannot shrink, so this one is large enough to compress.
        mask = group.createVariable(
            "mask",
            "i2",
            ("level", "lat", "lon"),
            compression="blosc_zstd",
            complevel=2,
            blosc_shuffle=1,
        )
        mask[:] = (sample((5, 6, 8)) > 8).astype("i2")
