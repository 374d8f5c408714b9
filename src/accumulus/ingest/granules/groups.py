"""A granule's groups read as one Dataset, whatever kind of granule holds them.

Granules as NASA ships them keep their variables in groups (IMERG: ``/Grid`` and
``/Grid/Intermediate``). A granule is read from one group, found by ``group_to_append``
when none is named: the group holding the variables along the append dimension. Its nested
groups come with it, their variables named by relative path
(``Intermediate/IRprecipitation``), so the cube keeps the structure; a group whose
dimensions are defined in an ancestor group (netCDF-4 scoping) gets the ancestor's
coordinate variables. Dimensions come from dimension scales or, in GPM files without them,
from each variable's ``DimensionNames`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.hierarchy import inherited_coordinates, pick_group
from accumulus.names import check_names
from accumulus.stores.group import ancestors_of, normalize_group

# Per group path ("" for the root): each variable's dimensions.
Layout = dict[str, dict[str, tuple[str, ...]]]

# netcdf-c's names for dimensions without a dimension scale.
_PHONY_DIMENSION = "phony_dim_"


@dataclass(frozen=True)
class Tree:
    """A group and its nested groups read as one Dataset."""

    dataset: xr.Dataset  # CF-encoded; nested variables named "Intermediate/IRprecipitation"
    paths: dict[str, str]  # variable -> its path in the source
    group_attrs: dict[str, dict[str, Any]]  # nested group (relative path) -> its attributes


def group_to_append(layout: Layout, dim: str, group: str | None, name: str) -> str:
    """``group`` when given (it must exist), else the one group holding variables along
    ``dim`` (nested groups come with their parent)."""
    if group is not None:
        return existing_group(layout, group, f"granule {name}")
    holders = [g for g, variables in layout.items() if any(dim in d for d in variables.values())]
    if not holders and any(layout[g] for g in layout if g):
        dims = "; ".join(
            f"{g or '/'}: {', '.join(sorted({d for v in layout[g].values() for d in v}))}"
            for g in sorted(layout)
            if layout[g]
        )
        raise AccumulusError(
            f"granule {name}: no variable has the dimension {dim!r} to append along; "
            f"dimensions by group: {dims}"
        )
    if not holders or "" in holders:
        return ""  # the root, as before groups: its checks name what is missing
    top = [g for g in holders if not any(g.startswith(h + "/") for h in holders)]
    return pick_group(top, f"variables along {dim!r}", f"granule {name}")


def existing_group(layout: Layout, group: str, where: str) -> str:
    path = normalize_group(group)
    if path not in layout:
        listed = ", ".join(g or "/" for g in sorted(layout))
        raise AccumulusError(f"{where}: no group {group!r}; its groups are {listed}")
    return path


def read_with(path: str, group: str) -> bool:
    """Whether reading ``group`` reads (some of) group ``path``: itself, a group nested in
    it, or an ancestor (whose coordinates it may take)."""
    return not group or path == group or path.startswith(group + "/") or path in ancestors_of(group)


def tree_dataset(
    open_group: Callable[[str], xr.Dataset],
    layout: Layout,
    group: str,
    dim: str | None,
    where: str,
) -> Tree:
    """``group`` and its nested groups with variables along ``dim`` (with variables at all,
    when None) as one flat Dataset (nested variables named by path relative to ``group``),
    with the coordinate variables that an ancestor group defines for their dimensions."""
    top = existing_group(layout, group, where)
    below = top + "/" if top else ""
    nested = sorted(
        g
        for g, variables in layout.items()
        if g.startswith(below)
        and g != top
        and variables
        and (dim is None or any(dim in dims for dims in variables.values()))
    )
    opened: list[xr.Dataset] = []
    variables: dict[str, xr.Variable] = {}
    paths: dict[str, str] = {}
    group_attrs: dict[str, dict[str, Any]] = {}
    try:
        for path in [top, *nested]:
            dataset = _with_dimension_names(open_group(path))
            opened.append(dataset)
            check_names(where, map(str, dataset.variables), map(str, dataset.dims))
            relative = path[len(top) :].strip("/")
            if relative:
                group_attrs[relative] = dict(dataset.attrs)
            for name, var in dataset.variables.items():
                flat = f"{relative}/{name}" if relative else str(name)
                variables[flat] = var
                paths[flat] = f"{path}/{name}" if path else str(name)
        dataset = _dataset(variables, opened[0].attrs, where)
        if any(dim not in dataset.variables for dim in dataset.dims):
            ancestors = [_with_dimension_names(open_group(a)) for a in ancestors_of(top)]
            opened.extend(ancestors)
            inherited = inherited_coordinates(dataset, ancestors)
            for name, var in inherited.items():
                variables[name] = var
                source = next(a for a in ancestors_of(top) if name in layout[a])
                paths[name] = f"{source}/{name}" if source else name
            dataset = _dataset(variables, opened[0].attrs, where)
    except BaseException:  # cleanup, then re-raised
        for each in opened:
            each.close()
        raise

    def close() -> None:
        for each in opened:
            each.close()

    dataset.set_close(close)
    return Tree(dataset, paths, group_attrs)


def _dataset(variables: Mapping[str, xr.Variable], attrs: Mapping, where: str) -> xr.Dataset:
    try:
        return xr.Dataset(dict(variables), attrs=dict(attrs))
    except ValueError as exc:  # the groups disagree on a dimension's size
        raise AccumulusError(f"{where}: its groups do not fit together: {exc}") from None


def _with_dimension_names(dataset: xr.Dataset) -> xr.Dataset:
    """Variables without dimension scales get netcdf-c's phony dimensions; GPM files name
    their dimensions in each variable's ``DimensionNames`` attribute ("nscan,npixel")."""
    renamed = {}
    for name, var in dataset.variables.items():
        names = named_dimensions(tuple(map(str, var.dims)), var.attrs.get("DimensionNames"))
        if names != var.dims:
            copy = var.copy(deep=False)
            copy.dims = names
            renamed[name] = copy
    if not renamed:
        return dataset
    variables = {name: renamed.get(name, var) for name, var in dataset.variables.items()}
    result = xr.Dataset(variables, attrs=dataset.attrs)
    result.set_close(dataset.close)
    return result


def named_dimensions(dims: tuple[str, ...], declared: Any) -> tuple[str, ...]:
    """``dims``, or the names a ``DimensionNames`` attribute ``declared`` gives netcdf-c's
    phony dimensions."""
    names = _dimension_names(declared)
    if len(names) == len(dims) and any(d.startswith(_PHONY_DIMENSION) for d in dims):
        return tuple(names)
    return dims


def _dimension_names(value: Any) -> list[str]:
    if isinstance(value, bytes | np.bytes_):
        value = value.decode("utf-8", "replace")
    if not isinstance(value, str):
        return []
    return [part.strip() for part in value.split(",") if part.strip()]
