"""An open datacube: open once, query many times (``accumulus.open``).

A ``Datacube`` keeps the metadata snapshot of its store (see ``stores.snapshot``) together with
everything read from it: the ``RawCube`` (arrays, coordinates, CF attributes) and the
accumulation groups with their arrays. Each query first reads the store's root metadata
documents (one round trip; in the calling thread for a local store) and compares them byte
for byte with those it holds (``stores.snapshot.root_documents``): while the store is unchanged
every query reuses what was read, without parsing anything again, and once a writer has
published a new snapshot (an append, a rebuilt accumulation) the next query reads it and
uses it whole. A query never mixes two snapshots.

Writers rewrite the root document without consolidated metadata while they work and
consolidate when they are done; until then the last consolidated snapshot stays in use.

A datacube may read its accumulation groups from a sidecar store beside the data (see
``accumulation.model.sidecar``): given as ``accumulations``, or opened in place of the cube, in
which case the source it names is opened. Its snapshot is then both stores' snapshots.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, Unpack

import xarray as xr
from zarr.abc.store import Store

from accumulus.accumulation.model import spec
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.accumulation.model.sidecar import Sidecar, sidecar_of
from accumulus.accumulation.query.answer import QueryResult, accumulations_answer, run_query
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.query.request import (
    QUERY_DOC,
    Query,
    QueryOptions,
    Range,
    ResolvedQuery,
    resolve,
)
from accumulus.errors import AccumulusError
from accumulus.hierarchy import find_cube_group
from accumulus.raw_cube import RawCube
from accumulus.scope import accumulus_scope, scoped
from accumulus.stores.group import group_label
from accumulus.stores.inferred_conventions import InferredConventionsStore
from accumulus.stores.locations import remote_errors
from accumulus.stores.opening import open_store, store_label
from accumulus.stores.snapshot import (
    MetadataSnapshot,
    PinnedMetadataStore,
    read_snapshot,
    read_snapshots,
    root_documents,
    roots_read_here,
    stored_roots,
    with_coordinates,
)
from accumulus.stores.transactional import branch_moved, transaction_of


@dataclass(frozen=True)
class DatacubeSnapshot:
    """A datacube as of one metadata snapshot: answer a whole query from it."""

    token: str
    generation: int  # increases with each new snapshot a Datacube reads
    cube: RawCube
    groups: AccumulationGroups

    @classmethod
    def of(
        cls, cube: RawCube, token: str = "", generation: int = 0, sidecar: Sidecar | None = None
    ) -> DatacubeSnapshot:
        """The snapshot ``cube`` was opened on, its coordinates and groups (from ``sidecar``
        when given) read now (so threads sharing it only read it)."""
        with accumulus_scope():
            for dim in cube.raw.dims:
                cube.index(str(dim))
            groups = AccumulationGroups(cube, sidecar)
            groups.read_all()
        return cls(token, generation, cube, groups)

    def resolve(self, query: Query) -> ResolvedQuery:
        with accumulus_scope():
            return resolve(self.cube, query, self.groups)

    def query(
        self, query: Query | ResolvedQuery, memory_bytes: int = DEFAULT_MEMORY_BYTES
    ) -> QueryResult:
        """The answer, its chunks read and reduced within about ``memory_bytes``."""
        with accumulus_scope():
            return run_query(self.cube, query, groups=self.groups, memory_bytes=memory_bytes)

    def scans(self, resolved: ResolvedQuery) -> bool:
        """Whether ``resolved`` can only be answered from the raw data (no accumulation of
        this snapshot can take part): the heavy questions."""
        return not accumulations_answer(self.groups, resolved)

    def reading_through(self, wrap: Callable[[Store], Store]) -> DatacubeSnapshot:
        """This snapshot with every chunk read through ``wrap(store)``: the cube's, and a
        sidecar's accumulations (the service's guard wraps both)."""
        cube = copy.copy(self.cube)
        cube.store = wrap(cube.store)
        return replace(self, cube=cube, groups=self.groups.reading_through(wrap))


class Datacube:
    """A datacube opened for queries (``accumulus.open``)."""

    def __init__(
        self,
        store: Store,
        label: str | None = None,
        group: str | None = None,
        variable: str | None = None,
        *,
        accumulations: Store | None = None,
        accumulations_label: str | None = None,
        storage_options: dict[str, Any] | None = None,
        allow_references: Sequence[str] | None = None,
    ) -> None:
        """The cube is the group ``group`` of ``store``, or the one group holding
        ``variable`` (or data variables), found in the first snapshot (from its documents,
        without a request of its own); the root of a store without groups. Accumulation
        groups are read from ``accumulations`` (a sidecar store) when given; a sidecar
        given as ``store`` answers for its source, opened with ``storage_options`` and
        ``allow_references``."""
        self.store = store
        self._store_label = label or store_label(store)
        self._wanted = (group, variable)
        self.sidecar_store = accumulations
        self._sidecar_label = accumulations_label or (
            store_label(accumulations) if accumulations is not None else ""
        )
        self._storage_options = storage_options
        self._allow_references = allow_references
        self.group: str | None = None  # known once the first snapshot is read
        self.label = self._store_label
        self._current: DatacubeSnapshot | None = None
        # The root documents of the stores as stored when the current snapshot was read
        # (the cube's, then a sidecar's): while they are the same, so is the snapshot.
        # None: not known, or not enough to tell (a store without consolidated metadata).
        self._roots: tuple[dict[str, bytes], ...] | None = None
        self._pinned = False
        self._facts: _StoresFacts | None = None
        self._reads = 0
        self._lock = threading.Lock()

    @classmethod
    def open(
        cls,
        url: str | Store,
        storage_options: dict[str, Any] | None = None,
        *,
        group: str | None = None,
        variable: str | None = None,
        label: str | None = None,
        accumulations: str | Store | None = None,
        allow_references: Sequence[str] | None = None,
        ref: str | None = None,
    ) -> Datacube:
        """The datacube at ``url``: its group ``group``, or the one group holding
        ``variable`` (or data variables); the root of a store without groups. ``label``:
        how messages name it (default: ``url``). ``accumulations``: a sidecar store holding
        its accumulation groups (``url`` may also be a sidecar: its source is opened).
        ``allow_references``: where a reference set may read besides its own location.
        ``ref``: of an icechunk repository, the branch, tag or snapshot id read (default:
        branch ``main``)."""
        allowed = allow_references
        store = open_store(
            url, "r", storage_options=storage_options, allow_references=allowed, ref=ref
        )
        label = label or (None if isinstance(url, Store) else str(url))
        side = None
        if accumulations is not None:
            side = open_store(
                accumulations, "r", storage_options=storage_options, allow_references=allowed
            )
        side_label = None if side is None or side is accumulations else str(accumulations)
        return cls(
            store,
            label,
            group,
            variable,
            accumulations=side,
            accumulations_label=side_label,
            storage_options=storage_options,
            allow_references=allow_references,
        )

    @classmethod
    def pinned(cls, cube: RawCube) -> Datacube:
        """A handle that always answers from ``cube``'s snapshot, never a newer one."""
        handle = cls(cube.store, cube.label)
        handle.group = ""  # the cube's store is already the view of its group
        handle._current = DatacubeSnapshot.of(cube)
        handle._pinned = True
        return handle

    def __repr__(self) -> str:
        return f"<accumulus.Datacube {self.label}>"

    @property
    def source_label(self) -> str:
        """How the store the cube is read from is named (a sidecar's source, once read)."""
        return self._store_label

    @property
    def sidecar_label(self) -> str:
        """How the sidecar store is named ("" without one)."""
        return self._sidecar_label

    # ----------------------------------------------------------------------------------------
    # Snapshots

    @scoped
    def snapshot(self) -> DatacubeSnapshot:
        """The datacube as its metadata stands now: reads the root metadata documents, and
        the rest (coordinates, accumulation groups) only when they changed."""
        if self._pinned:
            assert self._current is not None
            return self._current
        moved = branch_moved(self.store) if self._stores_facts().transactional else None
        if moved is not None:  # an icechunk branch has a new commit: read it from now on
            url, branch = moved
            self.store = open_store(
                url,
                "r",
                storage_options=self._storage_options,
                allow_references=self._allow_references,
                ref=branch,
            )
        with self._lock:
            self._reads += 1
            read = self._reads
            current, known = self._current, self._roots
        stores = self._stores()
        roots = _root_documents(stores) if current is not None else None
        if current is not None and roots is not None and roots == known:
            return current
        found = read_snapshots(*stores)
        with remote_errors(self.label):
            metadata = _raised(found[0])
        if self._current is None and self.sidecar_store is None:
            metadata = self._follow_sidecar(metadata)
        side = None
        sidecar_store = self.sidecar_store
        if sidecar_store is not None:
            with remote_errors(self._sidecar_label):
                side = _raised(found[1]) if len(found) > 1 else read_snapshot(sidecar_store)
        token = metadata.token if side is None else f"{metadata.token}+{side.token}"
        if roots is None:  # the documents just read, when they are the stored ones
            read_roots = [stored_roots(self.store, metadata)]
            if sidecar_store is not None and side is not None:
                read_roots.append(stored_roots(sidecar_store, side))
            stored = [r for r in read_roots if r is not None]
            roots = tuple(stored) if len(stored) == len(read_roots) else None
        if metadata.complete or (side is not None and side.complete):
            roots = None  # the root documents do not hold the whole snapshot
        if not metadata.documents:
            if self._current is None:
                raise AccumulusError(
                    f"{self.label} is not a Zarr datacube: no Zarr group metadata found"
                )
            # Not a writer at work (they keep the root document): the store is gone.
            raise AccumulusError(
                f"{self.label}: its store has no Zarr metadata any more (removed or replaced?)"
            )
        with self._lock:
            current = self._current
            if current is not None and (
                current.token == token
                # A snapshot installed from a later read is at least as new as this one.
                or current.generation > read
                # A writer at work: the last consolidated snapshot is the datacube.
                or (current.cube.consolidated and metadata.complete)
            ):
                if current.token == token and roots is not None:
                    self._roots = roots  # read with the same snapshot: they name it now
                return current
        if self.group is None:
            self._find_group(metadata)
        with remote_errors(self.label):
            metadata = with_coordinates(self.store, metadata)
        # Stores without xarray's conventions (the ZEP 5 generator's) are read from the
        # snapshot too; a group of the store is seen through a view (see ``hierarchy``).
        store = InferredConventionsStore(PinnedMetadataStore(self.store, metadata))
        cube = RawCube(store, label=self._store_label, group=self.group or None)
        sidecar = None
        if sidecar_store is not None and side is not None:
            sidecar = Sidecar.reading(PinnedMetadataStore(sidecar_store, side), self._sidecar_label)
        fresh = DatacubeSnapshot.of(cube, token, generation=read, sidecar=sidecar)
        with self._lock:
            if self._current is None or self._current.generation < read:
                self._current, self._roots = fresh, roots
            return self._current

    def _stores_facts(self) -> _StoresFacts:
        """What every query asks of the stores (``_StoresFacts``), worked out again only
        when they are other store objects (a moved branch, a sidecar followed)."""
        facts = self._facts
        if (
            facts is None
            or facts.store is not self.store
            or facts.sidecar is not self.sidecar_store
        ):
            stores = self._stores()
            facts = self._facts = _StoresFacts(
                self.store,
                self.sidecar_store,
                transaction_of(self.store) is not None,
                roots_read_here(*stores),
            )
        return facts

    def _stores(self) -> list[Store]:
        """The stores whose root documents make a snapshot: the cube's, then a sidecar's
        once the sidecar is known."""
        return [self.store] if self.sidecar_store is None else [self.store, self.sidecar_store]

    def _follow_sidecar(self, metadata: MetadataSnapshot) -> MetadataSnapshot:
        """When the store opened is a sidecar, open the source it names instead and read
        accumulations from the sidecar; return the snapshot of what is now the cube."""
        settings = sidecar_of(metadata.documents)
        if settings is None:
            return metadata
        source = settings["source"]
        self.sidecar_store, self._sidecar_label = self.store, self._store_label
        try:
            self.store = open_store(
                source,
                "r",
                storage_options=self._storage_options,
                allow_references=self._allow_references,
            )
            with remote_errors(source):
                found = read_snapshot(self.store)
        except AccumulusError as exc:
            raise AccumulusError(
                f"{self._sidecar_label} holds accumulations of {source}, which cannot be "
                f"read ({exc})"
            ) from None
        if not found.documents:
            raise AccumulusError(
                f"{self._sidecar_label} holds accumulations of {source}, which is gone "
                "(no Zarr metadata there)"
            )
        self._store_label = self.label = source
        if self._wanted[0] is None and settings["group"]:
            self._wanted = (settings["group"], self._wanted[1])
        return found

    def _find_group(self, metadata: MetadataSnapshot) -> None:
        group, variable = self._wanted
        found = find_cube_group(
            PinnedMetadataStore(self.store, metadata), group, variable, self._store_label
        )
        with self._lock:
            self.group = found
            self.label = group_label(self._store_label, found)

    @property
    def cube(self) -> RawCube:
        """The current snapshot's ``RawCube``."""
        return self.snapshot().cube

    @property
    def data_variables(self) -> list[str]:
        return self.cube.data_variables

    def accumulation_group(self, variable: str) -> spec.AccumulationGroup | None:
        """``variable``'s accumulation group in the current snapshot (None when it has none)."""
        return self.snapshot().groups.group(variable)

    # ----------------------------------------------------------------------------------------
    # Queries

    @scoped
    def query(
        self,
        variable: str,
        over: Iterable[str] | str,
        ranges: Mapping[str, Range] | None = None,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        **options: Unpack[QueryOptions],
    ) -> QueryResult:
        return self.answer(Query.asked(variable, over, ranges, **options), memory_bytes)

    query.__doc__ = (
        f"{QUERY_DOC}\n\nThe whole ``QueryResult``: data, plan and measured counts; chunks "
        "are read and reduced within about ``memory_bytes``."
    )

    def average(
        self,
        variable: str,
        over: Iterable[str] | str,
        ranges: Mapping[str, Range] | None = None,
        *,
        memory_bytes: int = DEFAULT_MEMORY_BYTES,
        **options: Unpack[QueryOptions],
    ) -> xr.DataArray:
        return self.query(variable, over, ranges, memory_bytes=memory_bytes, **options).data

    average.__doc__ = (
        f"{QUERY_DOC}\n\nThe answer as a ``DataArray``; the plan's numbers (chunks and bytes "
        "read, seconds) are in its ``attrs``."
    )

    @scoped
    def answer(self, query: Query, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> QueryResult:
        """The ``QueryResult`` of ``query`` on the current snapshot, its chunks read and
        reduced within about ``memory_bytes``. Where telling whether the snapshot held is
        still current takes a store request through the event loop (object storage), that
        request goes out with the query's reads instead of before them: one round trip
        fewer. An answer from a snapshot found stale is dropped and the question asked again
        of the new one."""
        with self._lock:
            current, known = self._current, self._roots
        facts = self._stores_facts()
        # An icechunk session's root documents never change (it reads one snapshot), so
        # they cannot tell a new commit: ``snapshot`` asks the branch (``branch_moved``).
        if self._pinned or current is None or known is None or facts.transactional or (
            facts.read_here
        ):  # fmt: skip
            return self.snapshot().query(query, memory_bytes)
        stores = self._stores()
        check = _CHECKS.submit(_root_documents, stores)
        try:
            result = current.query(query, memory_bytes)
        except Exception:  # asked again of a new snapshot if this one went stale, else raised
            if check.result() == known:
                raise
        else:
            if check.result() == known:
                return result
        return self.snapshot().query(query, memory_bytes)


@dataclass(frozen=True)
class _StoresFacts:
    """What a datacube's stores are, asked at every query: whether the cube's is an
    icechunk session's (``transaction_of``) and whether their root documents are read in
    the calling thread (``roots_read_here``); for these store objects."""

    store: Store
    sidecar: Store | None
    transactional: bool
    read_here: bool


# Freshness checks sent while a query reads (``Datacube.answer``), each a thread waiting on
# zarr's event loop: as many as queries a program asks at once, so that none waits behind
# another's check (threads are started as needed, and reused).
_CHECKS = ThreadPoolExecutor(32, thread_name_prefix="accumulus-check")


def _root_documents(stores: list[Store]) -> tuple[dict[str, bytes], ...] | None:
    """The stores' root documents as stored now (None when they cannot be read so:
    reading the snapshot then says what is wrong)."""
    try:
        return tuple(root_documents(*stores))
    except Exception:  # the stores' errors: reading the snapshot raises them, said in a line
        return None


def _raised(found: MetadataSnapshot | Exception) -> MetadataSnapshot:
    """A snapshot read by ``read_snapshots``, or what reading it raised, raised."""
    if isinstance(found, Exception):
        raise found
    return found
