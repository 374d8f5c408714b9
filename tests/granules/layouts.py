"""Granules written the way NASA and other centres ship them, small, with random values.

Each writer makes one granule file in the layout of a real product, written with h5py (as
GPM's toolkit writes HDF5 directly) or netCDF4 (netcdf-c). The layouts, field by field:

- IMERG half-hourly (``3B-HHR``, V07): the structure recorded from a real granule in
  ``tests/data/imerg_v07a_header.json`` (``headers.py`` compares them): groups ``/Grid`` and
  ``/Grid/Intermediate``, dimension scales ``time``, ``lon``, ``lat`` (and the pure netCDF
  dimensions ``nv``, ``lonv``, ``latv``) in ``/Grid`` used by the variables of both groups,
  stored ``(time, lon, lat)``; time in ``seconds since 1980-01-06 00:00:00 UTC`` on the
  ``julian`` calendar with ``time_bnds``; ``_FillValue`` -9999.9 (floats) / -9999 (int16)
  beside a string ``CodeMissingValue``; GPM's ``DimensionNames``; fixed-length attribute
  strings; uncompressed chunks of a whole granule.
- IMERG daily (``3B-DAY``): the same ``/Grid`` layout (the issue's description; the test
  repository holds no daily granule), with the daily product's variables (``precipitation``
  in mm/day, ``precipitation_cnt``...) and one step a day.
- MERRA-2 (``M2T1NXSLV``-like): flat NetCDF4, 24 hourly steps a file in ``minutes since
  <day> 00:30:00`` (units change from file to file), ``lat`` -90..90 and ``lon`` -180..180
  as doubles, float32 variables with ``_FillValue`` = ``missing_value`` = 1e15,
  ``scale_factor`` 1 / ``add_offset`` 0, deflate level 2 with shuffle.
- ERA5 (CDS netCDF): NetCDF-3 64-bit offset, ``latitude`` descending 90..-90, ``longitude``
  0..360, ``time`` in ``hours since 1900-01-01 00:00:00.0``, ``t2m`` and ``tp`` packed
  int16 with ``scale_factor``/``add_offset`` and ``_FillValue`` = ``missing_value`` -32767.
- OISST v2.1 (``oisst-avhrr-v02r01.YYYYMMDD.nc``): NetCDF4, ``(time, zlev, lat, lon)``,
  ``lon`` 0..360, ``time`` in ``days since 1978-01-01 12:00:00``, ``sst``/``anom``/``err``/
  ``ice`` packed int16 (``scale_factor`` 0.01, ``_FillValue`` -999) with land missing.

The grids are coarse so that boxes across the date line and across 0° hold cells.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import cftime
import h5py
import netCDF4
import numpy as np

IMERG_TIME_UNITS = "seconds since 1980-01-06 00:00:00 UTC"
PURE_DIMENSION = "This is a netCDF dimension but not a netCDF variable.         2"


@dataclass(frozen=True)
class Product:
    """How a product's granules are written and read back for a reference answer."""

    name: str
    variable: str  # the variable the tests average
    group: str | None  # the group the variables are in (None: the root)
    lat: str
    lon: str


IMERG_HHR = Product("imerg-hhr", "precipitation", "Grid", "lat", "lon")
IMERG_DAY = Product("imerg-day", "precipitation", "Grid", "lat", "lon")
MERRA2 = Product("merra2", "T2M", None, "lat", "lon")
ERA5 = Product("era5", "t2m", None, "latitude", "longitude")
OISST = Product("oisst", "sst", None, "lat", "lon")


def centers(start: float, stop: float, n: int) -> np.ndarray:
    """``n`` cell centres spanning [start, stop]."""
    step = (stop - start) / n
    return start + step * (np.arange(n) + 0.5)


def _text(value: str) -> np.bytes_:
    """A fixed-length, null-padded ASCII attribute, as GPM's toolkit writes them."""
    return np.bytes_(value.encode("ascii"))


def _records(pairs: Sequence[tuple[str, str]]) -> np.bytes_:
    return _text("".join(f"{k}={v};\n" for k, v in pairs))


# --------------------------------------------------------------------------------------------
# IMERG (HDF5 written directly, groups, dimension scales)


@dataclass(frozen=True)
class ImergGrid:
    lon: np.ndarray
    lat: np.ndarray

    @classmethod
    def regular(cls, nlon: int = 10, nlat: int = 10) -> ImergGrid:
        return cls(centers(-180, 180, nlon), centers(-90, 90, nlat))


HHR_VARIABLES = {  # name: (dtype, units or None)
    "precipitation": ("f4", "mm/hr"),
    "precipitationQualityIndex": ("f4", None),
    "probabilityLiquidPrecipitation": ("i2", "percent"),
    "randomError": ("f4", "mm/hr"),
}
HHR_INTERMEDIATE = {
    "IRinfluence": ("i2", None),
    "IRprecipitation": ("f4", "mm/hr"),
    "MWobservationTime": ("i2", "minutes"),
    "MWprecipSource": ("i2", None),
    "MWprecipitation": ("f4", "mm/hr"),
    "precipitationUncal": ("f4", "mm/hr"),
}
DAY_VARIABLES = {
    "precipitation": ("f4", "mm/day"),
    "precipitation_cnt": ("i2", "count"),
    "MWprecipitation": ("f4", "mm/day"),
    "MWprecipitation_cnt": ("i2", "count"),
    "randomError": ("f4", "mm/day"),
    "probabilityLiquidPrecipitation": ("i2", "percent"),
}


def imerg_name(start: dt.datetime, minutes: int, version: str = "V07A") -> str:
    """``3B-HHR.MS.MRG.3IMERG.20000601-S000000-E002959.0000.V07A.HDF5`` and the daily kind."""
    stop = start + dt.timedelta(minutes=minutes) - dt.timedelta(seconds=1)
    day = start.strftime("%Y%m%d")
    span = f"S{start:%H%M%S}-E{stop:%H%M%S}"
    if minutes == 30:
        index = start.hour * 60 + start.minute
        return f"3B-HHR.MS.MRG.3IMERG.{day}-{span}.{index:04d}.{version}.HDF5"
    return f"3B-DAY.MS.MRG.3IMERG.{day}-{span}.{version}.HDF5"


def write_imerg(
    directory: Path,
    start: dt.datetime,
    *,
    daily: bool = False,
    grid: ImergGrid | None = None,
    seed: int = 0,
    missing: float = 0.1,
) -> Path:
    """One IMERG granule (half-hourly, or daily) in the V07 ``/Grid`` layout."""
    grid = grid or ImergGrid.regular()
    minutes = 1440 if daily else 30
    path = directory / imerg_name(start, minutes)
    rng = np.random.default_rng(seed)
    begin = cftime.DatetimeJulian(*start.timetuple()[:6])
    seconds = int(cftime.date2num(begin, IMERG_TIME_UNITS, calendar="julian"))
    with h5py.File(path, "w", libver="earliest") as file:
        file.attrs.create("FileHeader", _file_header(path.name, start, minutes, daily))
        file.attrs.create("FileInfo", _file_info(daily))
        top = file.create_group("Grid")
        top.attrs.create("GridHeader", _grid_header(grid))
        scales = _imerg_scales(top, grid, seconds, minutes)
        variables = DAY_VARIABLES if daily else HHR_VARIABLES
        for name, (dtype, units) in variables.items():
            _imerg_variable(top, name, dtype, units, scales, rng, missing, daily)
        if not daily:
            below = top.create_group("Intermediate")
            for name, (dtype, units) in HHR_INTERMEDIATE.items():
                _imerg_variable(below, name, dtype, units, scales, rng, missing, daily)
    return path


def _file_header(name: str, start: dt.datetime, minutes: int, daily: bool) -> np.bytes_:
    stop = start + dt.timedelta(minutes=minutes) - dt.timedelta(milliseconds=1)
    kind = "3IMERGDF" if daily else "3IMERGHH"
    return _records(
        [
            ("DOI", f"10.5067/GPM/IMERG/{'3B-DAY' if daily else '3B-HH'}/07"),
            ("DOIauthority", "http://dx.doi.org/"),
            ("DOIshortName", kind),
            ("AlgorithmID", kind),
            ("AlgorithmVersion", f"{kind}_7.0"),
            ("FileName", name),
            ("SatelliteName", "MULTI"),
            ("InstrumentName", "MERGED"),
            ("GenerationDateTime", "2024-01-01T00:00:00.000Z"),
            ("StartGranuleDateTime", f"{start:%Y-%m-%dT%H:%M:%S}.000Z"),
            ("StopGranuleDateTime", f"{stop:%Y-%m-%dT%H:%M:%S}.{stop.microsecond // 1000:03d}Z"),
            ("GranuleNumber", ""),
            ("NumberOfSwaths", "0"),
            ("NumberOfGrids", "1"),
            ("GranuleStart", ""),
            ("TimeInterval", "DAY" if daily else "HALF_HOUR"),
            ("ProcessingSystem", "PPS"),
            ("ProductVersion", "V07A"),
            ("EmptyGranule", "NOT_EMPTY"),
            ("MissingData", ""),
        ]
    )


def _file_info(daily: bool) -> np.bytes_:
    return _records(
        [
            ("DataFormatVersion", "7e"),
            ("TKCodeBuildVersion", "0"),
            ("MetadataVersion", "7e"),
            ("FormatPackage", "HDF5-1.10.5"),
            ("BlueprintFilename", f"GPM.V7.{'3IMERGDF' if daily else '3IMERGHH'}.blueprint.xml"),
            ("BlueprintVersion", "BV_69"),
            ("TKIOVersion", "3.100"),
            ("MetadataStyle", "PVL"),
            ("EndianType", "LITTLE_ENDIAN"),
        ]
    )


def _grid_header(grid: ImergGrid) -> np.bytes_:
    return _records(
        [
            ("BinMethod", "ARITHMETIC_MEAN"),
            ("Registration", "CENTER"),
            ("LatitudeResolution", f"{abs(grid.lat[1] - grid.lat[0]):g}"),
            ("LongitudeResolution", f"{abs(grid.lon[1] - grid.lon[0]):g}"),
            ("NorthBoundingCoordinate", "90"),
            ("SouthBoundingCoordinate", "-90"),
            ("EastBoundingCoordinate", "180"),
            ("WestBoundingCoordinate", "-180"),
            ("Origin", "SOUTHWEST"),
        ]
    )


def _imerg_scales(
    top: h5py.Group, grid: ImergGrid, seconds: int, minutes: int
) -> dict[str, h5py.Dataset]:
    scales = {}
    for name, meaning in (("latv", "lat"), ("lonv", "lon"), ("nv", "time")):
        pure = top.create_dataset(name, data=np.zeros(2, "i4"), chunks=(2,))
        pure.make_scale(PURE_DIMENSION)
        pure.attrs.create("DimensionNames", _text(name))
        pure.attrs.create("LongName", _text(f"Number of {meaning} bounds."))
        pure.attrs.create("standard_name", _text(f"number{meaning}bnds"))
        scales[name] = pure
    axes = {
        "lat": (grid.lat, "degrees_north", "latitude", "Y"),
        "lon": (grid.lon, "degrees_east", "longitude", "X"),
    }
    for name, (values, units, standard, axis) in axes.items():
        scale = top.create_dataset(name, data=values.astype("f4"), chunks=(len(values),))
        scale.make_scale("")
        _attrs(
            scale,
            DimensionNames=name,
            Units=units,
            units=units,
            standard_name=standard,
            LongName=f"{standard.title()} at the center of grid intervals.",
            bounds=f"{name}_bnds",
            axis=axis,
        )
        scales[name] = scale
    time = top.create_dataset("time", data=np.array([seconds], "i4"), chunks=(1,))
    time.make_scale("")
    _attrs(
        time,
        DimensionNames="time",
        Units=IMERG_TIME_UNITS,
        units=IMERG_TIME_UNITS,
        standard_name="time",
        LongName="Representative time of data in seconds since 1980-01-06 00:00:00 UTC.",
        bounds="time_bnds",
        axis="T",
        calendar="julian",
    )
    scales["time"] = time
    for name, values, units in (
        ("lat_bnds", _bounds(grid.lat), "degrees_north"),
        ("lon_bnds", _bounds(grid.lon), "degrees_east"),
    ):
        dim = name[:3]
        bounds = top.create_dataset(name, data=values.astype("f4"), chunks=values.shape)
        _attach(bounds, [scales[dim], scales[f"{dim}v"]])
        _attrs(
            bounds,
            DimensionNames=f"{dim},{dim}v",
            Units=units,
            units=units,
            coordinates=f"{dim} {dim}v",
        )
    time_bnds = top.create_dataset(
        "time_bnds", data=np.array([[seconds, seconds + 60 * minutes]], "i4"), chunks=(1, 2)
    )
    _attach(time_bnds, [scales["time"], scales["nv"]])
    _attrs(
        time_bnds,
        DimensionNames="time,nv",
        Units=IMERG_TIME_UNITS,
        units=IMERG_TIME_UNITS,
        coordinates="time nv",
    )
    return scales


def _bounds(values: np.ndarray) -> np.ndarray:
    half = abs(values[1] - values[0]) / 2 if len(values) > 1 else 0.5
    return np.stack([values - half, values + half], axis=1)


def _imerg_variable(
    group: h5py.Group,
    name: str,
    dtype: str,
    units: str | None,
    scales: dict[str, h5py.Dataset],
    rng: np.random.Generator,
    missing: float,
    daily: bool,
) -> None:
    shape = (1, len(scales["lon"]), len(scales["lat"]))
    fill = np.float32(-9999.9) if dtype == "f4" else np.int16(-9999)
    if dtype == "f4":
        values = rng.gamma(0.5, 2.0 * (24 if daily else 1), size=shape).astype("f4")
    else:
        values = rng.integers(0, 101, size=shape).astype("i2")
    values[rng.random(shape) < missing] = fill
    data = group.create_dataset(name, data=values, chunks=shape, fillvalue=None)
    _attach(data, [scales["time"], scales["lon"], scales["lat"]])
    attributes = {
        "DimensionNames": "time,lon,lat",
        "coordinates": "time lon lat",
        "CodeMissingValue": "-9999.9" if dtype == "f4" else "-9999",
        "LongName": f"{name} (a fixture in the IMERG V07 layout)",
    }
    if units is not None:
        attributes.update(Units=units, units=units)
    _attrs(data, **attributes)
    data.attrs.create("_FillValue", fill, dtype=fill.dtype)


def _attach(data: h5py.Dataset, scales: Sequence[h5py.Dataset]) -> None:
    for axis, scale in enumerate(scales):
        data.dims[axis].attach_scale(scale)


def _attrs(item: h5py.HLObject, **values: str) -> None:
    for key, value in values.items():
        item.attrs.create(key, _text(value))


def imerg_series(
    directory: Path,
    start: dt.datetime,
    count: int,
    *,
    daily: bool = False,
    grid: ImergGrid | None = None,
    seed: int = 0,
) -> list[Path]:
    step = dt.timedelta(days=1) if daily else dt.timedelta(minutes=30)
    directory.mkdir(parents=True, exist_ok=True)
    return [
        write_imerg(directory, start + k * step, daily=daily, grid=grid, seed=seed + k)
        for k in range(count)
    ]


# --------------------------------------------------------------------------------------------
# MERRA-2 (flat NetCDF4, 1e15 fill values, -180..180)

MERRA2_FILL = np.float32(1e15)


def write_merra2(
    directory: Path,
    day: dt.date,
    *,
    nlon: int = 16,
    nlat: int = 9,
    steps: int = 24,
    seed: int = 0,
    missing: float = 0.05,
) -> Path:
    """One ``MERRA2_400.tavg1_2d_slv_Nx.YYYYMMDD.nc4``-like granule: hourly means of a day."""
    path = directory / f"MERRA2_400.tavg1_2d_slv_Nx.{day:%Y%m%d}.nc4"
    rng = np.random.default_rng(seed)
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncatts(
            {
                "History": "Original file generated: a test fixture",
                "Filename": path.name,
                "Conventions": "CF-1",
                "Institution": "NASA Global Modeling and Assimilation Office",
                "Format": "NetCDF-4/HDF-5",
                "SpatialCoverage": "global",
                "VersionID": "5.12.4",
                "TemporalRange": "1980-01-01 -> 2200-01-01",
                "identifier_product_doi_authority": "http://dx.doi.org/",
                "ShortName": "M2T1NXSLV",
                "GranuleID": path.name,
                "LatitudeResolution": str(180 / (nlat - 1)),
                "LongitudeResolution": str(360 / nlon),
            }
        )
        nc.createDimension("lon", nlon)
        nc.createDimension("lat", nlat)
        nc.createDimension("time", None)
        lon = nc.createVariable("lon", "f8", ("lon",))
        lon.setncatts({"long_name": "longitude", "units": "degrees_east", "vmax": 1e15})
        lon[:] = -180 + np.arange(nlon) * (360 / nlon)
        lat = nc.createVariable("lat", "f8", ("lat",))
        lat.setncatts({"long_name": "latitude", "units": "degrees_north", "vmax": 1e15})
        lat[:] = np.linspace(-90, 90, nlat)
        time = nc.createVariable("time", "i4", ("time",))
        time.setncatts(
            {
                "long_name": "time",
                "units": f"minutes since {day:%Y-%m-%d} 00:30:00",
                "time_increment": np.int32(10000),
                "begin_date": np.int32(int(f"{day:%Y%m%d}")),
                "begin_time": np.int32(3000),
                "vmax": np.float32(1e15),
                "vmin": np.float32(-1e15),
                "valid_range": np.array([-1e15, 1e15], "f4"),
            }
        )
        time[:] = np.arange(steps) * 60
        for name, long_name, units, low, high in (
            ("T2M", "2-meter_air_temperature", "K", 220.0, 310.0),
            ("QV2M", "2-meter_specific_humidity", "kg kg-1", 0.0, 0.02),
        ):
            var = nc.createVariable(
                name,
                "f4",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=2,
                shuffle=True,
                chunksizes=(1, nlat, nlon),
                fill_value=MERRA2_FILL,
            )
            var.setncatts(
                {
                    "long_name": long_name,
                    "units": units,
                    "missing_value": MERRA2_FILL,
                    "fmissing_value": MERRA2_FILL,
                    "scale_factor": np.float32(1.0),
                    "add_offset": np.float32(0.0),
                    "standard_name": long_name,
                    "vmax": MERRA2_FILL,
                    "vmin": -MERRA2_FILL,
                    "valid_range": np.array([-1e15, 1e15], "f4"),
                }
            )
            var.set_auto_maskandscale(False)
            values = rng.uniform(low, high, size=(steps, nlat, nlon)).astype("f4")
            values[rng.random(values.shape) < missing] = MERRA2_FILL
            var[:] = values
    return path


# --------------------------------------------------------------------------------------------
# ERA5 (CDS netCDF-3, descending latitude, 0..360, packed int16)

ERA5_PACKING = {
    "t2m": (0.0016, 265.0, "K", "2 metre temperature"),
    "tp": (4e-7, 0.013, "m", "Total precipitation"),
}


def write_era5(
    directory: Path,
    day: dt.date,
    *,
    nlon: int = 12,
    nlat: int = 7,
    steps: int = 4,
    seed: int = 0,
    missing: float = 0.05,
) -> Path:
    """One CDS ERA5 single-levels download for a day (``steps`` times a day)."""
    path = directory / f"era5_single_levels_{day:%Y%m%d}.nc"
    rng = np.random.default_rng(seed)
    hours0 = (dt.datetime.combine(day, dt.time()) - dt.datetime(1900, 1, 1)).days * 24
    with netCDF4.Dataset(path, "w", format="NETCDF3_64BIT_OFFSET") as nc:
        nc.setncatts({"Conventions": "CF-1.6", "history": "a test fixture in the CDS layout"})
        nc.createDimension("longitude", nlon)
        nc.createDimension("latitude", nlat)
        nc.createDimension("time", None)
        lon = nc.createVariable("longitude", "f4", ("longitude",))
        lon.setncatts({"units": "degrees_east", "long_name": "longitude"})
        lon[:] = np.arange(nlon) * (360 / nlon)
        lat = nc.createVariable("latitude", "f4", ("latitude",))
        lat.setncatts({"units": "degrees_north", "long_name": "latitude"})
        lat[:] = np.linspace(90, -90, nlat)
        time = nc.createVariable("time", "i4", ("time",))
        time.setncatts(
            {
                "units": "hours since 1900-01-01 00:00:00.0",
                "long_name": "time",
                "calendar": "gregorian",
            }
        )
        time[:] = hours0 + np.arange(steps) * (24 // steps)
        for name, (scale, offset, units, long_name) in ERA5_PACKING.items():
            var = nc.createVariable(
                name, "i2", ("time", "latitude", "longitude"), fill_value=-32767
            )
            var.setncatts(
                {
                    "scale_factor": scale,
                    "add_offset": offset,
                    "missing_value": np.int16(-32767),
                    "units": units,
                    "long_name": long_name,
                }
            )
            var.set_auto_maskandscale(False)
            packed = rng.integers(-32000, 32000, size=(steps, nlat, nlon)).astype("i2")
            packed[rng.random(packed.shape) < missing] = -32767
            var[:] = packed
    return path


# --------------------------------------------------------------------------------------------
# OISST v2.1 (NetCDF4, time x zlev x lat x lon, packed int16, 0..360)


def write_oisst(
    directory: Path,
    day: dt.date,
    *,
    nlon: int = 12,
    nlat: int = 6,
    seed: int = 0,
    land: float = 0.2,
) -> Path:
    """One ``oisst-avhrr-v02r01.YYYYMMDD.nc``-like daily granule."""
    path = directory / f"oisst-avhrr-v02r01.{day:%Y%m%d}.nc"
    rng = np.random.default_rng(seed)
    days = (day - dt.date(1978, 1, 1)).days
    land_mask = np.random.default_rng(12345).random((nlat, nlon)) < land  # the same every day
    with netCDF4.Dataset(path, "w", format="NETCDF4") as nc:
        nc.setncatts(
            {
                "Conventions": "CF-1.6, ACDD-1.3",
                "title": "NOAA/NCEI 1/4 Degree Daily Optimum Interpolation Sea Surface "
                "Temperature (OISST) Analysis, Version 2.1 - Final (a test fixture)",
                "id": path.name,
                "product_version": "Version v02r01",
                "time_coverage_start": f"{day:%Y-%m-%d}T00:00:00Z",
            }
        )
        nc.createDimension("time", 1)
        nc.createDimension("zlev", 1)
        nc.createDimension("lat", nlat)
        nc.createDimension("lon", nlon)
        time = nc.createVariable("time", "f4", ("time",))
        time.setncatts(
            {
                "long_name": "Center time of the day",
                "units": "days since 1978-01-01 12:00:00",
            }
        )
        time[:] = [days]
        zlev = nc.createVariable("zlev", "f4", ("zlev",))
        zlev.setncatts({"long_name": "Sea surface height", "units": "meters", "positive": "down"})
        zlev[:] = [0.0]
        lat = nc.createVariable("lat", "f4", ("lat",))
        lat.setncatts({"long_name": "Latitude", "units": "degrees_north", "grids": "Uniform grid"})
        lat[:] = centers(-90, 90, nlat)
        lon = nc.createVariable("lon", "f4", ("lon",))
        lon.setncatts({"long_name": "Longitude", "units": "degrees_east", "grids": "Uniform grid"})
        lon[:] = centers(0, 360, nlon)
        for name, low, high, units in (
            ("sst", -300, 3500, "Celsius"),
            ("anom", -1200, 1200, "Celsius"),
            ("err", 0, 1000, "Celsius"),
        ):
            var = nc.createVariable(
                name,
                "i2",
                ("time", "zlev", "lat", "lon"),
                zlib=True,
                complevel=4,
                chunksizes=(1, 1, nlat, nlon),
                fill_value=np.int16(-999),
            )
            var.setncatts(
                {
                    "long_name": f"Daily {name} (a test fixture)",
                    "units": units,
                    "add_offset": np.float32(0.0),
                    "scale_factor": np.float32(0.01),
                    "valid_min": np.int16(low),
                    "valid_max": np.int16(high),
                }
            )
            var.set_auto_maskandscale(False)
            packed = rng.integers(low, high, size=(1, 1, nlat, nlon)).astype("i2")
            packed[:, :, land_mask] = -999
            var[:] = packed
    return path
