"""Reading a granule's layout for a virtual cube: its identity (size and modification
stamp), structure, coordinates and HDF5 chunk index, through a reader that counts the bytes
read, never its data. ``scan_granule`` gives what the granule contributes to the reference
set (``references.compose``)."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import h5py
import numpy as np
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.hierarchy import pick_group
from accumulus.ingest.conform import Template, check_fits, template_of, times_in_cube
from accumulus.ingest.convert import (
    ArrayPlan,
    ConversionPlan,
    hdf5_dataset,
    plan_file,
    source_group,
)
from accumulus.ingest.declared import DeclaredVariable, check_declared, itemsize
from accumulus.ingest.granules import Granule
from accumulus.names import check_names
from accumulus.stores.group import normalize_group
from accumulus.stores.locations import file_options, local_path, url_scheme


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
    group: str = ""  # the group of the file read ("" for the root); the cube keeps it

    def array_plan(self, name: str) -> ArrayPlan:
        """The conversion plan of variable ``name`` of the group read."""
        path = f"{self.group}/{name}" if self.group else name
        return next(a for a in self.plan.arrays if a.path == path)


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


def check_unchanged(
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
    group: str | None = None,
) -> ScannedGranule:
    """Read a granule's structure, coordinates and HDF5 chunk index (not its data), from
    ``group`` of the file (by default the one group holding the dimension ``dim``)."""
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
            group = _granule_group(file, dim, group, item)
            node = file[group] if group else file
            check_declared(f"granule {item}", _declared(node), dim)
            granule = _as_granule(item, size, reader, group)
            # As the references store them: packed numbers stay packed.
            own = template_of(granule.dataset, dim, f"granule {item}", unpack=False)
            if template is not None:
                check_fits(granule, template, unpack=False)
            template = template or own
            plan = plan_file(file, item, zarr_format=zarr_format, group=group)
            chunks, refs = {}, {}
            for name in template.data:
                dataset = hdf5_dataset(node, name)
                if dataset is not None:
                    chunks[name], refs[name] = _chunk_refs(dataset, item, name, dim, template)
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
        group=group,
    )


def _declared(node: h5py.Group) -> list[DeclaredVariable]:
    """The datasets of ``node`` and of the groups above it (dimension scales xarray may
    index) as the file declares them."""
    out = []
    while True:
        for name, item in node.items():
            if isinstance(item, h5py.Dataset) and item.shape is not None:
                dims = tuple(
                    scale[0].name.rpartition("/")[2] if len(scale) else f"phony_dim_{axis}"
                    for axis, scale in enumerate(item.dims)
                )
                if item.attrs.get("CLASS") == b"DIMENSION_SCALE" and item.ndim == 1:
                    dims = (name,)  # a coordinate (or a bare dimension)
                size = itemsize(item.dtype)
                out.append(DeclaredVariable(name, dims, item.shape, size, item.chunks))
        if node.name == "/":
            return out
        node = node.parent


def _granule_group(file: h5py.File, dim: str, group: str | None, item: str) -> str:
    """``group`` (which must exist), or the one group where the dimension ``dim`` is
    defined (its nested groups use it too: the top one); the root when none is."""
    if group is not None:
        source_group(file, group, f"granule {item}")  # it must exist
        return normalize_group(group)
    if dim in file:
        return ""
    holders: list[str] = []
    file.visititems(
        lambda name, n: holders.append(name) if isinstance(n, h5py.Group) and dim in n else None
    )
    top = [g for g in holders if not any(g.startswith(h + "/") for h in holders)]
    if not top:
        return ""  # the template names what is missing
    return pick_group(top, f"the dimension {dim!r}", f"granule {item}")


def _as_granule(item: str, size: int, reader: _CountingReader, group: str = "") -> Granule:
    """The granule as ``conform`` checks it: xarray's encoded view, through h5netcdf."""
    try:
        dataset = xr.open_dataset(
            reader, engine="h5netcdf", group=group or None, decode_cf=False, chunks=None
        )
    except Exception as exc:  # h5netcdf raises several kinds on files it cannot map
        raise AccumulusError(f"granule {item}: cannot read it as NetCDF4: {exc}") from None
    check_names(f"granule {item}", map(str, dataset.variables), map(str, dataset.dims))
    return Granule(item, size, "", dataset, "netcdf", item, group)


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


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
