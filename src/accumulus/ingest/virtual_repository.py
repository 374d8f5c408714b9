"""Virtual cubes in an icechunk repository: ``append icechunk://… GRANULES --virtual``.

The references are those of a ``.json``/``.parq`` set (``virtual_scan.scan_new`` reads the new
granules' layouts, ``references.compose`` makes the Zarr metadata, the inline arrays and
the chunks' byte ranges); here they are written into a writable session instead of a file:
metadata and inline arrays (coordinates) as Zarr keys, every chunk of a granule as an
icechunk virtual reference (its granule's URL, offset and length: no data copied), after
the repository is configured to read the granules' directories (``add_containers``). The
cube's accumulation groups are brought up to date in the same session, as real chunks, and
everything lands in one commit, on the branch ``ref`` names, as a copying append does.

A repository holds Zarr v3 only. Monthly granules of unequal length give a rectilinear
chunk grid (ZEP 3), which icechunk holds (``transactional`` spells its sizes out).
"""

from __future__ import annotations

import base64
import itertools
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync

from accumulus.accumulation.build.accumulate import build_accumulations
from accumulus.accumulation.model.groups import read_group
from accumulus.errors import AccumulusError
from accumulus.grid import array_bounds
from accumulus.hierarchy import consolidate_groups, cube_groups, holds_accumulations
from accumulus.ingest.reference_file import (
    VIRTUAL_KEY,
    ReferenceSet,
    rectilinear_grids,
    reference_set_in,
)
from accumulus.ingest.references import compose
from accumulus.ingest.virtual_scan import VirtualAppend, VirtualResult, scan_new
from accumulus.raw_cube import RawCube
from accumulus.stores.arrays import array_at, group_at
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from accumulus.stores.transactional import (
    TransactionalStore,
    add_containers,
    chunk_location,
    retried_on_conflict,
    transaction_of,
)


def append_virtual_repository(asked: VirtualAppend) -> VirtualResult:
    """``virtual.append_virtual`` into the icechunk repository ``asked.target`` (created by
    the first append): one commit holding the new references, the grown coordinates and the
    accumulations brought up to date."""
    if asked.zarr_format not in (None, 3):
        raise AccumulusError(
            f"{asked.target}: icechunk repositories hold Zarr v3 only (--zarr-format 3)"
        )
    if not asked.items:
        raise AccumulusError("no granules given to append")
    return _append_once(asked.target, asked)


@retried_on_conflict  # a branch that moved meanwhile: done again on its head (of ``url``)
def _append_once(url: str, asked: VirtualAppend) -> VirtualResult:
    dim, group = asked.dim, asked.group
    session = _session(asked)
    existing = _existing(session, url, dim)
    if existing is not None and group is not None and group.strip("/") != existing.group:
        raise AccumulusError(
            f"{url} references the granules' group {existing.group or '/'!r}, not {group!r}"
        )
    new = scan_new(existing, asked, 3)
    scanned = new.scanned
    before = existing.steps if existing is not None else 0
    written_refs = 0
    if scanned:
        assert new.template is not None
        refs = compose(existing, new.definer, scanned, new.template, 3)
        added = add_containers(url, asked.storage_options, [g.record.url for g in scanned])
        if added:  # the session must see the new containers to take references into them
            session = _session(asked)
        _write(session, refs, existing.refs if existing is not None else {})
        _update_accumulations(session, url)
        names = ", ".join(g.name for g in scanned)
        granules = len(existing.granules if existing is not None else ()) + len(scanned)
        after = before + sum(g.record.steps for g in scanned)
        session.commit(
            f"append along {dim} (virtual): {names}",
            summary={"granules": granules, "extent": after},
        )
        written_refs = sum(isinstance(v, list) for v in refs.values())
    return VirtualResult.of(asked, existing, new, 3, written_refs)


def holds_virtual_cube(store: TransactionalStore) -> bool:
    """Whether the session holds a cube made by ``append … --virtual``."""
    try:
        root = zarr.open_group(store, mode="r", use_consolidated=False)
    except (zarr.errors.GroupNotFoundError, FileNotFoundError):
        return False
    settings: Any = root.attrs.get("accumulus", {})  # JSON
    return isinstance(settings, dict) and VIRTUAL_KEY in settings


def _session(asked: VirtualAppend) -> TransactionalStore:
    store = transaction_of(
        open_store(
            asked.target,
            "w",
            storage_options=asked.storage_options,
            ref=asked.ref,
            allow_references=asked.allow_references,
        )
    )
    assert store is not None  # an icechunk URL opens a session
    return store


def _existing(store: TransactionalStore, url: str, dim: str) -> ReferenceSet | None:
    """The virtual cube the session holds, or None in a new repository: its metadata
    documents, and the last chunk of each inline array along ``dim`` (what an append
    rewrites), read as references. The granules' chunks are not listed, nor the inline
    arrays' earlier chunks: what is read does not grow with the cube's length."""
    try:
        with rectilinear_grids():
            root = zarr.open_group(store, mode="r", use_consolidated=False)
            members = dict(root.members(max_depth=None))
    except (zarr.errors.GroupNotFoundError, FileNotFoundError):
        return None
    settings: Any = root.attrs.get("accumulus", {})  # JSON, checked here
    virtual = settings.get(VIRTUAL_KEY) if isinstance(settings, dict) else None
    if not isinstance(virtual, dict):
        if not members:
            return None
        raise AccumulusError(
            f"{url} holds a cube appended without --virtual; append its granules the same "
            "way, or reference them in a new repository"
        )
    keys = ["zarr.json", *(f"{path}/zarr.json" for path in members)]
    existing = reference_set_in(store, url, _read(store, keys), dim)
    cube = group_at(root, existing.group)
    prefix = f"{existing.group}/".lstrip("/")
    tail: list[str] = []
    for name in existing.inline:
        array = array_at(cube, name)
        axis = existing.template.variables[name].dims.index(dim)
        tail.extend(prefix + name + "/" + k for k in _chunk_keys_from(array, axis, existing.start))
    return replace(existing, refs={**existing.refs, **_read(store, tail)})


def _read(store: TransactionalStore, keys: list[str]) -> dict[str, str]:
    """The keys' values (those that exist) as a reference set holds them."""
    prototype = default_buffer_prototype()
    refs = {}
    for key in keys:
        value = sync(store.get(key, prototype))
        if value is not None:
            refs[key] = _as_reference(key, value.to_bytes())
    return refs


def _chunk_keys_from(array: zarr.Array, axis: int, start: int) -> list[str]:
    """The keys (under the array) of its chunks that hold steps ``start`` on along ``axis``."""
    ranges = [range(bounds.n_chunks) for bounds in array_bounds(array)]
    ranges[axis] = array_bounds(array)[axis].chunks_overlapping(start, array.shape[axis])
    return [array.metadata.encode_chunk_key(index) for index in itertools.product(*ranges)]


def _as_reference(key: str, data: bytes) -> str:
    """A key's value as a reference set holds it (``references._inline_ref``)."""
    if is_metadata_key(key):
        return data.decode()
    return "base64:" + base64.b64encode(data).decode()


def _write(store: TransactionalStore, refs: Mapping[str, Any], before: Mapping[str, Any]) -> None:
    """Write what changed: metadata documents first (parents before children: icechunk
    takes a node's chunks once the node exists), then inline chunks, then the new chunk
    references, as virtual references, one batch per array."""
    import icechunk

    prototype = default_buffer_prototype()
    inline = sorted(
        (k for k, v in refs.items() if isinstance(v, str) and before.get(k) != v),
        key=lambda k: (not is_metadata_key(k), k.count("/"), k),
    )
    for key in inline:
        text = refs[key]
        data = base64.b64decode(text[7:]) if text.startswith("base64:") else text.encode()
        sync(store.set(key, prototype.buffer.from_bytes(data)))
    by_array: dict[str, list[Any]] = defaultdict(list)
    for key, value in refs.items():
        if isinstance(value, list):
            array, _, chunk = key.rpartition("/c/")
            index = [int(i) for i in chunk.split("/")]
            location, offset, length = value
            by_array[array].append(
                icechunk.VirtualChunkSpec(index, chunk_location(location), offset, length)
            )
    session_store: icechunk.IcechunkStore = store._store  # type: ignore[assignment]  # the session's
    for array, chunks in by_array.items():
        failed = session_store.set_virtual_refs(f"/{array}", chunks, validate_containers=True)
        if failed:
            raise AccumulusError(
                f"{store.label}: {len(failed)} chunk reference(s) of {array!r} lie in no "
                "virtual chunk container of the repository"
            )


def _update_accumulations(store: TransactionalStore, label: str) -> None:
    """Bring every accumulation group made by accumulus up to date with the references
    just written (incremental: only the new steps are summed), as real chunks; then the
    consolidated metadata, which names the groups' new shapes."""
    with rectilinear_grids():
        root = zarr.open_group(store, mode="r", use_consolidated=False)
        if not holds_accumulations(root):
            return
        for path in cube_groups(store, use_consolidated=False):
            cube = RawCube(store, label, use_consolidated=False, group=path)
            for name in cube.data_variables:
                group = read_group(cube, name)
                if group is not None and group.producer == "accumulus":
                    build_accumulations(cube, name, group.request())
        consolidate_groups(store)
