"""Does a granule fit the cube, and its values in the cube's encoding.

The cube's ``Template`` is what every granule must look like: the same variables with the
same dimensions, dtypes and scale/offset; the same sizes and coordinate values along every
dimension but the append dimension (``static`` variables, written once); time values that
convert exactly to the cube's units and calendar. Every check names the granule and says
what was expected. A variable is compared, and its values written, in the form the cube
stores it (``cf.stored_form``: fill values its type cannot hold dropped with a warning,
float32 packing stored decoded). Values are copied as stored when the encodings agree;
times are converted to the cube's units, and different fill values are mapped to the
cube's, never onto a valid value.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr
from xarray.coding.times import decode_cf_datetime, encode_cf_datetime

from accumulus.errors import AccumulusError
from accumulus.ingest.cf import (
    LIMIT_ATTRS,
    PACKING_ATTRS,
    StoredForm,
    stored_form,
    to_stored,
    warn_dropped,
)
from accumulus.ingest.granules import Granule
from accumulus.ingest.times import check_decodable, readable_time_attrs

# Attributes that change what stored numbers mean: they must agree between granule and cube.
_MEANING_ATTRS = ("scale_factor", "add_offset", "_Unsigned", "units")
_TIME_UNITS = re.compile(r"^\s*\w+\s+since\s+", re.IGNORECASE)
_SAME_CALENDARS = {"gregorian": "standard", None: "standard", "": "standard"}


@dataclass(frozen=True)
class TimeEncoding:
    units: str  # CF's "<unit> since <date>"
    calendar: str  # CF's name; "standard" for "gregorian" or none given


@dataclass(frozen=True)
class VariableTemplate:
    name: str
    dims: tuple[str, ...]
    sizes: Mapping[str, int]  # every dimension but the append dimension
    form: StoredForm  # how the cube stores it: dtype, attributes, values read as missing
    time: TimeEncoding | None  # set when the values are times

    @property
    def dtype(self) -> np.dtype:
        return self.form.dtype

    @property
    def attrs(self) -> Mapping[str, Any]:
        """As the cube stores them (decoding attributes included)."""
        return self.form.attrs

    @property
    def fill_values(self) -> list[Any]:
        """The stored values read as missing; NaN for floats without any."""
        if self.form.masked:
            return list(self.form.masked)
        return [float("nan")] if self.dtype.kind == "f" else []


@dataclass(frozen=True)
class Template:
    """What granules appended along ``dim`` must look like."""

    dim: str
    variables: Mapping[str, VariableTemplate]
    static: Mapping[str, np.ndarray]  # values of the variables without ``dim``

    @property
    def appended(self) -> list[str]:
        """The variables that grow along ``dim``, the coordinate of ``dim`` last."""
        names = [n for n, v in self.variables.items() if self.dim in v.dims and n != self.dim]
        return [*names, self.dim]

    @property
    def coordinates(self) -> set[str]:
        """Coordinate variables: of a dimension, or named by another variable's ``bounds``
        or ``coordinates`` attribute (time bounds are small arrays, not data)."""
        names = {n for n, v in self.variables.items() if v.dims == (n,)}
        for var in self.variables.values():
            bounds = var.attrs.get("bounds")
            if isinstance(bounds, str):
                names.add(bounds)
            names.update(str(var.attrs.get("coordinates", "")).split())
        return names & set(self.variables)

    @property
    def data(self) -> list[str]:
        """The data variables that grow along ``dim``."""
        return [n for n in self.appended if n not in self.coordinates]


def template_of(
    dataset: xr.Dataset, dim: str, where: str, warn: bool = False, unpack: bool = True
) -> Template:
    """The template of a CF-encoded dataset (a cube's, or a first granule's). Fill values
    its variables' types cannot hold are dropped (with a warning naming ``where``).
    ``unpack=False``: the stored numbers are kept even where Zarr readers decode them
    otherwise (``cf.stored_form``; a virtual cube references the granules' bytes)."""
    if dim not in dataset.dims:
        raise AccumulusError(
            f"{where}: no dimension {dim!r} to append along; its dimensions are "
            f"{sorted(map(str, dataset.dims))}"
        )
    if dim not in dataset.variables or dataset.variables[dim].dims != (dim,):
        raise AccumulusError(
            f"{where}: dimension {dim!r} has no coordinate variable; appending needs one to "
            "order granules and refuse overlaps"
        )
    variables = {}
    static = {}
    for name, var in dataset.variables.items():
        name = str(name)
        form = stored_form(
            name, var.dtype, var.attrs, where, unpack=unpack, source_dtype=_on_disk(var)
        )
        if warn:
            warn_dropped(where, name, form)
        source = time = _time_encoding(dataset, name)
        if time is not None:
            # Refused here, before anything is written: a cube xarray cannot decode.
            check_decodable(where, name, time.units, time.calendar)
            form = replace(form, attrs=readable_time_attrs(form.attrs))
            if form.unpacked:
                form, time = _exact_times(form, time)
        variables[name] = VariableTemplate(
            name=name,
            dims=tuple(map(str, var.dims)),
            sizes={str(d): n for d, n in var.sizes.items() if d != dim},
            form=form,
            time=time,
        )
        if dim not in var.dims:
            values = to_stored(name, np.asarray(var.values), var.attrs, form)
            if source is not None and time is not None and form.unpacked:  # exact instants
                values = convert_times(values, source, time, form.dtype, where, name)
            static[name] = values
    return Template(dim, variables, static)


def _exact_times(form: StoredForm, time: TimeEncoding) -> tuple[StoredForm, TimeEncoding]:
    """Packed times that the cube stores decoded (float32 packing, ``cf.stored_form``) are
    stored as the instants xarray decodes from the source, exactly: integer nanoseconds
    since the same date (microseconds in the calendars cftime decodes, its resolution).
    Then a granule whose times count from another date (daily files, each from its own
    midnight) converts to the cube's units exactly, which float32 hours could not."""
    unit = "nanoseconds" if time.calendar in ("standard", "proleptic_gregorian") else "microseconds"
    since = _TIME_UNITS.sub("", time.units, count=1)
    units = f"{unit} since {since}"
    attrs = {k: v for k, v in form.attrs.items() if k not in LIMIT_ATTRS}  # in the old units
    attrs["units"] = units
    missing = np.iinfo("i8").min  # NaT, as xarray encodes it
    attrs["_FillValue"] = np.int64(missing)
    exact = replace(form, dtype=np.dtype("i8"), attrs=attrs, masked=(missing,))
    return exact, TimeEncoding(units, time.calendar)


def cube_dataset(dataset: xr.Dataset, template: Template) -> tuple[xr.Dataset, dict[str, Any]]:
    """The first granule as the cube is created from it: every variable in the cube's form
    (dtype, attributes, static values), empty along the append dimension; and each
    variable's fill value, which ``to_zarr`` takes as an encoding."""
    out: dict[str, dict[str, xr.Variable]] = {"coords": {}, "data": {}}
    fills = {}
    for name, var in dataset.variables.items():
        ours = template.variables[str(name)]
        if template.dim in var.dims:
            var = var.isel({template.dim: slice(0, 0)})
        if name in template.static:
            values = template.static[str(name)]
        else:
            values = to_stored(str(name), np.asarray(var.values), var.attrs, ours.form)
        attrs = dict(ours.attrs)
        fills[str(name)] = attrs.pop("_FillValue", None)
        kind = "coords" if name in dataset.coords else "data"
        out[kind][str(name)] = xr.Variable(var.dims, values.astype(ours.dtype), attrs)
    empty = xr.Dataset(out["data"], coords=out["coords"], attrs=dataset.attrs)
    return empty, fills


def _time_encoding(dataset: xr.Dataset, name: str) -> TimeEncoding | None:
    """Times are numbers with units "<unit> since <date>"; CF bounds variables take the
    units and calendar of the variable whose ``bounds`` they are. Units and calendar as
    xarray can read them (``times.readable_time_attrs``)."""
    attrs = dataset.variables[name].attrs
    units = attrs.get("units")
    if units is None:
        parent = next(
            (v for v in dataset.variables.values() if v.attrs.get("bounds") == name), None
        )
        if parent is None:
            return None
        attrs = parent.attrs
        units = attrs.get("units")
    attrs = readable_time_attrs(attrs)
    units = attrs.get("units")
    if not isinstance(units, str) or not _TIME_UNITS.match(units):
        return None
    calendar: Any = attrs.get("calendar")
    return TimeEncoding(units, _SAME_CALENDARS.get(calendar, calendar))


def check_fits(granule: Granule, template: Template, unpack: bool = True) -> None:
    """Raise ``AccumulusError`` (naming the granule) unless it fits the cube. Warns of
    fill values the granule's types cannot hold (dropped). ``unpack`` as in
    ``template_of``."""
    where = f"granule {granule.name}"
    dim = template.dim
    theirs = template_of(granule.dataset, dim, where, warn=True, unpack=unpack)
    missing = sorted(set(template.variables) - set(theirs.variables))
    extra = sorted(set(theirs.variables) - set(template.variables))
    if missing:
        raise AccumulusError(
            f"{where}: variable(s) {missing} missing; the cube has {sorted(template.variables)}"
        )
    if extra:
        raise AccumulusError(
            f"{where}: variable(s) {extra} that the cube does not have "
            f"(the cube has {sorted(template.variables)})"
        )
    for name, ours in template.variables.items():
        _check_variable(where, ours, theirs.variables[name])
    for name, values in template.static.items():
        _check_static(where, name, values, theirs.static[name])


def _check_variable(where: str, ours: VariableTemplate, theirs: VariableTemplate) -> None:
    name = ours.name
    if theirs.dims != ours.dims:
        raise AccumulusError(
            f"{where}: variable {name!r} has dimensions {list(theirs.dims)}; the cube's has "
            f"{list(ours.dims)}"
        )
    for dim, size in ours.sizes.items():
        if theirs.sizes[dim] != size:
            raise AccumulusError(
                f"{where}: another grid: dimension {dim!r} of {name!r} has {theirs.sizes[dim]} "
                f"values, the cube's {size}"
            )
    if theirs.dtype != ours.dtype and ours.time is None:  # times are converted
        raise AccumulusError(
            f"{where}: variable {name!r} is stored as {theirs.dtype}, the cube's as {ours.dtype}"
        )
    if (ours.time is None) != (theirs.time is None):
        raise AccumulusError(
            f"{where}: variable {name!r} has units {theirs.attrs.get('units')!r}, the cube's "
            f"{ours.attrs.get('units')!r}"
        )
    for key in _MEANING_ATTRS:
        if key == "units" and ours.time is not None:
            continue  # times are converted
        a, b = theirs.attrs.get(key), ours.attrs.get(key)
        if not _same(a, b):
            raise AccumulusError(
                f"{where}: variable {name!r} has {key}={a!r}, the cube's is {b!r}; values "
                "would change meaning"
            )
    differ = set(theirs.form.masked) != set(ours.form.masked)
    if differ and _missing_target(ours) is None and ours.time is None:
        raise AccumulusError(
            f"{where}: variable {name!r} marks missing values with "
            f"{list(theirs.form.masked)}, and the cube's has no fill value to map them to"
        )


def _check_static(where: str, name: str, ours: np.ndarray, theirs: np.ndarray) -> None:
    if ours.shape == theirs.shape and _array_equal(ours, theirs):
        return
    if ours.shape != theirs.shape:
        detail = f"shape {theirs.shape}, the cube's {ours.shape}"
    else:
        index = np.argwhere(~_equal_elements(ours, theirs))[0]
        at = tuple(int(i) for i in index)
        detail = f"first difference at index {at}: {theirs[at]!r}, the cube's {ours[at]!r}"
    raise AccumulusError(f"{where}: another grid: {name!r} differs from the cube's ({detail})")


def _array_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return bool(_equal_elements(a, b).all())


def _equal_elements(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    equal = np.asarray(a == b)
    if a.dtype.kind == "f" and b.dtype.kind == "f":
        equal = equal | (np.isnan(a) & np.isnan(b))
    return equal


def blocks(granule: Granule, template: Template, first: int = 0) -> list[slice]:
    """The blocks of steps along the append dimension, from step ``first`` on, in which
    ``conform`` reads a granule: whatever its length, what is held at once stays about
    ``BLOCK_BYTES`` (or one row of its stored chunks)."""
    size = int(granule.dataset.sizes[template.dim])
    steps = block_steps(granule, template)
    return [slice(s, min(s + steps, size)) for s in range(first, size, steps)]


def conform(granule: Granule, template: Template, steps: slice) -> dict[str, np.ndarray]:
    """The granule's values of every variable along the append dimension at ``steps``
    (one of ``blocks``), encoded as the cube stores them (call ``check_fits`` first)."""
    return {name: _conformed(granule, template, name, steps) for name in template.appended}


# Bytes of values (in the cube's types) read and converted at once, all variables together.
BLOCK_BYTES = 64 * 2**20
# A block spans whole stored chunks along the append dimension when a row of them holds at
# most this many bytes: read in parts, each chunk would be decompressed once per part.
CHUNK_ROW_BYTES = 2**30


def block_steps(granule: Granule, template: Template) -> int:
    """Steps per block: as many as ``BLOCK_BYTES`` hold (at least one), widened or cut to
    whole stored chunks along the dimension when a row of them stays within
    ``CHUNK_ROW_BYTES``."""
    dim = template.dim
    per_step, chunk = 0, 1
    for name in template.appended:
        var = granule.dataset.variables[name]
        values = math.prod(n for d, n in var.sizes.items() if d != dim)
        itemsize = max(var.dtype.itemsize, template.variables[name].dtype.itemsize)
        per_step += values * itemsize
        stored = var.encoding.get("preferred_chunks", {}).get(dim)
        chunk = max(chunk, int(stored or 1))
    steps = max(1, BLOCK_BYTES // max(per_step, 1))
    if chunk * per_step <= CHUNK_ROW_BYTES:
        steps = max(chunk, steps // chunk * chunk)
    return steps


def _conformed(granule: Granule, template: Template, name: str, steps: slice) -> np.ndarray:
    """One variable's values at ``steps`` (along the dimension), as the cube stores them."""
    where = f"granule {granule.name}"
    ours = template.variables[name]
    var = granule.dataset.variables[name]
    try:
        values = np.asarray(var.isel({template.dim: steps}).values)
    except Exception as exc:  # a corrupt or truncated chunk: netCDF4/HDF5/zarr errors
        raise AccumulusError(
            f"{where}: cannot read variable {name!r} (corrupt or truncated data?): {exc}"
        ) from None
    if ours.time is not None:
        return times_in_cube(granule, name, values, ours)
    form = stored_form(name, var.dtype, var.attrs, where, source_dtype=_on_disk(var))
    values = to_stored(name, values, var.attrs, form)
    return _map_fill(where, name, values, form.masked, ours)


def times_in_cube(
    granule: Granule, name: str, values: np.ndarray, ours: VariableTemplate
) -> np.ndarray:
    """A granule's stored times as the cube stores them: unpacked first where the cube
    stores them decoded (float32 packing, as in RSS SSMIS's ``sst_dtime``: int16 tenths of
    an hour), then in the cube's units; packed times the cube keeps packed must already be
    in its units (converting them would need repacking, which is rarely exact)."""
    where = f"granule {granule.name}"
    var = granule.dataset.variables[name]
    theirs = _time_encoding(granule.dataset, name)
    assert theirs is not None and ours.time is not None
    form = stored_form(name, var.dtype, var.attrs, where, source_dtype=_on_disk(var))
    if form.unpacked:
        values = to_stored(name, values, var.attrs, form)
    elif any(key in var.attrs for key in PACKING_ATTRS) and theirs != ours.time:
        raise AccumulusError(
            f"{where}: variable {name!r} holds packed times in units {theirs.units!r}, the "
            f"cube's are {ours.time.units!r}; packed times are appended only in the cube's units"
        )
    return convert_times(values, theirs, ours.time, ours.dtype, where, name)


def convert_times(
    values: np.ndarray,
    source: TimeEncoding,
    target: TimeEncoding,
    dtype: np.dtype,
    granule: str,
    name: str,
) -> np.ndarray:
    """Times in ``source`` units as numbers in ``target`` units, exactly, or an error
    naming ``granule`` (as messages name it: "granule g.nc") and the variable."""
    if source == target and values.dtype == dtype:
        return values
    where = f"{granule}: {name!r}"
    # int64 (nanoseconds) encoded as integers: float64 has not their 64 bits.
    encoded = np.dtype("i8") if dtype == np.dtype("i8") else np.dtype("f8")
    try:
        dates = decode_cf_datetime(values, source.units, source.calendar)
        numbers, _, _ = encode_cf_datetime(dates, target.units, target.calendar, encoded)
    except Exception as exc:  # cftime and pandas raise several kinds
        raise AccumulusError(
            f"{where}: cannot convert times from {source.units!r} ({source.calendar}) to the "
            f"cube's {target.units!r} ({target.calendar}): {exc}"
        ) from None
    numbers = np.asarray(numbers)
    stored = (np.round(numbers) if dtype.kind in "iu" else numbers).astype(dtype)
    back = np.asarray(decode_cf_datetime(stored, target.units, target.calendar))
    dates = np.asarray(dates)
    differ = ~((back == dates) | (pd.isnull(back) & pd.isnull(dates)))
    if differ.any():
        bad = int(np.argmax(differ))
        raise AccumulusError(
            f"{where}: time {dates[bad]} cannot be stored exactly as {dtype} in the cube's "
            f"units {target.units!r}"
        )
    return stored


def decoded_times(values: np.ndarray, template: Template) -> np.ndarray:
    """Times of the append dimension, stored in the cube's units, as dates: datetime64, or
    cftime objects in the calendars numpy does not have (as xarray decodes them)."""
    encoding = template.variables[template.dim].time
    if encoding is None:
        raise ValueError(f"{template.dim!r} holds no times")
    if not len(values):  # xarray finds no calendar range in nothing
        return np.asarray([], dtype=object)
    return np.asarray(decode_cf_datetime(values, encoding.units, encoding.calendar))


def time_labels(values: np.ndarray, template: Template) -> list[str]:
    """Coordinate values of the append dimension as text (dates when they are times)."""
    if template.variables[template.dim].time is None:
        return [str(v) for v in values.tolist()]
    dates = decoded_times(values, template)
    if dates.dtype.kind == "M":
        return [str(d) for d in np.datetime_as_string(dates, unit="s")]
    return [d.isoformat() for d in dates]  # cftime dates of non-standard calendars


def _on_disk(var: xr.Variable) -> np.dtype:
    """A granule variable's values as xarray decodes them from the file: its type on disk
    (byte order included), which ``decode_cf=False`` reports in ``encoding``."""
    stored = var.encoding.get("dtype")
    if stored is None or np.dtype(stored).newbyteorder("=") != var.dtype.newbyteorder("="):
        return var.dtype
    return np.dtype(stored)


def _missing_target(ours: VariableTemplate) -> Any:
    """The stored value the cube reads as missing: its fill value, or NaN in floats."""
    if ours.form.masked:
        return ours.form.masked[0]
    return float("nan") if ours.dtype.kind == "f" else None


def _map_fill(
    where: str, name: str, values: np.ndarray, theirs: tuple[Any, ...], ours: VariableTemplate
) -> np.ndarray:
    """A granule's values with the values it marks missing (``theirs``) mapped to the
    cube's; a valid value the cube would read as missing is an error."""
    if set(theirs) == set(ours.form.masked):
        return values
    missing = np.isin(values, theirs)
    clash = np.isin(values, ours.form.masked) & ~missing
    if clash.any():
        at = tuple(int(i) for i in np.argwhere(clash)[0])
        raise AccumulusError(
            f"{where}: variable {name!r} holds the valid value {values[at].item()!r} (at index "
            f"{at}), which the cube reads as missing (its fill values are "
            f"{list(ours.form.masked)}); it cannot be stored exactly"
        )
    if not missing.any():
        return values
    target = np.asarray(_missing_target(ours), dtype=values.dtype)
    return np.where(missing, target, values)


def _same(a: Any, b: Any) -> bool:
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    return np.array_equal(np.asarray(a, dtype="f8"), np.asarray(b, dtype="f8"), equal_nan=True)
