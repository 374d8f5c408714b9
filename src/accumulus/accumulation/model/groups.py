"""Reading a cube's ZEP 5 accumulation groups from its metadata snapshot.

``read_group`` parses a variable's ``<variable>_accumulation_group`` (attributes validated
against the ZEP 5 schema, see ``spec``); groups written by other producers (the ZEP 5
reference generator) do not say what raw extent they cover, which is derived here from the
shapes of their arrays. ``accumulation_array`` opens one array of a group ready to decode,
including arrays stored with the reference generator's ``accumulation_delta_filter``
(``filters.accumulation_delta``), which needs to be told its chunk shape.

``AccumulationGroups`` reads each group (and opens each array) of one snapshot once, from
the cube's store or from a sidecar store beside it (``sidecar``), whose groups are checked
against the source before they are used.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any, cast

import zarr
from zarr.abc.store import Store

from accumulus.accumulation.model import spec
from accumulus.accumulation.model.record import RECORD_KEY, BuildRecordError, attributes_problem
from accumulus.accumulation.model.sidecar import Sidecar, StaleSidecarError
from accumulus.accumulation.model.weights import latitude_of, varying_dims
from accumulus.errors import AccumulusError
from accumulus.filters.accumulation_delta import with_chunk_shape
from accumulus.grid import sharding_of
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import array_with


def read_group(
    cube: RawCube, variable: str, root: zarr.Group | None = None
) -> spec.AccumulationGroup | None:
    """``variable``'s accumulation group as stored in ``cube`` (or in ``root``, a sidecar's),
    or None when it has none."""
    var = cube.variable(variable)
    path = spec.group_name(variable)
    try:
        node = (cube.root if root is None else root)[path]
    except KeyError:
        return None
    if not isinstance(node, zarr.Group):
        raise AccumulusError(f"{cube.label}: {path} is an array, expected a ZEP 5 group")
    # Positioned arrays are in a subgroup (``spec.POSITIONS_GROUP``), named by their path.
    members = {name: child for name, child in node.members(max_depth=None)}

    def array_attrs(name: str) -> Mapping[str, Any] | None:
        child = members.get(name)
        return dict(child.attrs) if isinstance(child, zarr.Array) else None

    attributes = dict(node.attrs)
    group = spec.parse_group(var.name, var.dims, attributes, array_attrs)
    if group.producer == "foreign":  # theirs may hold a last partial entry
        return _foreign_coverage(cube, var, group, members)
    _check_shapes(cube.label, var, group, members)
    if group.complete:
        extension: Any = attributes.get(spec.EXTENSION_KEY, {})  # JSON
        problem = attributes_problem(
            cube,
            var,
            group,
            extension.get(RECORD_KEY),
            {name: array_attrs(name) for name in members},
            # A sidecar's source is checked against its own fingerprint (``sidecar``).
            source=root is None or root is cube.root,
        )
        if problem:
            raise BuildRecordError(
                f"{problem}: its sums would be wrong; rebuild it with "
                "`accumulus accumulate --rebuild`"
            )
    return group


def stride_unit(var: VariableInfo) -> str:
    """What ZEP 5's strides count along ``var``'s dimensions: its inner chunks when it is
    sharded (the unit it is read by, ``grid.read_grid``), its chunks otherwise."""
    return spec.INNER_CHUNK if sharding_of(var.array.metadata) is not None else spec.CHUNK


def stride_unit_problem(var: VariableInfo, group: spec.AccumulationGroup) -> str | None:
    """Why ``group``'s entries cannot be placed on ``var``'s chunks (None when they can):
    its strides count another unit (a sharded array's shards, before accumulus counted
    inner chunks)."""
    unit = stride_unit(var)
    if group.stride_unit == unit:
        return None
    return (
        f"{group.path} counts {group.stride_unit}s in its strides but {var.name!r} is read by "
        f"{unit}s: rebuild it with `accumulus accumulate --rebuild`"
    )


def _check_shapes(
    label: str, variable: VariableInfo, group: spec.AccumulationGroup, members: Mapping
) -> None:
    """Refuse accumulation arrays whose shape does not fit their ``_ARRAY_DIMENSIONS``
    (attributes edited or permuted by hand): at most one entry per ``stride`` chunks (or
    per position) along accumulated dimensions, at most the variable's size along the
    others."""
    bounds = dict(zip(variable.dims, variable.bounds, strict=True))
    # Where the data grew past the group's coverage, an update cut short (a kill after the
    # append's commit point) may have extended the arrays before the group's attributes:
    # entries past those the attributes place are unpublished, and the update redoes them.
    growing = {
        d
        for d, covered in group.coverage.items()
        if d in variable.dims and covered < variable.shape[variable.axis(d)]
    }
    for acc in group.accumulations:
        entries = {d: len(p) for d, p in acc.entry_positions(bounds).items()}
        for name in sorted(set(acc.arrays.values())):
            shape = members[name].shape
            for dim, size in zip(acc.array_dims, shape, strict=True):
                limit = entries.get(dim, variable.shape[variable.axis(dim)])
                if size > limit and dim not in growing:
                    raise AccumulusError(
                        f"{label}: {group.path}/{name} has shape {list(shape)}, which "
                        f"does not fit its _ARRAY_DIMENSIONS {list(acc.array_dims)} "
                        f"({dim} allows at most {limit}): its attributes were edited; "
                        "rebuild it with `accumulus accumulate --rebuild`"
                    )


def accumulation_array(
    cube: RawCube, variable: str, name: str, root: zarr.Group | None = None
) -> zarr.Array:
    """The array ``name`` of ``variable``'s accumulation group (in ``cube`` or in ``root``, a
    sidecar's), ready to read."""
    node = (cube.root if root is None else root)[f"{spec.group_name(variable)}/{name}"]
    assert isinstance(node, zarr.Array)
    metadata = with_chunk_shape(node.metadata)
    return node if metadata is node.metadata else array_with(node, metadata=metadata)


class AccumulationGroups:
    """The accumulation groups of one cube snapshot, each read once (and its arrays opened
    once), so that many queries of the snapshot share them. With a ``sidecar``, groups are
    read from it, and a group whose source changed is refused (``StaleSidecarError``)."""

    def __init__(self, cube: RawCube, sidecar: Sidecar | None = None) -> None:
        self.cube = cube
        self.sidecar = sidecar
        self.root = cube.root if sidecar is None else sidecar.root()
        # Where accumulation chunks are read: None for the cube's own store.
        self.store = None if sidecar is None else sidecar.store
        self.label = cube.label if sidecar is None else sidecar.label
        # Each group as read, or why it must not be used (checked once per snapshot).
        self._groups: dict[
            str, spec.AccumulationGroup | StaleSidecarError | BuildRecordError | None
        ] = {}
        self._arrays: dict[tuple[str, str], zarr.Array] = {}
        self._remembered: dict[Hashable, Any] = {}

    def remembered[T](self, key: Hashable, compute: Callable[[], T]) -> T:
        """``compute()``, computed once for these groups under ``key``: for what depends on
        the groups and the snapshot only (which accumulations a query's sums can come
        from), which every query would otherwise work out again. A ``compute`` that raises
        is not remembered."""
        if key not in self._remembered:
            self._remembered[key] = compute()
        return cast(T, self._remembered[key])

    def reading_through(self, wrap: Callable[[Store], Store]) -> AccumulationGroups:
        """These groups with a sidecar's chunks read through ``wrap(store)`` (the cube's own
        store is wrapped by its reader)."""
        if self.store is None:
            return self
        wrapped = copy.copy(self)
        wrapped.store = wrap(self.store)
        return wrapped

    def group(self, variable: str) -> spec.AccumulationGroup | None:
        if variable not in self._groups:
            try:
                if self.sidecar is not None:
                    self.sidecar.check(self.cube, variable, self.root)
                self._groups[variable] = read_group(self.cube, variable, self.root)
            except (StaleSidecarError, BuildRecordError) as refused:
                self._groups[variable] = refused
        found = self._groups[variable]
        if isinstance(found, StaleSidecarError | BuildRecordError):
            raise found
        return found

    def recorded_weights(self, variable: str) -> spec.Weights | None:
        """The weights ``variable``'s group was built with (None without a group, or when
        they are unknown), also for a stale sidecar group: they are the user's choice,
        which a raw scan follows too, not sums of the data."""
        try:
            group = self.group(variable)
            weights = group.weights if group is not None else None
        except (StaleSidecarError, BuildRecordError):  # not usable: its attribute
            extension = self.root[spec.group_name(variable)].attrs.get(spec.EXTENSION_KEY)
            weights = extension.get("weights") if isinstance(extension, dict) else None
        return weights if isinstance(weights, str) and weights != "unknown" else None

    def array(self, variable: str, name: str) -> zarr.Array:
        key = (variable, name)
        if key not in self._arrays:
            self._arrays[key] = accumulation_array(self.cube, variable, name, self.root)
        return self._arrays[key]

    def read_all(self) -> None:
        """Read every group now (so threads sharing this object only read it); a stale
        sidecar group is refused when a query asks for it."""
        for name, array in self._usable_arrays():
            self.array(name, array)

    def decoded_bytes(self) -> int:
        """The bytes of every usable group's arrays decoded: the most a cache of decoded
        accumulation chunks can hold of them (``accumulus serve``'s default size). A cache
        keeps the chunks of an array holding rows its group's weights vary along (a series'
        rows of latitude) as their weighted prefix sums along them, in float64
        (``query.row_prefix``): an integer array's (the counts) take 8 bytes a value there."""
        total = 0
        rows: dict[str, set[str]] = {}  # by variable
        for name, array in self._usable_arrays():
            if name not in rows:
                rows[name] = self._arrays_of_rows(name)
            decoded = self.array(name, array)
            counts = decoded.dtype.kind in "iu" and array in rows[name]
            total += decoded.size * 8 if counts else decoded.nbytes
        return total

    def _arrays_of_rows(self, variable: str) -> set[str]:
        """The arrays of ``variable``'s group whose accumulations keep as rows (not prefix
        sums) the one dimension its weights vary along."""
        group = self.group(variable)
        if group is None or group.weights is None:
            return set()
        varying = varying_dims(self.cube.decoded, group.weights, variable)
        return {
            array
            for acc in group.accumulations
            if len(varying) == 1 and varying[0] in acc.dims and varying[0] not in acc.prefix_dims
            for array in acc.arrays.values()
        }

    def _usable_arrays(self) -> Iterator[tuple[str, str]]:
        """(variable, array name) of each array of each group a query may read."""
        for name in self.cube.data_variables:
            try:
                group = self.group(name)
            except (StaleSidecarError, BuildRecordError):
                continue
            accumulations = group.accumulations if group is not None else ()
            for array in sorted({a for acc in accumulations for a in acc.arrays.values()}):
                yield name, array


def _foreign_coverage(
    cube: RawCube, variable: VariableInfo, group: spec.AccumulationGroup, members: Mapping
) -> spec.AccumulationGroup:
    """Groups written by other tools do not record what they cover: derive it from the
    array shapes (entries x stride chunks along accumulated dims, the extent elsewhere)."""
    coverage = dict(zip(variable.dims, variable.shape, strict=True))
    for acc in group.accumulations:
        for name in set(acc.arrays.values()):
            shape = dict(zip(acc.array_dims, members[name].shape, strict=True))
            for dim, bounds in zip(variable.dims, variable.bounds, strict=True):
                if dim in acc.dims:
                    edges = bounds.strided_edges(acc.stride(dim))
                    n = min(shape[dim], len(edges))
                    covered = edges[n - 1] if n else 0
                else:
                    covered = shape[dim]
                coverage[dim] = min(coverage[dim], covered)
    # The ZEP 5 generator weights by cos(latitude) where there is a latitude dimension.
    weights = "area" if latitude_of(cube.raw, variable.name) else "none"
    return spec.AccumulationGroup(
        variable=group.variable,
        variable_dims=group.variable_dims,
        accumulations=group.accumulations,
        weights=weights,
        coverage=coverage,
        complete=True,
        producer="foreign",
        # A ZEP 5 writer sees zarr's ``chunks``: the inner chunks of a sharded array.
        stride_unit=stride_unit(variable),
    )
