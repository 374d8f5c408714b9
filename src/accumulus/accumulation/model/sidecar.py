"""Accumulations beside the data: ZEP 5 groups kept in a store of their own (a sidecar).

A cube one cannot write to (behind an ``https://`` URL, a reference set over granules, a
bucket without write access) is accelerated by writing its accumulation groups into another
store, SIDE. SIDE's root attribute ``accumulus_sidecar`` names the source (its URL, or its
absolute path) and the source's group; each ZEP 5 group in SIDE carries, beside its
coverage, a fingerprint of what it summed (``accumulus_source``): the variable's
dimensions, shape, chunk edges, a digest of its encoding (dtype, codecs, fill value, CF
decoding attributes) and, for reference sets, a digest of the references of every chunk it
summed.

A reader compares that fingerprint with the source as it stands (``check``). A source that
grew keeps every summed chunk where it was: the group still answers exactly over its
coverage, and the planner reads past it raw. Anything else (another encoding, other chunk
edges inside the coverage, a shrunk dimension, other bytes behind a summed chunk) makes SIDE
stale: queries refuse it in one line saying how to refresh it, never answering from sums of
other data.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import product
from typing import Any

import zarr
from zarr.abc.store import Store
from zarr.core.sync import collect_aiterator
from zarr.storage import FsspecStore

from accumulus.accumulation.model import spec
from accumulus.errors import AccumulusError
from accumulus.grid import ChunkBounds
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import checked_format, consolidate
from accumulus.stores.base import innermost
from accumulus.stores.group import normalize_group
from accumulus.stores.locations import local_path

SIDECAR_KEY = "accumulus_sidecar"  # root attribute of a sidecar store
SOURCE_KEY = "accumulus_source"  # attribute of each group in it: what it summed


class StaleSidecarError(AccumulusError):
    """The source changed since the sidecar's sums were taken: they must not be used."""


def recorded_source(source: str) -> str:
    """How a sidecar names its source: a URL as given, a local path made absolute (so the
    sidecar answers from any working directory)."""
    path = local_path(source)
    return str(path.resolve()) if path is not None else source


def sidecar_settings(attributes: Mapping[str, Any]) -> dict[str, str] | None:
    """``{"source": ..., "group": ...}`` when these are a sidecar's root attributes."""
    settings = attributes.get(SIDECAR_KEY)
    if not isinstance(settings, dict) or not isinstance(settings.get("source"), str):
        return None
    return {"source": settings["source"], "group": str(settings.get("group") or "")}


@dataclass(frozen=True)
class Sidecar:
    """A sidecar store: where accumulation groups are read (and written) instead of the
    cube's own store."""

    store: Store
    label: str
    source: str  # as recorded in SIDE
    group: str  # the cube's group in the source ("" for its root)

    @classmethod
    def reading(cls, store: Store, label: str) -> Sidecar:
        """The sidecar at ``store`` (a store it is not is a one-line error)."""
        root = _open_root(store, label)
        settings = sidecar_settings(dict(root.attrs))
        if settings is None:
            raise AccumulusError(
                f"{label} holds no accumulations beside a source (no {SIDECAR_KEY} attribute): "
                "make one with `accumulus accumulate SOURCE VARIABLE --into SIDE`"
            )
        return cls(store, label, settings["source"], settings["group"])

    @classmethod
    def for_writing(cls, store: Store, label: str, source: str, cube: RawCube) -> Sidecar:
        """The sidecar at ``store`` for ``cube`` (read from ``source``): created when the
        store is empty, refused when it holds anything else than accumulations of it."""
        wanted = {"source": recorded_source(source), "group": normalize_group(cube.group)}
        try:
            root = zarr.open_group(store, mode="r", use_consolidated=False)
        except (zarr.errors.GroupNotFoundError, FileNotFoundError):
            if collect_aiterator(store.list()):
                raise AccumulusError(
                    f"{label} exists and is not a Zarr group: choose a new path for --into"
                ) from None
            attributes = {SIDECAR_KEY: {**wanted, "format": 1}}
            fmt = checked_format(cube.zarr_format)
            zarr.create_group(store, zarr_format=fmt, attributes=attributes)
            consolidate(store)
            return cls(store, label, wanted["source"], wanted["group"])
        settings = sidecar_settings(dict(root.attrs))
        if settings is None:
            raise AccumulusError(
                f"{label} is a Zarr store but not a sidecar (no {SIDECAR_KEY} attribute): "
                "choose a new path for --into"
            )
        if settings != wanted:
            raise AccumulusError(
                f"{label} holds accumulations of {_named(settings)}, not of {_named(wanted)}: "
                "choose another path for --into"
            )
        return cls(store, label, settings["source"], settings["group"])

    def root(self) -> zarr.Group:
        return _open_root(self.store, self.label)

    def refresh_command(self, variable: str) -> str:
        return f"`accumulus accumulate {self.source} {variable} --into {self.label}`"

    def check(self, cube: RawCube, variable: str, root: zarr.Group) -> None:
        """Refuse ``variable``'s group in ``root`` (this sidecar's) unless what it summed is
        still in the source ``cube`` as it was: ``StaleSidecarError`` otherwise."""
        problem = self.staleness(cube, variable, root)
        if problem:
            raise StaleSidecarError(problem)

    def staleness(self, cube: RawCube, variable: str, root: zarr.Group) -> str | None:
        """Why ``variable``'s group in ``root`` must not be used (None: it may be)."""
        try:
            node = root[spec.group_name(variable)]
        except KeyError:
            return None
        attributes = dict(node.attrs)
        extension = attributes.get(spec.EXTENSION_KEY, {})
        if not isinstance(extension, dict) or not extension.get("complete", False):
            return None  # an unfinished build: queries ignore it anyway
        recorded, coverage = attributes.get(SOURCE_KEY), extension.get("coverage")
        if not isinstance(recorded, dict) or not isinstance(coverage, dict):
            return (
                f"{self.label}: the group of {variable!r} records no fingerprint of its "
                f"source; rebuild it with {self.refresh_command(variable)} --rebuild"
            )
        current = fingerprint(cube, cube.variable(variable), coverage)
        problem = source_problem(recorded, current, coverage)
        if problem is None:
            return None
        return (
            f"{self.label} is stale for {variable!r}: its source {self.source} {problem} "
            f"since it was accumulated; refresh it with {self.refresh_command(variable)}"
        )


def sidecar_of(documents: Mapping[str, bytes]) -> dict[str, str] | None:
    """The sidecar settings in a store's root metadata documents (a ``MetadataSnapshot``'s),
    None when the store is not a sidecar."""
    try:
        if "zarr.json" in documents:
            attributes = json.loads(documents["zarr.json"]).get("attributes", {})
        else:
            attributes = json.loads(documents.get(".zattrs", b"{}"))
    except (ValueError, AttributeError):
        return None  # the cube's own reading says what is wrong with such a store
    return sidecar_settings(attributes) if isinstance(attributes, dict) else None


def _named(settings: Mapping[str, str]) -> str:
    group = settings["group"]
    return settings["source"] + (f" (group {group})" if group else "")


def _open_root(store: Store, label: str) -> zarr.Group:
    try:
        return zarr.open_group(store, mode="r")
    except (zarr.errors.GroupNotFoundError, FileNotFoundError):
        raise AccumulusError(f"{label}: no Zarr group there (not a sidecar)") from None


# --------------------------------------------------------------------------------------------
# Fingerprints


def fingerprint(cube: RawCube, var: VariableInfo, coverage: Mapping[str, int]) -> dict[str, Any]:
    """What a group covering ``coverage`` of ``var`` sums, as stored in its attributes."""
    found: dict[str, Any] = {
        "dims": list(var.dims),
        "shape": list(var.shape),
        "chunks": [_chunk_text(b) for b in var.bounds],
        "dtype": str(var.array.dtype),
        "encoding": _digest(_encoding(var)),
    }
    references = _references(cube)
    if references is not None:
        covered = _covered_chunks(var.dims, var.bounds, coverage)
        found["references"] = _digest(_chunk_references(cube, var, references, covered))
    return found


def source_problem(
    recorded: Mapping[str, Any], current: Mapping[str, Any], coverage: Mapping[str, int]
) -> str | None:
    """What changed in the source in a way that makes the sums wrong (None: nothing did;
    a source that only grew is fine). ``current`` is the fingerprint of the source now,
    over ``coverage``, the raw extent the group's sums cover."""
    if list(recorded.get("dims", [])) != current["dims"]:
        return f"has dimensions {current['dims']} (were {recorded.get('dims')})"
    if recorded.get("encoding") != current["encoding"]:
        return (
            f"changed its encoding (dtype {current['dtype']}, was {recorded.get('dtype')}; "
            "or its codecs, fill value or scale)"
        )
    for dim, size, was_size, chunks, was_chunks in zip(
        current["dims"],
        current["shape"],
        recorded["shape"],
        current["chunks"],
        recorded["chunks"],
        strict=True,
    ):
        if size < was_size:
            return f"shrank along {dim} from {was_size} to {size}"
        # Queries place entries at the chunk edges the source has now, within the coverage:
        # each must be the edge that entry was summed up to.
        limit = int(coverage.get(dim, was_size))
        usable = [e for e in _edges(size, chunks)[1:] if e <= limit]
        if usable != _edges(was_size, was_chunks)[1 : 1 + len(usable)]:
            return f"has other chunk edges along {dim}"
    if recorded.get("references") != current.get("references"):
        return "references other bytes for chunks it summed"
    return None


def _chunk_text(bounds: ChunkBounds) -> int | list[int]:
    """A regular grid as its chunk size, a rectilinear one as its chunk sizes."""
    sizes = bounds.sizes
    return max(sizes, default=0) if bounds.is_regular else list(sizes)


def _edges(size: int, chunks: int | Sequence[int]) -> list[int]:
    if isinstance(chunks, int):
        return list(ChunkBounds.regular(size, max(chunks, 1)).edges)
    return list(ChunkBounds.from_sizes(chunks).edges)


def _encoding(var: VariableInfo) -> dict[str, Any]:
    """Everything but the shape and grid that turns stored chunks into values."""
    metadata = var.array.metadata.to_dict()
    for key in ("shape", "chunks", "chunk_grid", "attributes", "dimension_names"):
        metadata.pop(key, None)
    return {"metadata": metadata, "decoding": dict(var.decoding_attrs)}


def _digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, default=repr)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _covered_chunks(
    dims: Sequence[str], bounds: Sequence[ChunkBounds], coverage: Mapping[str, int]
) -> list[tuple[int, ...]]:
    """The chunks a group covering ``coverage`` summed (all of each chunk within it)."""
    counts = [
        sum(1 for end in b.edges[1:] if end <= int(coverage.get(d, b.size)))
        for d, b in zip(dims, bounds, strict=True)
    ]
    return list(product(*(range(n) for n in counts)))


def _references(cube: RawCube) -> Mapping[str, Any] | None:
    """The reference mapping behind ``cube``'s store (a kerchunk reference set), or None."""
    store = innermost(cube.store)
    if not isinstance(store, FsspecStore):
        return None
    from fsspec.implementations.reference import ReferenceFileSystem

    return store.fs.references if isinstance(store.fs, ReferenceFileSystem) else None


def _chunk_references(
    cube: RawCube, var: VariableInfo, references: Mapping[str, Any], chunks: list[tuple[int, ...]]
) -> list[Any]:
    prefix = "/".join(p for p in (normalize_group(cube.group), var.array.path) if p)
    encode = var.array.metadata.encode_chunk_key
    return [_plain(references.get(f"{prefix}/{encode(c)}")) for c in chunks]


def _plain(reference: Any) -> Any:
    """A byte-range reference as JSON gives it (a Parquet set's come with numpy numbers)."""
    if isinstance(reference, list) and len(reference) == 3:
        return [str(reference[0]), int(reference[1]), int(reference[2])]
    return reference
