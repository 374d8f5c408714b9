"""What an accumulation group was built from (its build record), and whether that still holds.

A group's sums are right only for the raw data they summed and the attributes that say
where its entries end. So a build records, in the group's ``accumulus`` attribute under
``built_from``:

- the raw variable's shape, chunk edges and a digest of its encoding (``sidecar.fingerprint``);
- each accumulation array's ``_ARRAY_DIMENSIONS`` and ``_ACCUMULATION_STRIDE`` as written;
- the request it was built from (combinations, strides, positions, weights), so that building
  it again keeps them even when the group's other attributes can no longer be read
  (``recorded_request``);
- the raw objects it summed: for every stored object (a chunk, or a shard of a sharded
  array) lying wholly within the covered extent (a partial last one, which an append
  rewrites, is left out: the sums of its data are checked by ``verify``'s recomputation),
  its key and size, combined into one
  digest (a sum of per-object hashes, so an append adds the objects it newly covers without
  reading the others again), with the keys that were missing or empty.

Checking it costs two ways, so it is done in two places:

- ``attributes_problem`` compares the metadata a reader already holds (its snapshot: array
  attributes, the raw shape and grid) with the record: no request. ``groups.read_group``
  runs it, once per snapshot, so every query is guarded against edited attributes or a
  raw array rechunked or re-encoded since the build.
- ``objects_problem`` asks the store for the size of every covered raw object (a request
  per object): ``verify`` runs it, and a rebuild lists the missing ones
  (``missing_objects``) to refuse to bake a lost chunk in as missing values.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from itertools import product
from typing import Any

import zarr
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.sync import sync

from accumulus.accumulation.model import spec
from accumulus.accumulation.model.positions import rule_from_json, rule_json
from accumulus.accumulation.model.sidecar import fingerprint, source_problem
from accumulus.errors import AccumulationReadError, AccumulusError
from accumulus.raw_cube import RawCube, VariableInfo

RECORD_KEY = "built_from"  # in the group's ``accumulus`` attribute
MISSING_LISTED = 100  # missing objects named in a record (the count is always there)
_CONCURRENT = 64  # size requests in flight


class BuildRecordError(AccumulationReadError):
    """A group's attributes, or the raw data, no longer match what it was built from: its
    sums must not be used (the raw data can still answer)."""


# --------------------------------------------------------------------------------------------
# Writing


def build_record(
    cube: RawCube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    previous: Mapping[str, Any] | None = None,
    previous_coverage: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The record of ``group`` (just written over ``var``). With the ``previous`` record and
    the coverage it described (an update after the data grew), only the objects covered
    since are asked for their sizes."""
    objects = covered_objects(var, group.coverage)
    raw = previous.get("raw") if previous else None
    if isinstance(raw, dict) and previous_coverage is not None:
        before = set(covered_objects(var, previous_coverage))
        new = [o for o in objects if o not in before]
        sizes = object_sizes(var, new)
        digest = _add(int(raw.get("digest", "0"), 16), sizes)
        missing = [*raw.get("missing", []), *_missing(sizes)]
        missing_count = int(raw.get("missing_count", 0)) + len(_missing(sizes))
    else:
        sizes = object_sizes(var, objects)
        digest = _add(0, sizes)
        missing = _missing(sizes)
        missing_count = len(missing)
    found = fingerprint(cube, var, group.coverage)
    found.pop("references", None)  # a sidecar's own fingerprint has them
    return {
        "source": found,
        "arrays": arrays_as_written(group),
        "request": request_json(group.request()),
        "raw": {
            "objects": len(objects),
            "digest": f"{digest:016x}",
            "missing": sorted(missing)[:MISSING_LISTED],
            "missing_count": missing_count,
        },
    }


def arrays_as_written(group: spec.AccumulationGroup) -> dict[str, dict[str, Any]]:
    """Each accumulation array's ``_ARRAY_DIMENSIONS`` and ``_ACCUMULATION_STRIDE``."""
    arrays: dict[str, dict[str, Any]] = {}
    for acc in group.accumulations:
        attributes = spec.array_attributes(acc)
        for name in acc.arrays.values():
            arrays[name] = {
                "dims": attributes["_ARRAY_DIMENSIONS"],
                "stride": attributes.get("_ACCUMULATION_STRIDE"),
            }
    return arrays


def request_json(request: spec.BuildRequest) -> dict[str, Any]:
    """What a user chose, as the record keeps it (``shards`` is how arrays are stored, not
    what they hold: not kept)."""
    return {
        "combinations": [list(c) for c in request.combinations],
        "strides": {d: int(s) for d, s in request.strides.items()},
        "at": {d: rule_json(r) for d, r in request.at.items()},
        "weights": request.weights,
    } | ({"sums": list(request.sums)} if request.sums else {})


# --------------------------------------------------------------------------------------------
# Reading


def stored_record(root: zarr.Group, variable: str) -> dict[str, Any] | None:
    """The build record of ``variable``'s group in ``root`` (a cube's or a sidecar's), as
    written; None when there is no group, or no record in it."""
    try:
        node = root.get(spec.group_name(variable))
    except (AccumulusError, ValueError, KeyError):  # attributes that are not JSON
        return None
    extension = node.attrs.get(spec.EXTENSION_KEY) if isinstance(node, zarr.Group) else None
    found = extension.get(RECORD_KEY) if isinstance(extension, dict) else None
    return found if isinstance(found, dict) else None


def recorded_request(record: Any) -> spec.BuildRequest | None:
    """The request a record says its group was built from (None: a record written before
    requests were recorded, or none)."""
    kept = record.get("request") if isinstance(record, dict) else None
    if not isinstance(kept, dict):
        return None
    try:
        return spec.BuildRequest(
            combinations=tuple(tuple(str(d) for d in c) for c in kept["combinations"]),
            strides={str(d): int(s) for d, s in kept.get("strides", {}).items()},
            at={str(d): rule_from_json(r, str(d)) for d, r in kept.get("at", {}).items()},
            weights=str(kept["weights"]),
            sums=tuple(str(t) for t in kept.get("sums", []) if t in spec.OPTIONAL),
        )
    except (AccumulusError, KeyError, TypeError, ValueError):
        return None  # edited into something else: nothing to keep


# --------------------------------------------------------------------------------------------
# Checking


def attributes_problem(
    cube: RawCube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    record: Any,
    array_attributes: Mapping[str, Mapping[str, Any] | None],
    *,
    source: bool = True,
) -> str | None:
    """What changed since the build among what a reader's snapshot holds (None: nothing):
    an accumulation array's dimensions or stride, the raw array's encoding, shape or chunk
    edges within the coverage (``source``: False for a sidecar, whose own fingerprint is
    checked already). Groups without a record (built before records) pass."""
    if not isinstance(record, dict):
        return None
    where = f"{cube.label}: {group.path}"
    for name, written in sorted(record.get("arrays", {}).items()):
        attributes = array_attributes.get(name)
        if attributes is None:
            return f"{where}/{name} is gone since the build"
        for key, label in (("dims", "_ARRAY_DIMENSIONS"), ("stride", "_ACCUMULATION_STRIDE")):
            now = attributes.get(label)
            if (list(now) if isinstance(now, list | tuple) else now) != written.get(key):
                return (
                    f"{where}/{name}: {label} is {now}, but it was built with "
                    f"{written.get(key)} (its attributes were edited)"
                )
    recorded = record.get("source")
    if source and isinstance(recorded, dict):
        now = fingerprint(cube, var, group.coverage)
        now.pop("references", None)
        problem = source_problem(recorded, now, group.coverage)
        if problem is not None:
            return f"{where}: {var.name!r} {problem} since its accumulations were built"
    return None


def objects_problem(var: VariableInfo, group: spec.AccumulationGroup, record: Any) -> str | None:
    """Whether the raw objects within the coverage are those the build summed, by the sizes
    the store reports now (None: they are; also for a group without a record)."""
    if not isinstance(record, dict) or not isinstance(record.get("raw"), dict):
        return None
    raw = record["raw"]
    objects = covered_objects(var, group.coverage)
    sizes = object_sizes(var, objects)
    if f"{_add(0, sizes):016x}" == raw.get("digest"):
        return None
    was_missing = set(raw.get("missing", []))
    gone = [k for k in _missing(sizes) if k not in was_missing]
    if gone:
        named = ", ".join(gone[:3]) + (" ..." if len(gone) > 3 else "")
        what = f"{len(gone)} raw chunk(s) summed by the build are missing or empty now ({named})"
    elif len(objects) != raw.get("objects"):
        what = f"covers {len(objects)} raw objects now, {raw.get('objects')} when built"
    else:
        what = "raw chunks were rewritten (their sizes differ from those summed)"
    return (
        f"{group.path}: {what}: its sums no longer match the raw data; restore them, or "
        "rebuild with `accumulus accumulate --rebuild` (--allow-missing-chunks to sum "
        "missing chunks as missing values)"
    )


def missing_objects(var: VariableInfo, allowed: Iterable[str] = ()) -> list[str]:
    """Keys of the raw objects of ``var``'s whole extent that are not stored (or empty),
    apart from those ``allowed`` (missing when the group was last built)."""
    extent = dict(zip(var.dims, var.shape, strict=True))
    sizes = object_sizes(var, covered_objects(var, extent, partial=True))
    allowed = set(allowed)
    return [k for k in _missing(sizes) if k not in allowed]


def recorded_missing(record: Any) -> list[str] | None:
    """The keys a record lists as missing at the build (None when it does not list them
    all, or there is no record)."""
    raw = record.get("raw") if isinstance(record, dict) else None
    if not isinstance(raw, dict):
        return None
    listed = list(raw.get("missing", []))
    return listed if len(listed) == raw.get("missing_count") else None


# --------------------------------------------------------------------------------------------
# Raw objects


def covered_objects(
    var: VariableInfo, coverage: Mapping[str, int], *, partial: bool = False
) -> list[str]:
    """Store keys of ``var``'s stored objects (chunks, or shards) lying wholly within
    ``coverage`` as the grid declares them: a partial last one (declared larger than the
    data it holds) is left out, as an append along its dimension rewrites it, unless
    ``partial``."""
    metadata = var.array.metadata
    grid = ChunkGrid.from_metadata(metadata)
    counts = []
    for axis, dim in enumerate(var.dims):
        dimension = grid.dimensions[axis]
        limit = min(int(coverage.get(dim, var.shape[axis])), var.shape[axis])
        end, n = 0, 0
        for i in range(dimension.nchunks):
            end += dimension.chunk_size(i) if not partial else dimension.data_size(i)
            if end > limit:
                break
            n += 1
        counts.append(n)
    prefix = var.array.store_path.path
    prefix = f"{prefix}/" if prefix else ""
    return [
        prefix + metadata.encode_chunk_key(coords)
        for coords in product(*(range(n) for n in counts))
    ]


def object_sizes(var: VariableInfo, keys: Sequence[str]) -> dict[str, int | None]:
    """The stored size of each key (None: not stored as an object, e.g. a directory left in
    a chunk's place)."""
    store = var.array.store_path.store

    async def one(key: str, limit: asyncio.Semaphore) -> int | None:
        async with limit:
            if not await store.exists(key):
                return None
            return int(await store.getsize(key))

    async def every() -> list[int | None]:
        limit = asyncio.Semaphore(_CONCURRENT)
        return list(await asyncio.gather(*(one(k, limit) for k in keys)))

    return dict(zip(keys, sync(every()), strict=True)) if keys else {}


def _missing(sizes: Mapping[str, int | None]) -> list[str]:
    return [k for k, size in sizes.items() if not size]


def _add(digest: int, sizes: Mapping[str, int | None]) -> int:
    """``digest`` plus each object's hash (of its key and size), modulo 2**64: the same
    whatever order objects are added in."""
    for key, size in sizes.items():
        token = f"{key}:{size if size else 'missing'}".encode()
        digest += int.from_bytes(hashlib.sha256(token).digest()[:8], "big")
    return digest % 2**64
