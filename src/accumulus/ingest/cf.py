"""How a cube stores a CF-encoded variable so that xarray reads back exactly what it reads
from the source.

A variable's values are stored as the source stores them (its dtype, scale, offset and
fill values) whenever Zarr can carry that decoding, and decoded otherwise. Two things do
not survive the trip as they are:

- *Fill values the type cannot hold.* A Zarr ``fill_value`` must be a value of the array's
  type; a ``_FillValue`` of NaN on int16 (NetCDF-3 files written by scipy, HDF5 attributes
  written by h5py) would be cast to 0 and mask every valid 0. xarray masks values equal to
  a fill value, so a value no stored number equals marks nothing: it is dropped, with a
  warning naming the file, variable and value (xarray drops NaN on integers the same way).
- *Attribute types.* Zarr attributes are JSON, whose numbers read back as float64: a
  float32 ``scale_factor`` makes xarray decode in float32 from the source but in float64
  from Zarr (CF issue 422), and the numbers differ. Such a variable is stored decoded, as
  the float32 values xarray reads from the source, unless every value its type can hold
  (all 65536 of an int16) decodes to the same number either way.

xarray is the oracle throughout: which stored values it masks, and which numbers it
decodes, are found by decoding probe values with ``xarray.conventions.decode_cf_variable``
under the source's attributes (with their types) and under the attributes as the cube
stores them (as JSON gives them back), never by re-implementing its rules.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends.zarr import FillValueCoder

from accumulus.errors import AccumulusError, AccumulusWarning

FILL_ATTRS = ("_FillValue", "missing_value")
PACKING_ATTRS = ("scale_factor", "add_offset")
DECODING_ATTRS = (*FILL_ATTRS, *PACKING_ATTRS, "_Unsigned")
# Limits CF gives in packed units; they are unpacked with the values.
LIMIT_ATTRS = ("valid_min", "valid_max", "valid_range")
# Every value of an integer type this small is tried; larger types get probe values.
_EXHAUSTIVE_BYTES = 2
_PROBES = 4096


@dataclass(frozen=True)
class DroppedFill:
    """A fill value that marks no value the variable's type can hold."""

    attribute: str
    value: Any
    dtype: np.dtype

    def describe(self) -> str:
        value = np.asarray(self.value)
        if value.dtype.kind == "f" and np.isnan(value).any():
            why = f"NaN, on {self.dtype.name} values"
        elif value.dtype.kind in "iuf" and not np.isfinite(value).all():
            why = f"an infinity, on {self.dtype.name} values"
        else:
            why = f"no {self.dtype.name} value equals it"
        shown = value.item() if value.size == 1 else value.tolist()
        return f"{self.attribute} {shown!r} marks no value ({why})"


@dataclass(frozen=True)
class StoredForm:
    """How the cube stores one variable."""

    dtype: np.dtype
    attrs: Mapping[str, Any]  # as the cube stores them; ``_FillValue`` of type ``dtype``
    masked: tuple[Any, ...]  # stored values xarray reads as missing (NaN aside)
    unpacked: bool  # values are stored decoded, as xarray decodes the source
    dropped: tuple[DroppedFill, ...]
    source_dtype: np.dtype  # the source's values as xarray's decoder meets them

    @property
    def fill_value(self) -> Any:
        return self.attrs.get("_FillValue")


def stored_form(
    name: str,
    dtype: np.dtype,
    attrs: Mapping[str, Any],
    where: str,
    unpack: bool = True,
    source_dtype: np.dtype | None = None,
) -> StoredForm:
    """The form in which a cube stores variable ``name`` of ``where`` (a granule or file),
    given the ``dtype`` its values are stored with in the cube and its attributes as read
    from the source (with their types). ``source_dtype``: the source's values as xarray's
    decoder meets them, byte order included (it casts an ``_Unsigned`` fill value in it);
    by default ``dtype``. ``unpack=False`` keeps the stored values even where Zarr readers
    decode them otherwise (a virtual cube references the source's bytes). Raises
    ``AccumulusError`` naming the attribute when xarray cannot decode them at all."""
    dtype = np.dtype(dtype)
    source_dtype = dtype if source_dtype is None else np.dtype(source_dtype)
    if dtype.kind not in "iuf" or not any(k in attrs for k in DECODING_ATTRS):
        return StoredForm(dtype, dict(attrs), (), False, (), source_dtype)
    decoding = {k: attrs[k] for k in DECODING_ATTRS if k in attrs}
    try:
        return _stored_form(
            name, dtype, source_dtype, _Frozen(decoding), _Frozen(dict(attrs)), unpack
        )
    except _Undecodable as exc:
        value = f" = {decoding[exc.attribute]!r}" if exc.attribute in decoding else ""
        raise AccumulusError(
            f"{where}: variable {name!r}: xarray cannot decode its attribute "
            f"{exc.attribute!r}{value} ({exc.cause})"
        ) from None


def decode(name: str, values: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray:
    """``values`` as xarray decodes them under ``attrs`` (times left as numbers)."""
    dims = tuple(f"d{i}" for i in range(np.ndim(values)))
    variable = xr.Variable(dims, values, attrs={k: attrs[k] for k in DECODING_ATTRS if k in attrs})
    with warnings.catch_warnings():
        # xarray's own notes on non-conforming fills: ours name the file (warn_dropped).
        warnings.simplefilter("ignore", xr.SerializationWarning)
        warnings.simplefilter("ignore", RuntimeWarning)
        decoded = xr.conventions.decode_cf_variable(name, variable, decode_times=False)
        return np.asarray(decoded.values)


def to_stored(
    name: str, values: np.ndarray, attrs: Mapping[str, Any], form: StoredForm
) -> np.ndarray:
    """A source's stored ``values`` (with its ``attrs``) in the cube's ``form``: decoded
    when the form is unpacked, as they are otherwise."""
    if not form.unpacked:
        return values
    return decode(name, values.astype(form.source_dtype), attrs).astype(form.dtype, copy=False)


def warn_dropped(where: str, name: str, form: StoredForm) -> None:
    for dropped in form.dropped:
        warnings.warn(
            f"{where}: variable {name!r}: {dropped.describe()}; dropped, as xarray does, so "
            "no valid value is masked",
            AccumulusWarning,
            stacklevel=2,  # one place per caller, so the warnings registry shows it once
        )


# The form --------------------------------------------------------------------------------


class _Undecodable(Exception):
    def __init__(self, attribute: str, cause: Exception) -> None:
        self.attribute, self.cause = attribute, cause


class _Frozen(dict):
    """Attributes as an ``lru_cache`` key: compared by type and value."""

    def _key(self) -> tuple:
        return tuple((k, type(v).__name__, repr(v)) for k, v in sorted(self.items()))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(self._key())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Frozen) and self._key() == other._key()


@lru_cache(maxsize=1024)
def _stored_form(
    name: str,
    dtype: np.dtype,
    source_dtype: np.dtype,
    decoding: _Frozen,
    attrs: _Frozen,
    unpack: bool,
) -> StoredForm:
    probes = _probes(dtype, decoding)
    theirs = probes.astype(source_dtype)  # the same numbers, as the source holds them
    try:
        source = decode(name, theirs, decoding)
    except Exception as exc:  # whatever xarray raises on attributes it cannot use
        raise _Undecodable(_culprit(name, dtype, decoding), exc) from None
    masked_by = {key: _masked(name, theirs, decoding, key) for key in FILL_ATTRS}
    kept = dict(attrs)
    for key in FILL_ATTRS:
        kept.pop(key, None)
    fills = masked_by["_FillValue"]
    others = [v for v in masked_by["missing_value"] if v not in fills]
    view = _view_dtype(dtype, decoding.get("_Unsigned"))
    if len(fills):
        kept["_FillValue"] = dtype.type(fills[0])
        others = [*fills[1:], *others]
    elif dtype.kind == "f" and "_FillValue" in decoding and _all_nan(decoding["_FillValue"]):
        kept["_FillValue"] = dtype.type(np.nan)
    if others:
        as_view = np.asarray(others, dtype=dtype).view(view).tolist()
        kept["missing_value"] = as_view[0] if len(as_view) == 1 else as_view
    elif dtype.kind == "f" and "missing_value" in decoding and _all_nan(decoding["missing_value"]):
        kept["missing_value"] = decoding["missing_value"]
    dropped = tuple(_dropped(name, dtype, theirs, decoding))
    masked = tuple(np.asarray([*fills, *others], dtype=dtype).tolist())
    exhaustive = _exhaustive(dtype)
    form = StoredForm(dtype, kept, masked, False, dropped, source_dtype)
    if _decodes_as(name, source, probes, form, exhaustive):
        return form
    if not unpack:  # the source's bytes are kept (a virtual cube): at most retyped
        return _signed_as_unsigned_says(name, source, probes, form, exhaustive) or form
    return _unpacked_form(name, source.dtype, source_dtype, attrs, decoding, dropped)


def _decodes_as(
    name: str, source: np.ndarray, probes: np.ndarray, form: StoredForm, exhaustive: bool
) -> bool:
    """Whether xarray decodes ``probes`` stored in ``form``, as Zarr gives them back in
    either format, to the ``source``'s decoded values."""
    return all(
        _same_decoding(source, _decode_or_none(name, probes, cube), exhaustive)
        for cube in _as_zarr_gives_back(form.attrs, form.dtype)
    )


def _signed_as_unsigned_says(
    name: str, source: np.ndarray, probes: np.ndarray, form: StoredForm, exhaustive: bool
) -> StoredForm | None:
    """``form`` typed as its ``_Unsigned`` attribute views it, without that attribute: the
    same bytes, the same values. Where the bytes must stay the source's (a virtual cube), this
    is what xarray can decode when it cannot cast the form's fill value, read back from Zarr
    as a plain number, to the viewed type (``_Unsigned="false"`` on uint8 with a fill of 201).
    None when the form has no such attribute or the retyped form decodes otherwise."""
    view = _view_dtype(form.dtype, form.attrs.get("_Unsigned"))
    if view == form.dtype:
        return None
    attrs = {k: v for k, v in form.attrs.items() if k != "_Unsigned"}
    if "_FillValue" in attrs:  # missing_value is kept in the viewed type already
        attrs["_FillValue"] = np.asarray(attrs["_FillValue"], dtype=form.dtype).view(view)[()]
    masked = tuple(np.asarray(form.masked, dtype=form.dtype).view(view).tolist())
    viewed = StoredForm(view, attrs, masked, False, form.dropped, form.source_dtype)
    return viewed if _decodes_as(name, source, probes.view(view), viewed, exhaustive) else None


def _unpacked_form(
    name: str,
    dtype: np.dtype,
    source_dtype: np.dtype,
    attrs: Mapping[str, Any],
    decoding: Mapping[str, Any],
    dropped: tuple[DroppedFill, ...],
) -> StoredForm:
    """The variable stored as xarray decodes it: the decoding attributes go, NaN marks
    missing values, and valid limits given in packed units (integers) are unpacked too."""
    kept = {k: v for k, v in attrs.items() if k not in (*DECODING_ATTRS, *LIMIT_ATTRS)}
    scale = np.ravel(np.asarray(decoding.get("scale_factor", 1.0)))
    swap = {"valid_min": "valid_max", "valid_max": "valid_min"} if scale[0] < 0 else {}
    for key in LIMIT_ATTRS:
        if key not in attrs:
            continue
        value = np.asarray(attrs[key])
        if value.dtype.kind not in "iu":  # in unpacked units already
            kept[key] = attrs[key]
            continue
        limits = decode(name, np.ravel(value).astype(source_dtype), decoding).astype(dtype)
        if key == "valid_range":
            kept[key] = np.sort(limits)
        else:  # a negative scale makes the packed minimum the unpacked maximum
            kept[swap.get(key, key)] = limits[0]
    if dtype.kind == "f":
        kept["_FillValue"] = dtype.type(np.nan)
    return StoredForm(dtype, kept, (), True, dropped, source_dtype)


def _probes(dtype: np.dtype, decoding: Mapping[str, Any]) -> np.ndarray:
    """Stored values to decode: every value of a small integer type; otherwise edge
    values, random values, and each fill value cast to the type every way xarray might
    (NaN and infinities only to floats: other casts of them are undefined)."""
    if _exhaustive(dtype):
        info = np.iinfo(dtype)
        return np.arange(info.min, info.max + 1).astype(dtype)
    rng = np.random.default_rng(0)
    if dtype.kind == "f":
        floats = np.finfo(dtype)
        edges = [0.0, -0.0, 1.0, -1.0, 0.5, floats.max, floats.min, floats.tiny, np.inf, -np.inf]
        values = [*edges, *rng.normal(0, 1e4, _PROBES), *rng.integers(-(2**20), 2**20, 256)]
    else:
        info = np.iinfo(dtype)
        edges = [0, 1, -1, info.min, info.max, info.min + 1, info.max - 1]
        edges = [e for e in edges if info.min <= e <= info.max]
        values = [*edges, *rng.integers(info.min, info.max, _PROBES, endpoint=True)]
    probes = [np.asarray(values).astype(dtype)]
    twins = {dtype, _twin(dtype, "i"), _twin(dtype, "u")}
    for key in FILL_ATTRS:
        if key not in decoding:
            continue
        for value in _numbers(decoding[key]):
            for twin in twins:
                if not np.isfinite(value) and twin.kind != "f":
                    continue
                with np.errstate(all="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    cast = np.asarray(value).astype(twin).view(dtype).reshape(1)
                # Also its bytes in the other order: xarray casts an _Unsigned fill value in
                # the file's byte order and views it in the machine's.
                probes += [cast, cast.byteswap()]
                if dtype.kind == "f":
                    probes.append(-cast)
    return np.concatenate(probes).astype(dtype)


def _masked(name: str, probes: np.ndarray, decoding: Mapping[str, Any], key: str) -> list:
    """The probe values xarray masks because of attribute ``key`` (NaN inputs aside)."""
    if key not in decoding:
        return []
    only = {k: v for k, v in decoding.items() if k not in FILL_ATTRS or k == key}
    decoded = decode(name, probes, only)
    masked = _isnan(decoded) & ~_isnan(probes)
    return list(dict.fromkeys(probes[masked].tolist()))


def _dropped(
    name: str, dtype: np.dtype, probes: np.ndarray, decoding: Mapping[str, Any]
) -> list[DroppedFill]:
    """Each fill value (one by one) that masks no value of the type. NaN on floats is
    not dropped: NaN needs no mask."""
    out = []
    for key in FILL_ATTRS:
        if key not in decoding:
            continue
        for value in np.ravel(np.asarray(decoding[key])):
            if dtype.kind == "f" and _all_nan(value):
                continue
            alone = {k: v for k, v in decoding.items() if k not in FILL_ATTRS}
            alone[key] = value
            if not _masked(name, probes, alone, key):
                out.append(DroppedFill(key, value, dtype))
    return out


def _decode_or_none(name: str, values: np.ndarray, attrs: Mapping[str, Any]) -> np.ndarray | None:
    """``decode``, or None where xarray cannot decode the cube's attributes (it casts an
    ``_Unsigned="false"`` fill value read back as a Python int, 201 on uint8, to int8 and
    overflows): then the cube must not keep them."""
    try:
        return decode(name, values, attrs)
    except Exception:  # whatever xarray raises on attributes it cannot use
        return None


def _same_decoding(source: np.ndarray, cube: np.ndarray | None, exhaustive: bool) -> bool:
    """Whether the cube's decoding gives the numbers the source's does: on every probe, and
    (unless every stored value was probed) in the same float precision."""
    if cube is None or source.shape != cube.shape:
        return False
    nan = _isnan(source)
    if not np.array_equal(nan, _isnan(cube)):
        return False
    with np.errstate(invalid="ignore"):
        if not (source[~nan] == cube[~nan]).all():
            return False
    floats = source.dtype.kind == "f" and cube.dtype.kind == "f"
    return exhaustive or not floats or source.dtype == cube.dtype


def _culprit(name: str, dtype: np.dtype, decoding: Mapping[str, Any]) -> str:
    """The decoding attribute without which xarray decodes (the first one, else all)."""
    probe = np.zeros(1, dtype=dtype)
    for key in decoding:
        rest = {k: v for k, v in decoding.items() if k != key}
        try:
            decode(name, probe, rest)
        except Exception:  # whatever xarray raises on attributes it cannot use
            continue
        return key
    return ", ".join(decoding)


# Small helpers -------------------------------------------------------------------------------


def _exhaustive(dtype: np.dtype) -> bool:
    return dtype.kind in "iu" and dtype.itemsize <= _EXHAUSTIVE_BYTES


def _twin(dtype: np.dtype, kind: str) -> np.dtype:
    """The integer type of ``dtype``'s size and byte order of another signedness."""
    if dtype.kind not in "iu":
        return dtype
    return np.dtype(f"{dtype.byteorder if dtype.byteorder in '<>' else '='}{kind}{dtype.itemsize}")


def _view_dtype(dtype: np.dtype, unsigned: Any) -> np.dtype:
    """The type xarray compares ``missing_value`` with (after ``_Unsigned``)."""
    if unsigned == "true" and dtype.kind == "i":
        return _twin(dtype, "u")
    if unsigned == "false" and dtype.kind == "u":
        return _twin(dtype, "i")
    return dtype


def _numbers(value: Any) -> list[float | int | np.number]:
    out: list[float | int | np.number] = []
    for item in np.ravel(np.asarray(value)):
        if isinstance(item, np.integer | np.floating | int | float):
            out.append(item)
    return out


def _all_nan(value: Any) -> bool:
    array = np.asarray(value)
    return array.dtype.kind == "f" and array.size > 0 and bool(np.isnan(array).all())


def _isnan(values: np.ndarray) -> np.ndarray:
    return np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)


def _as_zarr_gives_back(attrs: Mapping[str, Any], dtype: np.dtype) -> list[dict[str, Any]]:
    """Decoding attributes as xarray reads them from a Zarr store, one dict per Zarr
    format: JSON numbers (int or float), lists for arrays; the fill value typed as the
    array (v2: zarr's ``fill_value``) or as a plain Python number (v3: the ``_FillValue``
    attribute through xarray's own ``FillValueCoder``). xarray decodes the two differently
    where a plain number overflows a cast that a typed one wraps."""
    plain = {}
    for key, value in attrs.items():
        if key not in DECODING_ATTRS or key == "_FillValue":
            continue
        array = np.asarray(value)
        plain[key] = json.loads(json.dumps(array.tolist() if array.ndim else array.item()))
    if "_FillValue" not in attrs:
        return [plain]
    fill = attrs["_FillValue"]
    v3 = FillValueCoder.decode(FillValueCoder.encode(fill, dtype), dtype)
    return [{**plain, "_FillValue": fill}, {**plain, "_FillValue": v3}]
