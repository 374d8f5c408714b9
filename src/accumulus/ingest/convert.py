"""NetCDF4/HDF5 or NetCDF-3 → Zarr v2 (default) or v3, keeping groups, dimensions,
attributes, fill values, chunk shapes and each variable's filter chain (mapped to codecs).

A NetCDF4/HDF5 source is read with h5py, whose HDF5 has every hdf5plugin filter registered
(netCDF4's own HDF5 copy does not), so any file whose filters decode here converts. A NetCDF-3
source (classic, 64-bit offset or 64-bit data, "CDF5") is read with netCDF4 (netcdf-c): it has
one group, no chunks and no compression to keep, so its variables get ``NETCDF3_CODEC``
(zarr-python's default compression, as ``append`` gives NetCDF-3 granules) and the plan says
so. Every byte of Zarr goes through zarr-python. Conversion runs in two phases:
``plan_conversion`` inspects the whole file and resolves every variable's codecs, failing
before anything is written; then ``convert`` writes into a temporary directory beside the
destination, chunk-aligned block by block (bounded memory), consolidates metadata and renames
the directory into place. On any failure the temporary directory is removed, so a destination
either appears whole or not.

Conventions are xarray's, so ``xarray.open_zarr`` reads the result like the source file:
dimension names in ``_ARRAY_DIMENSIONS`` (v2) or ``dimension_names`` (v3); ``_FillValue``
as the v2 ``fill_value`` or, in v3, as the attribute xarray writes; CF attributes (time
units, calendar, scale_factor...) copied as they are, values left encoded, except where
Zarr cannot carry their decoding (``cf.stored_form``): fill values the type cannot hold
are dropped with a warning, and float32-packed values are stored decoded.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import zarr
from zarr.storage import LocalStore

from accumulus.destinations import check_directory
from accumulus.errors import AccumulusError, Interrupted
from accumulus.filters import (
    ArrayLayout,
    CodecConfig,
    FilterError,
    HDF5Filter,
    dataset_pipeline,
    default_registry,
    for_array,
    numcodecs_codec,
    pipeline_to_codecs,
    split_v2,
    v3_codecs,
)
from accumulus.filters.builtin import load_hdf5plugin
from accumulus.ingest.cf import (
    DECODING_ATTRS,
    LIMIT_ATTRS,
    StoredForm,
    decode,
    stored_form,
    warn_dropped,
)
from accumulus.ingest.declared import DeclaredVariable, check_chunk, itemsize
from accumulus.ingest.netcdf3 import HeaderError, declared_size
from accumulus.ingest.times import readable_time_attrs
from accumulus.stores.arrays import consolidate
from accumulus.stores.group import normalize_group
from accumulus.stores.locations import local_path

CodecSpec = Mapping[str, Any] | Sequence[Mapping[str, Any]]

# HDF5 attributes that carry netCDF-4 or dimension-scale bookkeeping, not user metadata.
_INTERNAL_ATTRIBUTES = frozenset(
    {
        "CLASS",
        "NAME",
        "REFERENCE_LIST",
        "DIMENSION_LIST",
        "_Netcdf4Dimid",
        "_Netcdf4Coordinates",
        "_nc3_strict",
        "_NCProperties",
        "_FillValue",
    }
)
_PURE_DIMENSION = b"This is a netCDF dimension but not a netCDF variable"
# netcdf-c stores a variable named like a dimension it is not the coordinate of (CF bounds
# "time_bnds" on a dimension "time_bnds", as xarray writes them) under this prefix.
NON_COORDINATE_PREFIX = "_nc4_non_coord_"
# The first four bytes of a NetCDF-3 file: "CDF" and the format version.
NETCDF3_SIGNATURES = {
    b"CDF\x01": "NetCDF-3 classic",
    b"CDF\x02": "NetCDF-3 64-bit offset",
    b"CDF\x05": "NetCDF-3 64-bit data (CDF5)",
}
HDF5_FORMAT = "NetCDF4/HDF5"
# What NetCDF-3 variables are written with (no compression to keep): zarr-python's default.
NETCDF3_CODEC: CodecConfig = {"id": "zstd", "level": 0}
# Source bytes read per write call: whole chunks, as many along the first axis as fit.
_BLOCK_BYTES = 64 * 2**20


@dataclass
class ArrayPlan:
    """One variable: where it goes and how it is encoded."""

    path: str  # relative to the root, "group/var"
    shape: tuple[int, ...]
    dtype: np.dtype
    chunks: tuple[int, ...] | None  # None: contiguous in HDF5, let zarr choose
    dimensions: tuple[str, ...]
    attributes: dict[str, Any]
    fill_value: Any
    source_filters: list[HDF5Filter]
    codecs: list[CodecConfig]  # encoding order, resolved for the dtype
    text: bool = False  # variable-length strings in the source
    # Set when values are stored decoded (cf.stored_form): the source's decoding attributes.
    decoding: Mapping[str, Any] | None = None


@dataclass
class GroupPlan:
    path: str  # "" for the root
    attributes: dict[str, Any]


@dataclass
class ConversionPlan:
    source: str
    zarr_format: int
    source_format: str = HDF5_FORMAT  # or one of NETCDF3_SIGNATURES' names
    groups: list[GroupPlan] = field(default_factory=list)
    arrays: list[ArrayPlan] = field(default_factory=list)
    note: str = ""  # what the user should know about the codecs chosen
    warn: bool = True  # of fill values dropped
    unpack: bool = False  # store float32-packed values decoded (cf.stored_form)


def convert(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    zarr_format: int = 2,
    codecs: Mapping[str, CodecSpec] | None = None,
    default_codec: CodecSpec | None = None,
    group: str | None = None,
) -> ConversionPlan:
    """Convert a NetCDF4/HDF5 or NetCDF-3 file to a Zarr directory store at ``dest`` (which
    must not exist).

    ``codecs`` maps a variable ("precip" or "group/precip") to codec JSON (one codec or a
    chain in encoding order) replacing its mapped filters; ``default_codec`` replaces the
    filters of every other variable. ``group`` converts one group and its nested groups
    only, kept at their place, with the coordinate variables their dimensions take from
    ancestor groups. Returns the plan that was carried out.
    """
    destination = local_path(dest) or Path(dest)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise AccumulusError(f"{destination}: destination exists; remove it or choose another")
    # Missing directories are made, in the nearest one that exists, which must take them.
    nearest = next(p for p in (destination.parent, *destination.parent.parents) if p.exists())
    check_directory(nearest, os.fspath(dest))
    plan = plan_conversion(
        src, zarr_format=zarr_format, codecs=codecs, default_codec=default_codec, group=group
    )
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        try:
            with _open_source(plan.source, plan.source_format) as source:
                _write(plan, source, staging)
        except OSError as exc:  # data past the end of a truncated file, a damaged chunk
            raise AccumulusError(f"{plan.source}: reading failed ({exc})") from None
        if destination.exists():
            destination.rmdir()  # empty, checked above
        staging.rename(destination)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"nothing was written to {dest}; run the command again") from None
        raise
    return plan


# Planning ------------------------------------------------------------------------------------


def plan_conversion(
    src: str | os.PathLike[str],
    *,
    zarr_format: int = 2,
    codecs: Mapping[str, CodecSpec] | None = None,
    default_codec: CodecSpec | None = None,
    warn: bool = True,
    group: str | None = None,
) -> ConversionPlan:
    """Inspect ``src`` and resolve every variable's codecs (of ``group`` and its nested
    groups only, when given); raise before anything is written. Warns of fill values
    dropped (unless ``warn`` is false: the plan is only consulted)."""
    source = os.fspath(src)
    if not Path(source).is_file():
        raise AccumulusError(f"{source}: no such file")
    source_format = detect_format(source)
    with _open_source(source, source_format) as file:
        return plan_file(
            file,
            source,
            source_format,
            zarr_format=zarr_format,
            codecs=codecs,
            default_codec=default_codec,
            warn=warn,
            unpack=True,
            group=group,
        )


def plan_file(
    file: Any,
    source: str,
    source_format: str = HDF5_FORMAT,
    *,
    zarr_format: int = 2,
    codecs: Mapping[str, CodecSpec] | None = None,
    default_codec: CodecSpec | None = None,
    warn: bool = True,
    unpack: bool = False,
    group: str | None = None,
) -> ConversionPlan:
    """``plan_conversion`` of an open file (an ``h5py.File``, local or remote, or a netCDF-3
    ``netCDF4.Dataset``); ``source`` names it in messages. ``unpack``: store float32-packed
    values decoded, as ``convert`` does (a virtual cube references the stored bytes, and
    keeps them packed)."""
    if zarr_format not in (2, 3):
        raise AccumulusError(f"--zarr-format must be 2 or 3, got {zarr_format}")
    load_hdf5plugin()  # so h5py decodes every hdf5plugin filter
    overrides = {name.strip("/"): _as_chain(spec, name) for name, spec in (codecs or {}).items()}
    default = _as_chain(default_codec, "default") if default_codec is not None else None
    plan = ConversionPlan(source, zarr_format, source_format, warn=warn, unpack=unpack)
    if source_format == HDF5_FORMAT:
        top = source_group(file, group, source)
        _plan_ancestors(top, plan, overrides, default)
        _plan_group(top, plan, overrides, default)
    elif normalize_group(group):
        raise AccumulusError(f"{source}: a NetCDF-3 file has no groups (--group {group})")
    else:
        _plan_netcdf3(file, plan, overrides, default)
    unknown = sorted(set(overrides) - {array.path for array in plan.arrays})
    if unknown:
        known = [array.path for array in plan.arrays]
        raise AccumulusError(f"{source}: --codec names no variable {unknown}; variables: {known}")
    return plan


def detect_format(path: str) -> str:
    """``HDF5_FORMAT`` or the NetCDF-3 variant, from the file's signature."""
    if h5py.is_hdf5(path):
        return HDF5_FORMAT
    with open(path, "rb") as file:
        signature = file.read(4)
    if signature in NETCDF3_SIGNATURES:
        return NETCDF3_SIGNATURES[signature]
    raise AccumulusError(
        f"{path}: not a NetCDF file (neither an HDF5 signature nor NetCDF-3's 'CDF' with "
        f"version 1, 2 or 5; it starts with {signature!r})"
    )


def _open_source(path: str, source_format: str) -> Any:
    """The source file, open for reading: ``file[path][region]`` reads values as stored."""
    if source_format == HDF5_FORMAT:
        try:
            return h5py.File(path, "r")
        except OSError as exc:  # a truncated or damaged file: h5py says what it found
            raise AccumulusError(f"{path}: cannot be read as NetCDF4/HDF5 ({exc})") from None
    import netCDF4

    _check_complete(path, source_format)
    try:
        file = netCDF4.Dataset(path, "r")
    except OSError as exc:
        raise AccumulusError(f"{path}: cannot read it as {source_format}: {exc}") from None
    file.set_auto_maskandscale(False)  # values as stored; CF attributes are copied
    file.set_auto_chartostring(False)  # character arrays stay arrays of single bytes
    return file


def _check_complete(path: str, source_format: str) -> None:
    """Refuse a NetCDF-3 file shorter than its header says (netcdf-c would read zeros)."""
    size = os.path.getsize(path)
    length = 2**16
    with open(path, "rb") as file:
        while True:
            file.seek(0)
            header = file.read(length)
            try:
                needed = declared_size(header)
                break
            except HeaderError as exc:
                if len(header) < length or length >= size:
                    raise AccumulusError(
                        f"{path}: not a readable {source_format} file: {exc}"
                    ) from None
                length *= 4
    if size < needed:
        raise AccumulusError(
            f"{path}: truncated {source_format} file: its header declares {needed} bytes, "
            f"the file has {size}"
        )


def _as_chain(spec: CodecSpec | None, label: str) -> list[CodecConfig]:
    chain = [spec] if isinstance(spec, Mapping) else list(spec or [])
    for config in chain:
        if not isinstance(config, Mapping):
            raise AccumulusError(f"--codec {label}: expected a JSON object or list, got {config!r}")
        try:
            numcodecs_codec(config)  # unknown id or keys: numcodecs' verdict, in one line
        except FilterError as exc:
            raise AccumulusError(f"--codec {label}: {exc}") from None
    return [dict(config) for config in chain]


def source_group(file: h5py.File, group: str | None, source: str) -> h5py.Group:
    path = normalize_group(group)
    node = file.get(path) if path else file
    if not isinstance(node, h5py.Group):
        groups = ["/"]
        file.visititems(
            lambda name, item: groups.append(name) if isinstance(item, h5py.Group) else None
        )
        raise AccumulusError(f"{source}: no group {group!r}; its groups are {', '.join(groups)}")
    return node


def _plan_ancestors(
    top: h5py.Group,
    plan: ConversionPlan,
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> None:
    """The groups above ``top`` (their attributes), and the dimension scales they hold that
    variables under ``top`` use (netCDF-4 scoping), with those scales' CF bounds."""
    if top.name == "/":
        return
    used: set[str] = set()

    def collect(name: str, item: h5py.HLObject) -> None:
        if isinstance(item, h5py.Dataset) and item.attrs.get("CLASS", b"") != b"DIMENSION_SCALE":
            for axis in range(item.ndim):
                used.update(scale.name for scale in item.dims[axis].values())

    top.visititems(collect)
    node = top.parent
    chain = []
    while True:
        chain.append(node)
        if node.name == "/":
            break
        node = node.parent
    for ancestor in reversed(chain):
        plan.groups.append(GroupPlan(ancestor.name.strip("/"), _attributes(ancestor, plan.source)))
        phony: dict[int, str] = {}
        for item in ancestor.values():
            if not isinstance(item, h5py.Dataset) or item.name not in used:
                continue
            if _is_pure_dimension(item):
                continue
            plan.arrays.append(_plan_array(item, plan, phony, overrides, default))
            bounds = _json_value(item.attrs.get("bounds"))
            if isinstance(bounds, str) and isinstance(ancestor.get(bounds), h5py.Dataset):
                plan.arrays.append(_plan_array(ancestor[bounds], plan, phony, overrides, default))


def _plan_group(
    group: h5py.Group,
    plan: ConversionPlan,
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> None:
    path = group.name.strip("/")
    plan.groups.append(GroupPlan(path, _attributes(group, plan.source)))
    phony: dict[int, str] = {}  # dimension size -> phony name, shared within the group
    for item in group.values():
        if isinstance(item, h5py.Group):
            _plan_group(item, plan, overrides, default)
        elif isinstance(item, h5py.Dataset) and not _is_pure_dimension(item):
            plan.arrays.append(_plan_array(item, plan, phony, overrides, default))


def netcdf_path(hdf5_path: str) -> str:
    """A dataset's path in an HDF5 file as netCDF-4 names the variable."""
    parent, _, name = hdf5_path.strip("/").rpartition("/")
    name = name.removeprefix(NON_COORDINATE_PREFIX)
    return f"{parent}/{name}" if parent else name


def hdf5_dataset(group: h5py.Group, name: str) -> h5py.Dataset | None:
    """The dataset of netCDF-4 variable ``name`` in ``group``, or None."""
    for key in (name, NON_COORDINATE_PREFIX + name):
        item = group.get(key)
        if isinstance(item, h5py.Dataset) and not _is_pure_dimension(item):
            return item
    return None


def _plan_array(
    dataset: h5py.Dataset,
    plan: ConversionPlan,
    phony: dict[int, str],
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> ArrayPlan:
    path = netcdf_path(dataset.name)
    where = f"{plan.source}: variable {path!r}"
    dtype = _zarr_dtype(dataset, where)
    declared = DeclaredVariable(path, (), dataset.shape, itemsize(dtype), dataset.chunks)
    check_chunk(plan.source, declared)  # each is read whole, whatever part of it is asked
    text = dtype.kind == "O"
    pipeline = dataset_pipeline(dataset)
    for stage in pipeline:  # h5py must decode every stage to read the source at all
        if not h5py.h5z.filter_avail(stage.hdf5_id):
            provider = default_registry().hdf5_sides.get(stage.hdf5_id)
            hint = f" ({provider.provider} provides it)" if provider else ""
            raise AccumulusError(
                f"{where}: HDF5 filter {stage.hdf5_id} ({stage.name}) is not available to read "
                f"the data here{hint}"
            )

    form, decoding = (None, None) if text else _stored_form(dataset.attrs, path, dtype, plan)
    if form is not None:
        dtype = form.dtype

    def kept() -> list[CodecConfig]:
        if text:
            return []  # variable-length strings: HDF5 filters never apply, nor a default
        try:
            _check_codec_sides(pipeline)
            chain = pipeline_to_codecs(pipeline)
            return chain if decoding is None else _retyped(chain)
        except FilterError as exc:
            raise FilterError(f"{exc}; or choose another with --codec {path}='<json>'") from None

    # A contiguous source gets zarr's automatic chunks, whole small arrays; szip's scanline
    # depends on the chunk only when it holds fewer than 4096 values.
    layout = ArrayLayout(dtype, dataset.shape, dataset.chunks or dataset.shape)
    chain = _resolve_chain(path, where, layout, text, kept, overrides, default, plan.zarr_format)
    attributes = readable_time_attrs(_attributes(dataset, plan.source))
    if form is not None:
        attributes = _with_form(attributes, form)
    if text and plan.zarr_format == 2:
        # netcdf-c reads Zarr v2 strings only as fixed-width bytes ("|S<n>"), not as
        # numcodecs' vlen-utf8 objects; _Encoding tells xarray to decode them to str.
        dtype = np.dtype(f"S{_utf8_width(dataset)}")
        attributes["_Encoding"] = "utf-8"
    return ArrayPlan(
        path=path,
        shape=dataset.shape,
        dtype=dtype,
        chunks=dataset.chunks,
        dimensions=_dimension_names(dataset, phony),
        attributes=attributes,
        fill_value=_fill_value(form),
        source_filters=pipeline,
        codecs=chain,
        text=text,
        decoding=decoding,
    )


def _resolve_chain(
    path: str,
    where: str,
    layout: ArrayLayout,
    text: bool,
    kept: Callable[[], list[CodecConfig]],
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
    zarr_format: int,
) -> list[CodecConfig]:
    """A variable's codecs: its --codec, else the default --codec, else ``kept()`` (what the
    source's filters map to), resolved for the array and checked for the Zarr format."""
    try:
        if path in overrides:
            chain = overrides[path]
        elif default is not None and not text:
            chain = default
        else:
            chain = kept()
        if not text:
            chain = for_array(chain, layout.dtype, layout.shape, layout.chunks)
        _check_codecs(chain, zarr_format, text)
    except FilterError as exc:
        raise AccumulusError(f"{where}: {exc}") from None
    return chain


def _plan_netcdf3(
    file: Any,
    plan: ConversionPlan,
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> None:
    """A NetCDF-3 file: one group, numbers and characters, contiguous and uncompressed."""
    plan.groups.append(GroupPlan("", _netcdf3_attributes(file)))
    for variable in file.variables.values():
        path = variable.name
        where = f"{plan.source}: variable {path!r}"
        native = {name: variable.getncattr(name) for name in variable.ncattrs()}
        dtype = np.dtype(variable.dtype)
        form, decoding = None, None
        if dtype.kind in "iuf":
            form, decoding = _stored_form(native, path, dtype, plan)
            dtype = form.dtype
        layout = ArrayLayout(dtype, tuple(variable.shape), tuple(variable.shape))
        chain = _resolve_chain(
            path,
            where,
            layout,
            False,
            lambda: [NETCDF3_CODEC],
            overrides,
            default,
            plan.zarr_format,
        )
        attributes = readable_time_attrs(_netcdf3_attributes(variable))
        plan.arrays.append(
            ArrayPlan(
                path=path,
                shape=tuple(variable.shape),
                dtype=dtype,
                chunks=None,  # contiguous: zarr chooses
                dimensions=tuple(variable.dimensions),
                attributes=attributes if form is None else _with_form(attributes, form),
                fill_value=_fill_value(form),
                source_filters=[],
                codecs=chain,
                decoding=decoding,
            )
        )
    defaulted = [a.path for a in plan.arrays if a.path not in overrides and default is None]
    if defaulted:
        count = f"{len(defaulted)} of {len(plan.arrays)}"
        if len(defaulted) == len(plan.arrays):
            count = "all" if len(defaulted) > 1 else "its"
        plan.note = (
            f"{plan.source_format} has no compression to keep: {count} arrays written with the "
            f"default codec {json.dumps(NETCDF3_CODEC)}"
        )


def _netcdf3_attributes(node: Any) -> dict[str, Any]:
    """A NetCDF-3 group's or variable's attributes (text or numbers, always JSON-able)."""
    return {
        name: _json_value(node.getncattr(name))
        for name in node.ncattrs()
        if name not in _INTERNAL_ATTRIBUTES
    }


def _check_codec_sides(pipeline: Sequence[HDF5Filter]) -> None:
    registry = default_registry()
    for stage in pipeline:
        side = registry.codec_side(stage.hdf5_id)
        problem = side.availability()
        if problem:
            raise FilterError(
                f"HDF5 filter {stage.hdf5_id} ({stage.name}) maps to codec {side.codec_id!r}, "
                f"which is not usable here ({problem})"
            )


def _zarr_dtype(dataset: h5py.Dataset, where: str) -> np.dtype:
    dtype = dataset.dtype
    string_info = h5py.check_string_dtype(dtype)
    if string_info is not None and string_info.length is None:
        return np.dtype(object)  # variable-length strings: zarr's string dtype
    if dtype.kind in "biufS" and dtype.fields is None:
        return dtype
    raise AccumulusError(
        f"{where}: HDF5 type {dtype} (compound, enum, reference or variable-length) "
        "is not supported; only numbers, booleans and strings convert"
    )


def _check_codecs(chain: list[CodecConfig], zarr_format: int, text: bool) -> None:
    if text and chain:
        raise FilterError("variable-length strings take no HDF5 filters; remove its --codec")
    if zarr_format == 3:
        v3_codecs(chain)
    else:
        for config in chain:
            numcodecs_codec(config)


def _is_pure_dimension(dataset: h5py.Dataset) -> bool:
    """netCDF-4 stores a dimension without a coordinate variable as an empty scale."""
    name = dataset.attrs.get("NAME", b"")
    return isinstance(name, bytes) and name.startswith(_PURE_DIMENSION)


def _dimension_names(dataset: h5py.Dataset, phony: dict[int, str]) -> tuple[str, ...]:
    names = []
    is_scale = dataset.attrs.get("CLASS", b"") == b"DIMENSION_SCALE"
    # GPM files without dimension scales name each variable's dimensions in an attribute.
    declared = _json_value(dataset.attrs.get("DimensionNames"))
    declared = [d.strip() for d in declared.split(",")] if isinstance(declared, str) else []
    for axis, size in enumerate(dataset.shape):
        if axis == 0 and is_scale:
            names.append(dataset.name.rsplit("/", 1)[-1])
            continue
        scales = list(dataset.dims[axis].values()) if not is_scale else []
        if scales:
            names.append(scales[0].name.rsplit("/", 1)[-1])
        elif len(declared) == dataset.ndim and declared[axis]:
            names.append(declared[axis])
        else:  # no dimension scale: netcdf-c's convention, one phony name per size
            names.append(phony.setdefault(size, f"phony_dim_{len(phony)}"))
    return tuple(names)


def _stored_form(
    attrs: Mapping[str, Any], path: str, dtype: np.dtype, plan: ConversionPlan
) -> tuple[StoredForm, dict[str, Any] | None]:
    """How the cube stores a numeric variable (``cf.stored_form``), from its attributes as
    netCDF4 presents them; and, when its values are stored decoded, the attributes that
    decode them. Fill values its type cannot hold are dropped with a warning."""
    native = {}
    for key in (*DECODING_ATTRS, *LIMIT_ATTRS):
        if key in attrs:
            value = attrs[key]
            if isinstance(value, bytes | np.bytes_):
                value = value.decode("utf-8", "replace")
            elif isinstance(value, np.ndarray) and value.size == 1:
                value = value.reshape(-1)[0]  # HDF5 attributes of netCDF-4: 1-element arrays
            native[key] = value
    form = stored_form(path, dtype, native, plan.source, unpack=plan.unpack)
    if plan.warn:
        warn_dropped(plan.source, path, form)
    return form, native if form.unpacked else None


def _with_form(attributes: dict[str, Any], form: StoredForm) -> dict[str, Any]:
    """The attributes with the decoding ones (and limits) as the cube stores them; the fill
    value goes to the array's metadata."""
    out = {k: v for k, v in attributes.items() if k not in (*DECODING_ATTRS, *LIMIT_ATTRS)}
    for key, value in form.attrs.items():
        if key in (*DECODING_ATTRS, *LIMIT_ATTRS) and key != "_FillValue":
            out[key] = _json_value(np.asarray(value))
    return out


def _fill_value(form: StoredForm | None) -> Any:
    """The array's fill value: the form's, as a plain number."""
    if form is None or form.fill_value is None:
        return None
    return form.fill_value.item()


def _retyped(chain: list[CodecConfig]) -> list[CodecConfig]:
    """A variable's codec chain for its decoded values: element sizes follow the new type;
    codecs bound to the packed type cannot be kept."""
    out = []
    for config in chain:
        if "dtype" in config or "astype" in config:
            raise FilterError(
                f"codec {config.get('id')!r} works on the packed type, but the values are "
                "stored decoded (float32 packing: Zarr attributes cannot say float32)"
            )
        out.append({**config, "elementsize": 0} if "elementsize" in config else dict(config))
    return out


def _attributes(node: h5py.HLObject, source: str) -> dict[str, Any]:
    attributes = {}
    for name in node.attrs:
        if name in _INTERNAL_ATTRIBUTES:
            continue
        try:
            value = node.attrs[name]
        except OSError as exc:  # an attribute HDF5 cannot read (unknown type)
            raise AccumulusError(f"{source}: {node.name}: attribute {name!r}: {exc}") from None
        converted = _json_value(value)
        if converted is not _UNSUPPORTED:
            attributes[name] = converted
    return attributes


_UNSUPPORTED = object()


def _json_value(value: Any) -> Any:
    """An HDF5 attribute as netCDF4 presents it: text as str, length-1 arrays as scalars."""
    if isinstance(value, bytes | np.bytes_):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O" and value.size and not isinstance(value.flat[0], str | bytes):
            return _UNSUPPORTED  # object references (dimension lists and the like)
        items = [_json_value(v) for v in value.reshape(-1)]
        return items[0] if len(items) == 1 else items
    if isinstance(value, np.generic):
        return value.item()
    return _UNSUPPORTED


# Writing -------------------------------------------------------------------------------------


def _write(plan: ConversionPlan, source: Any, staging: Path) -> None:
    store = LocalStore(staging)
    root = zarr.open_group(store=store, mode="w", zarr_format=plan.zarr_format)
    for group in plan.groups:
        node = root if not group.path else root.require_group(group.path)
        node.attrs.update(group.attributes)
    for array_plan in plan.arrays:
        array = create_zarr_array(root, array_plan, plan.zarr_format)
        _copy_data(_source_variable(source, array_plan.path), array, array_plan, plan.source)
    consolidate(store)


def _source_variable(source: Any, path: str) -> Any:
    """The variable at ``path`` (as netCDF names it) of an open HDF5 or NetCDF-3 file."""
    if not isinstance(source, h5py.File):
        return source[path]
    parent, _, name = path.rpartition("/")
    return hdf5_dataset(source[parent] if parent else source, name)


def create_zarr_array(
    root: zarr.Group,
    plan: ArrayPlan,
    zarr_format: int,
    chunk_key_encoding: dict[str, str] | None = None,
) -> zarr.Array:
    """The Zarr array (metadata only) a plan describes, in xarray's conventions; with
    ``chunk_key_encoding`` (v3) other than zarr's default."""
    attributes = dict(plan.attributes)
    options: dict[str, Any] = {}
    if chunk_key_encoding is not None:
        options["chunk_key_encoding"] = chunk_key_encoding
    if zarr_format == 2:
        attributes["_ARRAY_DIMENSIONS"] = list(plan.dimensions)
        options["fill_value"] = plan.fill_value
        if plan.fill_value is not None:
            # netcdf-c takes _FillValue from the attributes only (as it writes it itself);
            # xarray reads the same value from fill_value.
            attributes["_FillValue"] = plan.fill_value
        if not plan.text:
            filters, compressor = split_v2(plan.codecs)
            options["filters"] = [numcodecs_codec(c) for c in filters] if filters else None
            options["compressors"] = numcodecs_codec(compressor) if compressor else None
    else:
        options["dimension_names"] = list(plan.dimensions)
        if plan.fill_value is not None:
            # xarray's own encoding of _FillValue for v3 (base64 for floats), so it masks.
            from xarray.backends.zarr import FillValueCoder

            options["fill_value"] = plan.fill_value
            attributes["_FillValue"] = FillValueCoder.encode(plan.fill_value, plan.dtype)
        if not plan.text:
            codecs = v3_codecs(plan.codecs)
            options.update(
                filters=codecs.filters, serializer=codecs.serializer, compressors=codecs.compressors
            )
    return root.create_array(
        plan.path,
        shape=plan.shape,
        dtype=str if plan.dtype.kind == "O" else plan.dtype,  # v3 text: zarr's string type
        chunks=plan.chunks or "auto",
        attributes=attributes,
        **options,
    )


def _copy_data(dataset: Any, array: zarr.Array, plan: ArrayPlan, source: str) -> None:
    if array.size == 0:
        return
    chain = " → ".join(f"{s.name or '?'} ({s.hdf5_id})" for s in plan.source_filters) or "none"
    for region in _blocks(array.shape, array.chunks, array.dtype.itemsize):
        try:
            block = dataset[region]
        except (OSError, RuntimeError) as exc:  # HDF5: a failed filter; netcdf-c: a short file
            raise AccumulusError(
                f"{source}: variable {plan.path!r}: cannot read the chunk(s) at "
                f"{_region_text(region)} through filters {chain}: {exc}"
            ) from None
        if plan.text:
            block = _text_block(block, plan.dtype)
        elif plan.decoding is not None:
            block = decode(plan.path, block, plan.decoding).astype(plan.dtype, copy=False)
        array[region] = block


def _blocks(
    shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int
) -> Iterator[tuple[slice, ...]]:
    """Chunk-aligned regions covering ``shape``: single chunks, widened along the first axis
    while a region stays under the byte budget (fewer, larger h5py reads and zarr writes)."""
    if not shape:
        yield ()
        return
    chunk_bytes = math.prod(chunks) * max(itemsize, 1)
    widen = max(1, _BLOCK_BYTES // max(chunk_bytes, 1))
    steps = (chunks[0] * widen, *chunks[1:])
    starts = [range(0, size, step) for size, step in zip(shape, steps, strict=True)]
    for corner in itertools.product(*starts):
        yield tuple(
            slice(start, min(start + step, size))
            for start, step, size in zip(corner, steps, shape, strict=True)
        )


def _region_text(region: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in region) + "]"


def _text_block(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Strings as the destination stores them: str objects, or UTF-8 bytes of fixed width."""
    texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in block.flat]
    if dtype.kind == "S":
        return np.array([t.encode("utf-8") for t in texts], dtype=dtype).reshape(block.shape)
    return np.array(texts, dtype=object).reshape(block.shape)


def _utf8_width(dataset: h5py.Dataset) -> int:
    """The longest string of a variable-length string dataset, in UTF-8 bytes (at least 1)."""
    width = 1
    for region in _blocks(dataset.shape, dataset.chunks or dataset.shape, 64):
        for value in np.asarray(dataset[region]).flat:
            text = value if isinstance(value, bytes) else str(value).encode("utf-8")
            width = max(width, len(text))
    return width


def parse_codec_options(
    options: Sequence[str],
) -> tuple[dict[str, CodecSpec], CodecSpec | None]:
    """``--codec VAR='<json>'`` and ``--codec '<json>'`` (the default for all variables) as
    (per-variable codecs, default). JSON is one codec object or a list of them."""
    per_variable: dict[str, CodecSpec] = {}
    default: CodecSpec | None = None
    for option in options:
        text = option.strip()
        name, _, body = ("", "", text) if text[:1] in "{[" else text.partition("=")
        label = f"--codec {name}" if name else "--codec"
        if not body.strip():
            raise AccumulusError(f"{label}: expected VAR='<json>' or '<json>', got {option!r}")
        try:
            spec = json.loads(body)
        except json.JSONDecodeError as exc:
            raise AccumulusError(f"{label}: invalid JSON {body!r}: {exc}") from None
        if not isinstance(spec, dict | list):
            raise AccumulusError(f"{label}: expected a JSON object or list, got {body!r}")
        if name:
            per_variable[name.strip().strip("/")] = spec
        elif default is not None:
            raise AccumulusError("--codec: more than one default codec given")
        else:
            default = spec
    return per_variable, default
