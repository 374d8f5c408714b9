"""The hierarchy of a store's groups: which group a command means, what a group inherits,
and a dataset with nested groups written in place.

NASA ships granules with their variables in groups (IMERG: ``/Grid``, ``/Grid/Intermediate``)
and a cube keeps them there (``Grid/precipitation``). Every command works on one group at a
time, through a view of the store in which that group is the root (``stores.group``).
Accumulation groups are never a cube's groups.

A group's variables may use dimensions whose coordinate variables live in an ancestor group
(netCDF-4 scoping; xarray's DataTree inherits them the same way): ``inherited_coordinates``
finds them. Which group a command means, when none is named, is the one candidate holding
what it needs (``pick_group``); several are an error that lists them.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.stores.arrays import checked_format, consolidate, dimension_names
from accumulus.stores.group import GroupStore, ancestors_of, group_view, normalize_group, split_view
from accumulus.stores.keys import GROUP_SUFFIX
from accumulus.stores.locations import remote_errors


def cube_groups(store: Store, use_consolidated: bool | None = None) -> list[str]:
    """Every group of a cube (the root as ``""``), accumulation groups left out."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        try:
            root = zarr.open_group(store, mode="r", use_consolidated=use_consolidated)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError):
            return []
        paths = [""]
        for path, node in root.members(max_depth=None):
            if isinstance(node, zarr.Group) and not any(
                part.endswith(GROUP_SUFFIX) for part in path.split("/")
            ):
                paths.append(path)
    return sorted(paths)


def pick_group(candidates: Sequence[str], what: str, where: str, option: str = "--group") -> str:
    """The one candidate group, or an error naming them all."""
    if len(candidates) == 1:
        return candidates[0]
    listed = ", ".join(c or "/" for c in candidates)
    raise AccumulusError(
        f"{where}: {len(candidates)} groups hold {what} ({listed}); choose one with {option}"
    )


def inherited_coordinates(
    dataset: xr.Dataset, ancestors: Sequence[xr.Dataset]
) -> dict[str, xr.Variable]:
    """Coordinate variables of ``dataset``'s dimensions that it lacks and an ancestor group
    defines (nearest ancestor first), with their CF ``bounds`` variables: netCDF-4 scoping."""
    found: dict[str, xr.Variable] = {}
    for dim, size in dataset.sizes.items():
        if dim in dataset.variables:
            continue
        for ancestor in ancestors:
            var = ancestor.variables.get(dim)
            if var is not None and var.dims == (dim,) and var.size == size:
                found[str(dim)] = var
                bounds = var.attrs.get("bounds")
                if isinstance(bounds, str) and bounds in ancestor.variables:
                    found[bounds] = ancestor.variables[bounds]
                break
    return found


def find_cube_group(store: Store, group: str | None, variable: str | None, where: str) -> str:
    """The group of a cube a command works on: ``group`` when given (it must exist); else
    the one group holding ``variable`` (or, without a variable, data variables). A cube
    without groups answers ``""`` without walking its tree."""
    with remote_errors(where):
        return _find_cube_group(store, group, variable, where)


def _find_cube_group(store: Store, group: str | None, variable: str | None, where: str) -> str:
    if group is not None:
        path = normalize_group(group)
        groups = cube_groups(store)
        if path not in groups:
            listed = ", ".join(g or "/" for g in groups) or "none"
            raise AccumulusError(f"{where}: no group {group!r}; its groups are {listed}")
        return path
    holders = _holders(store, variable)
    what = f"a variable {variable!r}" if variable else "data variables"
    if not holders:
        groups = cube_groups(store)
        if len(groups) <= 1:
            return ""  # no groups: the root's own checks say what is missing
        listed = ", ".join(g or "/" for g in groups)
        raise AccumulusError(f"{where}: no group holds {what}; its groups are {listed}")
    return "" if "" in holders else pick_group(holders, what, where)


def _holders(store: Store, variable: str | None) -> list[str]:
    """The groups holding ``variable`` (or data variables). The root is looked at first, so
    that a cube without groups costs no walk through its tree."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        try:
            root = zarr.open_group(store, mode="r")
            if any(_holds(name, node, variable) for name, node in root.arrays()):
                return [""]
            members = list(root.members(max_depth=None))
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError):
            return []
    return sorted(
        {
            path.rpartition("/")[0]
            for path, node in members
            if isinstance(node, zarr.Array)
            and GROUP_SUFFIX not in path
            and _holds(path.rpartition("/")[2], node, variable)
        }
    )


def _holds(name: str, array: zarr.Array, variable: str | None) -> bool:
    """Is ``array`` the variable asked for (or, without one, a data variable: not the
    coordinate variable of its own dimension)?"""
    if variable is not None:
        return name == variable
    return list(dimension_names(array)) != [name]


def ensure_group(store: Store, zarr_format: int) -> None:
    """Create the group a view shows and its ancestors, where missing, so that readers of
    the whole store (xarray's ``open_datatree``, zarr) can walk down to it."""
    base, path = split_view(store)
    if not path:
        return
    parts = path.split("/")
    for n in range(len(parts)):
        ancestor = "/".join(parts[:n])
        try:
            zarr.open_group(base, path=ancestor, mode="r", use_consolidated=False)
        except (FileNotFoundError, zarr.errors.GroupNotFoundError):
            zarr.open_group(base, path=ancestor, mode="a", zarr_format=checked_format(zarr_format))


def write_tree(
    dataset: xr.Dataset,
    store: Store,
    group_attrs: Mapping[str, Mapping[str, Any]] | None = None,
    **to_zarr: Any,
) -> None:
    """``dataset.to_zarr(store, **to_zarr)`` for a dataset whose nested-group variables are
    named by relative path ("Intermediate/IRprecipitation"): each group written in its place,
    its variables under their own names, with its ``group_attrs``. ``encoding`` is given per
    flat name. The ``accumulus`` settings of the top group (the append dimension) go to every
    group: each is a cube of its own to the commands that work on one group."""
    encoding = to_zarr.pop("encoding", {}) or {}
    by_group: dict[str, list[str]] = {}
    for name in dataset.variables:
        parent, _, _ = str(name).rpartition("/")
        by_group.setdefault(parent, []).append(str(name))
    ensure_group(store, to_zarr.get("zarr_format") or 2)
    for parent, names in sorted(by_group.items()):
        # Built from the variables themselves: selecting them from ``dataset`` would bring
        # along the top group's coordinates, which belong to the top group only.
        local = {n.rpartition("/")[2]: dataset.variables[n] for n in names}
        attrs = dict(dataset.attrs)
        if parent:
            attrs = dict((group_attrs or {}).get(parent, {}))
            if "accumulus" in dataset.attrs:
                attrs["accumulus"] = dataset.attrs["accumulus"]
        part = xr.Dataset(local, attrs=attrs)
        part_encoding = {n.rpartition("/")[2]: encoding[n] for n in names if n in encoding}
        part.to_zarr(store, group=parent or None, encoding=part_encoding, **to_zarr)


def set_group_attrs(root: zarr.Group, key: str, value: Any) -> None:
    """Set the attribute ``key`` of ``root`` and of its nested groups."""
    root.attrs[key] = value
    for path, node in root.members(max_depth=None):
        if isinstance(node, zarr.Group) and GROUP_SUFFIX not in path:
            node.attrs[key] = value


def holds_accumulations(root: zarr.Group) -> bool:
    """Does ``root`` or one of its nested groups hold a ZEP 5 accumulation group?"""
    return any(
        isinstance(node, zarr.Group) and path.rpartition("/")[2].endswith(GROUP_SUFFIX)
        for path, node in root.members(max_depth=None)
    )


def arrays_along(root: zarr.Group, dim: str) -> list[str]:
    """Paths of the arrays of ``root`` and its nested groups that have the dimension ``dim``
    (accumulation groups left out)."""
    return [
        path
        for path, node in root.members(max_depth=None)
        if isinstance(node, zarr.Array)
        and GROUP_SUFFIX not in path
        and dim in dimension_names(node)
    ]


def consolidate_groups(store: Store) -> None:
    """Refresh the consolidated metadata of the group a view shows, of its nested groups
    that hold their own, and of its ancestors that do (a reader may open any of them)."""
    consolidate(store)
    for path in cube_groups(store)[1:]:
        view = GroupStore(store, path)
        if _has_consolidated(view):
            consolidate(view)
    base, path = split_view(store)
    for ancestor in ancestors_of(path):
        ancestor_view = group_view(base, ancestor)
        if _has_consolidated(ancestor_view):
            consolidate(ancestor_view)


def _has_consolidated(store: Store) -> bool:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*[Cc]onsolidated metadata.*")
        try:
            group = zarr.open_group(store, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError):
            return False
    return group.metadata.consolidated_metadata is not None
