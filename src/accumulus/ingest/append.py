"""Create a cube from granules and append to it: resumable, safe for readers, accumulations
kept current.

One append, under the store's lock (``accumulus.locking``):

1. *Recover.* The journal (``journal.py``) says how far the cube is committed. Arrays grown
   past that by an interrupted run are cut back (their data was never visible: consolidated
   metadata is written last), and a commit interrupted after its journal write is finished.
2. *Check.* Every granule is opened, checked against the cube (``conform.py``) and read whole,
   before anything is written: bad input changes nothing. Granules already in the journal
   (same checksum) are skipped; overlaps are refused, or skipped with ``skip_existing``.
3. *Create* the cube from the first granule when the store is new: its encodings, chunks
   chosen by ``layout.py``, static coordinates written once, the dimension still empty.
4. *Write.* Granules are read again one at a time and their values written in whole chunks
   past the committed extent, where no reader looks (``writer.py``). Chunk edges along the
   dimension are regular, or declared granule by granule by a variable rule (a chunk per
   month, per year or per granule: ``layout.VariableGrid``, a rectilinear grid of Zarr v3).
5. *Commit*, at the end and whenever a chunk of data has filled since the last commit:
   partial last chunks, arrays resized (with their new chunk grid), journal (the commit
   point), accumulation groups updated incrementally, consolidated metadata last. Readers
   open the consolidated snapshot, so they see the cube before or after a commit, never in
   between.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.storage import FsspecStore

from accumulus import keys
from accumulus.accumulation import spec
from accumulus.accumulation.build import build_accumulations
from accumulus.chunking import CALENDAR_RULES, NAMED_RULES, ChunkRule
from accumulus.compute import Progress
from accumulus.cube import Cube
from accumulus.errors import AccumulusError
from accumulus.filters import numcodecs_codec, split_v2, v3_codecs
from accumulus.filters.nczarr import record_dimension_size
from accumulus.grid import declared_chunk_sizes, regular_chunk_size
from accumulus.ingest.conform import (
    Template,
    check_fits,
    conform,
    decoded_times,
    template_of,
    time_labels,
)
from accumulus.ingest.granules import CodecChain, Granule, GranuleLike, open_granule
from accumulus.ingest.journal import (
    CREATING,
    JOURNAL_KEY,
    READY,
    GranuleRecord,
    Journal,
    read_journal,
    write_journal,
)
from accumulus.ingest.layout import (
    AppendGrid,
    ArraySpec,
    ChunkChoice,
    RegularGrid,
    VariableGrid,
    choose_chunks,
)
from accumulus.ingest.writer import ChunkWriter
from accumulus.locking import StoreLock
from accumulus.storage import consolidate, open_store, quiet_consolidation, store_label


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


@dataclass
class _Planned:
    """A granule that passed the checks, and which of its steps to append."""

    item: GranuleLike
    name: str
    size: int
    checksum: str
    coordinate: np.ndarray  # along the append dimension, in the cube's encoding
    keep: slice = field(default_factory=lambda: slice(None))


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
    granules are checked and written.
    """
    started = time.perf_counter()
    items = _as_list(granules)
    if not items:
        raise AccumulusError("no granules given to append")
    chunks = dict(chunks or {})
    rule = _chunking_rule(chunking, chunks, dim)
    if isinstance(rule, int):
        chunks[dim] = rule
    zarr_format = _zarr_format(zarr_format, rule)
    label = store_label(store) if isinstance(store, Store) else os.fspath(store)
    target, new_directory = _open_target(store, label, storage_options)
    try:
        with StoreLock(target, label) as lock:
            run = _Run(target, label, dim, lock, chunks, rule, skip_existing, progress)
            return run.execute(items, storage_options, zarr_format, started)
    finally:
        if new_directory is not None:
            _remove_if_empty(new_directory)


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


def _zarr_format(asked: int | None, rule: ChunkRule | None) -> int:
    """The format of a new cube: as asked, else 2, or 3 for variable chunks."""
    variable = isinstance(rule, str)
    if asked is None:
        return 3 if variable else 2
    if asked not in (2, 3):
        raise AccumulusError(f"zarr_format must be 2 or 3, got {asked}")
    if asked == 2 and variable:
        raise AccumulusError(
            f"--chunking {rule} needs Zarr v3: Zarr v2 cannot store chunks of different sizes; "
            "use --zarr-format 3 (the default with --chunking)"
        )
    return asked


def _as_list(granules: GranuleLike | Iterable[GranuleLike]) -> list[GranuleLike]:
    if isinstance(granules, str | os.PathLike | xr.Dataset | Store):
        return [granules]
    return list(granules)


class _Run:
    """One append, under the lock."""

    def __init__(
        self,
        store: Store,
        label: str,
        dim: str,
        lock: StoreLock,
        chunks: dict[str, int],
        rule: ChunkRule | None,
        skip_existing: bool,
        progress: Progress | None,
    ) -> None:
        self.store = store
        self.label = label
        self.dim = dim
        self.lock = lock
        self.chunks = chunks  # as asked for (--chunks, and a --chunking size)
        self.rule = rule  # as asked for along ``dim``: a size, a variable rule, or None
        self.variable_rule: str | None = None  # the cube's variable rule along ``dim``, if any
        self.skip_existing = skip_existing
        self.progress = progress or (lambda done, total: None)
        self.skipped: list[tuple[str, str]] = []
        self.updated: set[str] = set()
        self.commits = 0
        self.first: GranuleLike | None = None  # the granule a new cube takes its encodings from
        self.root: zarr.Group | None = None  # the cube as of the last commit
        self.total = 0  # progress steps: each granule is checked, then written

    def execute(
        self,
        items: list[GranuleLike],
        storage_options: dict | None,
        zarr_format: int,
        started: float,
    ) -> AppendResult:
        journal, recovered = self._recover()
        template = None
        if journal is not None:
            self.root = self._consolidated_root()
            settings = self.root.attrs.get("accumulus", {})
            self.variable_rule = settings.get("chunking") if isinstance(settings, dict) else None
            template = self._store_template()
            self._check_chunking_unchanged(template)
        elif isinstance(self.rule, str):
            self.variable_rule = self.rule
        planned, template = self._check_all(items, journal, template, storage_options)
        before = journal.extent if journal else 0
        choice = None
        if planned and journal is None:
            assert template is not None
            self._check_rule_fits(template)
            journal, choice = self._create(template, zarr_format, storage_options)
            self.root = self._fresh_root()
        appended: list[str] = []
        if planned:
            assert journal is not None and template is not None
            journal = self._write(planned, journal, template, storage_options, appended)
        self.progress(self.total, self.total)
        return AppendResult(
            store=self.label,
            dim=self.dim,
            created=choice is not None,
            chunking=choice,
            appended=tuple(appended),
            skipped=tuple(self.skipped),
            extent=(before, journal.extent if journal else 0),
            commits=self.commits,
            accumulations=tuple(sorted(self.updated)),
            recovered=recovered,
            seconds=time.perf_counter() - started,
        )

    # Recovery --------------------------------------------------------------------------------

    def _recover(self) -> tuple[Journal | None, str]:
        journal = read_journal(self.store, self.label)
        if journal is None:
            ours = keys.PREFIX.rstrip("/")
            if any(name != ours for name in keys.top_level(self.store)):
                journal = self._adopt()
                return journal, (
                    f"adopted the existing cube: its {journal.extent} steps along {self.dim} "
                    "are taken as committed"
                )
            return None, ""
        if journal.state == CREATING:
            self._wipe()
            return None, "an interrupted creation was removed; the cube is created again"
        if journal.dim != self.dim:
            raise AccumulusError(
                f"{self.label} is appended along {journal.dim!r}, not {self.dim!r} "
                f"(use --dim {journal.dim})"
            )
        notes = []
        snapshot = self._consolidated_root()
        root = snapshot or self._fresh_root()
        for name in self._names_along_dim(root):
            # The array's own metadata, which a dead run may have resized.
            array = zarr.open_array(
                self.store, path=name, mode="r+", zarr_format=root.metadata.zarr_format
            )
            axis = _dims(array).index(self.dim)
            if array.shape[axis] != journal.extent:
                # Grown by a run that died before its commit point; never published.
                notes.append(f"{name} cut back from {array.shape[axis]} to {journal.extent}")
                shape = list(array.shape)
                shape[axis] = journal.extent
                array.resize(tuple(shape))
                record_dimension_size(self.store, self.dim, journal.extent)
        published = snapshot[self.dim].shape[0] if snapshot is not None else None
        if published != journal.extent:
            # A commit got past its journal write but not to consolidation: finish it.
            self._update_accumulations()
            self._consolidate()
            notes.append(f"the commit of {self.dim} up to {journal.extent} was finished")
        if self.lock.recovered is not None:
            notes.insert(0, f"took over the stale lock of {self.lock.recovered.describe()}")
        return journal, "; ".join(notes)

    def _adopt(self) -> Journal:
        """Take over a cube that append did not create (written by xarray's ``to_zarr``,
        ``accumulus convert`` or netcdf-c): its whole extent along ``dim`` becomes the first
        journal entry. Only metadata is written: the append dimension in the root
        attributes, the journal (the commit point), then consolidated metadata."""
        root = self._fresh_root()
        names = self._names_along_dim(root)
        if not names:
            raise AccumulusError(
                f"{self.label}: no array has the dimension {self.dim!r}, so there is nothing to "
                "append to along it (choose --dim among the cube's dimensions)"
            )
        extents = {name: root[name].shape[_dims(root[name]).index(self.dim)] for name in names}
        if len(set(extents.values())) != 1:
            raise AccumulusError(
                f"{self.label}: the arrays along {self.dim!r} have different lengths {extents}; "
                "cannot append to them as one cube"
            )
        extent = next(iter(extents.values()))
        for name in names:
            axis = _dims(root[name]).index(self.dim)
            if regular_chunk_size(root[name], axis) is None and not isinstance(self.rule, str):
                raise AccumulusError(
                    f"{self.label}: {name!r} has variable chunks along {self.dim!r}; say "
                    "which rule new chunks follow with --chunking per-granule|month|year"
                )
        settings = root.attrs.get("accumulus")
        settings = dict(settings) if isinstance(settings, dict) else {}
        settings["append_dim"] = self.dim
        if isinstance(self.rule, str):
            settings["chunking"] = self.variable_rule = self.rule
        root.attrs["accumulus"] = settings
        labels = xr.open_zarr(self.store, consolidated=False)[self.dim].values
        record = GranuleRecord(
            name="(in the store before its first append)",
            size=0,
            checksum="adopted",
            start=0,
            stop=extent,
            first=str(labels[0]) if extent else "",
            last=str(labels[-1]) if extent else "",
        )
        journal = Journal(self.dim, READY, extent, [record] if extent else [])
        write_journal(self.store, journal)
        self._consolidate()
        return journal

    def _wipe(self) -> None:
        """Delete what an interrupted creation wrote (everything but our lock), directories
        included, so that no empty array directory is left for zarr to stumble on."""
        stored = [k for k in keys.list_keys(self.store) if not k.startswith(keys.PREFIX)]
        for top in sorted({k.split("/", 1)[0] for k in stored}):
            if top in stored:
                keys.delete(self.store, top)
            else:
                sync(self.store.delete_dir(top))
        keys.delete(self.store, JOURNAL_KEY)

    def _consolidated_root(self) -> zarr.Group | None:
        """The root as readers see it (consolidated metadata), or None before the first
        commit. After recovery it is current, and the run reads metadata from it: no
        per-array requests."""
        with quiet_consolidation():
            root = zarr.open_group(self.store, mode="r+")
        return root if root.metadata.consolidated_metadata is not None else None

    # Checking ------------------------------------------------------------------------------

    def _store_template(self) -> Template:
        dataset = xr.open_dataset(
            self.store, engine="zarr", decode_cf=False, consolidated=True, chunks=None
        )
        try:
            return template_of(dataset, self.dim, self.label)
        finally:
            dataset.close()

    def _check_chunking_unchanged(self, template: Template) -> None:
        """``--chunks`` and ``--chunking`` apply when a cube is created: on an existing cube
        they must say how it is chunked already."""
        asked: dict[str, int | str] = dict(self.chunks)
        if self.rule is not None:
            asked[self.dim] = self.rule
        if not asked:
            return
        assert self.root is not None
        if isinstance(self.rule, str) and self.root.metadata.zarr_format == 2:
            raise AccumulusError(
                f"{self.label} is Zarr v2, which cannot store chunks of different sizes; "
                f"--chunking {self.rule} needs a cube created with Zarr v3 (--zarr-format 3, "
                "the default with --chunking)"
            )
        for name in template.data:
            array = self.root[name]
            assert isinstance(array, zarr.Array)
            stored: dict[str, int | str | None] = {
                d: regular_chunk_size(array, axis) for axis, d in enumerate(_dims(array))
            }
            if self.variable_rule is not None:
                stored[self.dim] = self.variable_rule
            differ = {d: n for d, n in asked.items() if stored.get(d, n) != n}
            if differ:
                text = ",".join(f"{d}={stored[d]}" for d in differ)
                raise AccumulusError(
                    f"{self.label}: {name} is chunked {text}; --chunks and --chunking apply "
                    "when a cube is created and cannot change an existing one"
                )

    def _check_rule_fits(self, template: Template) -> None:
        """A calendar rule reads dates: the dimension must have a CF time coordinate."""
        if self.variable_rule in CALENDAR_RULES and template.variables[self.dim].time is None:
            units = template.variables[self.dim].attrs.get("units")
            raise AccumulusError(
                f"--chunking {self.variable_rule} needs a CF time coordinate along "
                f"{self.dim!r} (units like 'days since 2000-01-01'); its units are {units!r}"
            )

    def _check_all(
        self,
        items: Sequence[GranuleLike],
        journal: Journal | None,
        template: Template | None,
        storage_options: dict | None,
    ) -> tuple[list[_Planned], Template | None]:
        """Open, check and read every granule; decide what each one appends. Without a
        cube yet, the first granule's template is the one the others must fit."""
        planned: list[_Planned] = []
        self.total = 2 * len(items)
        for done, item in enumerate(items, start=1):
            granule = open_granule(item, storage_options)
            try:
                known = journal.find(granule.checksum) if journal else None
                if known is not None:
                    self.skipped.append((granule.name, f"already ingested as {known.name}"))
                    continue
                twin = next((p for p in planned if p.checksum == granule.checksum), None)
                if twin is not None:
                    self.skipped.append((granule.name, f"the same as {twin.name}"))
                    continue
                if template is None:
                    template = template_of(granule.dataset, self.dim, f"granule {granule.name}")
                    self.first = item
                check_fits(granule, template)
                coordinate = conform(granule, template)[self.dim]
                _check_increasing(granule.name, coordinate, template)
                planned.append(
                    _Planned(item, granule.name, granule.size, granule.checksum, coordinate)
                )
            finally:
                granule.close()
                self.progress(done, self.total)
        planned.sort(key=lambda p: p.coordinate[0])
        if planned:
            assert template is not None
            planned = self._trim_overlaps(planned, journal, template)
        return planned, template

    def _trim_overlaps(
        self, planned: list[_Planned], journal: Journal | None, template: Template
    ) -> list[_Planned]:
        """Refuse (or, with ``skip_existing``, drop) steps at or before the end of the cube or
        of the granule before."""
        existing = self._stored_coordinate(journal)
        end, end_name = (existing[-1], "the cube") if existing.size else (None, "")
        kept = []
        for plan in planned:
            if end is not None and plan.coordinate[0] <= end:
                new = plan.coordinate > end
                old = plan.coordinate[~new]
                labels = time_labels(old[:1], template)
                end_label = time_labels(np.asarray([end]), template)[0]
                if not self.skip_existing:
                    raise AccumulusError(
                        f"granule {plan.name}: {self.dim} {labels[0]} is not after the end of "
                        f"{end_name} ({end_label}): an overlap or a duplicate, or {self.dim} "
                        "going backwards; --skip-existing skips steps already in the cube"
                    )
                present = np.isin(old, existing)
                if not present.all():
                    missing = time_labels(old[~present][:1], template)[0]
                    raise AccumulusError(
                        f"granule {plan.name}: {self.dim} {missing} goes backwards: it is "
                        f"before the end of {end_name} ({end_label}) but not in the cube"
                    )
                if not new.any():
                    self.skipped.append((plan.name, f"every {self.dim} already in the cube"))
                    continue
                plan.keep = slice(int(np.argmax(new)), None)
            kept.append(plan)
            end, end_name = plan.coordinate[-1], f"granule {plan.name}"
            existing = np.concatenate([existing, plan.coordinate[plan.keep]])
        return kept

    def _stored_coordinate(self, journal: Journal | None) -> np.ndarray:
        if journal is None or journal.extent == 0:
            return np.asarray([])
        assert self.root is not None
        array = self.root[self.dim]
        assert isinstance(array, zarr.Array)
        return np.asarray(array[: journal.extent])

    # Creating ------------------------------------------------------------------------------

    def _create(
        self, template: Template, zarr_format: int, storage_options: dict | None
    ) -> tuple[Journal, ChunkChoice]:
        """The cube's arrays from the first granule: its encodings, empty along ``dim``.
        Everything is decided (and may fail) before the first write."""
        assert self.first is not None
        granule = open_granule(self.first, storage_options)
        try:
            specs = {
                str(name): ArraySpec(
                    dims=tuple(map(str, var.dims)),
                    shape=tuple(var.shape),
                    itemsize=var.dtype.itemsize,
                    is_coordinate=name in template.coordinates,
                )
                for name, var in granule.dataset.variables.items()
            }
            choice = choose_chunks(specs, self.dim, self.chunks, self.variable_rule)
            chains = granule.compression(zarr_format)
            empty = granule.dataset.isel({self.dim: slice(0, 0)}).drop_encoding()
            encoding = {}
            for name, var in empty.variables.items():
                fill = var.attrs.pop("_FillValue", None)
                chain = chains.get(str(name))
                if not chain and name in template.coordinates and self.dim in var.dims:
                    # Uncompressed in the granule, but its ~1 MiB chunks in the cube are
                    # rewritten at each commit, mostly fill: zarr's default compression.
                    chain = None
                encoding[name] = {
                    "chunks": choice.chunks[str(name)],
                    "_FillValue": fill,
                    **_codec_encoding(chain, zarr_format),
                }
            settings = {"append_dim": self.dim}
            if self.variable_rule is not None:
                settings["chunking"] = self.variable_rule
            empty.attrs["accumulus"] = settings
            write_journal(self.store, Journal(self.dim, CREATING))
            empty.to_zarr(
                self.store,
                mode="a",
                zarr_format=zarr_format,
                encoding=encoding,
                consolidated=False,
            )
        finally:
            granule.close()
        journal = Journal(self.dim, READY, 0, [])
        write_journal(self.store, journal)
        return journal, choice

    # Writing and committing ------------------------------------------------------------------

    def _write(
        self,
        planned: list[_Planned],
        journal: Journal,
        template: Template,
        storage_options: dict | None,
        appended: list[str],
    ) -> Journal:
        assert self.root is not None
        arrays = {name: self.root[name] for name in template.appended}
        grid = self._data_grid(arrays, template, journal)
        grids = {
            name: grid if name in template.data else RegularGrid(_chunk_along(array, self.dim))
            for name, array in arrays.items()
        }
        writer = ChunkWriter(arrays, self.dim, journal.extent, grids)
        records: list[GranuleRecord] = []
        try:
            for done, plan in enumerate(planned, start=1):
                values = self._read_again(plan, template, storage_options)
                if isinstance(grid, VariableGrid):
                    grid.extend(self._grid_coordinate(values[self.dim], template))
                start = writer.size
                writer.add(values)
                labels = time_labels(values[self.dim][[0, -1]], template)
                records.append(
                    GranuleRecord(plan.name, plan.size, plan.checksum, start, writer.size, *labels)
                )
                appended.append(plan.name)
                if grid.complete_end(writer.size) > grid.complete_end(journal.extent):
                    journal = self._commit(writer, journal, records)
                    records = []
                self.progress(self.total - len(planned) + done, self.total)
            if records:
                journal = self._commit(writer, journal, records)
        finally:
            writer.close()
        return journal

    def _data_grid(
        self, arrays: Mapping[str, zarr.Array], template: Template, journal: Journal
    ) -> AppendGrid:
        """Where the data variables' chunks fall along the append dimension (all alike)."""
        first = arrays[(template.data or [self.dim])[0]]
        if self.variable_rule is None or not template.data:
            return RegularGrid(_chunk_along(first, self.dim))
        coordinate = self._grid_coordinate(self._stored_coordinate(journal), template)
        sizes = declared_chunk_sizes(first, _dims(first).index(self.dim))
        return VariableGrid(self.variable_rule, sizes, coordinate)

    def _grid_coordinate(self, values: np.ndarray, template: Template) -> np.ndarray:
        """Coordinate values as the variable rule reads them: dates for a calendar rule."""
        return decoded_times(values, template) if self.variable_rule in CALENDAR_RULES else values

    def _read_again(
        self, plan: _Planned, template: Template, storage_options: dict | None
    ) -> dict[str, np.ndarray]:
        granule: Granule = open_granule(plan.item, storage_options)
        try:
            if granule.checksum != plan.checksum:
                raise AccumulusError(
                    f"granule {plan.name} changed while it was being appended; run again"
                )
            values = conform(granule, template)
        finally:
            granule.close()
        axis = {n: template.variables[n].dims.index(self.dim) for n in values}
        return {n: v[(slice(None),) * axis[n] + (plan.keep,)] for n, v in values.items()}

    def _commit(
        self, writer: ChunkWriter, journal: Journal, records: list[GranuleRecord]
    ) -> Journal:
        writer.write_partial()
        writer.wait()
        self.lock.check()
        writer.resize()
        record_dimension_size(self.store, self.dim, writer.size)  # for netcdf-c readers
        journal = journal.committed(records, writer.size)
        write_journal(self.store, journal)  # the commit point
        assert self.root is not None
        if any(name.endswith(spec.GROUP_SUFFIX) for name in self.root.group_keys()):
            self._update_accumulations()
        self._consolidate()
        self.commits += 1
        return journal

    def _update_accumulations(self) -> None:
        """Bring every accumulation group made by accumulus up to date with the committed
        data: incremental, so its cost follows the appended data, not the archive."""
        cube = Cube(self.store, self.label, use_consolidated=False)
        for name in cube.data_variables:
            group = cube.accumulation_group(name)
            if group is None or group.producer != "accumulus":
                continue  # groups of other tools: queries derive their coverage from shapes
            request = spec.BuildRequest(
                combinations=tuple(acc.dims for acc in group.accumulations),
                strides={
                    d: s
                    for acc in group.accumulations
                    for d, s in zip(acc.dims, acc.strides, strict=True)
                },
                weights=group.weights,
            )
            update = build_accumulations(cube, name, request, held_lock=self.lock)
            if update.action != "up to date":
                self.updated.add(name)

    def _consolidate(self) -> None:
        consolidate(self.store)

    # Store helpers -------------------------------------------------------------------------

    def _fresh_root(self) -> zarr.Group:
        """The root group as the arrays' own metadata describe it (newer than consolidated
        metadata while an append is under way)."""
        return zarr.open_group(self.store, mode="r+", use_consolidated=False)

    def _names_along_dim(self, root: zarr.Group) -> list[str]:
        return [name for name, array in root.arrays() if self.dim in _dims(array)]


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
    """The chunk size of a regular grid along ``dim``."""
    return array.chunks[_dims(array).index(dim)]


def _dims(array: zarr.Array) -> list[str]:
    if array.metadata.zarr_format == 2:
        return list(array.attrs.get("_ARRAY_DIMENSIONS", []))
    return list(array.metadata.dimension_names or [])


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
    new_directory = None
    if "://" not in text or text.startswith("file://"):
        path = Path(text.removeprefix("file://")).expanduser()
        if not path.exists():
            if not path.parent.is_dir():
                raise AccumulusError(
                    f"cannot create the cube {text}: directory {path.parent} does not exist"
                )
            new_directory = path
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
