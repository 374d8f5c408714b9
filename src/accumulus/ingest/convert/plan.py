"""The first phase of a conversion: the whole file inspected and every variable's codecs,
dimensions, attributes and fill value resolved, failing before anything is written."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict, Unpack

import h5py
import numpy as np

from accumulus.errors import AccumulusError
from accumulus.filters import (
    ArrayLayout,
    CodecConfig,
    FilterError,
    HDF5Filter,
    dataset_pipeline,
    default_registry,
    pipeline_to_codecs,
)
from accumulus.filters.builtin import load_hdf5plugin
from accumulus.ingest.cf import DECODING_ATTRS, LIMIT_ATTRS, StoredForm, stored_form, warn_dropped
from accumulus.ingest.convert.codecs import (
    NETCDF3_CODEC,
    CodecSpec,
    as_chain,
    check_codec_sides,
    resolve_chain,
    retyped,
)
from accumulus.ingest.convert.source import (
    HDF5_FORMAT,
    blocks,
    detect_format,
    hdf5_attributes,
    hdf5_dimension_names,
    is_pure_dimension,
    json_value,
    netcdf3_attributes,
    netcdf_path,
    open_source,
    source_group,
)
from accumulus.ingest.declared import DeclaredVariable, check_chunk, itemsize
from accumulus.ingest.times import readable_time_attrs
from accumulus.stores.group import normalize_group


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

    def codec_chains(self) -> dict[str, list[CodecConfig]]:
        """Per array path, its codec chain (encoding order)."""
        return {array.path: list(array.codecs) for array in self.arrays}


class ConversionOptions(TypedDict, total=False):
    """What a conversion is asked: the keyword arguments ``convert`` and ``plan_conversion``
    hand on to ``plan_file`` (which holds their defaults): ``zarr_format``, 2 (the default)
    or 3; ``codecs`` and ``default_codec``, codec JSON for named variables and for every
    other (see ``convert``); ``warn`` of fill values dropped (default true); ``group``, the
    group converted with its nested groups (default: all)."""

    zarr_format: int
    codecs: Mapping[str, CodecSpec] | None
    default_codec: CodecSpec | None
    warn: bool
    group: str | None


def plan_conversion(
    src: str | os.PathLike[str], **options: Unpack[ConversionOptions]
) -> ConversionPlan:
    """Inspect ``src`` and resolve every variable's codecs (of ``group`` and its nested
    groups only, when given); raise before anything is written. Warns of fill values
    dropped (unless ``warn`` is false: the plan is only consulted)."""
    source = os.fspath(src)
    if not Path(source).is_file():
        raise AccumulusError(f"{source}: no such file")
    source_format = detect_format(source)
    with open_source(source, source_format) as file:
        return plan_file(file, source, source_format, unpack=True, **options)


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
    overrides = {name.strip("/"): as_chain(spec, name) for name, spec in (codecs or {}).items()}
    default = as_chain(default_codec, "default") if default_codec is not None else None
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
        plan.groups.append(
            GroupPlan(ancestor.name.strip("/"), hdf5_attributes(ancestor, plan.source))
        )
        phony: dict[int, str] = {}
        for item in ancestor.values():
            if not isinstance(item, h5py.Dataset) or item.name not in used:
                continue
            if is_pure_dimension(item):
                continue
            plan.arrays.append(_plan_array(item, plan, phony, overrides, default))
            bounds = json_value(item.attrs.get("bounds"))
            if isinstance(bounds, str) and isinstance(ancestor.get(bounds), h5py.Dataset):
                plan.arrays.append(_plan_array(ancestor[bounds], plan, phony, overrides, default))


def _plan_group(
    group: h5py.Group,
    plan: ConversionPlan,
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> None:
    path = group.name.strip("/")
    plan.groups.append(GroupPlan(path, hdf5_attributes(group, plan.source)))
    phony: dict[int, str] = {}  # dimension size -> phony name, shared within the group
    for item in group.values():
        if isinstance(item, h5py.Group):
            _plan_group(item, plan, overrides, default)
        elif isinstance(item, h5py.Dataset) and not is_pure_dimension(item):
            plan.arrays.append(_plan_array(item, plan, phony, overrides, default))


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
            check_codec_sides(pipeline)
            chain = pipeline_to_codecs(pipeline)
            return chain if decoding is None else retyped(chain)
        except FilterError as exc:
            raise FilterError(f"{exc}; or choose another with --codec {path}='<json>'") from None

    # A contiguous source gets zarr's automatic chunks, whole small arrays; szip's scanline
    # depends on the chunk only when it holds fewer than 4096 values.
    layout = ArrayLayout(dtype, dataset.shape, dataset.chunks or dataset.shape)
    chain = resolve_chain(path, where, layout, text, kept, overrides, default, plan.zarr_format)
    attributes = readable_time_attrs(hdf5_attributes(dataset, plan.source))
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
        dimensions=hdf5_dimension_names(dataset, phony),
        attributes=attributes,
        fill_value=_fill_value(form),
        source_filters=pipeline,
        codecs=chain,
        text=text,
        decoding=decoding,
    )


def _plan_netcdf3(
    file: Any,
    plan: ConversionPlan,
    overrides: Mapping[str, list[CodecConfig]],
    default: list[CodecConfig] | None,
) -> None:
    """A NetCDF-3 file: one group, numbers and characters, contiguous and uncompressed."""
    plan.groups.append(GroupPlan("", netcdf3_attributes(file)))
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
        chain = resolve_chain(
            path,
            where,
            layout,
            False,
            lambda: [NETCDF3_CODEC],
            overrides,
            default,
            plan.zarr_format,
        )
        attributes = readable_time_attrs(netcdf3_attributes(variable))
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
            out[key] = json_value(np.asarray(value))
    return out


def _fill_value(form: StoredForm | None) -> Any:
    """The array's fill value: the form's, as a plain number."""
    if form is None or form.fill_value is None:
        return None
    return form.fill_value.item()


def _utf8_width(dataset: h5py.Dataset) -> int:
    """The longest string of a variable-length string dataset, in UTF-8 bytes (at least 1)."""
    width = 1
    for region in blocks(dataset.shape, dataset.chunks or dataset.shape, 64):
        for value in np.asarray(dataset[region]).flat:
            text = value if isinstance(value, bytes) else str(value).encode("utf-8")
            width = max(width, len(text))
    return width
