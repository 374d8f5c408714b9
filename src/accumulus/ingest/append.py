"""Create a cube from granules and append to it: resumable, safe for readers, accumulations
kept current.

``append`` runs five phases under the store's lock (``accumulus.stores.lock``), each a function
below that takes the previous phase's result, an immutable value, and returns its own:

1. ``recover`` -> ``Recovered``: the journal (``journal.py``) says how far the cube is
   committed; what an interrupted run left past it is cut back, a commit interrupted after
   its journal write is finished, an interrupted creation is wiped.
2. ``check`` -> ``Checked``: every granule is opened, checked against the cube
   (``conform.py``) and read whole; granules already in the journal are skipped, overlaps
   refused (or skipped with ``skip_existing``). Nothing has been written yet.
3. ``create`` -> ``Committed``: a new cube's arrays from the first granule, empty along the
   append dimension (chunks, and shards if asked, chosen by ``layout.py``).
4. ``write`` -> ``Written``: the granules are read again one at a time and their values
   written in whole chunks past the committed extent, where no reader looks (``writer.py``),
   with a ``commit`` whenever a chunk of data has filled and at the end. In a sharded
   cube the unit written and committed is the shard (one object): a shard is written once
   it is full, the partial last one at each commit (zarr keeps its old inner chunks), and
   shards before the committed extent's are never touched.
5. ``commit`` -> ``Journal``: partial last chunks, arrays resized, the journal (the commit
   point), accumulation groups updated incrementally, consolidated metadata last.

The crash-safety rule of each phase is stated where it is enforced. Together: readers open
the consolidated snapshot, so they see the cube before or after a commit, never in between;
a run killed at any moment is finished by running it again.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.storage import FsspecStore

from accumulus.accumulation.build.accumulate import build_accumulations
from accumulus.accumulation.model.groups import read_group
from accumulus.compute import Progress
from accumulus.destinations import check_store
from accumulus.errors import AccumulusError, Interrupted
from accumulus.filters import numcodecs_codec, split_v2, v3_codecs
from accumulus.grid import (
    CALENDAR_RULES,
    NAMED_RULES,
    AppendGrid,
    ChunkRule,
    RegularGrid,
    VariableGrid,
    declared_chunk_sizes,
    regular_chunk_size,
)
from accumulus.hierarchy import (
    arrays_along,
    consolidate_groups,
    cube_groups,
    holds_accumulations,
    set_group_attrs,
    write_tree,
)
from accumulus.ingest.cadence import step_seconds, steps_per_year
from accumulus.ingest.conform import (
    Template,
    blocks,
    check_fits,
    conform,
    cube_dataset,
    decoded_times,
    template_of,
    time_labels,
)
from accumulus.ingest.granules import (
    CodecChain,
    Granule,
    GranuleLike,
    InGroup,
    open_granule,
    open_zarr_tree,
    resolve_group,
)
from accumulus.ingest.journal import (
    CREATING,
    JOURNAL_KEY,
    READY,
    GranuleRecord,
    Journal,
    read_journal,
    write_journal,
)
from accumulus.ingest.layout import ArraySpec, ChunkChoice, choose_chunks, choose_shards
from accumulus.ingest.writer import ChunkWriter
from accumulus.raw_cube import RawCube
from accumulus.scope import accumulus_scope
from accumulus.stores import keys
from accumulus.stores.arrays import dimension_names
from accumulus.stores.group import group_label, group_view
from accumulus.stores.lock import StoreLock
from accumulus.stores.nczarr_metadata import record_dimension_size
from accumulus.stores.opening import open_store, store_label
from accumulus.stores.stable_shards import StableShardStore


@dataclass(frozen=True)
class AppendResult:
    """What one append did."""

    store: str
    dim: str
    created: bool
    chunking: ChunkChoice | None  # on creation: the chunks chosen, and why
    appended: tuple[str, ...]  # granule names
    skipped: tuple[tuple[str, str], ...]  # (granule name, why)
    extent: tuple[int, int]  # size along ``dim`` before and after
    commits: int
    accumulations: tuple[str, ...]  # variables whose accumulation groups were updated
    recovered: str  # what an interrupted run had left, and what was done about it
    seconds: float


def append(
    store: str | os.PathLike[str] | Store,
    granules: GranuleLike | Iterable[GranuleLike],
    dim: str = "time",
    chunks: Mapping[str, int] | None = None,
    skip_existing: bool = False,
    storage_options: dict | None = None,
    *,
    chunking: ChunkRule | None = None,
    zarr_format: int | None = None,
    progress: Progress | None = None,
    group: str | None = None,
    shards: Mapping[str, int] | None = None,
    allow_references: Sequence[str] | None = None,
) -> AppendResult:
    """Append ``granules`` (NetCDF4/HDF5 files, Zarr stores or ``xarray.Dataset`` objects)
    to the cube at ``store`` along ``dim``, creating it from the first granule if needed.

    On creation: ``chunks`` ({dim: size}), by default chunks of about 100 MiB; ``chunking``
    along ``dim``: a size (regular chunks, like ``chunks={dim: size}``), or ``"month"``,
    ``"year"`` (a chunk per calendar period of the time coordinate) or ``"per-granule"``
    (each granule its own chunk), which need Zarr v3 (a rectilinear chunk grid);
    ``zarr_format`` 2 or 3, by default 2, or 3 with those rules. On an existing cube they
    must agree with how it is chunked. Granules already ingested are skipped; times already
    in the cube are an error, or skipped with ``skip_existing``. Safe to re-run after an
    interruption, and to run while others read. ``progress(done, total)`` is called as
    granules are checked and written. ``group``: the group of the granules to append (with
    its nested groups along ``dim``), kept at the same place in the cube; by default the one
    group holding variables along ``dim``. ``shards`` ({dim: size}, Zarr v3, the default
    format with it): on creation, the data variables' chunks are packed in shards of these
    sizes (multiples of the chunk sizes; one chunk per shard along dimensions not named);
    on an existing cube they must agree with its shards. ``allow_references``: where a
    granule that is a reference set (``.parq``, or a ``.json`` URL) may read besides its own
    location.
    """
    started = time.perf_counter()
    items = _as_list(granules)
    if not items:
        raise AccumulusError("no granules given to append")
    chunks = dict(chunks or {})
    rule = _chunking_rule(chunking, chunks, dim)
    if isinstance(rule, int):
        chunks[dim] = rule
    shards = dict(shards or {})
    request = Request(
        chunks=chunks,
        rule=rule,
        shards=shards,
        zarr_format=_zarr_format(zarr_format, rule, bool(shards)),
        skip_existing=skip_existing,
        storage_options=storage_options,
        allow_references=tuple(allow_references or ()),
        progress=progress or (lambda done, total: None),
        steps=2 * len(items),
    )
    label = store_label(store) if isinstance(store, Store) else os.fspath(store)
    # The destination is checked before any granule is read.
    target_store, new_directory = _open_target(store, label, storage_options)
    try:
        group = resolve_group(items[0], dim, group, storage_options, request.allow_references)
        items = [_in_group(item, group, dim) for item in items]
        # Shards rewritten keep their old inner chunks in place, for readers of the old index.
        target_store = StableShardStore(target_store)
        # A group of the cube is a store of its own: journal, lock and metadata inside it.
        target_store, label = group_view(target_store, group), group_label(label, group)
        with StoreLock(target_store, label) as lock:
            target = Target(target_store, label, dim, lock)
            recovered = recover(target, request)
            checked = check(target, request, recovered, items)
            choice = written = None
            if checked.batch is not None:
                cube = recovered.cube
                if cube is None:
                    cube, choice = create(target, request, checked.batch)
                written = write(target, request, cube, checked.batch)
            request.progress(request.steps, request.steps)
    except KeyboardInterrupt:
        raise Interrupted(_kept(target_store, label, dim)) from None
    finally:
        if new_directory is not None:
            _remove_if_empty(new_directory)
    before = recovered.cube.journal.extent if recovered.cube else 0
    return AppendResult(
        store=label,
        dim=dim,
        created=choice is not None,
        chunking=choice,
        appended=written.appended if written else (),
        skipped=checked.skipped,
        extent=(before, written.journal.extent if written else before),
        commits=written.commits if written else 0,
        accumulations=tuple(sorted(recovered.updated | (written.updated if written else set()))),
        recovered=recovered.note,
        seconds=time.perf_counter() - started,
    )


def _kept(store: Store, label: str, dim: str) -> str:
    """What an interrupted append leaves: its journal's last commit."""
    journal = read_journal(store, label)
    if journal is None or journal.state == CREATING:
        return f"{label} was not created (nothing was committed); run the same command again"
    return (
        f"{label} keeps its last commit, {dim} {journal.extent} steps from "
        f"{len(journal.granules)} granule(s); run the same command again to append the rest "
        "(granules already in the cube are skipped)"
    )


# --------------------------------------------------------------------------------------------
# What the phases are given and what they hand on: immutable values


@dataclass(frozen=True)
class Target:
    """The store an append writes to, and the lock it holds there for the whole run."""

    store: Store
    label: str  # how messages name the store
    dim: str  # the append dimension
    lock: StoreLock


@dataclass(frozen=True)
class Request:
    """What the caller asked for, checked."""

    chunks: Mapping[str, int]  # as asked for (--chunks, and a --chunking size)
    rule: ChunkRule | None  # as asked for along ``dim``: a size, a variable rule, or None
    shards: Mapping[str, int]  # as asked for (--shards); empty: unsharded
    zarr_format: int  # of a new cube
    skip_existing: bool
    storage_options: dict | None
    allow_references: tuple[str, ...]  # where granules that are reference sets may read
    progress: Progress  # called with (done, steps)
    steps: int  # of progress: each granule is checked, then written

    @property
    def variable_rule(self) -> str | None:
        """The variable chunk rule asked for (month, year, per-granule), if any."""
        return self.rule if isinstance(self.rule, str) else None


@dataclass(frozen=True)
class Committed:
    """The cube as of its last commit."""

    journal: Journal
    root: zarr.Group  # its metadata as of that commit
    variable_rule: str | None  # how its data variables are chunked along the dimension
    template: Template  # what granules appended to it must look like


@dataclass(frozen=True)
class Recovered:
    """The cube after recovery (None: there is none yet, the first granule creates it)."""

    cube: Committed | None
    note: str  # what an interrupted run had left, and what was done about it
    updated: frozenset[str]  # variables whose accumulations a finished commit updated


@dataclass(frozen=True)
class Planned:
    """A granule that passed the checks, and which of its steps to append."""

    item: GranuleLike
    name: str
    size: int
    checksum: str
    coordinate: np.ndarray  # along the append dimension, in the cube's encoding
    keep: slice = slice(None)


@dataclass(frozen=True)
class Batch:
    """The granules to append, checked."""

    planned: tuple[Planned, ...]  # in order along the dimension
    template: Template  # what they were checked against
    first: GranuleLike  # the first granule checked: a new cube takes its encodings from it


@dataclass(frozen=True)
class Checked:
    """Every granule checked: what to append, and what to skip."""

    batch: Batch | None  # None: nothing to append
    skipped: tuple[tuple[str, str], ...]  # (granule name, why)


@dataclass(frozen=True)
class Written:
    journal: Journal  # as of the last commit
    appended: tuple[str, ...]  # granule names
    commits: int
    updated: frozenset[str]  # variables whose accumulation groups were updated


# --------------------------------------------------------------------------------------------
# 1. Recover


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
    root = _consolidated_root(target.store) or _fresh_root(target.store)
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
    snapshot = _consolidated_root(store)
    root = snapshot or _fresh_root(store)
    for name in _names_along_dim(root, dim):
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
    published = snapshot[dim].shape[0] if snapshot is not None else None
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
    root = _fresh_root(store)
    names = _names_along_dim(root, dim)
    if not names:
        raise AccumulusError(
            f"{label}: no array has the dimension {dim!r}, so there is nothing to "
            "append to along it (choose --dim among the cube's dimensions)"
        )
    extents = {name: root[name].shape[dimension_names(root[name]).index(dim)] for name in names}
    if len(set(extents.values())) != 1:
        raise AccumulusError(
            f"{label}: the arrays along {dim!r} have different lengths {extents}; "
            "cannot append to them as one cube"
        )
    extent = next(iter(extents.values()))
    for name in names:
        axis = dimension_names(root[name]).index(dim)
        if regular_chunk_size(root[name], axis) is None and request.variable_rule is None:
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


# --------------------------------------------------------------------------------------------
# 2. Check


def check(
    target: Target, request: Request, recovered: Recovered, items: Sequence[GranuleLike]
) -> Checked:
    """Open, check and read every granule, and decide what each one appends. Without a cube
    yet, the first granule's template is the one the others must fit.

    Crash safety: nothing is written here, and nothing is written before every granule has
    passed: a truncated, corrupt or misfitting granule (or a bad option) changes nothing."""
    cube = recovered.cube
    template = cube.template if cube else None
    if cube is not None:
        _check_chunking_unchanged(target, request, cube)
    journal = cube.journal if cube else None
    planned: list[Planned] = []
    skipped: list[tuple[str, str]] = []
    first = None
    for done, item in enumerate(items, start=1):
        granule = open_granule(item, request.storage_options, request.allow_references)
        try:
            known = journal.find(granule.checksum) if journal else None
            if known is not None:
                skipped.append((granule.name, f"already ingested as {known.name}"))
                continue
            twin = next((p for p in planned if p.checksum == granule.checksum), None)
            if twin is not None:
                skipped.append((granule.name, f"the same as {twin.name}"))
                continue
            if template is None:
                template = template_of(granule.dataset, target.dim, f"granule {granule.name}")
            first = item if first is None else first
            check_fits(granule, template)
            # Every value is read and converted here, block by block, so that a granule
            # that cannot be stored exactly is refused before anything is written.
            steps = blocks(granule, template)
            coordinate = np.concatenate([conform(granule, template, s)[target.dim] for s in steps])
            _check_increasing(granule.name, coordinate, template)
            planned.append(Planned(item, granule.name, granule.size, granule.checksum, coordinate))
        finally:
            granule.close()
            request.progress(done, request.steps)
    planned.sort(key=lambda p: p.coordinate[0])
    if template is None or first is None or not planned:
        return Checked(None, tuple(skipped))
    planned = _trim_overlaps(target, request, cube, template, planned, skipped)
    if cube is None:
        _check_rule_fits(request.variable_rule, template)
    batch = Batch(tuple(planned), template, first) if planned else None
    return Checked(batch, tuple(skipped))


def _check_chunking_unchanged(target: Target, request: Request, cube: Committed) -> None:
    """``--chunks``, ``--chunking`` and ``--shards`` apply when a cube is created: on an
    existing cube they must say how it is chunked already."""
    asked: dict[str, int | str] = dict(request.chunks)
    if request.rule is not None:
        asked[target.dim] = request.rule
    if request.shards:
        _check_shards_unchanged(target, request, cube)
    if not asked:
        return
    if request.variable_rule is not None and cube.root.metadata.zarr_format == 2:
        raise AccumulusError(
            f"{target.label} is Zarr v2, which cannot store chunks of different sizes; "
            f"--chunking {request.rule} needs a cube created with Zarr v3 (--zarr-format 3, "
            "the default with --chunking)"
        )
    for name in cube.template.data:
        array = _array(cube.root, name)
        stored: dict[str, int | str | None] = {
            d: array.chunks[axis] if array.shards else regular_chunk_size(array, axis)
            for axis, d in enumerate(dimension_names(array))
        }
        if cube.variable_rule is not None:
            stored[target.dim] = cube.variable_rule
        differ = {d: n for d, n in asked.items() if stored.get(d, n) != n}
        if differ:
            text = ",".join(f"{d}={stored[d]}" for d in differ)
            raise AccumulusError(
                f"{target.label}: {name} is chunked {text}; --chunks and --chunking apply "
                "when a cube is created and cannot change an existing one"
            )


def _check_shards_unchanged(target: Target, request: Request, cube: Committed) -> None:
    for name in cube.template.data:
        array = _array(cube.root, name)
        names = dimension_names(array)
        if not array.shards:
            raise AccumulusError(
                f"{target.label}: {name} is not sharded; --shards applies when a cube is "
                "created and cannot change an existing one"
            )
        stored = dict(zip(names, array.shards, strict=True))
        differ = {d: n for d, n in request.shards.items() if stored.get(d, n) != n}
        if differ:
            text = ",".join(f"{d}={stored[d]}" for d in differ)
            raise AccumulusError(
                f"{target.label}: {name} is in shards {text}; --shards applies when a cube is "
                "created and cannot change an existing one"
            )


def _check_rule_fits(rule: str | None, template: Template) -> None:
    """A calendar rule reads dates: the dimension must have a CF time coordinate."""
    dim = template.dim
    if rule in CALENDAR_RULES and template.variables[dim].time is None:
        units = template.variables[dim].attrs.get("units")
        raise AccumulusError(
            f"--chunking {rule} needs a CF time coordinate along "
            f"{dim!r} (units like 'days since 2000-01-01'); its units are {units!r}"
        )


def _trim_overlaps(
    target: Target,
    request: Request,
    cube: Committed | None,
    template: Template,
    planned: list[Planned],
    skipped: list[tuple[str, str]],
) -> list[Planned]:
    """Refuse (or, with ``skip_existing``, drop) steps at or before the end of the cube or
    of the granule before; ``skipped`` gets the granules dropped whole."""
    dim = target.dim
    existing = _stored_coordinate(cube, dim)
    end, end_name = (existing[-1], "the cube") if existing.size else (None, "")
    kept = []
    for plan in planned:
        if end is not None and plan.coordinate[0] <= end:
            new = plan.coordinate > end
            old = plan.coordinate[~new]
            labels = time_labels(old[:1], template)
            end_label = time_labels(np.asarray([end]), template)[0]
            if not request.skip_existing:
                raise AccumulusError(
                    f"granule {plan.name}: {dim} {labels[0]} is not after the end of "
                    f"{end_name} ({end_label}): an overlap or a duplicate, or {dim} "
                    "going backwards; --skip-existing skips steps already in the cube"
                )
            present = np.isin(old, existing)
            if not present.all():
                missing = time_labels(old[~present][:1], template)[0]
                raise AccumulusError(
                    f"granule {plan.name}: {dim} {missing} goes backwards: it is "
                    f"before the end of {end_name} ({end_label}) but not in the cube"
                )
            if not new.any():
                skipped.append((plan.name, f"every {dim} already in the cube"))
                continue
            plan = replace(plan, keep=slice(int(np.argmax(new)), None))
        kept.append(plan)
        end, end_name = plan.coordinate[-1], f"granule {plan.name}"
        existing = np.concatenate([existing, plan.coordinate[plan.keep]])
    return kept


def _stored_coordinate(cube: Committed | None, dim: str) -> np.ndarray:
    """The committed values of the append dimension's coordinate."""
    if cube is None or cube.journal.extent == 0:
        return np.asarray([])
    return np.asarray(_array(cube.root, dim)[: cube.journal.extent])


# --------------------------------------------------------------------------------------------
# 3. Create


def create(target: Target, request: Request, batch: Batch) -> tuple[Committed, ChunkChoice]:
    """The cube's arrays from the first granule: its encodings, empty along ``dim``.
    Everything is decided (and may fail) before the first write.

    Crash safety: the journal says ``creating`` before the first array is written and
    ``ready`` only once all are; ``recover`` wipes a creation cut short, and the next run
    creates the cube again."""
    template, dim, store = batch.template, target.dim, target.store
    zarr_format, variable_rule = request.zarr_format, request.variable_rule
    granule = open_granule(batch.first, request.storage_options, request.allow_references)
    try:
        specs = {
            str(name): ArraySpec(
                dims=tuple(map(str, var.dims)),
                shape=tuple(var.shape),
                itemsize=template.variables[str(name)].dtype.itemsize,
                is_coordinate=name in template.coordinates,
            )
            for name, var in granule.dataset.variables.items()
        }
        year = steps_per_year(_step_seconds(granule, batch))
        choice = choose_chunks(specs, dim, request.chunks, variable_rule, year)
        choice = choose_shards(choice, specs, dim, request.shards)
        chains = granule.compression(zarr_format)
        empty, fills = cube_dataset(granule.dataset, template)
        encoding = {}
        for name, var in empty.variables.items():
            fill = fills[str(name)]
            chain = chains.get(str(name))
            if not chain and dim in var.dims:
                # Uncompressed in the granule, but chunks along the append dimension fill
                # over many appends, rewritten at each commit and mostly fill until then:
                # zarr's default compression.
                chain = None
            encoding[name] = {
                "chunks": choice.chunks[str(name)],
                **({"shards": choice.shards[str(name)]} if str(name) in choice.shards else {}),
                "_FillValue": fill,
                **_codec_encoding(chain, zarr_format),
            }
        settings = {"append_dim": dim}
        if variable_rule is not None:
            settings["chunking"] = variable_rule
        empty.attrs["accumulus"] = settings
        write_journal(store, Journal(dim, CREATING))
        write_tree(
            empty,
            store,
            group_attrs=granule.group_attrs,
            mode="a",
            zarr_format=zarr_format,
            encoding=encoding,
            consolidated=False,
        )
    finally:
        granule.close()
    journal = Journal(dim, READY, 0, ())
    write_journal(store, journal)
    return Committed(journal, _fresh_root(store), variable_rule, template), choice


# --------------------------------------------------------------------------------------------
# 4. Write


def write(target: Target, request: Request, cube: Committed, batch: Batch) -> Written:
    """Write the planned granules' values along the dimension, committing whenever a chunk
    of data has filled since the last commit, and at the end.

    Crash safety: values are written past the committed extent, through views whose shape
    is never stored (``writer.py``), so no reader sees them before a commit; a granule that
    changed since it was checked is refused before its values are written."""
    template = batch.template
    arrays = {name: _array(cube.root, name) for name in template.appended}
    grid = _data_grid(target.dim, cube, arrays, template)
    grids = {
        name: grid if name in template.data else RegularGrid(_chunk_along(array, target.dim))
        for name, array in arrays.items()
    }
    journal = cube.journal
    writer = ChunkWriter(arrays, target.dim, journal.extent, grids)
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
        return RegularGrid(_chunk_along(first, dim))
    stored = _stored_coordinate(cube, dim)
    coordinate = _grid_coordinate(stored, template, cube.variable_rule)
    sizes = declared_chunk_sizes(first, dimension_names(first).index(dim))
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


# --------------------------------------------------------------------------------------------
# 5. Commit


def commit(
    target: Target,
    root: zarr.Group,
    writer: ChunkWriter,
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


# --------------------------------------------------------------------------------------------
# Options and stores


def _chunking_rule(
    chunking: ChunkRule | None, chunks: Mapping[str, int], dim: str
) -> ChunkRule | None:
    """The chunking asked for along ``dim``: a named rule, a chunk size, or None."""
    if chunking is None:
        return chunks.get(dim)
    rule = chunking.strip().lower() if isinstance(chunking, str) else chunking
    if isinstance(rule, str) and rule.isdigit():
        rule = int(rule)
    if rule not in NAMED_RULES and not (type(rule) is int and rule > 0):
        raise AccumulusError(
            f"--chunking {chunking}: expected {', '.join(NAMED_RULES)} or a chunk size"
        )
    if dim in chunks and chunks[dim] != rule:
        raise AccumulusError(
            f"--chunks {dim}={chunks[dim]} and --chunking {rule} disagree; give one of them"
        )
    return rule


def _zarr_format(asked: int | None, rule: ChunkRule | None, sharded: bool = False) -> int:
    """The format of a new cube: as asked, else 2, or 3 for variable chunks or shards."""
    variable = isinstance(rule, str)
    if variable and sharded:
        raise AccumulusError(
            f"--shards with --chunking {rule}: zarr's sharding codec cuts every shard into "
            f"inner chunks of one size, and {rule} chunks vary in length; give --chunking a "
            "size (or --chunks) to shard, or drop --shards"
        )
    if asked is None:
        return 3 if variable or sharded else 2
    if asked not in (2, 3):
        raise AccumulusError(f"zarr_format must be 2 or 3, got {asked}")
    if asked == 2 and sharded:
        raise AccumulusError(
            "--shards needs Zarr v3: Zarr v2 has no shards; use --zarr-format 3 (the default "
            "with --shards)"
        )
    if asked == 2 and variable:
        raise AccumulusError(
            f"--chunking {rule} needs Zarr v3: Zarr v2 cannot store chunks of different sizes; "
            "use --zarr-format 3 (the default with --chunking)"
        )
    return asked


def _as_list(granules: GranuleLike | Iterable[GranuleLike]) -> list[GranuleLike]:
    if isinstance(granules, str | os.PathLike | xr.Dataset | Store | InGroup):
        return [granules]
    return list(granules)


def _in_group(item: GranuleLike, group: str, dim: str) -> GranuleLike:
    """``item`` read from ``group`` with its nested groups along ``dim``."""
    if isinstance(item, xr.Dataset):
        return item
    return InGroup(item.item if isinstance(item, InGroup) else item, group, dim)


def _consolidated_root(store: Store) -> zarr.Group | None:
    """The root as readers see it (consolidated metadata), or None before the first
    commit. After recovery it is current, and the run reads metadata from it: no
    per-array requests."""
    with accumulus_scope():
        root = zarr.open_group(store, mode="r+")
    return root if root.metadata.consolidated_metadata is not None else None


def _fresh_root(store: Store) -> zarr.Group:
    """The root group as the arrays' own metadata describe it (newer than consolidated
    metadata while an append is under way)."""
    return zarr.open_group(store, mode="r+", use_consolidated=False)


def _array(root: zarr.Group, name: str) -> zarr.Array:
    array = root[name]
    if not isinstance(array, zarr.Array):
        raise AccumulusError(f"{name} is a group, where the cube needs an array")
    return array


def _names_along_dim(root: zarr.Group, dim: str) -> list[str]:
    return arrays_along(root, dim)


def _step_seconds(granule: Granule, batch: Batch) -> float | None:
    """The archive's cadence along the append dimension, from the times being appended or
    the CF bounds of the first granule's (``cadence.py``)."""
    template = batch.template
    coordinate = template.variables[template.dim]
    bounds = coordinate.attrs.get("bounds")
    values = granule.dataset[bounds].values if bounds in granule.dataset.variables else None
    units = coordinate.time.units if coordinate.time is not None else None
    times = np.concatenate([plan.coordinate for plan in batch.planned])
    return step_seconds(times, units, values)


def _check_increasing(name: str, coordinate: np.ndarray, template: Template) -> None:
    steps = np.diff(coordinate)
    if (steps <= 0).any():
        at = int(np.argmax(steps <= 0))
        pair = time_labels(coordinate[at : at + 2], template)
        raise AccumulusError(
            f"granule {name}: {template.dim} is not strictly increasing ({pair[0]} is followed "
            f"by {pair[1]})"
        )


def _chunk_along(array: zarr.Array, dim: str) -> int:
    """The size along ``dim`` of the objects a regular grid stores: its chunks, or its
    shards when sharded. Appends write and commit by them, so a shard is written once per
    commit (zarr rewrites a shard whole, keeping the inner chunks a write does not cover)."""
    return (array.shards or array.chunks)[dimension_names(array).index(dim)]


def _codec_encoding(chain: CodecChain | None, zarr_format: int) -> dict[str, Any]:
    """xarray ``to_zarr`` encoding for a codec chain (None: zarr's default compression)."""
    if chain is None:
        return {}
    if zarr_format == 2:
        filters, compressor = split_v2(chain)
        return {
            "filters": [numcodecs_codec(c) for c in filters] if filters else None,
            "compressors": [numcodecs_codec(compressor)] if compressor else None,
        }
    codecs = v3_codecs(chain)
    return {
        "filters": list(codecs.filters) or None,
        "serializer": codecs.serializer,
        "compressors": list(codecs.compressors) or None,
    }


def _open_target(
    store: str | os.PathLike[str] | Store, label: str, storage_options: dict | None
) -> tuple[Store, Path | None]:
    """The store to append to, and the directory this call creates (removed again if the
    append fails before writing anything). Its parent directory or bucket must exist."""
    if isinstance(store, Store):
        return store, None
    text = os.fspath(store)
    if text.endswith(".zip"):
        raise AccumulusError(
            f"{text}: zip stores cannot be appended to (objects are never replaced in a zip); "
            "append to a directory or s3:// store, and zip a copy"
        )
    new_directory = check_store(text, "the cube")
    target = open_store(text, "w", storage_options=storage_options)
    inner = target
    while hasattr(inner, "_store"):
        inner = inner._store
    if isinstance(inner, FsspecStore):
        bucket = inner.path.split("/", 1)[0]
        try:
            exists = sync(inner.fs._exists(bucket))
        except Exception as exc:
            raise AccumulusError(f"cannot reach {label}: {exc}") from None
        if not exists:
            raise AccumulusError(f"cannot create the cube {label}: bucket {bucket!r} not found")
    return target, new_directory


def _remove_if_empty(path: Path) -> None:
    """Remove a directory this append created when nothing was written into it."""
    if path.is_dir() and not any(p.is_file() for p in path.rglob("*")):
        shutil.rmtree(path)
