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

Modules: ``granule_layout`` (reading a granule's layout), ``references`` (building the
reference set), ``reference_file`` (reading and writing the file); here, the order in which
granules extend the cube.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from accumulus.errors import AccumulusError
from accumulus.ingest.conform import Template, time_labels
from accumulus.ingest.granule_layout import (
    ScannedGranule,
    check_unchanged,
    granule_url,
    scan_granule,
)
from accumulus.ingest.reference_file import ReferenceSet, read_reference_set, write_atomically
from accumulus.ingest.references import compose
from accumulus.scope import scoped
from accumulus.stores.group import normalize_group
from accumulus.stores.reference_sets import is_parquet_references
from accumulus.stores.transactional import is_repository_url


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
    references: int  # byte-range references in the set after the append
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
    started = time.perf_counter()
    target = os.fspath(out)
    if is_repository_url(target):
        from accumulus.ingest.virtual_repository import append_virtual_repository

        return append_virtual_repository(
            target,
            granules,
            dim,
            zarr_format=zarr_format,
            skip_existing=skip_existing,
            storage_options=storage_options,
            group=group,
            ref=ref,
            allow_references=allow_references,
        )
    if ref is not None:
        raise AccumulusError(f"--ref {ref}: {target} is not an icechunk repository (no refs)")
    parquet = is_parquet_references(target)
    if not (target.endswith(".json") or parquet):
        raise AccumulusError(
            f"{target}: a virtual cube is written as a .json reference file or a .parq "
            "(Parquet) reference set"
        )
    items = [os.fspath(g) for g in granules]
    if not items:
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
    new = scan_new(existing, items, dim, fmt, storage_options, group, skip_existing)
    scanned, skipped, template, definer = new.scanned, new.skipped, new.template, new.definer
    before = len(existing.coordinate) if existing else 0
    if scanned:
        assert template is not None
        # fsspec's Parquet layout parses chunk keys as "i.j.k" (Zarr v2's encoding).
        encoding = _V2_KEYS if parquet and fmt == 3 else None
        refs = compose(existing, definer, scanned, template, fmt, encoding)
        write_atomically(target, refs, storage_options, existing)
        references = sum(isinstance(v, list) for v in refs.values())
    else:
        references = sum(isinstance(v, list) for v in existing.refs.values()) if existing else 0
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
        references=references,
        seconds=time.perf_counter() - started,
    )


@dataclass(frozen=True)
class NewGranules:
    """The granules an append adds to a virtual cube, scanned, in time order."""

    scanned: list[ScannedGranule]
    skipped: list[tuple[str, str]]  # (granule, why)
    template: Template | None  # the cube's, or the first granule's for a new cube
    definer: ScannedGranule | None  # of a new cube: the granule its metadata comes from


def scan_new(
    existing: ReferenceSet | None,
    items: list[str],
    dim: str,
    fmt: int,
    storage_options: dict | None,
    group: str | None,
    skip_existing: bool,
) -> NewGranules:
    """Read the layout of the granules not referenced yet (those that are must be
    unchanged), in time order; overlaps refused, or skipped with ``skip_existing``."""
    group = existing.group if existing is not None else group
    if fmt not in (2, 3):
        raise AccumulusError(f"zarr_format must be 2 or 3, got {fmt}")
    known = {g.url: g for g in existing.granules} if existing else {}
    template = existing.template if existing else None
    scanned: list[ScannedGranule] = []
    skipped: list[tuple[str, str]] = []
    for item in dict.fromkeys(items):  # a granule given twice is appended once
        url = granule_url(item)
        if url in known:
            check_unchanged(item, url, known[url], storage_options)
            skipped.append((item, "already referenced"))
            continue
        granule = scan_granule(item, url, dim, template, fmt, storage_options, group)
        template, group = template or granule.template, granule.group
        scanned.append(granule)
    # A new cube takes its metadata from the granule its template came from (the first given).
    definer = scanned[0] if scanned and existing is None else None
    if scanned:
        assert template is not None
        scanned.sort(key=lambda g: _first(g.coordinate))
        scanned, overlaps = _drop_overlaps(scanned, existing, template, skip_existing)
        skipped.extend(overlaps)
    return NewGranules(scanned, skipped, template, definer)


_V2_KEYS = {"name": "v2", "separator": "."}

# Past this many chunk references a JSON set is slow to open (every reader parses all of it;
# bench_virtual.py --scale), and ``append`` suggests a Parquet set.
LARGE_JSON_SET = 100_000


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
