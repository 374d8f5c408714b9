"""CF-encoded files written by the field's own writers, from a description a Hypothesis
strategy draws: netCDF4 (netcdf-c, NetCDF-4 and NetCDF-3 64-bit offset), scipy (NetCDF-3
64-bit offset) and h5py (HDF5 with dimension scales, which netcdf-c reads as NetCDF-4).

Each writer stores exactly the numbers and typed attributes of the description, with no
masking or scaling of its own, so the file is what the description says and xarray decodes
it by its rules alone. The strategy covers every storage type (both byte orders where the
format has them), ``_Unsigned``, float32/float64 (negative) packing, fill values absent, in
range, NaN or beyond what the type holds, ``missing_value`` scalars and lists, valid limits,
and time units and calendars; latitude runs either way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import netCDF4
import numpy as np
import scipy.io
from hypothesis import strategies as st

WRITERS = ("netcdf4", "netcdf4-classic", "scipy", "h5py")
CLASSIC_TYPES = ("i1", "i2", "i4", "f4", "f8")  # NetCDF-3: no unsigned types (CDF-5 aside)
ALL_TYPES = ("i1", "u1", "i2", "u2", "i4", "u4", "f4", "f8")
CALENDARS = (None, "standard", "gregorian", "proleptic_gregorian", "noleap", "360_day", "julian")
TIME_UNITS = (
    "days since 2000-01-01",
    "hours since 1990-01-01 00:00:00",
    "seconds since 1970-01-01",
)

# Fill values: absent, a value of the type, NaN, or a number no value of the type equals.
ABSENT, IN_RANGE, NAN, OUT_OF_RANGE = "absent", "in range", "NaN", "out of range"


@dataclass(frozen=True)
class Variable:
    dtype: np.dtype  # as stored, byte order included
    values: np.ndarray  # (time, lat, lon), as stored
    attrs: dict[str, Any]  # typed as the file stores them
    unholdable: tuple[Any, ...] = ()  # (attribute, value): fill values no stored value equals

    @property
    def masks_in_float32(self) -> bool:
        """Whether xarray compares values with fill values after casting them to float32
        (CF: a float32 scale factor, and an offset of the same type if any, make float32
        the unpacked type), which int32, uint32 and float64 values do not all survive:
        then a fill value of the type may mark nothing, or several values."""
        return compares_in_float32(self.attrs, self.dtype)


def compares_in_float32(attrs: dict[str, Any], dtype: np.dtype) -> bool:
    """See ``Variable.masks_in_float32``. As xarray chooses the unpacked type
    (``xarray.coding.variables._choose_float_dtype``): a float32 scale factor alone makes it
    float32; with a float32 offset too, 4-byte integers are unpacked to float64 (where
    nothing is lost) and float64 values to float32."""
    scale, offset = attrs.get("scale_factor"), attrs.get("add_offset")
    if not isinstance(scale, np.float32) or not isinstance(offset, np.float32 | None):
        return False
    if dtype.kind == "f":
        return dtype.itemsize == 8
    return dtype.itemsize == 4 and offset is None


@dataclass(frozen=True)
class CFFile:
    writer: str
    times: np.ndarray
    time_attrs: dict[str, Any]
    lat: np.ndarray
    lon: np.ndarray
    variables: dict[str, Variable] = field(default_factory=dict)

    def describe(self) -> str:
        lines = [f"{self.writer}: time {self.times.dtype} {self.time_attrs}"]
        for name, var in self.variables.items():
            lines.append(f"  {name} {var.dtype.str} {var.attrs} unholdable={var.unholdable}")
        return "\n".join(lines)


def write(path: Path, spec: CFFile) -> Path:
    {"netcdf4": _netcdf4, "netcdf4-classic": _netcdf4, "scipy": _scipy, "h5py": _h5py}[spec.writer](
        path, spec
    )
    return path


def _coordinates(spec: CFFile) -> dict[str, tuple[np.ndarray, dict[str, Any]]]:
    return {
        "time": (spec.times, spec.time_attrs),
        "lat": (spec.lat, {"units": "degrees_north", "standard_name": "latitude"}),
        "lon": (spec.lon, {"units": "degrees_east", "standard_name": "longitude"}),
    }


def _netcdf4(path: Path, spec: CFFile) -> None:
    form = "NETCDF4" if spec.writer == "netcdf4" else "NETCDF3_64BIT_OFFSET"
    with netCDF4.Dataset(path, "w", format=form) as ds:
        for name, (values, attrs) in _coordinates(spec).items():
            ds.createDimension(name, len(values))
            var = ds.createVariable(name, values.dtype, (name,))
            var.setncatts(attrs)
            var[:] = values
        for name, v in spec.variables.items():
            attrs = dict(v.attrs)
            fill = attrs.pop("_FillValue", None)  # netcdf-c sets it at creation only
            endian = {">": "big", "<": "little"}.get(v.dtype.byteorder, "native")
            var = ds.createVariable(
                name,
                v.dtype if form == "NETCDF4" else v.dtype.newbyteorder("="),
                ("time", "lat", "lon"),
                fill_value=fill,
                endian=endian if form == "NETCDF4" else "native",
            )
            var.set_auto_maskandscale(False)  # store the numbers given, as they are
            var.setncatts(attrs)
            var[:] = v.values


def _scipy(path: Path, spec: CFFile) -> None:
    with scipy.io.netcdf_file(path, "w", version=2) as ds:  # NetCDF-3 64-bit offset
        for name, (values, attrs) in _coordinates(spec).items():
            ds.createDimension(name, len(values))
            var = ds.createVariable(name, values.dtype.char, (name,))
            var[:] = values
            for key, value in attrs.items():
                setattr(var, key, value)
        for name, v in spec.variables.items():
            var = ds.createVariable(name, v.dtype.char, ("time", "lat", "lon"))
            var[:] = v.values
            for key, value in v.attrs.items():
                setattr(var, key, value)


def _h5py(path: Path, spec: CFFile) -> None:
    with h5py.File(path, "w") as file:
        scales = {}
        for name, (values, attrs) in _coordinates(spec).items():
            scale = file.create_dataset(name, data=values)
            scale.make_scale(name)
            scale.attrs.update(attrs)
            scales[name] = scale
        for name, v in spec.variables.items():
            data = file.create_dataset(name, data=v.values.astype(v.dtype), chunks=True)
            for axis, dim in enumerate(("time", "lat", "lon")):
                data.dims[axis].attach_scale(scales[dim])
            data.attrs.update(v.attrs)


# Strategies -------------------------------------------------------------------------------


@st.composite
def cf_files(draw: st.DrawFn, writers: tuple[str, ...] = WRITERS) -> CFFile:
    writer = draw(st.sampled_from(writers))
    nt = draw(st.integers(1, 5))
    nlat = draw(st.integers(2, 5))
    nlon = draw(st.integers(2, 5))
    time_dtype = np.dtype(draw(st.sampled_from(["i4", "f8"])))
    steps = draw(st.lists(st.integers(0, 2000), min_size=nt, max_size=nt, unique=True))
    times = np.sort(np.asarray(steps)).astype(time_dtype)
    if time_dtype.kind == "f" and draw(st.booleans()):
        times = times / 4  # quarter units: exact in float64
    time_attrs: dict[str, Any] = {"units": draw(st.sampled_from(TIME_UNITS))}
    calendar = draw(st.sampled_from(CALENDARS))
    if calendar is not None:
        time_attrs["calendar"] = calendar
    lat = np.linspace(-60, 60, nlat).astype(draw(st.sampled_from(["f4", "f8"])))
    if draw(st.booleans()):
        lat = lat[::-1].copy()  # north to south, as ERA-Interim
    lon = (np.arange(nlon) * 7.5 - 30).astype("f4")
    count = draw(st.integers(1, 2))
    variables = {f"v{i}": draw(cf_variables(writer, (nt, nlat, nlon))) for i in range(count)}
    return CFFile(writer, times, time_attrs, lat, lon, variables)


@st.composite
def cf_variables(draw: st.DrawFn, writer: str, shape: tuple[int, ...]) -> Variable:
    classic = writer in ("netcdf4-classic", "scipy")
    base = np.dtype(draw(st.sampled_from(CLASSIC_TYPES if classic else ALL_TYPES)))
    order = "="
    if writer in ("netcdf4", "h5py") and base.itemsize > 1:
        order = draw(st.sampled_from("<>"))
    dtype = base.newbyteorder(order)
    attrs: dict[str, Any] = {}
    # _Unsigned: the signed types of NetCDF-3 holding unsigned values, or the reverse.
    view = base
    if base.kind == "i" and draw(st.integers(0, 3)) == 0:
        attrs["_Unsigned"] = "true"
        view = np.dtype(f"u{base.itemsize}")
    elif base.kind == "u" and draw(st.integers(0, 5)) == 0:
        attrs["_Unsigned"] = "false"
        view = np.dtype(f"i{base.itemsize}")
    # Packing: scale and offset, float32 or float64, either sign.
    packing = draw(st.sampled_from(["none", "none", "scale", "offset", "both"]))
    if packing in ("scale", "both"):
        kind = draw(st.sampled_from(["f4", "f8"]))
        magnitude = draw(st.sampled_from([0.01, 0.5, 1.7250274674967954, 4.778e-4, 0.1, 3.0]))
        attrs["scale_factor"] = np.dtype(kind).type(magnitude * draw(st.sampled_from([1, -1])))
    if packing in ("offset", "both"):
        kind = draw(st.sampled_from(["f4", "f8"]))
        offset = draw(st.sampled_from([66825.5, -1.46875, 26.96875, 273.15, 0.0, -100.0]))
        attrs["add_offset"] = np.dtype(kind).type(offset)
    # Fill values. netcdf-c casts _FillValue to the variable's type, so only scipy and h5py
    # write the NaN or out-of-range ones real files carry.
    fill_kinds = [ABSENT, IN_RANGE]
    if writer in ("scipy", "h5py") or base.kind == "f":
        fill_kinds.append(NAN)
    if writer in ("scipy", "h5py") and base == view:  # (with _Unsigned, xarray casts it)
        fill_kinds.append(OUT_OF_RANGE)
    fill_kind = draw(st.sampled_from(fill_kinds))
    if fill_kind != ABSENT:
        attrs["_FillValue"] = draw(_fill_value(fill_kind, base, base, writer))
    missing_kind = draw(st.sampled_from(["absent", "same", "scalar", "list"]))
    if missing_kind == "same" and "_FillValue" in attrs:
        attrs["missing_value"] = attrs["_FillValue"]
    elif missing_kind == "scalar":
        kind = draw(st.sampled_from([IN_RANGE, IN_RANGE, NAN, OUT_OF_RANGE]))
        attrs["missing_value"] = draw(_fill_value(kind, base, view, writer))
    elif missing_kind == "list":
        first = draw(_fill_value(IN_RANGE, base, view, writer))
        second = draw(_fill_value(IN_RANGE, base, view, writer))
        attrs["missing_value"] = np.asarray([first, second], dtype=np.asarray(first).dtype)
    # Valid limits (xarray does not apply them; they must not mask anything either).
    limits = draw(st.sampled_from(["none", "range", "min", "max", "min and max"]))
    low, high = sorted(draw(st.lists(_in_range(base), min_size=2, max_size=2)))
    if limits == "range":
        attrs["valid_range"] = np.asarray([low, high], dtype=base)
    if "min" in limits:
        attrs["valid_min"] = base.type(low)
    if "max" in limits:
        attrs["valid_max"] = base.type(high)
    values = draw(_values(base, shape, attrs))
    return Variable(dtype, values.astype(dtype), attrs, unholdable(attrs, base, view))


def unholdable(attrs: dict[str, Any], base: np.dtype, view: np.dtype) -> tuple[Any, ...]:
    """(attribute, value) of each fill value that no stored value equals, by CF's and
    xarray's reading: ``missing_value`` is compared with the values as ``_Unsigned`` makes
    them; ``_FillValue`` too, except that with ``_Unsigned`` xarray first casts it to the
    stored type (so only NaN marks nothing). NaN on floats needs no mask: not counted.
    Where xarray compares in float32 (``compares_in_float32``), an integer fill value is
    held when it equals a value of the type cast to float32: int32's 2**31 - 1 becomes
    2**31, so a ``_FillValue`` of 2147483648.0 on int32 marks it."""
    in_float32 = compares_in_float32(attrs, base)
    out = []
    for key in ("_FillValue", "missing_value"):
        for value in np.ravel(np.asarray(attrs.get(key, []))):
            number = float(value)
            if np.isnan(number) and base.kind == "f":
                continue
            if key == "_FillValue" and base != view:
                held = not np.isnan(number)
            elif view.kind in "iu":
                info = np.iinfo(view)
                low, high = info.min, info.max
                if in_float32:  # the values as float32 (exact, since they are integers)
                    low, high = float(np.float32(low)), float(np.float32(high))
                    number = number if float(np.float32(number)) == number else np.nan
                held = np.isfinite(number) and number.is_integer() and low <= value <= high
            else:
                with np.errstate(over="ignore"):
                    held = bool(view.type(value) == value)
            if not held:
                out.append((key, value))
    return tuple(out)


def _in_range(dtype: np.dtype) -> st.SearchStrategy:
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return st.integers(int(info.min), int(info.max))
    return st.floats(-1e6, 1e6, width=8 * dtype.itemsize)


@st.composite
def _fill_value(draw: st.DrawFn, kind: str, base: np.dtype, view: np.dtype, writer: str) -> Any:
    """A fill value of ``kind`` for values of type ``view`` (stored as ``base``), typed as a
    file may type it: as the variable, or float64 as ERA-Interim's (not netcdf-c's
    _FillValue: it casts)."""
    if kind == NAN:
        return np.float64(np.nan) if base.kind in "iu" else base.type(np.nan)
    if kind == OUT_OF_RANGE:
        if view.kind in "iu":
            info = np.iinfo(view)
            choices = [float(info.max) + 1, float(info.min) - 1, 1.5, np.inf, -np.inf]
            if view.itemsize < 4:  # an integer attribute of a wider type (scipy: int32 at most)
                return np.int32(draw(st.sampled_from([int(info.max) + 1, int(info.min) - 1])))
            return np.float64(draw(st.sampled_from(choices)))
        if view == np.float32:
            return np.float64(draw(st.sampled_from([1e40, -1e40, 0.1, 1 / 3])))
        return np.float64(draw(st.sampled_from([np.inf, -np.inf])))  # inf on float64 masks inf
    value = draw(_in_range(view))
    if base == view and view.kind in "iu" and writer != "netcdf4" and draw(st.booleans()):
        return np.float64(value)  # an integral number typed float64
    if base != view:  # _Unsigned: the attribute has the stored type (wrapped), as netcdf-c
        return np.asarray(value, dtype=view).view(base)[()]
    return view.type(value)


@st.composite
def _values(draw: st.DrawFn, dtype: np.dtype, shape: tuple[int, ...], attrs: dict) -> np.ndarray:
    """Stored values that include the edges of the type, 0 (what a NaN fill casts to), each
    fill and missing value as stored, and NaN for floats."""
    specials: list[Any] = [0, 1]
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        specials += [int(info.min), int(info.max), int(info.min) + 1]
    else:
        specials += [np.nan, -0.0, -1.0, 1e4]
    for key in ("_FillValue", "missing_value"):
        for value in np.ravel(np.asarray(attrs.get(key, []))):
            with np.errstate(all="ignore"):
                cast = np.asarray(value).astype(dtype)
            # An infinity only where a fill value masks it: accumulations of infinite
            # values are undefined (inf - inf), which is not what this test is about.
            if np.isfinite(cast) or np.isnan(cast) or np.isinf(value):
                specials.append(cast.item())
    count = int(np.prod(shape))
    picks = draw(
        st.lists(
            st.one_of(st.sampled_from(specials), _in_range(dtype)), min_size=count, max_size=count
        )
    )
    with np.errstate(all="ignore"):
        return (
            np.asarray(picks, dtype="f8" if dtype.kind == "f" else object)
            .astype(dtype)
            .reshape(shape)
        )
