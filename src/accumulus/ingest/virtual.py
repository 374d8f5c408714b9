"""Virtual cubes: Zarr over NetCDF4/HDF5 granules, without copying their data.

A virtual cube is a reference set in kerchunk's format (version 1 JSON): the Zarr metadata
documents and the small coordinate arrays inline, and every chunk of a data variable a byte
range ``[url, offset, length]`` of one HDF5 chunk of a granule, decoded by the codecs the
HDF5 filter registry maps the granule's filter pipeline to (``convert``'s plan, without the
copy). Granules of unequal length along the append dimension give a rectilinear chunk grid
(ZEP 3, Zarr v3, the default); ``zarr_format=2`` keeps a regular grid and refuses a granule
that would break it.

Appending reads the new granules' metadata, HDF5 chunk indexes and coordinates (a small
fraction of their bytes), never their data, and adds their references only. The granules
referenced so far are listed in the root attributes (``accumulus.virtual``), so a granule
given again is skipped; the reference file is replaced in one write, so a reader opens the
set before or after an append, never half of one.
"""

from __future__ import annotations

import base64
import io
import json
import os
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr
import zarr
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import MemoryStore

from accumulus.errors import AccumulusError
from accumulus.grid import array_bounds, with_chunk_sizes
from accumulus.ingest.conform import (
    Template,
    check_fits,
    convert_times,
    template_of,
    time_labels,
)
from accumulus.ingest.convert import ArrayPlan, ConversionPlan, create_zarr_array, plan_file
from accumulus.ingest.granules import Granule
from accumulus.scope import scoped
from accumulus.storage import (
    consolidate,
    file_options,
    is_metadata_key,
    local_path,
    open_reference_store,
    store_metadata,
    url_scheme,
)

VIRTUAL_KEY = "virtual"
REFERENCE_VERSION = 1


@dataclass(frozen=True)
class ChunkRef:
    """One stored HDF5 chunk: its chunk index in the granule and its bytes in the file."""

    index: tuple[int, ...]
    offset: int
    size: int


@dataclass(frozen=True)
class GranuleRecord:
    """How a referenced granule is identified: a changed file is refused, not mixed in."""

    url: str
    size: int
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


@dataclass(frozen=True)
class ReferenceSet:
    """An existing virtual cube, as read from its reference file."""

    refs: Mapping[str, Any]
    template: Template
    zarr_format: int
    granules: tuple[GranuleRecord, ...]
    signatures: Mapping[str, Any]  # referenced array -> what its granules must agree on
    coordinate: np.ndarray  # along the append dimension, as stored
    inline: Mapping[str, np.ndarray]  # inline arrays along the append dimension
    dim_chunks: Mapping[str, tuple[int, ...]]  # referenced array -> chunk sizes along dim


@dataclass(frozen=True)
class VirtualResult:
    """What one virtual append did."""

    store: str
    dim: str
    created: bool
    appended: tuple[str, ...]
    skipped: tuple[tuple[str, str], ...]  # (granule, why)
    extent: tuple[int, int]  # size along ``dim`` before and after
    zarr_format: int
    bytes_read: int  # of the granules appended, to find their chunks and coordinates
    granule_bytes: int  # total size of the granules appended
    seconds: float


@scoped
def append_virtual(
    out: str | os.PathLike[str],
    granules: Iterable[str | os.PathLike[str]],
    dim: str = "time",
    *,
    zarr_format: int | None = None,
    skip_existing: bool = False,
    storage_options: dict | None = None,
) -> VirtualResult:
    """Create or extend the virtual cube ``out`` (a ``.json`` reference file, local or a
    URL) with references to the chunks of NetCDF4/HDF5 ``granules`` along ``dim``, in time
    order whatever the order given. Granule paths may be local or URLs (read with
    ``storage_options``). Nothing is written unless every granule fits."""
    started = time.perf_counter()
    target = os.fspath(out)
    if not target.endswith(".json"):
        raise AccumulusError(f"{target}: a virtual cube is written as a .json reference file")
    items = [os.fspath(g) for g in granules]
    if not items:
        raise AccumulusError("no granules given to append")
    existing = read_reference_set(target, dim, storage_options)
    if existing is not None and zarr_format not in (None, existing.zarr_format):
        raise AccumulusError(
            f"{target} is Zarr v{existing.zarr_format}; it cannot be appended to as v{zarr_format}"
        )
    fmt = existing.zarr_format if existing else (zarr_format or 3)
    if fmt not in (2, 3):
        raise AccumulusError(f"zarr_format must be 2 or 3, got {fmt}")
    known = {g.url: g for g in existing.granules} if existing else {}
    template = existing.template if existing else None
    scanned: list[ScannedGranule] = []
    skipped: list[tuple[str, str]] = []
    for item in dict.fromkeys(items):  # a granule given twice is appended once
        url = granule_url(item)
        if url in known:
            _check_unchanged(item, url, known[url], storage_options)
            skipped.append((item, "already referenced"))
            continue
        granule = scan_granule(item, url, dim, template, fmt, storage_options)
        template = template or granule.template
        scanned.append(granule)
    before = len(existing.coordinate) if existing else 0
    # A new cube takes its metadata from the granule its template came from (the first given).
    definer = scanned[0] if scanned and existing is None else None
    if scanned:
        assert template is not None
        scanned.sort(key=lambda g: _first(g.coordinate))
        scanned, overlaps = _drop_overlaps(scanned, existing, template, skip_existing)
        skipped.extend(overlaps)
    if scanned:
        assert template is not None
        refs = compose(existing, definer, scanned, template, fmt)
        _write_atomically(target, refs, storage_options)
    return VirtualResult(
        store=target,
        dim=dim,
        created=existing is None and bool(scanned),
        appended=tuple(g.name for g in scanned),
        skipped=tuple(skipped),
        extent=(before, before + sum(g.record.steps for g in scanned)),
        zarr_format=fmt,
        bytes_read=sum(g.bytes_read for g in scanned),
        granule_bytes=sum(g.record.size for g in scanned),
        seconds=time.perf_counter() - started,
    )


# --------------------------------------------------------------------------------------------
# Reading granules


def granule_url(item: str) -> str:
    """How a granule is referenced: a URL as given, a local file as an absolute path."""
    path = local_path(item)
    return item if path is None else str(path.resolve())


class _CountingReader(io.RawIOBase):
    """A read-only file object that counts the bytes read through it (h5py reads here)."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.bytes_read = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        buffer[: len(data)] = data
        self.bytes_read += len(data)
        return len(data)

    def close(self) -> None:
        self.raw.close()
        super().close()


@contextmanager
def _open_file(item: str, url: str, storage_options: dict | None) -> Iterator[_CountingReader]:
    try:
        if url_scheme(url):
            import fsspec

            raw = fsspec.open(url, "rb", **file_options(url, storage_options)).open()
        else:
            raw = open(url, "rb")  # noqa: SIM115 - closed by the reader below
    except FileNotFoundError:
        raise AccumulusError(f"granule {item}: no such file") from None
    except Exception as exc:  # fsspec raises many kinds for a URL it cannot reach
        raise AccumulusError(f"granule {item}: cannot open it: {_first_line(exc)}") from None
    reader = _CountingReader(raw)
    try:
        yield reader
    finally:
        reader.close()


def _identity(item: str, url: str, storage_options: dict | None) -> tuple[int, str]:
    """(size, modification stamp) of a granule, from its metadata only."""
    if not url_scheme(url):
        try:
            stat = os.stat(url)
        except FileNotFoundError:
            raise AccumulusError(f"granule {item}: no such file") from None
        return stat.st_size, str(stat.st_mtime_ns)
    import fsspec

    try:
        fs, path = fsspec.url_to_fs(url, **file_options(url, storage_options))
        info = fs.info(path)
    except FileNotFoundError as exc:
        # fsspec's HTTP filesystem reports every failure as "not found"; the cause says which.
        status = getattr(exc.__cause__, "status", 404 if exc.__cause__ is None else None)
        if status == 403:
            raise AccumulusError(f"granule {item}: access denied (403)") from None
        if status is None:
            reason = _first_line(exc.__cause__)  # type: ignore[arg-type]
            raise AccumulusError(f"granule {item}: cannot reach it: {reason}") from None
        raise AccumulusError(f"granule {item}: not found ({status})") from None
    except PermissionError:
        raise AccumulusError(f"granule {item}: access denied (403)") from None
    except Exception as exc:
        raise AccumulusError(f"granule {item}: cannot reach it: {_first_line(exc)}") from None
    stamp = info.get("ETag") or info.get("etag") or info.get("LastModified") or ""
    return int(info.get("size") or 0), str(stamp)


def _check_unchanged(
    item: str, url: str, record: GranuleRecord, storage_options: dict | None
) -> None:
    size, modified = _identity(item, url, storage_options)
    if (size, modified) != (record.size, record.modified):
        raise AccumulusError(
            f"granule {item} is already referenced but has changed since (size {record.size} "
            f"-> {size}); its old references would read wrong bytes: rebuild the virtual cube"
        )


def scan_granule(
    item: str,
    url: str,
    dim: str,
    template: Template | None,
    zarr_format: int,
    storage_options: dict | None,
) -> ScannedGranule:
    """Read a granule's structure, coordinates and HDF5 chunk index (not its data)."""
    size, modified = _identity(item, url, storage_options)
    with _open_file(item, url, storage_options) as reader:
        try:
            file = h5py.File(reader, "r")
        except OSError:
            raise AccumulusError(
                f"granule {item}: not a NetCDF4/HDF5 file; virtual cubes reference HDF5 "
                "chunks (append netCDF-3 granules without --virtual)"
            ) from None
        with file:
            granule = _as_granule(item, size, reader)
            own = template_of(granule.dataset, dim, f"granule {item}")
            if template is not None:
                check_fits(granule, template)
            template = template or own
            plan = plan_file(file, item, zarr_format=zarr_format)
            referenced = [n for n in template.data if n in file]
            chunks, refs = {}, {}
            for name in referenced:
                chunks[name], refs[name] = _chunk_refs(file[name], item, name, dim, template)
            inline, static = _inline_values(granule, template, own)
    steps = int(granule.dataset.sizes[dim])
    return ScannedGranule(
        record=GranuleRecord(url, size, modified, steps),
        name=item,
        plan=plan,
        template=own,
        coordinate=inline[dim],
        inline=inline,
        static=static,
        chunks=chunks,
        refs=refs,
        bytes_read=reader.bytes_read,
    )


def _as_granule(item: str, size: int, reader: _CountingReader) -> Granule:
    """The granule as ``conform`` checks it: xarray's encoded view, through h5netcdf."""
    try:
        dataset = xr.open_dataset(reader, engine="h5netcdf", decode_cf=False, chunks=None)
    except Exception as exc:  # h5netcdf raises several kinds on files it cannot map
        raise AccumulusError(f"granule {item}: cannot read it as NetCDF4: {exc}") from None
    return Granule(item, size, "", dataset, "netcdf", item)


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
            values = convert_times(values, theirs.time, ours.time, ours.dtype, granule.name, name)
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
    refs = []

    def visit(info: Any) -> None:
        if info.filter_mask:
            raise AccumulusError(
                f"{where}: the chunk at {tuple(info.chunk_offset)} skipped filters "
                f"(mask {info.filter_mask}); Zarr cannot decode it with the others' codecs"
            )
        index = tuple(o // c for o, c in zip(info.chunk_offset, chunks, strict=True))
        refs.append(ChunkRef(index, int(info.byte_offset), int(info.size)))

    dataset.id.chunk_iter(visit)
    return chunks, tuple(refs)


def _storage(dataset: h5py.Dataset) -> int:
    return int(dataset.id.get_storage_size())


# --------------------------------------------------------------------------------------------
# Combining granules


def _first(coordinate: np.ndarray) -> Any:
    return coordinate[0] if len(coordinate) else np.inf


def _drop_overlaps(
    scanned: list[ScannedGranule],
    existing: ReferenceSet | None,
    template: Template,
    skip_existing: bool,
) -> tuple[list[ScannedGranule], list[tuple[str, str]]]:
    """Granules must extend the cube in order: none may overlap the cube or each other."""
    last = existing.coordinate[-1] if existing is not None and len(existing.coordinate) else None
    kept, skipped = [], []
    for granule in scanned:
        coordinate = granule.coordinate
        if len(coordinate) > 1 and not np.all(np.diff(coordinate) > 0):
            raise AccumulusError(
                f"granule {granule.name}: its {template.dim!r} values do not increase"
            )
        if last is not None and coordinate[0] <= last:
            labels = time_labels(np.asarray([coordinate[0], last]), template)
            why = f"starts at {labels[0]}, not after the cube's last step {labels[1]}"
            if skip_existing and coordinate[-1] <= last:
                skipped.append((granule.name, f"already covered ({why})"))
                continue
            hint = "" if skip_existing else "; use --skip-existing to skip steps already in"
            raise AccumulusError(f"granule {granule.name} overlaps the cube: it {why}{hint}")
        kept.append(granule)
        last = coordinate[-1]
    return kept, skipped


def _signature(granule: ScannedGranule, name: str, dim: str) -> dict[str, Any]:
    """What must agree between granules for their chunks to be read by one array: dtype,
    codecs, fill values, and the chunk shape off the append dimension."""
    plan = next(a for a in granule.plan.arrays if a.path == name)
    axis = granule.template.variables[name].dims.index(dim)
    chunks = [c for a, c in enumerate(granule.chunks[name]) if a != axis]
    fills = granule.template.variables[name].fill_values
    return {
        "dtype": plan.dtype.str,
        "codecs": plan.codecs,
        "chunks": chunks,
        "fill_values": [repr(float(v)) for v in fills],
    }


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
            ):
                if theirs[key] != ours[key]:
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
) -> dict[str, Any]:
    """The new reference set: metadata and inline arrays written by zarr into memory, the
    old chunk references kept, the new granules' chunk references added after them.
    A new cube (``existing`` None) takes its metadata from ``definer``."""
    dim = template.dim
    signatures = _check_signatures(scanned, existing.signatures if existing else {}, dim)
    store = MemoryStore()
    if existing is None:
        assert definer is not None
        root = _create(store, definer, scanned, template, zarr_format)
        chunks_before: dict[str, int] = {}
    else:
        root = _reopen(store, existing)
        chunks_before = {name: len(sizes) for name, sizes in existing.dim_chunks.items()}
        _extend(root, existing, scanned, template)
    records = [*(existing.granules if existing else ()), *(g.record for g in scanned)]
    settings = dict(root.attrs.get("accumulus", {}))
    settings["append_dim"] = dim
    settings[VIRTUAL_KEY] = {
        "version": 1,
        "granules": [r.to_dict() for r in records],
        "arrays": signatures,
    }
    root.attrs["accumulus"] = settings
    with _rectilinear():
        consolidate(store)
    refs: dict[str, Any] = {key: _inline_ref(store, key) for key in _keys(store)}
    if existing is not None:
        refs.update({k: v for k, v in existing.refs.items() if isinstance(v, list)})
    for name in signatures:
        metadata = root[name].metadata
        axis = template.variables[name].dims.index(dim)
        start = chunks_before.get(name, 0)
        for granule in scanned:
            for ref in granule.refs[name]:
                index = list(ref.index)
                index[axis] += start
                key = f"{name}/{metadata.encode_chunk_key(tuple(index))}"
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
) -> zarr.Group:
    """A new cube's metadata and inline arrays, from the plan of granule ``first``."""
    dim = template.dim
    root = zarr.open_group(store, mode="w", zarr_format=zarr_format)
    root.attrs.update(next(g.attributes for g in first.plan.groups if g.path == ""))
    along = {name: np.concatenate([g.inline[name] for g in scanned]) for name in first.inline}
    for plan in first.plan.arrays:
        name = plan.path
        if name not in template.variables:
            continue  # variables of sub-groups are not part of the cube
        if name in first.refs:
            axis = template.variables[name].dims.index(dim)
            sizes = [s for g in scanned for s in _dim_chunk_sizes(g, name, dim)]
            shape, grid = list(plan.shape), list(first.chunks[name])
            shape[axis] = sum(sizes)
            grid[axis] = _grid_along(sizes, zarr_format, name, dim)
            with _rectilinear():
                create_zarr_array(root, replace(plan, shape=tuple(shape), chunks=grid), zarr_format)
        elif name in along:
            _write_inline(root, plan, along[name], _INLINE_CHUNK)
        else:
            values = first.static[name]
            _write_inline(root, plan, values, max(1, values.size))
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
    with _rectilinear():
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
    for name, old in existing.dim_chunks.items():
        sizes = [*old, *(s for g in scanned for s in _dim_chunk_sizes(g, name, dim))]
        array = root[name]
        axis = template.variables[name].dims.index(dim)
        grid = _grid_along(sizes, fmt, name, dim)
        with _rectilinear():
            if isinstance(grid, int) and fmt == 2:
                array.resize(_replaced(array.shape, axis, sum(sizes)))
            else:
                store_metadata(array, with_chunk_sizes(array.metadata, axis, sum(sizes), sizes))
    for name, values in existing.inline.items():
        new = np.concatenate([values, *(g.inline[name] for g in scanned)])
        array = root[name]
        axis = template.variables[name].dims.index(dim)
        array.resize(_replaced(array.shape, axis, new.shape[axis]))
        array[...] = new


def _replaced(shape: Sequence[int], axis: int, size: int) -> tuple[int, ...]:
    return tuple(size if a == axis else n for a, n in enumerate(shape))


# Inline arrays along the append dimension (times, time bounds) are chunked this long, so
# an append rewrites one small chunk.
_INLINE_CHUNK = 2**16


def _write_inline(root: zarr.Group, plan: ArrayPlan, values: np.ndarray, chunk: int) -> None:
    """A small array stored in the reference file itself."""
    chunks = (min(chunk, max(1, values.shape[0])), *values.shape[1:]) if values.ndim else None
    fmt = root.metadata.zarr_format
    array = create_zarr_array(root, replace(plan, shape=values.shape, chunks=chunks), fmt)
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


@contextmanager
def _rectilinear() -> Iterator[None]:
    """zarr-python reads and writes rectilinear chunk grids only with this setting."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


# --------------------------------------------------------------------------------------------
# Reading and writing reference files


def read_reference_set(target: str, dim: str, storage_options: dict | None) -> ReferenceSet | None:
    """The virtual cube at ``target``, or None when there is none yet."""
    import fsspec

    try:
        with fsspec.open(target, "rb", **file_options(target, storage_options)) as file:
            document = json.load(file)
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise AccumulusError(f"{target}: not a reference file (invalid JSON: {exc})") from None
    refs = document.get("refs") if isinstance(document, dict) else None
    if not isinstance(refs, dict):
        raise AccumulusError(f"{target}: not a kerchunk reference file (no 'refs')")
    store = open_reference_store(document, storage_options, label=target)
    with _rectilinear():
        root = zarr.open_group(store, mode="r")
        settings = root.attrs.get("accumulus", {})
        virtual = settings.get(VIRTUAL_KEY) if isinstance(settings, dict) else None
        if not isinstance(virtual, dict) or settings.get("append_dim") != dim:
            raise AccumulusError(
                f"{target} is not a virtual cube appended along {dim!r} by accumulus"
                + (f" (it is appended along {settings['append_dim']!r})" if settings else "")
            )
        dataset = xr.open_dataset(store, engine="zarr", decode_cf=False, chunks=None)
        template = template_of(dataset, dim, target)
        signatures = virtual.get("arrays", {})
        dim_chunks = {
            name: array_bounds(root[name])[template.variables[name].dims.index(dim)].sizes
            for name in signatures
        }
        inline = {
            name: np.asarray(dataset.variables[name].values)
            for name in template.appended
            if name not in signatures
        }
    granules = tuple(
        GranuleRecord(g["url"], int(g["size"]), str(g["modified"]), int(g["steps"]))
        for g in virtual.get("granules", [])
    )
    return ReferenceSet(
        refs=refs,
        template=template,
        zarr_format=root.metadata.zarr_format,
        granules=granules,
        signatures=signatures,
        coordinate=inline[dim],
        inline=inline,
        dim_chunks=dim_chunks,
    )


def _write_atomically(target: str, refs: Mapping[str, Any], storage_options: dict | None) -> None:
    """Replace the reference file in one step: a reader gets the old or the new one."""
    document = json.dumps({"version": REFERENCE_VERSION, "refs": dict(refs)}).encode()
    if url_scheme(target):
        import fsspec

        fs, path = fsspec.url_to_fs(target, **file_options(target, storage_options))
        fs.pipe_file(path, document)  # one PUT: object stores replace objects atomically
        return
    path = Path(target).expanduser()
    if not path.parent.is_dir():
        raise AccumulusError(f"cannot write {target}: directory {path.parent} does not exist")
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as f:
        f.write(document)
        temporary = f.name
    os.replace(temporary, path)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
