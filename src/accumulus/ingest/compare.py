"""Does a cube hold exactly what xarray decodes from its sources?

``compare_sources`` opens the cube as ``xarray.open_zarr`` does and each source file as
``xarray.open_dataset`` does, and compares every variable of the source, value for value,
with the same cells of the cube: missing (NaN, NaT) in both or in neither, equal otherwise.
A source appended along a dimension is found in the cube by its coordinate values along it
(the cube's ``append_dim``); any other source must match the whole cube (``convert``).
Groups are compared group by group. Differences are reported by variable and index range
in the cube, so an archive producer can check a conversion before publishing it.

Values are compared a block at a time along the first axis, so memory stays bounded
whatever the size of the sources.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.ingest.times import readable_time_attrs
from accumulus.scope import accumulus_scope
from accumulus.stores.opening import open_store

# Values of one variable compared at a time (along the first axis).
BLOCK_VALUES = 2**24


@dataclass(frozen=True)
class Difference:
    """Where and how a variable of the cube differs from a source."""

    variable: str  # "name" or "group/name"
    dims: tuple[str, ...]
    region: tuple[tuple[int, int], ...] | None  # [start, stop) per dimension, in the cube
    count: int  # values that differ (0 when the difference is not in values)
    detail: str

    def describe(self) -> str:
        where = ""
        if self.region is not None:
            ranges = ", ".join(
                f"{d} {a}:{b}" for d, (a, b) in zip(self.dims, self.region, strict=True)
            )
            where = f" [{ranges}]"
        return f"{self.variable}{where}: {self.detail}"


@dataclass(frozen=True)
class SourceComparison:
    """One source against the cube."""

    source: str
    variables: tuple[str, ...]  # compared
    steps: int | None  # steps along the append dimension found in the cube (None: whole)
    differences: tuple[Difference, ...]
    # What differs in decoding only, said once: variables whose stored values equal the
    # source's, which xarray decodes differently (float32 packing kept in a virtual cube).
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.differences


def compare_sources(
    store: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    *,
    dim: str | None = None,
    storage_options: dict | None = None,
    allow_references: Sequence[str] | None = None,
) -> list[SourceComparison]:
    """Compare the cube at ``store`` with each of ``sources`` as xarray decodes them.
    ``dim``: the dimension the sources were appended along (default: the cube's
    ``append_dim``; none for a converted file, which must match the whole cube).
    ``allow_references``: where a reference set may read besides its own location."""
    if not sources:
        raise AccumulusError("no sources given to compare the cube with")
    zstore = open_store(
        store, "r", storage_options=storage_options, allow_references=allow_references
    )
    with accumulus_scope():
        root = zarr.open_group(zstore, mode="r")
    label = os.fspath(store)
    return [_compare_source(zstore, root, label, os.fspath(source), dim) for source in sources]


def _append_dim(root: zarr.Group, group: str) -> str | None:
    """The dimension the cube's ``group`` is appended along: its own ``accumulus``
    attribute says (an append into a group keeps it there), else the root's."""
    node = root.get(group) if group else root
    for holder in (node, root):
        settings = holder.attrs.get("accumulus") if isinstance(holder, zarr.Group) else None
        if isinstance(settings, dict) and settings.get("append_dim"):
            return str(settings["append_dim"])
    return None


def _compare_source(
    zstore: Store, root: zarr.Group, label: str, source: str, dim: str | None
) -> SourceComparison:
    names: list[str] = []
    differences: list[Difference] = []
    explained: dict[str, int] = {}
    steps = None
    for group in _groups(source):
        along = dim if dim is not None else _append_dim(root, group)
        theirs = _open_source(source, group)
        try:
            ours = _open_cube(zstore, label, group)
        except AccumulusError as exc:
            differences.append(Difference(group or "/", (), None, 0, str(exc)))
            continue
        positions, problems = _positions(ours, theirs, along, group)
        differences.extend(problems)
        if along is not None and along in theirs.dims and positions is not None:
            steps = (steps or 0) + int((positions >= 0).sum())
        stored = None  # both as stored, opened when a variable's decoded values differ
        for name in map(str, theirs.variables):
            path = f"{group}/{name}" if group else name
            names.append(path)
            found = _compare_variable(ours, theirs, name, path, along, positions)
            if any(d.count for d in found):
                stored = stored or (
                    _open_stored(source, group),
                    _open_cube(zstore, label, group, False),
                )
                if _stored_alike(*stored, name, path, along, positions):
                    explained[path] = sum(d.count for d in found)
                    continue
            differences.extend(found)
        theirs.close()
    notes = (_decoding_note(explained),) if explained else ()
    return SourceComparison(source, tuple(names), steps, tuple(differences), notes)


def _open_stored(source: str, group: str) -> xr.Dataset:
    """The source's values as stored, with their attributes (nothing decoded)."""
    if Path(source).is_dir():
        return xr.open_zarr(source, group=group or None, chunks=None, decode_cf=False)
    return xr.open_dataset(source, group=group or None, cache=False, decode_cf=False)


# Attributes whose values (not types) say how stored numbers decode.
_DECODING = ("scale_factor", "add_offset", "_FillValue", "missing_value", "_Unsigned")


def _stored_alike(
    theirs: xr.Dataset,
    ours: xr.Dataset,
    name: str,
    path: str,
    dim: str | None,
    positions: np.ndarray | None,
) -> bool:
    """Whether the cube stores exactly the source's numbers for float32-packed ``name``,
    with decoding attributes of the same values (and time units): then decoded values that
    differ differ in how xarray decodes them, not in what the cube holds."""
    if name not in ours.variables or name not in theirs.variables:
        return False
    a, b = theirs.variables[name].attrs, ours.variables[name].attrs
    packing = [np.asarray(a[k]).dtype for k in ("scale_factor", "add_offset") if k in a]
    if np.dtype("f4") not in packing:
        return False
    for key in (*_DECODING, "units", "calendar"):
        if (key in a) != (key in b):
            return False
        if key in a and not _same_value(a[key], b[key]):
            return False
    return not _compare_variable(ours, theirs, name, path, dim, positions)


def _same_value(a: object, b: object) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return str(a) == str(b)
    x, y = np.asarray(a, dtype="f8"), np.asarray(b, dtype="f8")
    return x.shape == y.shape and bool(np.array_equal(x, y, equal_nan=True))


def _decoding_note(explained: dict[str, int]) -> str:
    listed = ", ".join(f"{name} ({count} values)" for name, count in explained.items())
    return (
        f"{listed}: the cube stores the source's values exactly, with the same scale, offset "
        "and fill values, but xarray decodes them differently: the file's float32 "
        "scale_factor/add_offset in float32, the cube's (JSON numbers) in float64, so decoded "
        "values differ in the last float32 digits (CF issue 422; a copied cube stores such "
        "variables decoded, a virtual one references the file's bytes)"
    )


def _groups(source: str) -> list[str]:
    """The source's groups ("" for the root), or just the root of a Zarr store."""
    if Path(source).is_dir():
        return [""]
    try:
        with netCDF4.Dataset(source) as file:
            return list(_group_paths(file, ""))
    except OSError as exc:
        raise AccumulusError(f"source {source}: cannot read it as NetCDF/HDF5: {exc}") from None


def _group_paths(group: netCDF4.Dataset, path: str) -> Iterator[str]:
    yield path
    for name, child in group.groups.items():
        yield from _group_paths(child, f"{path}/{name}" if path else name)


def _open_source(source: str, group: str) -> xr.Dataset:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", xr.SerializationWarning)  # xarray's notes on fills
        try:
            if Path(source).is_dir():
                return xr.open_zarr(source, group=group or None, chunks=None)
            return xr.open_dataset(source, group=group or None, cache=False)
        except Exception as exc:  # xarray and its backends raise many kinds
            readable = _with_readable_times(source, group)
            if readable is None:
                raise AccumulusError(f"source {source}: xarray cannot open it: {exc}") from None
            return readable


def _with_readable_times(source: str, group: str) -> xr.Dataset | None:
    """The source decoded with its time units as append stores them (``times``: the same
    meaning, in a spelling xarray reads), or None when that changes nothing or fails too."""
    try:
        dataset = xr.open_dataset(source, group=group or None, cache=False, decode_times=False)
    except Exception:  # xarray and its backends raise many kinds; the first one is reported
        return None
    changed = False
    for var in dataset.variables.values():
        readable = readable_time_attrs(var.attrs)
        if readable != var.attrs:
            var.attrs = readable
            changed = True
    if not changed:
        dataset.close()
        return None
    try:
        return xr.decode_cf(
            dataset, mask_and_scale=False, concat_characters=False, decode_coords=False
        )
    except Exception:  # xarray's CF decoding (cftime, pandas) raises many kinds
        dataset.close()
        return None


def _open_cube(zstore: Store, label: str, group: str, decode: bool = True) -> xr.Dataset:
    with warnings.catch_warnings(), accumulus_scope():
        warnings.simplefilter("ignore", xr.SerializationWarning)
        # A group of a cube has its metadata in the root's consolidated document, where
        # xarray does not look for it: its note that it read the group's own is no news.
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return xr.open_zarr(zstore, group=group or None, chunks=None, decode_cf=decode)
        except (FileNotFoundError, KeyError, zarr.errors.GroupNotFoundError):
            raise AccumulusError(f"the cube {label} has no group {group!r}") from None


def _positions(
    ours: xr.Dataset, theirs: xr.Dataset, dim: str | None, group: str
) -> tuple[np.ndarray | None, list[Difference]]:
    """Where the source's steps along ``dim`` are in the cube (-1: not there)."""
    if dim is None or dim not in theirs.dims or dim not in ours.indexes:
        return None, []
    if dim not in theirs.indexes:
        problem = f"the source has no coordinate along {dim!r} to find its steps in the cube"
        return None, [Difference(_path(group, dim), (dim,), None, 0, problem)]
    positions = np.asarray(ours.indexes[dim].get_indexer(theirs.indexes[dim]))
    absent = np.flatnonzero(positions < 0)
    if not absent.size:
        return positions, []
    first = theirs.indexes[dim][absent[0]]
    problem = (
        f"{absent.size} of the source's {positions.size} steps are not in the cube (first: {first})"
    )
    return positions, [Difference(_path(group, dim), (dim,), None, 0, problem)]


def _compare_variable(
    ours: xr.Dataset,
    theirs: xr.Dataset,
    name: str,
    path: str,
    dim: str | None,
    positions: np.ndarray | None,
) -> list[Difference]:
    source = theirs.variables[name]
    dims = tuple(map(str, source.dims))
    if name not in ours.variables:
        return [Difference(path, dims, None, 0, "not in the cube")]
    cube = ours.variables[name]
    if tuple(map(str, cube.dims)) != dims:
        detail = f"dimensions {list(cube.dims)} in the cube, {list(dims)} in the source"
        return [Difference(path, dims, None, 0, detail)]
    along = dims.index(dim) if dim in dims and positions is not None else None
    if along is None or positions is None:
        expected, found = tuple(cube.shape), tuple(source.shape)
    else:
        expected = _shape_found(tuple(cube.shape), along, positions)
        found = _shape_found(tuple(source.shape), along, positions)
    if found != expected:
        detail = f"shape {cube.shape} in the cube, {source.shape} in the source"
        return [Difference(path, dims, None, 0, detail)]
    tally = _Tally(dims)
    for theirs_index, ours_index in _blocks(source.shape, along, positions):
        tally.add(
            ours_index,
            np.asarray(cube[ours_index].values),
            np.asarray(source[theirs_index].values),
        )
    return tally.differences(path)


def _shape_found(shape: tuple[int, ...], along: int, positions: np.ndarray) -> tuple[int, ...]:
    """The source's shape with only its steps found in the cube along ``along``."""
    return tuple(int((positions >= 0).sum()) if a == along else n for a, n in enumerate(shape))


def _blocks(
    shape: tuple[int, ...], along: int | None, positions: np.ndarray | None
) -> Iterator[tuple[tuple, tuple]]:
    """(source index, cube index) pairs of blocks along the first axis, covering the
    source's values that are in the cube."""
    if not shape:
        yield (), ()
        return
    per_step = int(np.prod(shape[1:], dtype=np.int64)) or 1
    step = max(1, BLOCK_VALUES // per_step)
    for start in range(0, shape[0], step):
        theirs: list = [slice(None)] * len(shape)
        theirs[0] = slice(start, min(start + step, shape[0]))
        ours = list(theirs)
        if along is not None:
            assert positions is not None
            found = np.flatnonzero(positions >= 0)
            if along == 0:
                found = found[(found >= start) & (found < start + step)]
                if not found.size:
                    continue
            theirs[along] = found
            ours[along] = positions[found]
        yield _indexer(theirs), _indexer(ours)


def _indexer(index: Iterable) -> tuple:
    """Integer arrays that are runs as slices (xarray's outer indexing takes either)."""
    out = []
    for item in index:
        if isinstance(item, np.ndarray) and item.size and (np.diff(item) == 1).all():
            item = slice(int(item[0]), int(item[-1]) + 1)
        out.append(item)
    return tuple(out)


class _Tally:
    """Differences of one variable, block by block: how many, their bounding box in the
    cube, and the first one."""

    def __init__(self, dims: tuple[str, ...]) -> None:
        self.dims = dims
        self.count = 0
        self.low: np.ndarray | None = None
        self.high: np.ndarray | None = None
        self.first = ""

    def add(self, index: tuple, cube: np.ndarray, source: np.ndarray) -> None:
        differ = _differ(cube, source)
        if not differ.any():
            return
        where = np.argwhere(differ)
        offsets = [_offsets(i, n) for i, n in zip(index, cube.shape, strict=True)]
        cells = np.stack([offsets[a][where[:, a]] for a in range(where.shape[1])], axis=1)
        low, high = cells.min(axis=0), cells.max(axis=0) + 1
        self.low = low if self.low is None else np.minimum(self.low, low)
        self.high = high if self.high is None else np.maximum(self.high, high)
        if not self.count:
            at = tuple(where[0])
            cell = tuple(int(c) for c in cells[0])
            self.first = f"first at {cell}: cube {_shown(cube[at])}, source {_shown(source[at])}"
        self.count += int(differ.sum())

    def differences(self, path: str) -> list[Difference]:
        if not self.count:
            return []
        assert self.low is not None and self.high is not None
        region = tuple((int(a), int(b)) for a, b in zip(self.low, self.high, strict=True))
        detail = f"{self.count} values differ ({self.first})"
        return [Difference(path, self.dims, region, self.count, detail)]


def _offsets(index: object, size: int) -> np.ndarray:
    """The cube indices a block's axis covers."""
    if isinstance(index, slice):
        return np.arange(index.start or 0, (index.start or 0) + size)
    return np.asarray(index)


def _differ(cube: np.ndarray, source: np.ndarray) -> np.ndarray:
    """Cells where one is missing and the other not, or both present and unequal."""
    missing_cube, missing_source = _missing(cube), _missing(source)
    with np.errstate(invalid="ignore"):
        unequal = np.asarray(cube != source)
    return (missing_cube != missing_source) | (~missing_cube & ~missing_source & unequal)


def _missing(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype.kind in "mM":
        return np.isnat(values)
    if values.dtype.kind == "O":
        return np.asarray(pd.isnull(values))
    return np.zeros(values.shape, dtype=bool)


def _shown(value: object) -> str:
    return repr(value.item() if isinstance(value, np.generic) else value)


def _path(group: str, name: str) -> str:
    return f"{group}/{name}" if group else name
