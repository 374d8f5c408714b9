"""Phase 4 of an append: the granules' values written past the committed extent, with a
commit whenever a chunk of data has filled, and at the end."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager

import numpy as np
import zarr

from accumulus.errors import AccumulusError
from accumulus.grid import (
    CALENDAR_RULES,
    AppendGrid,
    GrowingGrid,
    RegularGrid,
    VariableGrid,
    declared_chunk_sizes,
    growing_cap,
)
from accumulus.ingest.append.commit import commit
from accumulus.ingest.append.cube_state import chunk_along, cube_array, stored_coordinate
from accumulus.ingest.append.unpublished_writer import UnpublishedWriter
from accumulus.ingest.append.values import Batch, Committed, Planned, Request, Target, Written
from accumulus.ingest.conform import Template, blocks, conform, decoded_times, time_labels
from accumulus.ingest.granules import Granule, open_granule
from accumulus.ingest.journal import GranuleRecord
from accumulus.stores.arrays import dimension_names
from accumulus.stores.transactional import transaction_of


def write(target: Target, request: Request, cube: Committed, batch: Batch) -> Written:
    """Write the planned granules' values along the dimension, committing whenever a chunk
    of data has filled since the last commit, and at the end.

    Crash safety: values are written past the committed extent, through views whose shape
    is never stored (``unpublished_writer.py``), so no reader sees them before a commit; a
    granule that changed since it was checked is refused before its values are written."""
    template = batch.template
    arrays = {name: cube_array(cube.root, name) for name in template.appended}
    grid = _data_grid(target.dim, cube, arrays, template)
    grids = {
        name: grid if name in template.data else RegularGrid(chunk_along(array, target.dim))
        for name, array in arrays.items()
    }
    journal = cube.journal
    in_transaction = transaction_of(target.store) is not None
    writer = UnpublishedWriter(arrays, target.dim, journal.extent, grids, grow_first=in_transaction)
    records: list[GranuleRecord] = []
    appended: list[str] = []
    commits = 0
    updated: frozenset[str] = frozenset()
    try:
        for done, plan in enumerate(batch.planned, start=1):
            new_steps = plan.coordinate[plan.keep]
            if isinstance(grid, VariableGrid):
                grid.extend(_grid_coordinate(new_steps, template, cube.variable_rule))
            start = writer.size
            with _opened_again(plan, request) as granule:
                for steps in blocks(granule, template, first=plan.keep.start or 0):
                    writer.add(conform(granule, template, steps))
            labels = time_labels(new_steps[[0, -1]], template)
            records.append(
                GranuleRecord(plan.name, plan.size, plan.checksum, start, writer.size, *labels)
            )
            appended.append(plan.name)
            if grid.complete_end(writer.size) > grid.complete_end(journal.extent):
                journal, names = commit(target, cube.root, writer, journal, records)
                records, commits, updated = [], commits + 1, updated | names
            request.progress(request.steps - len(batch.planned) + done, request.steps)
        if records:
            journal, names = commit(target, cube.root, writer, journal, records)
            commits, updated = commits + 1, updated | names
    finally:
        writer.close()
    return Written(journal, tuple(appended), commits, updated)


def _data_grid(
    dim: str, cube: Committed, arrays: Mapping[str, zarr.Array], template: Template
) -> AppendGrid:
    """Where the data variables' chunks fall along the append dimension (all alike)."""
    first = arrays[(template.data or [dim])[0]]
    if cube.variable_rule is None or not template.data:
        return RegularGrid(chunk_along(first, dim))
    sizes = declared_chunk_sizes(first, dimension_names(first).index(dim))
    cap = growing_cap(cube.variable_rule)
    if cap is not None:
        return GrowingGrid(cap, sizes, cube.journal.extent)
    stored = stored_coordinate(cube, dim)
    coordinate = _grid_coordinate(stored, template, cube.variable_rule)
    return VariableGrid(cube.variable_rule, sizes, coordinate)


def _grid_coordinate(values: np.ndarray, template: Template, rule: str | None) -> np.ndarray:
    """Coordinate values as the variable rule reads them: dates for a calendar rule."""
    return decoded_times(values, template) if rule in CALENDAR_RULES else values


@contextmanager
def _opened_again(plan: Planned, request: Request) -> Iterator[Granule]:
    """A checked granule opened again to write its values, unchanged since it was checked."""
    granule = open_granule(plan.item, request.storage_options, request.allow_references)
    try:
        if granule.checksum != plan.checksum:
            raise AccumulusError(
                f"granule {plan.name} changed while it was being appended; run again"
            )
        yield granule
    finally:
        granule.close()
