"""What a granule contributes to a virtual cube: its record (identity and length), structure,
coordinates and HDF5 chunk index, read through ``granules.referenced_hdf5`` (never its data).
``scan_granule`` gives what the granule contributes to the reference set
(``references.compose``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np

from accumulus.errors import AccumulusError
from accumulus.ingest.conform import Template, check_fits, template_of, times_in_cube
from accumulus.ingest.convert import ArrayPlan, ConversionPlan, hdf5_dataset
from accumulus.ingest.granules import Granule, read_granule
from accumulus.ingest.granules.referenced_hdf5 import ReferencedHDF5File, stamp_identity
from accumulus.stores.locations import local_path


@dataclass(frozen=True)
class ChunkRef:
    """One stored HDF5 chunk: its chunk index in the granule and its bytes in the file."""

    index: tuple[int, ...]
    offset: int  # of its first byte in the file
    size: int  # bytes stored (compressed)


@dataclass(frozen=True)
class GranuleRecord:
    """How a referenced granule is identified: a changed file is refused, not mixed in."""

    url: str
    size: int  # bytes
    modified: str  # mtime (local) or ETag / Last-Modified (remote)
    steps: int

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "size": self.size, "modified": self.modified, "steps": self.steps}


@dataclass(frozen=True)
class ScannedGranule:
    """What a granule contributes: its references and its values of the inline arrays."""

    record: GranuleRecord
    name: str
    plan: ConversionPlan
    template: Template
    coordinate: np.ndarray  # along the append dimension, in the cube's encoding
    inline: Mapping[str, np.ndarray]  # inline arrays along the dimension, cube-encoded
    static: Mapping[str, np.ndarray]  # arrays without the dimension (used from the first)
    chunks: Mapping[str, tuple[int, ...]]  # referenced array -> HDF5 chunk shape
    refs: Mapping[str, tuple[ChunkRef, ...]]  # referenced array -> its stored chunks
    bytes_read: int
    group: str = ""  # the group of the file read ("" for the root); the cube keeps it

    def array_plan(self, name: str) -> ArrayPlan:
        """The conversion plan of variable ``name`` of the group read."""
        path = f"{self.group}/{name}" if self.group else name
        return next(a for a in self.plan.arrays if a.path == path)


def granule_url(item: str) -> str:
    """How a granule is referenced: a URL as given, a local file as an absolute path."""
    path = local_path(item)
    return item if path is None else str(path.resolve())


def check_unchanged(
    item: str, url: str, record: GranuleRecord, storage_options: dict | None
) -> None:
    now = stamp_identity(item, url, storage_options)
    if (now.size, now.fingerprint) != (record.size, record.modified):
        raise AccumulusError(
            f"granule {item} is already referenced but has changed since (size {record.size} "
            f"-> {now.size}); its old references would read wrong bytes: rebuild the virtual cube"
        )


def scan_granule(
    item: str,
    url: str,
    dim: str,
    template: Template | None,
    zarr_format: int,
    storage_options: dict | None,
    group: str | None = None,
) -> ScannedGranule:
    """Read a granule's structure, coordinates and HDF5 chunk index (not its data), from
    ``group`` of the file (by default the one group holding the dimension ``dim``)."""
    with ReferencedHDF5File(item, url, storage_options) as file:
        group = file.resolve_group(dim, group)
        granule = read_granule(file, group, dim)
        # As the references store them: packed numbers stay packed.
        own = template_of(granule.dataset, dim, f"granule {item}", unpack=False)
        if template is not None:
            check_fits(granule, template, unpack=False)
        template = template or own
        plan = file.plan(zarr_format, group)
        node = file.h5[group] if group else file.h5
        chunks, refs = {}, {}
        for name in template.data:
            dataset = hdf5_dataset(node, name)
            if dataset is not None:
                chunks[name], refs[name] = _chunk_refs(dataset, item, name, dim, template)
        inline, static = _inline_values(granule, template, own)
    steps = int(granule.dataset.sizes[dim])
    return ScannedGranule(
        record=GranuleRecord(url, granule.size, granule.checksum, steps),
        name=item,
        plan=plan,
        template=own,
        coordinate=inline[dim],
        inline=inline,
        static=static,
        chunks=chunks,
        refs=refs,
        bytes_read=file.bytes_read,
        group=group,
    )


def _inline_values(
    granule: Granule, template: Template, own: Template
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Values of the coordinates along the dimension (in the cube's encoding) and of the
    variables without it."""
    inline = {}
    for name in template.appended:
        if name in template.data:
            continue
        ours, theirs = template.variables[name], own.variables[name]
        values = np.asarray(granule.dataset.variables[name].values)
        if ours.time is not None and theirs.time is not None:
            values = times_in_cube(granule, name, values, ours)
        inline[name] = values
    static = {name: np.asarray(v) for name, v in own.static.items()}
    return inline, static


def _chunk_refs(
    dataset: h5py.Dataset, item: str, name: str, dim: str, template: Template
) -> tuple[tuple[int, ...], tuple[ChunkRef, ...]]:
    """The chunk shape of a variable in a granule and where each stored chunk lies."""
    where = f"granule {item}: variable {name!r}"
    if dataset.is_virtual or dataset.external:
        raise AccumulusError(f"{where} keeps its data outside the file; it cannot be referenced")
    shape = dataset.shape
    axis = template.variables[name].dims.index(dim)
    if dataset.chunks is None:
        offset = dataset.id.get_offset()
        if dataset.size and offset is None and dataset.id.get_storage_size():
            raise AccumulusError(f"{where} is stored compactly; it cannot be referenced")
        refs = () if offset is None else (ChunkRef((0,) * len(shape), offset, _storage(dataset)),)
        return tuple(shape), refs
    chunks = tuple(dataset.chunks)
    if shape[axis] % chunks[axis]:
        raise AccumulusError(
            f"{where}: its HDF5 chunks along {dim!r} ({chunks[axis]}) do not tile its "
            f"{shape[axis]} steps, so its last chunk holds padding a reference cannot leave "
            "out; append it without --virtual"
        )
    found: list[ChunkRef] = []

    def visit(info: Any) -> None:
        if info.filter_mask:
            raise AccumulusError(
                f"{where}: the chunk at {tuple(info.chunk_offset)} skipped filters "
                f"(mask {info.filter_mask}); Zarr cannot decode it with the others' codecs"
            )
        index = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
        found.append(ChunkRef(index, int(info.byte_offset), int(info.size)))

    dataset.id.chunk_iter(visit)
    return chunks, tuple(found)


def _storage(dataset: h5py.Dataset) -> int:
    return int(dataset.id.get_storage_size())
