"""``accumulus inspect``: what a cube holds, as a JSON-able dictionary."""

from __future__ import annotations

from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.sync import sync

from accumulus.accumulation.model import pairs, spec, statistics
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.grid import array_bounds, sharding_of
from accumulus.raw_cube import RawCube
from accumulus.stores.arrays import array_at, bytes_stored, dimension_names, missing_chunks
from accumulus.stores.inferred_conventions import inferred_conventions
from accumulus.stores.keys import is_metadata_key


def _codecs(array: zarr.Array) -> list[dict[str, Any]]:
    metadata = array.metadata
    if metadata.zarr_format == 2:
        chain = [*(metadata.filters or ()), *([metadata.compressor] if metadata.compressor else [])]
        return [c.get_config() for c in chain]
    return [c.to_dict() for c in metadata.codecs]


def _chunk_grid(array: zarr.Array) -> dict[str, Any]:
    """The chunks (inner chunks of a sharded array) and, when sharded, the shards."""
    bounds = array_bounds(array)
    if all(b.is_regular for b in bounds):
        grid: dict[str, Any] = {
            "type": "regular",
            "chunks": [max(b.sizes, default=0) for b in bounds],
        }
    else:
        grid = {"type": "rectilinear", "chunk_sizes": [list(b.sizes) for b in bounds]}
    if sharding_of(array.metadata) is not None:
        shards = ChunkGrid.from_metadata(array.metadata).chunk_sizes
        grid["shards"] = [max(sizes, default=0) for sizes in shards]
    return grid


def describe_array(array: zarr.Array, dims: list[str]) -> dict[str, Any]:
    return {
        "path": array.path,
        "dims": dims,
        "shape": list(array.shape),
        "dtype": str(array.dtype),
        "chunk_grid": _chunk_grid(array),
        "codecs": _codecs(array),
        "bytes": int(array.nbytes),
        "bytes_stored": bytes_stored(array),
        "objects": _objects_stored(array),
    }


def _objects_stored(array: zarr.Array) -> int | None:
    """How many objects hold the array's chunks (its shards, when sharded), or None where
    the store cannot list them."""
    store_path = array.store_path
    prefix = f"{store_path.path}/" if store_path.path else ""

    async def count() -> int:
        keys = [k async for k in store_path.store.list_prefix(prefix)]
        return sum(not is_metadata_key(k) for k in keys)

    try:
        return sync(count())
    except Exception:  # a store's listing errors, as for stores.arrays.bytes_stored
        return None


def stored_bytes(
    store: Store, variable: str, group: spec.AccumulationGroup, raw_store: Store | None = None
) -> tuple[dict[str, int | None], int | None]:
    """Stored bytes of each accumulation of ``group`` (by key; None where the store cannot
    list them) and of the raw array (in ``raw_store`` when the group is in a sidecar), as
    the stores hold them now."""
    root = zarr.open_group(store, mode="r", use_consolidated=False)
    sizes = {}
    for acc in group.accumulations:
        names = sorted(set(acc.arrays.values()))
        parts = [bytes_stored(array_at(root, f"{group.path}/{n}")) for n in names]
        sizes[acc.key] = None if None in parts else sum(p or 0 for p in parts)
    if raw_store is not None:
        root = zarr.open_group(raw_store, mode="r", use_consolidated=False)
    return sizes, bytes_stored(array_at(root, variable))


def describe_cube(cube: RawCube, found: AccumulationGroups | None = None) -> dict[str, Any]:
    """What ``cube`` holds; its accumulation groups from ``found`` (a sidecar's) if given."""
    arrays = [
        describe_array(a, list(dimension_names(a)))
        for _, a in sorted(cube.root.arrays(), key=lambda x: x[0])
    ]
    found = found or AccumulationGroups(cube)
    groups = []
    sidecar = None if found.sidecar is None else _describe_sidecar(found)
    for name in cube.data_variables:
        if sidecar is not None and sidecar["variables"].get(name, {}).get("stale"):
            continue
        group = found.group(name)
        if group is None:
            continue
        var = cube.variable(name)
        bounds = dict(zip(var.dims, var.bounds, strict=True))
        raw_stored = bytes_stored(var.array)
        accumulations = []
        for acc in group.accumulations:
            described = {
                t: describe_array(found.array(name, n), list(acc.array_dims))
                for t, n in sorted(acc.arrays.items())
            }
            unique = {a["path"]: a["bytes_stored"] for a in described.values()}.values()
            stored = None if None in unique else sum(unique)
            accumulations.append(
                {
                    "dims": list(acc.dims),
                    "strides": list(acc.strides),
                    # Where entries end: chunk ends (ZEP 5) or the --at rule, and how many.
                    "at": acc.rule_text(),
                    "entries": {d: len(p) for d, p in acc.entry_positions(bounds).items()},
                    "arrays": described,
                    "bytes_stored": stored,
                    "raw_bytes_stored": raw_stored,
                }
            )
        groups.append(
            {
                "variable": name,
                # Chunk objects of its arrays that the store no longer holds (deleted by
                # hand, lost in a copy): a query of them fails; a rebuild restores them.
                "missing_chunks": _missing_chunks(found, name, group),
                # Statistics whose extra sums it stores (accumulate --stats), and the bytes
                # of their arrays (None where a store cannot list them).
                "stats": _stats_stored(group, accumulations),
                # The bytes of the accumulations added for them beside the default layout
                # (``spec.split_for_sums``: at chunk ends and months), all their arrays.
                "stats_siblings_bytes": _siblings_stored(group, accumulations),
                # A correlation's pair sums with each partner (accumulate --stats corr:VAR2).
                "pairs": _pairs_stored(cube, name),
                "reference": group.reference,
                "path": spec.group_name(name),
                "producer": group.producer,
                "weights": group.weights,
                "complete": group.complete,
                "stride_unit": group.stride_unit,
                # default (accumulate with no options), ZEP 5 (--minimal) or custom.
                "layout": spec.layout_name(group),
                "coverage": {
                    d: {"covered": int(group.coverage.get(d, 0)), "size": n}
                    for d, n in zip(var.dims, var.shape, strict=True)
                },
                "accumulations": accumulations,
            }
        )
    return {
        "store": cube.label,
        "zarr_format": cube.zarr_format,
        "consolidated": cube.consolidated,
        "dimensions": {str(d): int(n) for d, n in cube.raw.sizes.items()},
        "arrays": arrays,
        "accumulation_groups": groups,
        # Conventions the store lacks, inferred to read it (stores.inferred_conventions).
        "inferred": inferred_conventions(cube.store),
    } | ({"sidecar": sidecar} if sidecar is not None else {})


def _missing_chunks(
    found: AccumulationGroups, variable: str, group: spec.AccumulationGroup
) -> dict[str, dict[str, Any]]:
    """Each array of ``group`` with chunk objects missing -> how many and the first key."""
    out: dict[str, dict[str, Any]] = {}
    names = sorted({n for acc in group.accumulations for n in acc.arrays.values()})
    for n in names:
        array = found.array(variable, n)
        missing = missing_chunks(array)
        if missing:
            out[array.path] = {"count": len(missing), "first": f"{array.path}/{missing[0]}"}
    return out


def _describe_sidecar(found: AccumulationGroups) -> dict[str, Any]:
    """A sidecar's store and source, and for each variable it accumulates whether its sums
    still hold for the source (``stale``: why not) and what of the source they cover."""
    sidecar = found.sidecar
    assert sidecar is not None
    variables = {}
    for name in found.cube.data_variables:
        if spec.group_name(name) not in found.root:
            continue
        stale = sidecar.staleness(found.cube, name, found.root)
        variables[name] = {"stale": stale}
    return {"store": sidecar.label, "source": sidecar.source, "variables": variables}


def _pairs_stored(cube: RawCube, variable: str) -> dict[str, dict[str, Any]]:
    """Each variable ``variable`` keeps pair sums with -> where their entries end, how many
    are final, and their array."""
    out: dict[str, dict[str, Any]] = {}
    for other in pairs.partners(cube.root, variable):
        found = pairs.read_pairs(cube.root, variable, other)
        if found is None:
            out[other] = {"complete": False}
            continue
        described, array = found
        out[other] = {
            "complete": True,
            "dim": described.dim,
            "at": "chunk ends",
            "entries": len(described.positions),
            "final": described.final,
            "array": describe_array(array, list(dimension_names(array))),
        }
    return out


def _siblings_stored(
    group: spec.AccumulationGroup, accumulations: list[dict[str, Any]]
) -> int | None:
    """The bytes of ``group``'s accumulations added for a statistic's sums (None where not
    known)."""
    sizes = [
        described["bytes_stored"]
        for acc, described in zip(group.accumulations, accumulations, strict=True)
        if group.is_sums_sibling(acc)
    ]
    return None if None in sizes else sum(s or 0 for s in sizes)


def _stats_stored(
    group: spec.AccumulationGroup, accumulations: list[dict[str, Any]]
) -> dict[str, int | None]:
    """Each statistic of ``accumulate --stats`` the group keeps sums for -> the bytes its
    arrays take, all accumulations together (None where not known)."""
    stored: dict[str, int | None] = {}
    held = {t for acc in group.accumulations for t in acc.arrays}
    for stat in statistics.built_stats(sorted(held)):
        paths: dict[str, int | None] = {}
        for acc in accumulations:
            for term, array in acc["arrays"].items():
                if term in statistics.BUILT_STATS[stat]:
                    paths[array["path"]] = array["bytes_stored"]
        sizes = list(paths.values())
        stored[stat] = None if None in sizes else sum(s for s in sizes if s is not None)
    return stored
