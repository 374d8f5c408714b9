"""What the two writers of a virtual cube share (``virtual``: a ``.json`` or ``.parq``
reference set; ``virtual_repository``: an icechunk repository): the granules an append adds,
scanned and checked against the cube in time order (``scan_new``), and what an append did
(``VirtualResult``)."""

from __future__ import annotations

import time
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
from accumulus.ingest.reference_file import ReferenceSet


@dataclass(frozen=True)
class VirtualAppend:
    """A virtual append as asked of ``virtual.append_virtual`` (whose docstring says what
    each argument means), handed to the writer of its kind of ``target``: ``items``, the
    granules' paths or URLs as given; ``started``, when it began (``time.perf_counter``)."""

    target: str
    items: tuple[str, ...]
    dim: str
    zarr_format: int | None
    skip_existing: bool
    storage_options: dict | None
    group: str | None
    ref: str | None
    allow_references: tuple[str, ...]
    started: float


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

    @classmethod
    def of(
        cls,
        asked: VirtualAppend,
        existing: ReferenceSet | None,
        new: NewGranules,
        zarr_format: int,
        references: int,
    ) -> VirtualResult:
        """What the append ``asked`` did, adding ``new`` to ``existing`` (None: no cube
        yet), with ``references`` in the set after it."""
        scanned = new.scanned
        before = existing.steps if existing is not None else 0
        return cls(
            store=asked.target,
            dim=asked.dim,
            created=existing is None and bool(scanned),
            appended=tuple(g.name for g in scanned),
            skipped=tuple(new.skipped),
            extent=(before, before + sum(g.record.steps for g in scanned)),
            zarr_format=zarr_format,
            bytes_read=sum(g.bytes_read for g in scanned),
            granule_bytes=sum(g.record.size for g in scanned),
            references=references,
            seconds=time.perf_counter() - asked.started,
        )


@dataclass(frozen=True)
class NewGranules:
    """The granules an append adds to a virtual cube, scanned, in time order."""

    scanned: list[ScannedGranule]
    skipped: list[tuple[str, str]]  # (granule, why)
    template: Template | None  # the cube's, or the first granule's for a new cube
    definer: ScannedGranule | None  # of a new cube: the granule its metadata comes from


def scan_new(existing: ReferenceSet | None, asked: VirtualAppend, fmt: int) -> NewGranules:
    """Read the layout of the granules ``asked`` not referenced yet (those that are must be
    unchanged), in time order; overlaps refused, or skipped with ``skip_existing``."""
    dim, storage_options = asked.dim, asked.storage_options
    group = existing.group if existing is not None else asked.group
    if fmt not in (2, 3):
        raise AccumulusError(f"zarr_format must be 2 or 3, got {fmt}")
    known = {g.url: g for g in existing.granules} if existing else {}
    template = existing.template if existing else None
    scanned: list[ScannedGranule] = []
    skipped: list[tuple[str, str]] = []
    for item in dict.fromkeys(asked.items):  # a granule given twice is appended once
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
        scanned, overlaps = _drop_overlaps(scanned, existing, template, asked.skip_existing)
        skipped.extend(overlaps)
    return NewGranules(scanned, skipped, template, definer)


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
