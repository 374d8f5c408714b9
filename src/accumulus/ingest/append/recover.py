"""Phase 1 of an append: bring the store back to its last commit, or finish that commit."""

from __future__ import annotations

import xarray as xr
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync

from accumulus.errors import AccumulusError
from accumulus.grid import regular_chunk_size
from accumulus.hierarchy import arrays_along, consolidate_groups, set_group_attrs
from accumulus.ingest.append.commit import update_accumulations
from accumulus.ingest.append.cube_state import consolidated_root, fresh_root
from accumulus.ingest.append.values import Committed, Recovered, Request, Target
from accumulus.ingest.conform import Template, template_of
from accumulus.ingest.granules import open_zarr_tree
from accumulus.ingest.journal import (
    CREATING,
    JOURNAL_KEY,
    READY,
    GranuleRecord,
    Journal,
    read_journal,
    write_journal,
)
from accumulus.stores import keys
from accumulus.stores.arrays import array_at, dimension_names
from accumulus.stores.nczarr_metadata import record_dimension_size


def recover(target: Target, request: Request) -> Recovered:
    """Bring the store back to its last commit, or finish that commit.

    Crash safety: the journal is the commit point. Arrays grown past its extent were never
    published (consolidated metadata is written last), so cutting them back loses nothing a
    reader saw; a journal newer than the consolidated metadata means the commit point was
    passed, so the commit is finished, never undone. A creation cut short (journal still
    ``creating``) is wiped and done again."""
    journal = read_journal(target.store, target.label)
    updated: frozenset[str] = frozenset()
    if journal is None:
        ours = keys.PREFIX.rstrip("/")
        if not any(name != ours for name in keys.top_level(target.store)):
            return Recovered(None, "", updated)
        journal = _adopt(target, request)
        note = (
            f"adopted the existing cube: its {journal.extent} steps along {target.dim} "
            "are taken as committed"
        )
    elif journal.state == CREATING:
        _wipe(target.store)
        note = "an interrupted creation was removed; the cube is created again"
        return Recovered(None, note, updated)
    else:
        if journal.dim != target.dim:
            raise AccumulusError(
                f"{target.label} is appended along {journal.dim!r}, not {target.dim!r} "
                f"(use --dim {journal.dim})"
            )
        note, updated = _back_to_the_journal(target, journal)
    root = consolidated_root(target.store) or fresh_root(target.store)
    settings = root.attrs.get("accumulus", {})
    variable_rule = settings.get("chunking") if isinstance(settings, dict) else None
    cube = Committed(journal, root, variable_rule, _store_template(target))
    return Recovered(cube, note, updated)


def _back_to_the_journal(target: Target, journal: Journal) -> tuple[str, frozenset[str]]:
    """Cut arrays grown past the journal back to it; finish a commit whose journal was
    written but whose consolidated metadata was not. Returns what was done, and the
    variables whose accumulations were brought up to date."""
    store, dim = target.store, target.dim
    notes = []
    snapshot = consolidated_root(store)
    root = snapshot or fresh_root(store)
    for name in arrays_along(root, dim):
        # The array's own metadata, which a dead run may have resized.
        array = zarr.open_array(store, path=name, mode="r+", zarr_format=root.metadata.zarr_format)
        axis = dimension_names(array).index(dim)
        if array.shape[axis] != journal.extent:
            # Grown by a run that died before its commit point; never published.
            notes.append(f"{name} cut back from {array.shape[axis]} to {journal.extent}")
            shape = list(array.shape)
            shape[axis] = journal.extent
            array.resize(tuple(shape))
            record_dimension_size(store, dim, journal.extent)
    published = array_at(snapshot, dim).shape[0] if snapshot is not None else None
    updated: frozenset[str] = frozenset()
    if published != journal.extent:
        # A commit got past its journal write but not to consolidation: finish it.
        updated = update_accumulations(target)
        consolidate_groups(store)
        notes.append(f"the commit of {dim} up to {journal.extent} was finished")
    if target.lock.recovered is not None:
        notes.insert(0, f"took over the stale lock of {target.lock.recovered.describe()}")
    return "; ".join(notes), updated


def _adopt(target: Target, request: Request) -> Journal:
    """Take over a cube that append did not create (written by xarray's ``to_zarr``,
    ``accumulus convert`` or netcdf-c): its whole extent along ``dim`` becomes the first
    journal entry.

    Crash safety: only metadata is written, the journal (the commit point) after the append
    dimension in the root attributes and consolidated metadata after the journal; a run
    killed before the journal write adopts the cube again."""
    store, label, dim = target.store, target.label, target.dim
    root = fresh_root(store)
    names = arrays_along(root, dim)
    if not names:
        raise AccumulusError(
            f"{label}: no array has the dimension {dim!r}, so there is nothing to "
            "append to along it (choose --dim among the cube's dimensions)"
        )
    arrays = {name: array_at(root, name) for name in names}
    extents = {name: a.shape[dimension_names(a).index(dim)] for name, a in arrays.items()}
    if len(set(extents.values())) != 1:
        raise AccumulusError(
            f"{label}: the arrays along {dim!r} have different lengths {extents}; "
            "cannot append to them as one cube"
        )
    extent = next(iter(extents.values()))
    for name in names:
        axis = dimension_names(arrays[name]).index(dim)
        if regular_chunk_size(arrays[name], axis) is None and request.variable_rule is None:
            raise AccumulusError(
                f"{label}: {name!r} has variable chunks along {dim!r}; say "
                "which rule new chunks follow with --chunking per-granule|month|year"
            )
    settings = root.attrs.get("accumulus")
    settings = dict(settings) if isinstance(settings, dict) else {}
    settings["append_dim"] = dim
    if request.variable_rule is not None:
        settings["chunking"] = request.variable_rule
    set_group_attrs(root, "accumulus", settings)
    labels = xr.open_zarr(store, consolidated=False)[dim].values
    record = GranuleRecord(
        name="(in the store before its first append)",
        size=0,
        checksum="adopted",
        start=0,
        stop=extent,
        first=str(labels[0]) if extent else "",
        last=str(labels[-1]) if extent else "",
    )
    journal = Journal(dim, READY, extent, (record,) if extent else ())
    write_journal(store, journal)
    consolidate_groups(store)
    return journal


def _wipe(store: Store) -> None:
    """Delete what an interrupted creation wrote (everything but our lock), directories
    included, so that no empty array directory is left for zarr to stumble on."""
    stored = [k for k in keys.list_keys(store) if not k.startswith(keys.PREFIX)]
    for top in sorted({k.split("/", 1)[0] for k in stored}):
        if top in stored:
            keys.delete(store, top)
        else:
            sync(store.delete_dir(top))
    keys.delete(store, JOURNAL_KEY)


def _store_template(target: Target) -> Template:
    dataset = open_zarr_tree(target.store, where=target.label).dataset
    try:
        return template_of(dataset, target.dim, target.label)
    finally:
        dataset.close()
