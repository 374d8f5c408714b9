"""netcdf-c's NCZarr metadata for every Zarr v2 store accumulus writes, so netcdf-c opens it.

Pure Zarr says which dimensions an array has only by name (``_ARRAY_DIMENSIONS``), and
netcdf-c gives each name one length per group. A ZEP 5 accumulation group breaks that: its
``acc_time`` has ``time`` = number of entries while ``acc_lat`` has ``time`` = the full
length, so netcdf-c refuses the store ("NetCDF: Invalid dimension size"). netcdf-c's own
NCZarr metadata can say which is which, and netcdf-c prefers it in ``mode=nczarr``:

- the root's ``_nczarr_superblock`` (``{"version": "2.0.0"}``) marks the store as NCZarr;
- each group's ``_nczarr_group`` lists its dimensions with their lengths, arrays and groups;
- each array's ``_nczarr_array`` names its dimensions by full path in
  ``dimension_references`` (``/time``, ``/precip_accumulation_group/time_4``).

This is what netcdf-c 4.10 itself writes (checked by writing a store with netCDF4 in
``mode=nczarr`` and reading its JSON), minus ``_NCProperties`` (netcdf-c's own provenance) and
``_nczarr_attr`` (attribute types, which netcdf-c infers when absent). ``_ARRAY_DIMENSIONS`` and
every other attribute stay exactly as they are, so zarr-python, xarray and the ZEP 5 schemas
see the same store; xarray hides attributes starting with ``_nc``.

Dimension names: an array axis refers to the nearest enclosing group's dimension of the same
name when the lengths agree; otherwise the array's own group gets a dimension, named as the
axis when no enclosing group has that name, else ``<name>_<length>`` (``time_4``). A dimension
never shadows another of the same name, because netCDF4-python finds dimensions by name,
nearest group first, and would otherwise compute wrong shapes.

The plan is a pure function of the consolidated snapshot (``nczarr_attributes``);
``write_nczarr_metadata`` runs after every consolidation (``stores.arrays.consolidate``) and writes
only the documents that change. netcdf-c 4.10 reads Zarr v3 not at all, so v3 stores carry
none of it. In ``mode=zarr``
netcdf-c ignores all of this and reads ``_ARRAY_DIMENSIONS`` only, one length per name and
group, so an accumulation group over two or more dimensions stays unreadable there; that
mode reads such a store with ``mode=zarr,noxarray`` (anonymous dimensions).
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

SUPERBLOCK = {"version": "2.0.0"}
DIM = "_ARRAY_DIMENSIONS"
# netcdf-c keeps a group's dimensions in an attribute of the group, under one of two names
# (NCZarr 2.x and earlier releases).
_NCZARR_GROUP_ATTRIBUTES = (("_nczarr_group", "dimensions"), ("_NCZARR_GROUP", "dims"))


@dataclass(frozen=True)
class ArrayAxes:
    """One array: its path from the root ("g/acc_time"), shape and dimension names (None
    when it has no ``_ARRAY_DIMENSIONS``)."""

    path: str
    shape: tuple[int, ...]
    names: tuple[str, ...] | None


@dataclass
class Dimensions:
    """The plan: each group's dimensions (name -> length) and each array's references."""

    groups: dict[str, dict[str, int]] = field(default_factory=dict)
    references: dict[str, list[str]] = field(default_factory=dict)


def plan_dimensions(groups: Iterable[str], arrays: Iterable[ArrayAxes]) -> Dimensions:
    """Group dimensions and per-array dimension references for a hierarchy (pure)."""
    plan = Dimensions(groups={group: {} for group in groups})
    plan.groups.setdefault("", {})
    by_group: dict[str, list[ArrayAxes]] = {}
    for array in arrays:
        by_group.setdefault(_parent(array.path), []).append(array)
    for group in sorted(plan.groups, key=lambda g: (g.count("/") if g else -1, g)):
        # Coordinate variables first, so they name the dimensions they define.
        for array in sorted(by_group.get(group, []), key=_coordinates_first):
            plan.references[array.path] = [
                _reference(plan, group, name, size)
                for name, size in zip(_axis_names(array), array.shape, strict=True)
            ]
    return plan


def _parent(path: str) -> str:
    return posixpath.dirname(path)


def _coordinates_first(array: ArrayAxes) -> tuple[bool, str]:
    name = posixpath.basename(array.path)
    return (not (array.names is not None and array.names == (name,)), name)


def _axis_names(array: ArrayAxes) -> tuple[str, ...]:
    if array.names is not None and len(array.names) == len(array.shape):
        return array.names
    return tuple(f"_Anonymous_Dim_{size}" for size in array.shape)  # netcdf-c's own naming


def _enclosing(group: str) -> list[str]:
    """The group and its ancestors, nearest first ("" is the root)."""
    chain = [group]
    while chain[-1]:
        chain.append(_parent(chain[-1]))
    return chain


def _visible(plan: Dimensions, group: str, name: str) -> tuple[str, int] | None:
    """(group, length) of the dimension ``name`` as seen from ``group``, if any."""
    for candidate in _enclosing(group):
        if name in plan.groups[candidate]:
            return candidate, plan.groups[candidate][name]
    return None


def _reference(plan: Dimensions, group: str, name: str, size: int) -> str:
    anonymous = name.startswith("_Anonymous_Dim_")
    home = "" if anonymous else group  # netcdf-c puts anonymous dimensions in the root
    found = _visible(plan, home, name)
    if found is not None and found[1] == size:
        return _path(found[0], name)
    if found is not None:  # taken with another length: a name of its own, never shadowing
        name = _free_name(plan, home, f"{name}_{size}", size)
        found = _visible(plan, home, name)
        if found is not None:
            return _path(found[0], name)
    plan.groups[home][name] = size
    return _path(home, name)


def _free_name(plan: Dimensions, group: str, name: str, size: int) -> str:
    """``name``, or ``name_2``, ``name_3``... until it is unused or already has ``size``."""
    candidate, number = name, 1
    while (found := _visible(plan, group, candidate)) is not None and found[1] != size:
        number += 1
        candidate = f"{name}_{number}"
    return candidate


def _path(group: str, name: str) -> str:
    return f"/{group}/{name}" if group else f"/{name}"


# Writing -------------------------------------------------------------------------------------


def write_nczarr_metadata(store: Store) -> None:
    """Bring the store's NCZarr metadata up to date with its arrays, right after its metadata
    was consolidated: it reads the consolidated snapshot (one request), writes the ``.zattrs``
    that change, then the same change into the snapshot, so readers see it everywhere and a
    store already in step costs that one read. v2 stores only; a v3 store keeps none (copies
    from a v2 source, as ``rechunk`` makes them, would describe that source)."""
    document = sync(_get_json(store, ".zmetadata"))
    if document is None:
        _strip_from_v3(store)
        return
    metadata = document.get("metadata") or {}
    changed = nczarr_attributes(metadata)
    if not changed:
        return
    for key, attrs in changed.items():
        sync(_set_json(store, key, attrs))
    sync(_set_json(store, ".zmetadata", {**document, "metadata": {**metadata, **changed}}))


def nczarr_attributes(metadata: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The ``.zattrs`` documents to rewrite, by key, for a v2 consolidated snapshot (pure)."""
    groups = {""} | {key.removesuffix("/.zgroup") for key in metadata if key.endswith("/.zgroup")}
    arrays = {key.removesuffix("/.zarray") for key in metadata if key.endswith("/.zarray")}

    def attrs(path: str) -> dict[str, Any]:
        return dict(metadata.get(f"{path}/.zattrs" if path else ".zattrs") or {})

    axes = [
        ArrayAxes(path, tuple(metadata[f"{path}/.zarray"]["shape"]), _names(attrs(path).get(DIM)))
        for path in arrays
    ]
    plan = plan_dimensions(groups, axes)
    wanted: dict[str, dict[str, Any]] = {}
    for path in groups:
        before = attrs(path)
        entry = {
            "dimensions": _with_unlimited(plan.groups[path], before),
            "arrays": sorted(posixpath.basename(p) for p in arrays if _parent(p) == path),
            "groups": sorted(posixpath.basename(p) for p in groups if p and _parent(p) == path),
        }
        extra = {"_nczarr_group": entry}
        if not path:
            extra["_nczarr_superblock"] = before.get("_nczarr_superblock") or dict(SUPERBLOCK)
        wanted[path] = {**before, **extra}
    for path in arrays:
        references = {"dimension_references": plan.references[path], "storage": "chunked"}
        wanted[path] = {**attrs(path), "_nczarr_array": references}
    return {
        (f"{path}/.zattrs" if path else ".zattrs"): document
        for path, document in wanted.items()
        if document != attrs(path)
    }


def _names(value: Any) -> tuple[str, ...] | None:
    strings = isinstance(value, Sequence) and not isinstance(value, str)
    return tuple(value) if strings and all(isinstance(v, str) for v in value) else None


def _with_unlimited(dimensions: Mapping[str, int], attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Dimensions as netcdf-c writes them, keeping netcdf-c's unlimited flags."""
    before = (attrs.get("_nczarr_group") or {}).get("dimensions") or {}
    out: dict[str, Any] = {}
    for name, size in dimensions.items():
        previous = before.get(name)
        unlimited = isinstance(previous, Mapping) and previous.get("unlimited")
        out[name] = {"size": size, "unlimited": 1} if unlimited else size
    return out


def _strip_from_v3(store: Store) -> None:
    """Remove NCZarr attributes a v3 store inherited (rare: read from its consolidated
    metadata, written and re-consolidated only when some are there)."""
    root_document = sync(_get_json(store, "zarr.json"))
    consolidated = (root_document or {}).get("consolidated_metadata") or {}
    nodes = {"": root_document or {}, **(consolidated.get("metadata") or {})}
    stale = [p for p, node in nodes.items() if any(k.startswith("_nczarr_") for k in _v3(node))]
    if not stale:
        return
    root = zarr.open_group(store, mode="r+", use_consolidated=False)
    for path in stale:
        node = root if not path else root[path]
        for key in [k for k in node.attrs if k.startswith("_nczarr_")]:
            del node.attrs[key]
    zarr.consolidate_metadata(store)


def _v3(node: Mapping[str, Any]) -> Mapping[str, Any]:
    return node.get("attributes") or {}


async def _get_json(store: Store, key: str) -> Any:
    value = await store.get(key, default_buffer_prototype())
    return json.loads(value.to_bytes()) if value is not None else None


async def _set_json(store: Store, key: str, document: Any) -> None:
    text = json.dumps(document, indent=2, allow_nan=True)  # zarr writes NaN fill values so
    await store.set(key, default_buffer_prototype().buffer.from_bytes(text.encode()))


def record_dimension_size(store: Store, dim: str, size: int) -> None:
    """Keep netcdf-c's record of a root dimension's size in step after the arrays grew.

    In NCZarr mode netcdf-c takes dimension sizes from the root group's attribute, not from
    the arrays, and refuses arrays longer than their dimension; between an append's resize
    and its consolidation this keeps the store readable. Stores without it (or without
    ``dim`` in it) are left alone."""
    root = zarr.open_group(store, mode="r+", use_consolidated=False)
    for attribute, key in _NCZARR_GROUP_ATTRIBUTES:
        info = root.attrs.get(attribute)
        if not isinstance(info, dict) or dim not in info.get(key, {}):
            continue
        dims = dict(info[key])
        entry = dims[dim]
        dims[dim] = {**entry, "size": size} if isinstance(entry, dict) else size
        root.attrs[attribute] = {**info, key: dims}
