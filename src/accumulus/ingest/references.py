"""Building a virtual cube's reference set: the Zarr metadata documents and the inline
arrays (coordinates along the append dimension, static variables) written by zarr into
memory, the chunk references of the granules added after the existing ones. Granules must
agree on what one array reads (dtype, codecs, chunks off the append dimension, fill values:
their *signature*); their chunk sizes along it give a regular grid or a rectilinear one
(Zarr v3)."""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore

from accumulus.errors import AccumulusError
from accumulus.grid import with_chunk_sizes
from accumulus.ingest.conform import Template
from accumulus.ingest.convert import ArrayPlan, create_zarr_array
from accumulus.ingest.granule_layout import ScannedGranule
from accumulus.ingest.reference_file import VIRTUAL_KEY, ReferenceSet, rectilinear_grids
from accumulus.stores.arrays import (
    array_at,
    checked_format,
    consolidate,
    group_at,
    store_metadata,
)
from accumulus.stores.keys import is_metadata_key


def _signature(granule: ScannedGranule, name: str, dim: str) -> dict[str, Any]:
    """What must agree between granules for their chunks to be read by one array: dtype,
    codecs, fill values, and the chunk shape off the append dimension."""
    plan = granule.array_plan(name)
    axis = granule.template.variables[name].dims.index(dim)
    chunks = [c for a, c in enumerate(granule.chunks[name]) if a != axis]
    fills = granule.template.variables[name].fill_values
    signature = {
        "dtype": plan.dtype.str,
        "codecs": plan.codecs,
        "chunks": chunks,
        "fill_values": [repr(float(v)) for v in fills],
    }
    if granule.template.variables[name].time is not None:  # numbers read as stored
        signature["times"] = [plan.attributes.get("units"), plan.attributes.get("calendar")]
    return signature


def _check_signatures(
    scanned: Sequence[ScannedGranule], recorded: Mapping[str, Any], dim: str
) -> dict[str, Any]:
    """Every granule's referenced arrays must match the cube's (or the first granule's)."""
    expected = dict(recorded)
    for granule in scanned:
        for name in granule.refs:
            theirs = json.loads(json.dumps(_signature(granule, name, dim)))
            ours = expected.setdefault(name, theirs)
            for key, what in (
                ("dtype", "is stored as"),
                ("codecs", "is compressed with"),
                ("chunks", f"has chunks (off {dim!r}) of"),
                ("fill_values", "marks missing values with"),
                ("times", "holds times (units, calendar)"),
            ):
                if key not in ours and key == "times":
                    continue  # a set made before times were recorded
                if theirs.get(key) != ours[key]:
                    raise AccumulusError(
                        f"granule {granule.name}: variable {name!r} {what} {theirs[key]}, the "
                        f"cube's {ours[key]}; a virtual cube reads every granule's bytes with "
                        "one encoding (append without --virtual to re-encode)"
                    )
    return expected


def compose(
    existing: ReferenceSet | None,
    definer: ScannedGranule | None,
    scanned: Sequence[ScannedGranule],
    template: Template,
    zarr_format: int,
    chunk_key_encoding: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The new reference set: metadata and inline arrays written by zarr into memory, the
    old chunk references kept, the new granules' chunk references added after them.
    A new cube (``existing`` None) takes its metadata from ``definer``, and its arrays'
    ``chunk_key_encoding`` (v3) when given. Every chunk of an inline array is stored, even
    one all fill values, so that the set references every chunk of every array."""
    dim = template.dim
    signatures = _check_signatures(scanned, existing.signatures if existing else {}, dim)
    group = existing.group if existing is not None else definer.group if definer else ""
    prefix = f"{group}/" if group else ""
    store = MemoryStore()
    if existing is None:
        assert definer is not None
        with zarr.config.set({"array.write_empty_chunks": True}):
            root = _create(store, definer, scanned, template, zarr_format, chunk_key_encoding)
        chunks_before: dict[str, int] = {}
    else:
        root = _reopen(store, existing)
        chunks_before = {name: len(sizes) for name, sizes in existing.dim_chunks.items()}
        with zarr.config.set({"array.write_empty_chunks": True}):
            _extend(root, existing, scanned, template)
    records = [*(existing.granules if existing else ()), *(g.record for g in scanned)]
    # The set's record stays in the root attributes, where readers of reference sets look
    # for the granules it was made from, with the group the cube is in.
    settings: dict[str, Any] = dict(root.attrs.get("accumulus", {}))  # type: ignore[arg-type]  # ours, an object
    settings["append_dim"] = dim
    if group:
        settings["group"] = group
    settings[VIRTUAL_KEY] = {
        "version": 1,
        "granules": [r.to_dict() for r in records],
        "arrays": signatures,
    }
    root.attrs["accumulus"] = settings
    if group:  # what the cube's own group says of itself, as an append's does
        node = group_at(root, group)
        ours: Any = node.attrs.get("accumulus", {})  # JSON: an object where we wrote it
        node.attrs["accumulus"] = {**dict(ours), "append_dim": dim}
    with rectilinear_grids():
        consolidate(store)
    refs: dict[str, Any] = {key: _inline_ref(store, key) for key in _keys(store)}
    if existing is not None:
        refs.update({k: v for k, v in existing.refs.items() if isinstance(v, list)})
    for name in signatures:
        metadata = array_at(root, prefix + name).metadata
        axis = template.variables[name].dims.index(dim)
        start = chunks_before.get(name, 0)
        for granule in scanned:
            for ref in granule.refs[name]:
                index = list(ref.index)
                index[axis] += start
                key = f"{prefix}{name}/{metadata.encode_chunk_key(tuple(index))}"
                refs[key] = [granule.record.url, ref.offset, ref.size]
            start += granule.record.steps // granule.chunks[name][axis]
    return refs


def _dim_chunk_sizes(granule: ScannedGranule, name: str, dim: str) -> list[int]:
    axis = granule.template.variables[name].dims.index(dim)
    size = granule.chunks[name][axis]
    return [size] * (granule.record.steps // size)


def _create(
    store: MemoryStore,
    first: ScannedGranule,
    scanned: Sequence[ScannedGranule],
    template: Template,
    zarr_format: int,
    chunk_key_encoding: dict[str, str] | None,
) -> zarr.Group:
    """A new cube's metadata and inline arrays, from the plan of granule ``first``."""
    dim = template.dim
    root = zarr.open_group(store, mode="w", zarr_format=checked_format(zarr_format))
    for group in first.plan.groups:  # the cube's group and its ancestors, in that order
        if group.path in ("", first.group) or first.group.startswith(group.path + "/"):
            node = root.require_group(group.path) if group.path else root
            node.attrs.update(group.attributes)
    prefix = f"{first.group}/" if first.group else ""
    along = {name: np.concatenate([g.inline[name] for g in scanned]) for name in first.inline}
    for plan in first.plan.arrays:
        name = plan.path.removeprefix(prefix)
        if name not in template.variables or not plan.path.startswith(prefix):
            continue  # variables of nested or other groups are not part of the cube
        if name in first.refs:
            axis = template.variables[name].dims.index(dim)
            sizes = [s for g in scanned for s in _dim_chunk_sizes(g, name, dim)]
            shape, grid = list(plan.shape), list(first.chunks[name])
            shape[axis] = sum(sizes)
            grid[axis] = _grid_along(sizes, zarr_format, name, dim)
            # A list as zarr takes it: along the dimension, a size or a list of sizes.
            planned = replace(plan, shape=tuple(shape), chunks=grid)  # type: ignore[arg-type]
            with rectilinear_grids():
                create_zarr_array(root, planned, zarr_format, chunk_key_encoding)
        elif name in along:
            _write_inline(root, plan, along[name], _INLINE_CHUNK, chunk_key_encoding)
        else:
            values = first.static[name]
            whole = max(1, values.shape[0]) if values.ndim else 1
            _write_inline(root, plan, values, whole, chunk_key_encoding)
    return root


def _grid_along(sizes: Sequence[int], zarr_format: int, name: str, dim: str) -> Any:
    """The chunk grid along the append dimension: one size (regular) or the list."""
    if len(set(sizes)) == 1:
        return sizes[0]
    if zarr_format == 2:
        raise AccumulusError(
            f"variable {name!r}: the granules give chunks of {sorted(set(sizes))} steps along "
            f"{dim!r}; Zarr v2 needs one size. Write the virtual cube as Zarr v3 (the "
            "default), whose rectilinear chunk grid holds them"
        )
    return list(sizes)


def _reopen(store: MemoryStore, existing: ReferenceSet) -> zarr.Group:
    """The existing set's metadata and inline chunks, as a writable in-memory store."""
    prototype = default_buffer_prototype()
    for key, value in existing.refs.items():
        if isinstance(value, str):
            data = base64.b64decode(value[7:]) if value.startswith("base64:") else value.encode()
            sync(store.set(key, prototype.buffer.from_bytes(data)))
    with rectilinear_grids():
        return zarr.open_group(store, mode="r+", use_consolidated=False)


def _extend(
    root: zarr.Group,
    existing: ReferenceSet,
    scanned: Sequence[ScannedGranule],
    template: Template,
) -> None:
    """Grow the referenced arrays' grids and the inline arrays along the dimension."""
    dim = template.dim
    fmt = existing.zarr_format
    node = group_at(root, existing.group)
    for name, old in existing.dim_chunks.items():
        sizes = [*old, *(s for g in scanned for s in _dim_chunk_sizes(g, name, dim))]
        array = array_at(node, name)
        axis = template.variables[name].dims.index(dim)
        grid = _grid_along(sizes, fmt, name, dim)
        with rectilinear_grids():
            if isinstance(grid, int) and fmt == 2:
                array.resize(_replaced(array.shape, axis, sum(sizes)))
            else:
                store_metadata(array, with_chunk_sizes(array.metadata, axis, sum(sizes), sizes))
    for name, values in existing.inline.items():  # the tail, from ``existing.start``
        new = np.concatenate([values, *(g.inline[name] for g in scanned)])
        array = array_at(node, name)
        axis = template.variables[name].dims.index(dim)
        array.resize(_replaced(array.shape, axis, existing.start + new.shape[axis]))
        array[(slice(None),) * axis + (slice(existing.start, None),)] = new


def _replaced(shape: Sequence[int], axis: int, size: int) -> tuple[int, ...]:
    return tuple(size if a == axis else n for a, n in enumerate(shape))


# Inline arrays along the append dimension (times, time bounds) are chunked this long,
# whatever the first granule's length: an append rewrites the last chunk (at most 8 KB of
# times), and a reader opens the coordinate of 100,000 steps in 100 reads.
_INLINE_CHUNK = 1024


def _write_inline(
    root: zarr.Group,
    plan: ArrayPlan,
    values: np.ndarray,
    chunk: int,
    chunk_key_encoding: dict[str, str] | None,
) -> None:
    """A small array stored in the reference file itself, ``chunk`` long along its first
    dimension."""
    chunks = (chunk, *values.shape[1:]) if values.ndim else None
    fmt = root.metadata.zarr_format
    planned = replace(plan, shape=values.shape, chunks=chunks)
    array = create_zarr_array(root, planned, fmt, chunk_key_encoding)
    if values.size:
        array[...] = values


def _keys(store: MemoryStore) -> list[str]:
    async def collect() -> list[str]:
        return [key async for key in store.list()]

    return sorted(sync(collect()))


def _inline_ref(store: MemoryStore, key: str) -> str:
    """A key's value in a reference file: metadata as JSON text, chunks as base64."""
    data = sync(store.get(key, prototype=default_buffer_prototype()))
    assert data is not None
    raw = data.to_bytes()
    if is_metadata_key(key):
        return raw.decode()
    return "base64:" + base64.b64encode(raw).decode()
