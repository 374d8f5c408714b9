"""The file a conversion reads: its format (by signature), opened to read values as stored,
its groups, datasets, dimensions and attributes as netCDF-4 names them, and the
chunk-aligned regions it is read in."""

from __future__ import annotations

import itertools
import math
import os
from collections.abc import Iterator
from typing import Any

import h5py
import numpy as np

from accumulus.errors import AccumulusError
from accumulus.ingest.netcdf3_header import NETCDF3_SIGNATURES, HeaderError, declared_size
from accumulus.stores.group import normalize_group

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
HDF5_FORMAT = "NetCDF4/HDF5"
# Source bytes read per write call: whole chunks, as many along the first axis as fit.
BLOCK_BYTES = 64 * 2**20


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


def open_source(path: str, source_format: str) -> Any:
    """The source file, open for reading: ``file[path][region]`` reads values as stored."""
    if source_format == HDF5_FORMAT:
        try:
            return h5py.File(path, "r")
        except OSError as exc:  # a truncated or damaged file: h5py says what it found
            raise AccumulusError(f"{path}: cannot be read as NetCDF4/HDF5 ({exc})") from None
    import netCDF4

    check_complete(path, source_format)
    try:
        file = netCDF4.Dataset(path, "r")
    except OSError as exc:
        raise AccumulusError(f"{path}: cannot read it as {source_format}: {exc}") from None
    file.set_auto_maskandscale(False)  # values as stored; CF attributes are copied
    file.set_auto_chartostring(False)  # character arrays stay arrays of single bytes
    return file


def check_complete(path: str, source_format: str, where: str | None = None) -> None:
    """Refuse a NetCDF-3 file shorter than its header says (netcdf-c would read zeros);
    ``where`` names it in messages (by default its path)."""
    where = where or path
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
                        f"{where}: not a readable {source_format} file: {exc}"
                    ) from None
                length *= 4
    if size < needed:
        raise AccumulusError(
            f"{where}: truncated {source_format} file: its header declares {needed} bytes, "
            f"the file has {size}"
        )


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


def netcdf_path(hdf5_path: str) -> str:
    """A dataset's path in an HDF5 file as netCDF-4 names the variable."""
    parent, _, name = hdf5_path.strip("/").rpartition("/")
    name = name.removeprefix(NON_COORDINATE_PREFIX)
    return f"{parent}/{name}" if parent else name


def hdf5_dataset(group: h5py.Group, name: str) -> h5py.Dataset | None:
    """The dataset of netCDF-4 variable ``name`` in ``group``, or None."""
    for key in (name, NON_COORDINATE_PREFIX + name):
        item = group.get(key)
        if isinstance(item, h5py.Dataset) and not is_pure_dimension(item):
            return item
    return None


def source_variable(source: Any, path: str) -> Any:
    """The variable at ``path`` (as netCDF names it) of an open HDF5 or NetCDF-3 file."""
    if not isinstance(source, h5py.File):
        return source[path]
    parent, _, name = path.rpartition("/")
    return hdf5_dataset(source[parent] if parent else source, name)


def is_pure_dimension(dataset: h5py.Dataset) -> bool:
    """netCDF-4 stores a dimension without a coordinate variable as an empty scale."""
    name = dataset.attrs.get("NAME", b"")
    return isinstance(name, bytes) and name.startswith(_PURE_DIMENSION)


def hdf5_dimension_names(dataset: h5py.Dataset, phony: dict[int, str]) -> tuple[str, ...]:
    names = []
    is_scale = dataset.attrs.get("CLASS", b"") == b"DIMENSION_SCALE"
    # GPM files without dimension scales name each variable's dimensions in an attribute.
    declared = json_value(dataset.attrs.get("DimensionNames"))
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


def hdf5_attributes(node: h5py.HLObject, source: str) -> dict[str, Any]:
    attributes = {}
    for name in node.attrs:
        if name in _INTERNAL_ATTRIBUTES:
            continue
        try:
            value = node.attrs[name]
        except OSError as exc:  # an attribute HDF5 cannot read (unknown type)
            raise AccumulusError(f"{source}: {node.name}: attribute {name!r}: {exc}") from None
        converted = json_value(value)
        if converted is not _UNSUPPORTED:
            attributes[name] = converted
    return attributes


def netcdf3_attributes(node: Any) -> dict[str, Any]:
    """A NetCDF-3 group's or variable's attributes (text or numbers, always JSON-able)."""
    return {
        name: json_value(node.getncattr(name))
        for name in node.ncattrs()
        if name not in _INTERNAL_ATTRIBUTES
    }


_UNSUPPORTED = object()


def json_value(value: Any) -> Any:
    """An HDF5 attribute as netCDF4 presents it: text as str, length-1 arrays as scalars."""
    if isinstance(value, bytes | np.bytes_):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.kind == "O" and value.size and not isinstance(value.flat[0], str | bytes):
            return _UNSUPPORTED  # object references (dimension lists and the like)
        items = [json_value(v) for v in value.reshape(-1)]
        return items[0] if len(items) == 1 else items
    if isinstance(value, np.generic):
        return value.item()
    return _UNSUPPORTED


def blocks(
    shape: tuple[int, ...], chunks: tuple[int, ...], itemsize: int
) -> Iterator[tuple[slice, ...]]:
    """Chunk-aligned regions covering ``shape``: single chunks, widened along the first axis
    while a region stays under the byte budget (fewer, larger h5py reads and zarr writes)."""
    if not shape:
        yield ()
        return
    chunk_bytes = math.prod(chunks) * max(itemsize, 1)
    widen = max(1, BLOCK_BYTES // max(chunk_bytes, 1))
    steps = (chunks[0] * widen, *chunks[1:])
    starts = [range(0, size, step) for size, step in zip(shape, steps, strict=True)]
    for corner in itertools.product(*starts):
        yield tuple(
            slice(start, min(start + step, size))
            for start, step, size in zip(corner, steps, shape, strict=True)
        )
