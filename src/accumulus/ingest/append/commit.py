"""Phase 5 of an append: make what was written visible, in an order that a crash at any
moment cannot break."""

from __future__ import annotations

from collections.abc import Sequence

import zarr

from accumulus.accumulation.build.accumulate import build_accumulations
from accumulus.accumulation.model.groups import read_group
from accumulus.hierarchy import consolidate_groups, cube_groups, holds_accumulations
from accumulus.ingest.append.unpublished_writer import UnpublishedWriter
from accumulus.ingest.append.values import Target
from accumulus.ingest.journal import GranuleRecord, Journal, write_journal
from accumulus.raw_cube import RawCube
from accumulus.stores.nczarr_metadata import record_dimension_size


def commit(
    target: Target,
    root: zarr.Group,
    writer: UnpublishedWriter,
    journal: Journal,
    records: Sequence[GranuleRecord],
) -> tuple[Journal, frozenset[str]]:
    """Make what ``writer`` wrote visible: returns the new journal, and the variables whose
    accumulation groups were brought up to date.

    Crash safety, in this order and no other:

    1. every chunk written (the partial last ones too) and waited for;
    2. the lock still ours (a writer paused past its lease stops here, before anything
       visible changes);
    3. the arrays' metadata resized: readers of the consolidated snapshot do not look;
    4. the journal: the commit point. Dying before it, the next run cuts the arrays back;
       after it, the next run finishes the steps below;
    5. accumulation groups, entries past their old coverage, then their recorded coverage;
    6. consolidated metadata, last: what readers open. They see the cube before or after
       this commit, never in between."""
    writer.write_partial()
    writer.wait()
    target.lock.check()
    writer.resize()
    record_dimension_size(target.store, target.dim, writer.size)  # for netcdf-c readers
    journal = journal.committed(records, writer.size)
    write_journal(target.store, journal)  # the commit point
    updated: frozenset[str] = frozenset()
    if holds_accumulations(root):
        updated = update_accumulations(target)
    consolidate_groups(target.store)
    return journal, updated


def update_accumulations(target: Target) -> frozenset[str]:
    """Bring every accumulation group made by accumulus up to date with the committed
    data, in the cube's group and its nested groups: incremental, so its cost follows the
    appended data, not the archive. Returns the variables whose groups changed (nested
    ones by relative path)."""
    updated: set[str] = set()
    for path in cube_groups(target.store, use_consolidated=False):
        cube = RawCube(target.store, target.label, use_consolidated=False, group=path)
        names = _update_group_accumulations(target, cube)
        updated |= {f"{path}/{name}" if path else name for name in names}
    return frozenset(updated)


def _update_group_accumulations(target: Target, cube: RawCube) -> set[str]:
    updated = set()
    for name in cube.data_variables:
        group = read_group(cube, name)
        if group is None or group.producer != "accumulus":
            continue  # groups of other tools: queries derive their coverage from shapes
        update = build_accumulations(cube, name, group.request(), held_lock=target.lock)
        if update.action != "up to date":
            updated.add(name)
    return updated
