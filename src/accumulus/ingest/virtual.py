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

Modules: ``granule_layout`` (reading a granule's layout), ``virtual_scan`` (the granules
an append adds, in the order they extend the cube), ``references`` (building the reference
set), ``reference_file`` (reading and writing the file); here, the file's append, and an
icechunk repository's handed to ``virtual_repository``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

from accumulus.errors import AccumulusError
from accumulus.ingest.reference_file import read_reference_set, write_atomically
from accumulus.ingest.references import compose
from accumulus.ingest.virtual_scan import VirtualAppend, VirtualResult, scan_new
from accumulus.scope import scoped
from accumulus.stores.group import normalize_group
from accumulus.stores.reference_sets import is_parquet_references
from accumulus.stores.transactional import is_repository_url


@scoped
def append_virtual(
    out: str | os.PathLike[str],
    granules: Iterable[str | os.PathLike[str]],
    dim: str = "time",
    *,
    zarr_format: int | None = None,
    skip_existing: bool = False,
    storage_options: dict | None = None,
    group: str | None = None,
    ref: str | None = None,
    allow_references: Iterable[str] = (),
) -> VirtualResult:
    """Create or extend the virtual cube ``out``, local or a URL: a ``.json`` reference file
    or a ``.parq``/``.parquet`` Parquet reference set, with references to the chunks of
    NetCDF4/HDF5 ``granules`` along ``dim``, in time order whatever the order given. Granule
    paths may be local or URLs (read with ``storage_options``). ``group``: the group of the
    granules to reference (by default the one where ``dim`` is defined), kept at the same
    place in the cube. Nothing is written unless every granule fits.

    ``out`` may also be an icechunk repository (``icechunk://``, ``icechunk+s3://``): the
    references are then written into it as virtual chunks, in one commit on the branch
    ``ref`` (see ``virtual_repository``); ``allow_references``: where its other virtual
    chunk containers may read, for its accumulations."""
    asked = VirtualAppend(
        os.fspath(out),
        tuple(os.fspath(g) for g in granules),
        dim,
        zarr_format=zarr_format,
        skip_existing=skip_existing,
        storage_options=storage_options,
        group=group,
        ref=ref,
        allow_references=tuple(allow_references),
        started=time.perf_counter(),
    )
    if is_repository_url(asked.target):
        from accumulus.ingest.virtual_repository import append_virtual_repository

        return append_virtual_repository(asked)
    return _append_reference_set(asked)


def _append_reference_set(asked: VirtualAppend) -> VirtualResult:
    """``append_virtual`` into a ``.json`` or ``.parq`` reference set."""
    target, dim, zarr_format, group = asked.target, asked.dim, asked.zarr_format, asked.group
    storage_options = asked.storage_options
    if asked.ref is not None:
        raise AccumulusError(f"--ref {asked.ref}: {target} is not an icechunk repository (no refs)")
    parquet = is_parquet_references(target)
    if not (target.endswith(".json") or parquet):
        raise AccumulusError(
            f"{target}: a virtual cube is written as a .json reference file or a .parq "
            "(Parquet) reference set"
        )
    if not asked.items:
        raise AccumulusError("no granules given to append")
    existing = read_reference_set(target, dim, storage_options)
    if existing is not None and zarr_format not in (None, existing.zarr_format):
        raise AccumulusError(
            f"{target} is Zarr v{existing.zarr_format}; it cannot be appended to as v{zarr_format}"
        )
    if existing is not None and group is not None and normalize_group(group) != existing.group:
        raise AccumulusError(
            f"{target} references the granules' group {existing.group or '/'!r}, not {group!r}"
        )
    fmt = existing.zarr_format if existing else (zarr_format or 3)
    new = scan_new(existing, asked, fmt)
    scanned, template, definer = new.scanned, new.template, new.definer
    if scanned:
        assert template is not None
        # fsspec's Parquet layout parses chunk keys as "i.j.k" (Zarr v2's encoding).
        encoding = _V2_KEYS if parquet and fmt == 3 else None
        refs = compose(existing, definer, scanned, template, fmt, encoding)
        write_atomically(target, refs, storage_options, existing)
        references = sum(isinstance(v, list) for v in refs.values())
    else:
        references = sum(isinstance(v, list) for v in existing.refs.values()) if existing else 0
    return VirtualResult.of(asked, existing, new, fmt, references)


_V2_KEYS = {"name": "v2", "separator": "."}

# Past this many chunk references a JSON set is slow to open (every reader parses all of it;
# bench_virtual.py --scale), and ``append`` suggests a Parquet set.
LARGE_JSON_SET = 100_000
