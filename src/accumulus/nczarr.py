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

netcdf-c 4.10 reads Zarr v3 not at all, so v3 stores carry none of it. In ``mode=zarr``
netcdf-c ignores all of this and reads ``_ARRAY_DIMENSIONS`` only, one length per name and
group, so an accumulation group over two or more dimensions stays unreadable there; that
mode reads such a store with ``mode=zarr,noxarray`` (anonymous dimensions).
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import zarr
from zarr.abc.store import Store

SUPERBLOCK = {"version": "2.0.0"}
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
    """Bring the store's NCZarr metadata up to date with its arrays (v2 stores only).

    Only attributes that change are written, so a store already in step costs one listing.
    Call it before consolidating metadata, so the consolidated snapshot carries it too.
    A v3 store (which netcdf-c 4.10 does not read) keeps none: copies from a v2 source
    (``rechunk``) would describe that source."""
    root = zarr.open_group(store, mode="r+", use_consolidated=False)
    members = dict(root.members(max_depth=None))
    if root.metadata.zarr_format != 2:
        for node in [root, *members.values()]:  # copied from a v2 source: stale here
            stale = [key for key in node.attrs if key.startswith("_nczarr_")]
            for key in stale:
                del node.attrs[key]
        return
    groups = {"": root} | {p: n for p, n in members.items() if isinstance(n, zarr.Group)}
    arrays = {p: n for p, n in members.items() if isinstance(n, zarr.Array)}
    axes = [
        ArrayAxes(path, tuple(array.shape), _names(array.attrs.get("_ARRAY_DIMENSIONS")))
        for path, array in arrays.items()
    ]
    plan = plan_dimensions(groups, axes)
    for path, group in groups.items():
        wanted = {
            "_nczarr_group": {
                "dimensions": _with_unlimited(plan.groups[path], group.attrs),
                "arrays": sorted(posixpath.basename(p) for p in arrays if _parent(p) == path),
                "groups": sorted(posixpath.basename(p) for p in groups if p and _parent(p) == path),
            }
        }
        if not path:
            wanted["_nczarr_superblock"] = dict(group.attrs.get("_nczarr_superblock") or SUPERBLOCK)
        _update(group, wanted)
    for path, array in arrays.items():
        wanted_array = {"dimension_references": plan.references[path], "storage": "chunked"}
        _update(array, {"_nczarr_array": wanted_array})


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


def _update(node: zarr.Group | zarr.Array, wanted: Mapping[str, Any]) -> None:
    changed = {key: value for key, value in wanted.items() if node.attrs.get(key) != value}
    if changed:
        node.update_attributes(changed)


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
