"""A virtual cube's reference set, local or at a URL: kerchunk's version 1 JSON (a ``.json``
file) or fsspec's Parquet layout (a ``.parq``/``.parquet`` directory, ``reference_parquet``).
Read back with what accumulus recorded in it (``ReferenceSet``), and replaced so that a
reader opens the set before or after an append, never half of one."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus.errors import AccumulusError
from accumulus.grid import array_bounds
from accumulus.ingest.conform import Template, template_of
from accumulus.ingest.granule_layout import GranuleRecord
from accumulus.ingest.reference_parquet import read_parquet_set, write_parquet_set
from accumulus.stores.arrays import array_at, group_at
from accumulus.stores.local import write_file_atomically
from accumulus.stores.locations import file_options, url_scheme
from accumulus.stores.reference_sets import is_parquet_references, open_reference_store

VIRTUAL_KEY = "virtual"
REFERENCE_VERSION = 1


@dataclass(frozen=True)
class ReferenceSet:
    """An existing virtual cube, as read from its reference file."""

    refs: Mapping[str, Any]
    template: Template
    zarr_format: int
    granules: tuple[GranuleRecord, ...]
    signatures: Mapping[str, Any]  # referenced array -> what its granules must agree on
    coordinate: np.ndarray  # along the append dimension, as stored, from ``start`` on
    inline: Mapping[str, np.ndarray]  # inline arrays along the append dimension, from ``start``
    dim_chunks: Mapping[str, tuple[int, ...]]  # referenced array -> chunk sizes along dim
    group: str = ""  # the group of the set that is the cube ("" for the root)
    # Where ``coordinate`` and ``inline`` begin along the dimension: the first step of the
    # inline arrays' last chunk. Only their tail is read, and an append rewrites them from
    # there: its work does not grow with the cube's length.
    start: int = 0

    @property
    def steps(self) -> int:
        """The cube's length along the append dimension."""
        return self.start + len(self.coordinate)


@contextmanager
def rectilinear_grids() -> Iterator[None]:
    """zarr-python reads and writes rectilinear chunk grids only with this setting."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


def read_reference_set(target: str, dim: str, storage_options: dict | None) -> ReferenceSet | None:
    """The virtual cube at ``target``, or None when there is none yet."""
    import fsspec

    if is_parquet_references(target):
        refs = read_parquet_set(target, storage_options)
        return None if refs is None else _reference_set(target, refs, dim, storage_options)
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
    return _reference_set(target, refs, dim, storage_options)


def _reference_set(
    target: str, refs: dict[str, Any], dim: str, storage_options: dict | None
) -> ReferenceSet:
    return reference_set_in(open_reference_store(refs, target, storage_options), target, refs, dim)


def reference_set_in(store: Store, target: str, refs: Mapping[str, Any], dim: str) -> ReferenceSet:
    """The virtual cube ``store`` holds (``target``: how messages name it), whose
    references are ``refs`` (an icechunk repository's: its metadata documents)."""
    with rectilinear_grids():
        root = zarr.open_group(store, mode="r")
        settings: Any = root.attrs.get("accumulus", {})  # JSON, checked below
        virtual = settings.get(VIRTUAL_KEY) if isinstance(settings, dict) else None
        if not isinstance(virtual, dict) or settings.get("append_dim") != dim:
            raise AccumulusError(
                f"{target} is not a virtual cube appended along {dim!r} by accumulus"
                + (f" (it is appended along {settings['append_dim']!r})" if settings else "")
            )
        group = str(settings.get("group", ""))
        node = group_at(root, group)
        dataset = xr.open_dataset(
            store,  # type: ignore[arg-type]  # xarray's zarr engine opens a zarr Store
            engine="zarr",
            group=group or None,
            decode_cf=False,
            chunks=None,
            create_default_indexes=False,  # an index would read the whole coordinate
        )
        template = template_of(dataset, dim, target, unpack=False)
        signatures = virtual.get("arrays", {})
        dim_chunks = {
            name: array_bounds(array_at(node, name))[template.variables[name].dims.index(dim)].sizes
            for name in signatures
        }
        names = [name for name in template.appended if name not in signatures]
        start = min(
            (
                _last_chunk_start(array_at(node, n), template.variables[n].dims.index(dim))
                for n in names
            ),
            default=0,
        )
        inline = {
            name: np.asarray(dataset.variables[name][{dim: slice(start, None)}].values)
            for name in names
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
        group=group,
        start=start,
    )


def _last_chunk_start(array: zarr.Array, axis: int) -> int:
    """The first step of an array's last chunk along ``axis`` (0 when it is empty)."""
    bounds = array_bounds(array)[axis]
    return bounds.edges[bounds.chunk_of(bounds.size - 1)[0]] if bounds.size else 0


def write_atomically(
    target: str,
    refs: Mapping[str, Any],
    storage_options: dict | None,
    previous: ReferenceSet | None = None,
) -> None:
    """Replace the reference set (``previous``, when there is one): a reader gets the old or
    the new one."""
    if is_parquet_references(target):
        write_parquet_set(target, refs, storage_options, previous.refs if previous else None)
        return
    document = json.dumps({"version": REFERENCE_VERSION, "refs": dict(refs)}).encode()
    if url_scheme(target):
        import fsspec

        fs, path = fsspec.url_to_fs(target, **file_options(target, storage_options))
        fs.pipe_file(path, document)  # one PUT: object stores replace objects atomically
        return
    path = Path(target).expanduser()
    if not path.parent.is_dir():
        raise AccumulusError(f"cannot write {target}: directory {path.parent} does not exist")
    write_file_atomically(str(path), document)
