"""A file encoded field by field like ``eraint_uvz.nc`` of github.com/pydata/xarray-data (the
ERA-Interim monthly means of xarray's tutorial), with synthetic values: that repository
states no licence, so its data are not copied, only its layout.

The layout, as ``netCDF4`` and ``scipy.io.netcdf_file`` read the original:

- NetCDF-3 64-bit offset (version byte 2), written by scipy as the original was: netcdf-c
  refuses a ``_FillValue`` of another type than its variable's, and this file has one.
- dimensions longitude(480), latitude(241), level(3), month(2); no unlimited dimension.
- ``longitude``, ``latitude``: float32, ``_FillValue`` = NaN (double), ``units``,
  ``long_name``; latitude runs from 90 down to -90, longitude from -180 by 0.75.
- ``level``: int32, millibars 200, 500, 850. ``month``: int32 1, 7, no attributes.
- ``z``, ``u``, ``v`` (month, level, latitude, longitude): int16 with, in this order,
  ``number_of_significant_digits`` (int), ``units``, ``scale_factor`` (double, negative),
  ``long_name``, ``add_offset`` (double), ``_FillValue`` (double NaN: non-conforming on an
  integer variable), ``standard_name``. Scale factors and offsets are the original's.
- global ``Conventions`` = "CF-1.0" and an ``Info`` text.

The synthetic ``v`` has a calm band where its packed value is 0, the number a NaN fill
value cast to int16 becomes, as the original's ``v`` has 781 packed zeros.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import scipy.io

PACKING = {
    # name: (significant digits, units, scale_factor, long_name, add_offset, standard_name)
    "z": (5, "m**2 s**-2", -1.7250274674967954, "Geopotential", 66825.5, "geopotential"),
    "u": (2, "m s**-1", -0.001572704938045535, "U component of wind", 26.96875, "eastward_wind"),
    "v": (2, "m s**-1", -0.0004778199963376671, "V component of wind", -1.46875, "northward_wind"),
}
LONGITUDE = np.arange(480, dtype="f4") * np.float32(0.75) - np.float32(180)
LATITUDE = np.float32(90) - np.arange(241, dtype="f4") * np.float32(0.75)  # north to south
LEVEL = np.asarray([200, 500, 850], dtype="i4")
MONTH = np.asarray([1, 7], dtype="i4")


def fields() -> dict[str, np.ndarray]:
    """Smooth monthly fields of geopotential and wind (physical units), (month, level,
    latitude, longitude)."""
    lon = np.deg2rad(LONGITUDE.astype("f8"))[None, None, None, :]
    lat = np.deg2rad(LATITUDE.astype("f8"))[None, None, :, None]
    level = (LEVEL.astype("f8") / 1000)[None, :, None, None]
    season = np.asarray([-1.0, 1.0])[:, None, None, None]
    z = 9.81 * (12000 - 10500 * level) + 900 * np.cos(2 * lat) + 300 * season * np.sin(lat)
    u = 35 * (1.2 - level) * np.cos(lat) ** 2 * np.sin(2 * lat + 0.3) + 4 * np.cos(3 * lon)
    v = 6 * np.sin(2 * lon) * np.cos(lat) * (1 + 0.3 * season) + 1.5 * np.sin(5 * lat)
    shape = (len(MONTH), len(LEVEL), len(LATITUDE), len(LONGITUDE))
    z, u, v = (np.broadcast_to(f, shape).copy() for f in (z, u, v))
    calm = (np.abs(LATITUDE) <= 3)[None, None, :, None] & (np.abs(LONGITUDE) <= 30)
    v[np.broadcast_to(calm, v.shape)] = PACKING["v"][4]  # packs to 0
    return {"z": z, "u": u, "v": v}


def pack(name: str, values: np.ndarray) -> np.ndarray:
    _, _, scale, _, offset, _ = PACKING[name]
    return np.round((values - offset) / scale).astype("i2")


def write_eraint_like(path: Path) -> Path:
    with scipy.io.netcdf_file(path, "w", version=2) as ds:
        ds.Conventions = "CF-1.0"
        ds.Info = "Synthetic monthly fields in the layout of ERA-Interim's eraint_uvz.nc."
        for name, size in (("longitude", 480), ("latitude", 241), ("level", 3), ("month", 2)):
            ds.createDimension(name, size)
        for name, values, units, long_name in (
            ("longitude", LONGITUDE, "degrees_east", "longitude"),
            ("latitude", LATITUDE, "degrees_north", "latitude"),
        ):
            var = ds.createVariable(name, "f", (name,))
            var[:] = values
            var._FillValue = np.float64(np.nan)
            var.units = units
            var.long_name = long_name
        level = ds.createVariable("level", "i", ("level",))
        level[:] = LEVEL
        level.units, level.long_name = "millibars", "pressure_level"
        for name, physical in fields().items():
            digits, units, scale, long_name, offset, standard = PACKING[name]
            var = ds.createVariable(name, "h", ("month", "level", "latitude", "longitude"))
            var[:] = pack(name, physical)
            var.number_of_significant_digits = np.int32(digits)
            var.units = units
            var.scale_factor = np.float64(scale)
            var.long_name = long_name
            var.add_offset = np.float64(offset)
            var._FillValue = np.float64(np.nan)
            var.standard_name = standard
        month = ds.createVariable("month", "i", ("month",))
        month[:] = MONTH
    return path
