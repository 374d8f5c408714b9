"""A file's structure as ``h5dump -H`` shows it, as data: groups, datasets, their types,
dimension scales, chunking, filters and attributes (names, types, and the values that
carry meaning). Fixtures are compared with the structure recorded from real granules."""

from __future__ import annotations

from typing import Any

import h5py
import numpy as np

# Attributes whose values describe the data (compared); others (long descriptions, dates,
# file names) are compared by name and type only.
MEANING = {
    "units",
    "Units",
    "calendar",
    "axis",
    "bounds",
    "standard_name",
    "coordinates",
    "DimensionNames",
    "CodeMissingValue",
    "_FillValue",
    "CLASS",
    "NAME",
}
# Attributes holding "KEY=VALUE;" records (GPM headers): their keys are compared.
RECORDS = {"FileHeader", "FileInfo", "GridHeader"}


def summary(path: str) -> dict[str, Any]:
    """Every object of an HDF5 file by path."""
    out: dict[str, Any] = {}
    with h5py.File(path, "r") as file:
        out["/"] = _node(file)
        file.visititems(lambda name, item: out.__setitem__(name, _node(item)))
    return out


def _node(item: h5py.HLObject) -> dict[str, Any]:
    node: dict[str, Any] = {"attrs": {k: _attribute(item, k) for k in sorted(item.attrs)}}
    if isinstance(item, h5py.Group):
        node["kind"] = "group"
        return node
    node["kind"] = "dataset"
    node["dtype"] = item.dtype.str
    node["rank"] = item.ndim
    node["layout"] = "whole chunk" if item.chunks == item.shape else "chunked"
    if item.chunks is None:
        node["layout"] = "contiguous"
    node["filters"] = sorted(str(f) for f in item._filters)
    node["dims"] = [[s.name for s in item.dims[a].values()] for a in range(item.ndim)]
    return node


def _attribute(item: h5py.HLObject, name: str) -> dict[str, Any]:
    raw = item.attrs.get_id(name)
    kind = raw.get_type()
    described: dict[str, Any] = {"type": _type_text(kind)}
    if name in ("DIMENSION_LIST", "REFERENCE_LIST"):
        return described
    value = item.attrs[name]
    if name in MEANING:
        described["value"] = _plain(value)
    elif name in RECORDS:
        text = _plain(value)
        described["keys"] = [part.split("=")[0].strip() for part in text.split(";") if "=" in part]
    return described


def _type_text(kind: h5py.h5t.TypeID) -> str:
    if isinstance(kind, h5py.h5t.TypeStringID):
        pad = {0: "nullterm", 1: "nullpad", 2: "spacepad"}[kind.get_strpad()]
        return "vlen string" if kind.is_variable_str() else f"string {pad}"
    if isinstance(kind, h5py.h5t.TypeVlenID):
        return "vlen"
    if isinstance(kind, h5py.h5t.TypeCompoundID):
        return "compound"
    return np.dtype(kind.dtype).str


def _plain(value: Any) -> Any:
    if isinstance(value, bytes | np.bytes_):
        return value.decode("utf-8", "replace")
    if isinstance(value, np.ndarray):
        return [_plain(v) for v in value.tolist()] if value.ndim else _plain(value.item())
    if isinstance(value, np.generic):
        return value.item()
    return value
