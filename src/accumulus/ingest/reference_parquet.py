"""A virtual cube as a Parquet reference set: the layout fsspec's ``LazyReferenceMapper``
reads and writes (what ``kerchunk.df.refs_to_dataframe`` makes), so that xarray opens it
through fsspec's reference filesystem and a reader loads only the references it needs.

The layout: ``.zmetadata`` (JSON: every metadata document and the ``record_size``) and, per
array, ``<array>/refs.<n>.parq``, each holding the references of ``record_size`` chunks in
C order (path, offset, size; or the raw bytes of an inline chunk). fsspec finds a chunk's
row from ``<array>/.zarray``'s shape and chunks and parses chunk keys as ``i.j.k``, as in
Zarr v2. A Zarr v3 cube (rectilinear grids) is therefore written with the v2 chunk key
encoding (``"."``), and each v3 array gets a ``.zarray`` entry that gives fsspec its grid's
extent in chunks only (``shape`` = chunks per axis, ``chunks`` = 1): zarr reads a v3 group's
``zarr.json`` documents and never these.

Every chunk of every array is referenced: fsspec (under pandas 3) reads an unreferenced
chunk of a Parquet set as a broken reference rather than as missing, so a set with one is
refused. Writes go to a staging directory beside the set (an append: only the reference
files whose rows changed, which fsspec merges with the rows they keep), then move in file by
file, ``.zmetadata`` last: a reader, or an append cut short, sees the old set or the new one.
That holds because an append only adds rows after the existing ones (arrays grow along their
first axis only), which is checked.
"""

from __future__ import annotations

import base64
import json
import math
import uuid
from collections.abc import Mapping
from itertools import product
from typing import Any

import zarr

from accumulus.errors import AccumulusError
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.locations import file_options
from accumulus.stores.reference_sets import PARQUET_ENGINE, open_parquet_references

# References per Parquet file: fsspec's default. A reader loads a whole file for one chunk.
RECORD_SIZE = 10_000

_HINT = ".zarray"


def read_parquet_set(target: str, storage_options: dict | None) -> dict[str, Any] | None:
    """The reference set at ``target`` as kerchunk's JSON form (``{key: reference}``: metadata
    as JSON text, inline chunks as ``base64:``, byte ranges as ``[url, offset, size]``), or
    None when there is none."""
    mapper = open_parquet_references(target, storage_options)
    if mapper is None:
        return None
    metadata = _documents(mapper.zmetadata)
    refs: dict[str, Any] = {key: json.dumps(doc) for key, doc in metadata.items()}
    for array, counts in _grids(mapper.zmetadata).items():
        for index in product(*(range(n) for n in counts)):
            key = f"{array}/{'.'.join(map(str, index))}" if array else ".".join(map(str, index))
            try:
                value = mapper[key]
            except KeyError:
                continue
            if isinstance(value, list):
                if isinstance(value[0], str):  # pandas 3 reads an empty row's path as NaN
                    refs[key] = [value[0], *(int(v) for v in value[1:])]
            else:
                refs[key] = "base64:" + base64.b64encode(bytes(value)).decode()
    return refs


def write_parquet_set(
    target: str,
    refs: Mapping[str, Any],
    storage_options: dict | None,
    previous: Mapping[str, Any] | None = None,
) -> None:
    """Write the reference set ``refs`` (kerchunk's JSON form) as Parquet at ``target``,
    replacing the set there so that a reader sees the old one or the new one. ``previous``
    (the set there, as ``read_parquet_set`` gave it): only the reference files holding rows
    that differ from it are written; fsspec merges them with the rows they keep."""
    import fsspec
    from fsspec.implementations.reference import LazyReferenceMapper

    metadata = {
        k: json.loads(v) for k, v in refs.items() if is_metadata_key(k) and k != ".zmetadata"
    }
    grids = _grids(metadata, hints=True)
    existing = open_parquet_references(target, storage_options)
    if existing is not None:
        _check_rows_stay(target, grids, _grids(existing.zmetadata))
    chunks = {k: v for k, v in refs.items() if not is_metadata_key(k)}
    _check_complete(target, grids, chunks)
    if existing is not None and previous is not None:
        chunks = {k: v for k, v in chunks.items() if previous.get(k) != v}
    fs, root = fsspec.url_to_fs(target, **file_options(target, storage_options))
    root = root.rstrip("/")
    parent, _, name = root.rpartition("/")
    staging = f"{parent}/.{name}.{uuid.uuid4().hex[:12]}.staging"
    try:
        if existing is None:
            mapper = LazyReferenceMapper.create(
                staging, fs=fs, record_size=RECORD_SIZE, engine=PARQUET_ENGINE
            )
        else:  # the set itself: the rows a file keeps are read from it
            mapper = existing
            fs.makedirs(staging, exist_ok=True)
        mapper.zmetadata.update(metadata)
        for array, counts in grids.items():
            if f"{array}/zarr.json" in metadata:  # v3: the grid's extent, for fsspec only
                mapper.zmetadata[f"{array}/{_HINT}"] = {
                    "shape": counts,
                    "chunks": [1] * len(counts),
                }
        for key in sorted(chunks):
            mapper[key] = chunks[key]
        mapper.flush(base_url=None if existing is None else fs.unstrip_protocol(staging))
        _publish(fs, staging, root)
    except AccumulusError:
        raise
    except Exception as exc:  # fsspec's filesystems' and fastparquet's (OSError, ValueError, ...)
        raise AccumulusError(f"cannot write {target}: {str(exc).splitlines()[0]}") from None
    finally:
        if fs.exists(staging):
            fs.rm(staging, recursive=True)


def _publish(fs: Any, staging: str, root: str) -> None:
    """Move the staged files into the set, ``.zmetadata`` (what readers open first) last."""
    staged = sorted(fs.find(staging), key=lambda p: p.endswith("/.zmetadata"))
    for path in staged:
        destination = root + path[len(staging) :]
        fs.makedirs(destination.rpartition("/")[0], exist_ok=True)
        fs.mv(path, destination)


def _documents(zmetadata: Mapping[str, Any]) -> dict[str, Any]:
    """The Zarr metadata documents of a set's ``.zmetadata``, without fsspec's grid hints."""
    return {
        key: doc
        for key, doc in zmetadata.items()
        if key != ".zmetadata" and not _is_hint(key, zmetadata)
    }


def _is_hint(key: str, zmetadata: Mapping[str, Any]) -> bool:
    array, _, leaf = key.rpartition("/")
    return leaf == _HINT and f"{array}/zarr.json" in zmetadata


def _grids(metadata: Mapping[str, Any], hints: bool = False) -> dict[str, list[int]]:
    """Chunks per axis of every array, as fsspec numbers its rows (a 0-d array: one chunk).
    ``hints``: from the arrays' own metadata (v2 ``.zarray``, v3 ``zarr.json``) rather than
    from what fsspec reads (``.zarray`` entries, v3 hints included)."""
    grids = {}
    for key, doc in metadata.items():
        array, _, leaf = key.rpartition("/")
        if leaf == _HINT and not (hints and f"{array}/zarr.json" in metadata):
            # fsspec's own arithmetic (LazyReferenceMapper._get_chunk_sizes)
            shape, chunks = doc["shape"], doc["chunks"]
            grids[array] = [math.ceil(s / c) for s, c in zip(shape, chunks, strict=True)] or [1]
        elif leaf == "zarr.json" and hints and doc.get("node_type") == "array":
            grids[array] = _v3_counts(doc) or [1]
    return grids


def _v3_counts(doc: Mapping[str, Any]) -> list[int]:
    """Chunks per axis of a Zarr v3 array (regular or rectilinear grid), as zarr reads it."""
    from zarr.core.chunk_grids import ChunkGrid
    from zarr.core.metadata import ArrayV3Metadata

    with zarr.config.set({"array.rectilinear_chunks": True}):
        return list(ChunkGrid.from_metadata(ArrayV3Metadata.from_dict(dict(doc))).grid_shape)


def _check_complete(target: str, grids: Mapping[str, list[int]], chunks: Mapping[str, Any]) -> None:
    """Every chunk referenced: fsspec cannot read a Parquet row as 'absent'."""
    stored: dict[str, int] = {}
    for key in chunks:
        stored[key.rpartition("/")[0]] = stored.get(key.rpartition("/")[0], 0) + 1
    for array, counts in grids.items():
        if stored.get(array, 0) != math.prod(counts):
            raise AccumulusError(
                f"{target}: array {array!r} has {stored.get(array, 0)} of its "
                f"{math.prod(counts)} chunks stored (its granules left some unwritten); a "
                "Parquet reference set must reference every chunk: write a .json one"
            )


def _check_rows_stay(
    target: str, grids: Mapping[str, list[int]], before: Mapping[str, list[int]]
) -> None:
    """An append must keep every existing chunk in its row: fsspec numbers rows in C order,
    so only the first axis may grow."""
    for array, counts in grids.items():
        was = before.get(array)
        if was is not None and was[1:] != counts[1:]:
            raise AccumulusError(
                f"{target}: appending would move the references of {array!r} to other rows "
                f"(its chunks per axis go from {was} to {counts}); a Parquet reference set "
                "grows along the arrays' first dimension only: write a .json one"
            )
