"""Rewriting a datacube with other chunks: regular ↔ variable (ZEP 3) along any dimension.

``rechunk`` plans first (every rule resolved and checked against every array, the output
format chosen), so bad input fails before anything is written. It then copies each array
with Dask, one task per destination chunk reading just that region of the source (memory
stays at a few chunks whatever the cube's size), keeping each array's data type, fill value,
codecs, attributes and dimension names, and the groups' attributes. Accumulation groups are
not copied: they are rebuilt on the new chunks, with the source's configuration, by
``accumulus.api.accumulate``. A directory destination is written beside its final name and
renamed into place at the end, so it appears whole or not at all; other destinations
(``memory://``, ``s3://``) are cleared on failure.

Zarr v2 has no variable chunks: a variable grid needs Zarr v3, which is chosen when no format
is asked for; asking for v2 is an error. Between formats, attributes follow xarray's
conventions (``_ARRAY_DIMENSIONS`` ↔ ``dimension_names``, the v2 ``fill_value`` ↔ the v3
``_FillValue`` attribute) and codecs are mapped by ``accumulus.filters``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import dask.array as da
import numpy as np
import xarray as xr
import zarr
from xarray.backends.zarr import FillValueCoder
from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.storage import LocalStore

from accumulus import compute
from accumulus.accumulation.model import spec
from accumulus.accumulation.model.chunk_check import read_problem_text
from accumulus.accumulation.model.groups import read_group
from accumulus.api import accumulate
from accumulus.chunk_reader import ChunkReadError
from accumulus.errors import AccumulusError
from accumulus.filters import join_v2, join_v3, numcodecs_codec, split_v2, v3_codecs
from accumulus.grid import (
    AxisChunks,
    ChunkBounds,
    ChunkRule,
    array_axis_chunks,
    axis_bounds,
    axis_chunks,
    parse_chunk_rules,
    rule_text,
)
from accumulus.raw_cube import RawCube, StoredValues
from accumulus.scope import accumulus_scope, scoped
from accumulus.stores.arrays import checked_format, consolidate, dimension_names
from accumulus.stores.locations import local_path
from accumulus.stores.opening import open_store, store_label
from accumulus.stores.zep3 import Zep3DraftKeys


@dataclass(frozen=True)
class RechunkResult:
    source: str
    dest: str
    zarr_format: int
    chunks: Mapping[str, Mapping[str, tuple[int, ...]]]  # array path -> {dim: chunk sizes}
    accumulated: tuple[str, ...]  # variables whose accumulation groups were rebuilt
    seconds: float


@dataclass(frozen=True)
class ArrayCopy:
    """One array to copy: its source and the chunks it gets."""

    path: str
    source: zarr.Array
    dims: tuple[str, ...]
    chunks: tuple[AxisChunks, ...]

    @property
    def bounds(self) -> tuple[ChunkBounds, ...]:
        return tuple(
            axis_bounds(size, c) for size, c in zip(self.source.shape, self.chunks, strict=True)
        )

    @property
    def variable(self) -> bool:
        """True when some dimension has chunks of different sizes (Zarr v3 only)."""
        return any(isinstance(c, tuple) for c in self.chunks)

    def zarr_chunks(self) -> tuple[int, ...] | list[int | list[int]]:
        """The ``chunks`` argument of zarr's array creation."""
        if not self.variable:
            return tuple(self.chunks)  # type: ignore[arg-type]
        return [c if isinstance(c, int) else list(c) for c in self.chunks]


@dataclass(frozen=True)
class AccumulationConfig:
    """What a source accumulation group was built with, to build it again."""

    variable: str
    dims: tuple[tuple[str, ...], ...]
    strides: Mapping[str, int]
    weights: spec.Weights | None
    at: Mapping[str, Any]  # positions rules (``--at``)


@scoped
def rechunk(
    src: str | Store,
    dest: str,
    chunks: str | Sequence[str] | Mapping[str, Any],
    zarr_format: int | None = None,
    *,
    scheduler: str | None = None,
    progress: compute.Progress | None = None,
    storage_options: dict | None = None,
    allow_references: Sequence[str] | None = None,
) -> RechunkResult:
    """Copy the datacube ``src`` to ``dest`` (which must not exist) with the chunks
    ``chunks`` gives: ``"time=month"``, ``"time=31,28,31,...,lat=90"`` or a mapping such as
    ``{"time": "year", "lat": 90}`` (see ``accumulus.grid``). Dimensions not named keep
    their chunks. ``zarr_format``: 2 or 3; by default the source's, or 3 when the chunks
    vary. Accumulation groups are rebuilt with the source's configuration.
    ``allow_references``: where a reference set may read besides its own location."""
    started = time.perf_counter()
    rules = parse_chunk_rules(chunks)
    if zarr_format not in (None, 2, 3):
        raise AccumulusError(f"--zarr-format must be 2 or 3, got {zarr_format}")
    source_store = open_store(
        src, "r", storage_options=storage_options, allow_references=allow_references
    )
    source_label = str(src) if not isinstance(src, Store) else store_label(src)
    root = _open_root(source_store, source_label)
    plan = plan_copies(root, rules)
    fmt = target_format(plan, rules, root.metadata.zarr_format, zarr_format)
    configs = accumulation_configs(source_store, root, source_label)
    consolidated = root.metadata.consolidated_metadata is not None

    with _destination(dest, source_label, storage_options) as dest_store:
        try:
            _write(root, plan, dest_store, fmt, consolidated, scheduler, progress)
        except ChunkReadError as failed:  # the destination is removed on the way out
            if not failed.of_the_data:
                raise
            raise AccumulusError(
                f"{source_label}: {read_problem_text(failed)}; nothing was written (restore "
                "the chunk, then run it again)"
            ) from None
        for config in configs:
            accumulate(
                dest_store,
                config.variable,
                config.dims,
                weights=config.weights,
                strides=config.strides,
                at=config.at,
                scheduler=scheduler,
            )
    return RechunkResult(
        source=source_label,
        dest=str(dest),
        zarr_format=fmt,
        chunks={
            item.path: {d: b.sizes for d, b in zip(item.dims, item.bounds, strict=True)}
            for item in plan
        },
        accumulated=tuple(c.variable for c in configs),
        seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------------------------
# Planning (nothing is written)


def _open_root(store: Store, label: str) -> zarr.Group:
    with accumulus_scope():
        try:
            return zarr.open_group(store, mode="r")
        except (FileNotFoundError, zarr.errors.GroupNotFoundError, ValueError) as exc:
            raise AccumulusError(f"{label} is not a Zarr group: {exc}") from None


def _is_accumulation_path(path: str) -> bool:
    return any(part.endswith(spec.GROUP_SUFFIX) for part in path.split("/"))


def plan_copies(root: zarr.Group, rules: Mapping[str, ChunkRule]) -> list[ArrayCopy]:
    """Every array to copy (accumulation groups aside) with its new chunk bounds; raises
    AccumulusError for a rule that names no dimension or does not fit one."""
    arrays = [
        (path, node)
        for path, node in root.members(max_depth=None)
        if isinstance(node, zarr.Array) and not _is_accumulation_path(path)
    ]
    seen_dims = {d for path, node in arrays for d in named_dimensions(node, path)}
    unknown = sorted(set(rules) - seen_dims)
    if unknown:
        raise AccumulusError(
            f"--chunks names dimension(s) {unknown} that no array has; dimensions: "
            f"{sorted(seen_dims)}"
        )
    resolved: dict[tuple[str, str, int], AxisChunks] = {}
    plan = []
    for path, array in arrays:
        if array.metadata.zarr_format == 3 and array.metadata.sharding_codec is not None:
            raise AccumulusError(f"{path}: sharded arrays cannot be rechunked here")
        dims = named_dimensions(array, path)
        chunks = []
        for axis, (dim, size) in enumerate(zip(dims, array.shape, strict=True)):
            if dim not in rules:
                chunks.append(array_axis_chunks(array, axis))
                continue
            scope = (path.rpartition("/")[0], dim, size)
            if scope not in resolved:
                resolved[scope] = _rule_chunks(root, scope[0], dim, size, rules[dim])
            chunks.append(resolved[scope])
        plan.append(ArrayCopy(path, array, dims, tuple(chunks)))
    return plan


def _rule_chunks(root: zarr.Group, group: str, dim: str, size: int, rule: ChunkRule) -> AxisChunks:
    times = decoded_coordinate(root, group, dim) if isinstance(rule, str) else None
    return axis_chunks(rule, size, dim=dim, times=times)


def named_dimensions(array: zarr.Array, path: str) -> tuple[str, ...]:
    """An array's dimension names, by xarray's conventions for each format."""
    names = dimension_names(array)
    if len(names) != array.ndim:
        raise AccumulusError(
            f"{path}: no dimension names (dimension_names in Zarr v3, _ARRAY_DIMENSIONS in v2)"
        )
    return names


def decoded_coordinate(root: zarr.Group, group_path: str, dim: str) -> np.ndarray | None:
    """The CF-decoded values of the coordinate array named ``dim``, looked for in the array's
    group, then its parents (as netCDF scopes dimensions); None when there is none."""
    parts = group_path.split("/") if group_path else []
    for depth in range(len(parts), -1, -1):
        path = "/".join([*parts[:depth], dim])
        try:
            node = root[path]
        except KeyError:
            continue
        if isinstance(node, zarr.Array) and node.ndim == 1:
            attrs = {k: v for k, v in node.attrs.items() if k != "_ARRAY_DIMENSIONS"}
            raw = xr.Dataset({dim: (dim, node[...], attrs)})
            try:
                return xr.decode_cf(raw)[dim].values
            except ValueError as exc:
                raise AccumulusError(f"{path}: cannot decode its CF time: {exc}") from None
    return None


def target_format(
    plan: Sequence[ArrayCopy],
    rules: Mapping[str, ChunkRule],
    source_format: int,
    asked: int | None,
) -> int:
    """The output's Zarr format: the one asked for, else the source's, else 3 when some
    chunks vary (Zarr v2 cannot express them)."""
    variable = [
        (item.path, dim)
        for item in plan
        for dim, chunks in zip(item.dims, item.chunks, strict=True)
        if isinstance(chunks, tuple)
    ]
    if not variable:
        return asked or source_format
    if asked == 2:
        path, dim = variable[0]
        rule = f" (--chunks {dim}={rule_text(rules[dim])})" if dim in rules else ""
        raise AccumulusError(
            f"Zarr v2 cannot store variable chunk sizes, as {path!r} along {dim!r} needs{rule}; "
            "use --zarr-format 3"
        )
    return 3


def accumulation_configs(store: Store, root: zarr.Group, label: str) -> list[AccumulationConfig]:
    """The configuration of every accumulation group at the root of the source."""
    names = [
        name.removesuffix(spec.GROUP_SUFFIX)
        for name, node in root.members()
        if isinstance(node, zarr.Group) and name.endswith(spec.GROUP_SUFFIX)
    ]
    if not names:
        return []
    cube = RawCube(store, label)
    configs = []
    for variable in names:
        if variable not in cube.data_variables:
            continue
        group = read_group(cube, variable)
        if group is None:
            continue
        request = group.request()
        weights = None if group.weights == "unknown" else group.weights
        configs.append(
            AccumulationConfig(variable, request.combinations, request.strides, weights, request.at)
        )
    return configs


# --------------------------------------------------------------------------------------------
# Writing


@contextmanager
def _destination(dest: str, source: str, storage_options: dict | None) -> Iterator[Store]:
    """A store to write the output in, published whole on success, removed on failure."""
    text = os.fspath(dest)
    path = local_path(text)
    if path is None:
        store = open_store(text, "w", storage_options=storage_options)
        if sync(_has_keys(store)):
            raise AccumulusError(f"{text}: destination exists; remove it or choose another")
        try:
            yield store
        except BaseException:  # cleanup, then re-raised
            sync(_delete_all(store))
            raise
        return
    if path.suffix == ".zip":
        raise AccumulusError(f"{path}: write a directory store, then zip it")
    if path.exists() and (not path.is_dir() or any(path.iterdir())):
        raise AccumulusError(f"{path}: destination exists; remove it or choose another")
    if path.resolve() == (local_path(source) or Path(source)).resolve():
        raise AccumulusError(f"{path}: destination is the source; choose another")
    path.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        yield LocalStore(staging)
        if path.exists():
            path.rmdir()  # an empty directory, checked above
        staging.rename(path)
    except BaseException:  # cleanup, then re-raised
        shutil.rmtree(staging, ignore_errors=True)
        raise


async def _has_keys(store: Store) -> bool:
    async for _ in store.list():
        return True
    return False


async def _delete_all(store: Store) -> None:
    # Key by key: fsspec's memory filesystem does not honour Store.clear() fully.
    for key in [key async for key in store.list()]:
        await store.delete(key)


def _write(
    root: zarr.Group,
    plan: Sequence[ArrayCopy],
    store: Store,
    fmt: int,
    consolidated: bool,
    scheduler: str | None,
    progress: compute.Progress | None,
) -> None:
    out = zarr.open_group(
        store, mode="w", zarr_format=checked_format(fmt), attributes=dict(root.attrs)
    )
    groups = sorted(
        (path for path, node in root.members(max_depth=None) if isinstance(node, zarr.Group)),
        key=lambda p: p.count("/"),
    )
    for path in groups:
        if not _is_accumulation_path(path):
            out.create_group(path, attributes=dict(root[path].attrs))
    writes = []
    for item in plan:
        target = _create_like(store, item, fmt)
        if item.source.ndim == 0:
            target[...] = item.source[...]
        elif item.source.size:
            blocks = da.from_array(
                StoredValues(item.source), chunks=tuple(b.sizes for b in item.bounds), lock=False
            )
            # One task per destination chunk: no two tasks write the same chunk.
            writes.append(da.store(blocks, target, lock=False, compute=False))  # type: ignore[arg-type]  # dask writes to any array-like target
    compute.run(writes, scheduler=scheduler, progress=progress)
    if consolidated:
        consolidate(store)


def _create_like(store: Store, item: ArrayCopy, fmt: int) -> zarr.Array:
    """An empty array like ``item.source`` with the new chunks, in format ``fmt``."""
    source = item.source
    if source.metadata.zarr_format != fmt:
        return zarr.create_array(
            store,
            name=item.path,
            shape=source.shape,
            dtype=str if source.dtype.kind in "OT" else source.dtype,
            chunks=item.zarr_chunks(),
            zarr_format=checked_format(fmt),
            **_converted_options(source, item, fmt),
        )
    # Same format: zarr keeps the data type, fill value, codecs, attributes and dimension
    # names of the source ("keep"); only the chunks change.
    keys: dict[str, Any] | None = None
    if isinstance(getattr(source.metadata, "chunk_key_encoding", None), Zep3DraftKeys):
        keys = {"name": "default", "separator": "/"}  # standard keys, not the draft's layout
    return zarr.from_array(
        store,
        name=item.path,
        data=source,
        write_data=False,
        chunks=item.zarr_chunks(),
        shards=None,
        chunk_key_encoding=keys,
    )


def _converted_options(source: zarr.Array, item: ArrayCopy, fmt: int) -> dict[str, Any]:
    """Attributes, fill value and codecs of a v2 array written as v3, or the reverse, by
    xarray's conventions, so ``xarray.open_zarr`` reads both alike."""
    attributes = {k: v for k, v in source.attrs.items() if k != "_ARRAY_DIMENSIONS"}
    text = source.dtype.kind in "OTU"  # strings: each format's own string codecs
    if fmt == 3:
        # v2's fill_value marks missing values; in v3 xarray reads that from _FillValue.
        fill = source.metadata.fill_value
        if fill is not None and "_FillValue" not in attributes and not text:
            attributes["_FillValue"] = FillValueCoder.encode(fill, source.dtype)
        options: dict[str, Any] = {"dimension_names": item.dims, "fill_value": fill}
        if not text:
            v2: Any = source  # a v2 array here: numcodecs codecs, each with its config
            filters = [f.get_config() for f in v2.filters]
            compressor = v2.compressors[0].get_config() if v2.compressors else None
            codecs = v3_codecs(join_v2(filters, compressor))
            options.update(
                filters=codecs.filters,
                serializer=codecs.serializer,
                compressors=codecs.compressors,
            )
    else:
        attributes["_ARRAY_DIMENSIONS"] = list(item.dims)
        fill = None
        if "_FillValue" in attributes and not text:
            fill = FillValueCoder.decode(attributes.pop("_FillValue"), source.dtype)  # type: ignore[arg-type]  # JSON the coder checks
        options = {"fill_value": fill}
        if not text:
            v3: Any = source.metadata  # a v3 array here: it has codecs
            configs = join_v3([c.to_dict() for c in v3.codecs])
            v2_filters, compressor = split_v2(configs)
            options.update(
                filters=[numcodecs_codec(c) for c in v2_filters or ()],
                compressors=numcodecs_codec(compressor) if compressor else None,
            )
    options["attributes"] = attributes
    return options
