"""The public functions of accumulus (re-exported from ``accumulus``).

Stores are given as a path or URL (directory, ``file://``, ``.zip``, ``memory://name``,
``s3://bucket/prefix``) or a zarr ``Store``; queries also take an open ``Datacube``
(``open``), which reads a store's metadata once and answers many queries from it, or a
``RawCube`` snapshot, answered as it stands. ``group`` names the group of the store a function
works on ("Grid" in an IMERG cube); by default the one group holding the variable (a cube
without groups: its root). Every function runs inside ``accumulus_scope``.

A cube one cannot write to is accelerated by accumulations beside it: ``accumulate(SOURCE,
..., into=SIDE)`` writes them into the store SIDE, which then answers for SOURCE wherever
a store is asked for (``open(SIDE)``, ``average(SIDE, ...)``), or is named with
``accumulations=SIDE``.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Unpack

import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus import coordinates
from accumulus.accumulation.model import spec
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.accumulation.model.positions import parse_at
from accumulus.accumulation.model.sidecar import Sidecar, sidecar_settings
from accumulus.accumulation.model.sidecar import (
    StaleSidecarError as StaleSidecarError,  # re-exported
)
from accumulus.accumulation.model.weights import resolve_weights
from accumulus.accumulation.query.answer import QueryResult as QueryResult  # re-exported
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.query.request import QUERY_DOC, Bound, QueryOptions, split_list
from accumulus.accumulation.query.request import STATS as STATS  # re-exported
from accumulus.accumulation.query.request import Query as Query  # re-exported
from accumulus.accumulation.query.request import ResolvedQuery as ResolvedQuery  # re-exported
from accumulus.accumulation.query.request import malformed_range as malformed_range  # re-exported
from accumulus.accumulation.query.request import split_range as split_range  # re-exported
from accumulus.datacube import Datacube
from accumulus.datacube import DatacubeSnapshot as DatacubeSnapshot  # re-exported
from accumulus.destinations import check_store, removed_on_failure
from accumulus.errors import AccumulusError, Interrupted
from accumulus.hierarchy import find_cube_group
from accumulus.inspection import describe_cube, stored_bytes
from accumulus.numeric import check_numeric
from accumulus.raw_cube import RawCube
from accumulus.scope import scoped
from accumulus.stores.opening import open_store, store_label

if TYPE_CHECKING:
    # Builds, verification and ingestion bring in Dask, h5py and numba: each function
    # imports its module when called, so that a query (``average --json``) loads none.
    from accumulus.accumulation.build.accumulate import BuildResult
    from accumulus.accumulation.build.verify import VerifyReport
    from accumulus.compute import Progress
    from accumulus.ingest.compare import SourceComparison

StoreLike = str | Store | RawCube | Datacube


@scoped
def open(
    store: StoreLike,
    *,
    storage_options: dict | None = None,
    group: str | None = None,
    variable: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
) -> Datacube:
    """Open a datacube for queries: its metadata is read once per snapshot, and
    ``.average(...)``/``.query(...)`` reuse it until a writer publishes a new one.
    ``accumulations``: a store holding its accumulation groups beside it (made with
    ``accumulate(..., into=)``); a store so made may also be opened in place of the cube.
    ``allow_references``: where a reference set (``.json``, ``.parq``) may read besides its
    own location (directories and URL prefixes; see docs/remote.md)."""
    handle = _datacube(store, storage_options, group, variable, accumulations, allow_references)
    handle.snapshot()  # a store that cannot be read is refused now
    return handle


def _datacube(
    store: StoreLike,
    storage_options: dict | None,
    group: str | None,
    variable: str | None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
) -> Datacube:
    if isinstance(store, Datacube | RawCube) and accumulations is not None:
        raise AccumulusError("accumulations= is given with a store path or URL, not an open cube")
    if isinstance(store, Datacube):
        return store
    if isinstance(store, RawCube):
        return Datacube.pinned(store)
    return Datacube.open(
        store,
        storage_options,
        group=group,
        variable=variable,
        accumulations=accumulations,
        allow_references=allow_references,
    )


@scoped
def open_cube(
    store: StoreLike,
    mode: str = "r",
    storage_options: dict | None = None,
    *,
    group: str | None = None,
    variable: str | None = None,
    allow_references: Sequence[str] | None = None,
) -> RawCube:
    """Open a datacube snapshot (reads its metadata once): the group ``group`` of the store,
    or the one group holding ``variable`` (or data variables). An open ``Datacube`` gives its
    current snapshot."""
    if isinstance(store, RawCube):
        return store
    if isinstance(store, Datacube):
        return store.cube
    opened = open_store(
        store,  # type: ignore[arg-type]
        mode,  # type: ignore[arg-type]
        storage_options=storage_options,
        allow_references=allow_references,
    )
    label = None if isinstance(store, Store) else str(store)
    where = label or store_label(opened)
    path = find_cube_group(opened, group, variable, where)
    return RawCube(opened, label, group=path)


@scoped
def accumulate(
    store: StoreLike,
    variable: str,
    dims: Iterable[Sequence[str] | str] | None = None,
    *,
    weights: spec.Weights | None = None,
    strides: Mapping[str, int] | None = None,
    at: str | Mapping[str, Any] | None = None,
    scheduler: str | None = None,
    rebuild: bool = False,
    shards: bool | None = None,
    progress: Progress | None = None,
    storage_options: dict | None = None,
    group: str | None = None,
    into: str | os.PathLike[str] | None = None,
    allow_missing_chunks: bool = False,
    allow_references: Sequence[str] | None = None,
    minimal: bool = False,
) -> BuildResult:
    """Build the ZEP 5 accumulation group of ``variable``.

    With no ``dims``, ``at``, ``strides`` or ``minimal``, the default layout
    (``spec.default_layout``): time at every day, and latitude+longitude at every cell, so
    series over any box and maps over any period read no raw chunk (about two full-size
    arrays of sums: ``inspect`` reports what they take). ``minimal``: ZEP 5 as written
    only (every dimension alone plus latitude+longitude, at chunk ends).

    ``dims``: the dimension combinations to accumulate, e.g. ``[("time",), ("latitude",
    "longitude")]`` (a string "latitude,longitude" also works); default every dimension alone
    plus the latitudes' and longitudes' dimensions together. ``weights``: "area" (cos
    latitude, 1-D or 2-D: ``accumulus.coordinates``), "none", or the name of an array of the
    dataset; default the cell areas ``cell_measures`` names, else "area" where latitudes are
    found, else "none".
    ``strides``: accumulate every k chunks along a dimension (default 1).
    ``at``: where entries end along a dimension instead of chunk ends, e.g.
    ``{"time": "month"}``, ``{"time": 1}`` (every element), ``{"lat": 1, "lon": 1}``,
    ``{"time": ["2001-01-01", "2006-01-01"]}`` (labels), or the text ``"time=month"``.
    ``shards``: write the accumulation arrays in shards (Zarr v3), so that fine
    accumulations stay few objects; by default when the variable is sharded.
    Re-running with the same configuration does nothing; another configuration needs
    ``rebuild=True``. Building a group again is refused where raw chunks are missing that
    were not missing when it was last built (they would be summed as missing values),
    unless ``allow_missing_chunks``. ``allow_references``: as for ``open``.
    ``into``: write them into this store (created if missing, in an existing directory)
    beside ``store``, which is then only read (a URL, a reference file, anything
    read-only). The store records
    ``store`` and a fingerprint of what was summed; running again extends it after the
    source grew and rebuilds it when the source changed.
    """
    from accumulus.accumulation.build.accumulate import build_accumulations, check_request

    if into is not None and not isinstance(store, str | os.PathLike):
        raise AccumulusError("into= needs the source as a path or URL, which it records")
    created = check_store(into, "the sidecar") if into is not None else None
    try:
        with removed_on_failure(created):  # a sidecar made by a failed run is not left
            cube = open_cube(
                store,
                "r" if into else "r+",
                storage_options,
                group=group,
                variable=variable,
                allow_references=allow_references,
            )
            var = cube.variable(variable)
            check_numeric(cube.raw, cube.decoded, variable, "a variable to accumulate")
            positions = parse_at(at)
            if dims is None:
                found = [
                    coordinates.find(cube.raw, var.dims, k, variable) for k in coordinates.KINDS
                ]
                horizontal = [d for c in found for d in c.dims] if all(found) else []
                if minimal or at is not None or strides:
                    combos = spec.default_combinations(var.dims, horizontal)
                else:  # no options: the layout that answers from accumulations
                    combos, positions = spec.default_layout(var.dims, horizontal)
            else:
                combos = [_combination(c) for c in dims]
            request = spec.BuildRequest(
                combinations=tuple(combos),
                strides=dict(strides or {}),
                at=positions,
                weights=resolve_weights(cube.decoded, variable, weights),
                shards=shards,
            )
            sidecar = None
            if into is not None:
                check_request(var, request)  # before anything is written
                side = open_store(into, "w", storage_options=storage_options)
                sidecar = Sidecar.for_writing(side, os.fspath(into), os.fspath(store), cube)  # type: ignore[arg-type]
            result = build_accumulations(
                cube,
                variable,
                request,
                rebuild=rebuild,
                scheduler=scheduler,
                progress=progress,
                into=sidecar,
                allow_missing_chunks=allow_missing_chunks,
            )
            if result.action == "up to date":
                return result
            if sidecar is None:
                stored, raw = stored_bytes(cube.store, variable, result.group)
            else:
                stored, raw = stored_bytes(sidecar.store, variable, result.group, cube.store)
            return replace(result, stored=stored, raw_stored=raw)
    except KeyboardInterrupt:
        raise Interrupted(_unfinished(variable, into, created)) from None


def _unfinished(variable: str, into: Any, created: Path | None) -> str:
    """What an interrupted ``accumulate`` leaves."""
    if created is not None:
        return f"the sidecar {os.fspath(into)} was not created; run the same command again"
    return (
        f"the accumulations of {variable} are unfinished (a group begun is marked incomplete, "
        "and queries read the raw data instead); run the same command again to build them"
    )


def _combination(combo: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(combo, str):
        combo = split_list(combo)
    if not combo or any(not d for d in combo):
        raise AccumulusError(f"empty dimension name in combination {combo!r}")
    return tuple(combo)


def answer(
    store: StoreLike,
    query: Query,
    *,
    storage_options: dict | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    group: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
) -> QueryResult:
    """The ``QueryResult`` of ``query`` (a ``Query``) on ``store``: data, plan and measured
    stats. Chunks are read and reduced within about ``memory_bytes``; a chunk larger than
    that is refused before it is read. ``accumulations``: a store holding its accumulation
    groups beside it."""
    # The store's snapshot is read once, by the query itself.
    handle = _datacube(
        store, storage_options, group, query.variable, accumulations, allow_references
    )
    return handle.answer(query, memory_bytes)


def query(
    store: StoreLike,
    variable: str,
    over: Iterable[str] | str,
    ranges: Mapping[str, tuple[Bound, Bound]] | None = None,
    *,
    storage_options: dict | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    group: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
    **options: Unpack[QueryOptions],
) -> QueryResult:
    return answer(
        store,
        Query.asked(variable, over, ranges, **options),
        storage_options=storage_options,
        memory_bytes=memory_bytes,
        group=group,
        accumulations=accumulations,
        allow_references=allow_references,
    )


@scoped
def average(
    store: StoreLike,
    variable: str,
    over: Iterable[str] | str,
    ranges: Mapping[str, tuple[Bound, Bound]] | None = None,
    *,
    storage_options: dict | None = None,
    group: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
    **options: Unpack[QueryOptions],
) -> xr.DataArray:
    return query(
        store,
        variable,
        over,
        ranges,
        storage_options=storage_options,
        group=group,
        accumulations=accumulations,
        allow_references=allow_references,
        **options,
    ).data


_ONE_SHOT = (
    "One question of ``store``: ``open(store)`` keeps its metadata for the next. "
    "``accumulations``: a store holding its accumulation groups beside it."
)
query.__doc__ = (
    f"{QUERY_DOC}\n\nThe whole ``QueryResult``: data, plan and measured stats; chunks are read "
    f"and reduced within about ``memory_bytes``. {_ONE_SHOT}"
)
average.__doc__ = (
    f"{QUERY_DOC}\n\nThe answer as a ``DataArray``; the plan's numbers (chunks and bytes read, "
    f"seconds) are in its ``attrs``. {_ONE_SHOT}"
)


@scoped
def verify(
    store: StoreLike,
    variable: str | None = None,
    *,
    storage_options: dict | None = None,
    group: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
) -> list[VerifyReport]:
    """Recompute accumulations from the raw data and compare (all variables by default).
    A sidecar (or a cube with ``accumulations``) is verified against its source: a group
    whose source changed since it was built is reported stale, the others recomputed from
    the source's raw data."""
    allowed = allow_references
    if accumulations is not None or _is_sidecar(store, storage_options, allowed):
        handle = _datacube(store, storage_options, group, variable, accumulations, allowed)
        snapshot = handle.snapshot()
        cube, groups = snapshot.cube, snapshot.groups
    else:
        cube = open_cube(
            store, "r", storage_options, group=group, variable=variable, allow_references=allowed
        )
        groups = None
    names = [variable] if variable else cube.data_variables
    reports = [_verify_one(cube, name, groups) for name in names]
    if variable is None:
        reports = [r for r in reports if r.checked or r.problems]
    return reports


def _verify_one(cube: RawCube, variable: str, groups: AccumulationGroups | None) -> VerifyReport:
    from accumulus.accumulation.build.verify import VerifyReport, verify_variable

    if groups is None or groups.sidecar is None:
        return verify_variable(cube, variable)
    stale = groups.sidecar.staleness(cube, variable, groups.root)
    if stale:
        return VerifyReport(variable, problems=[stale])
    return verify_variable(cube, variable, groups.root)


@scoped
def verify_sources(
    store: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    *,
    dim: str | None = None,
    storage_options: dict | None = None,
    allow_references: Sequence[str] | None = None,
) -> list[SourceComparison]:
    """Compare the cube with the files it was made from, as xarray decodes them: every
    variable, value for value; differences by variable and index range. ``dim``: what the
    sources were appended along (default: the cube's; none for a converted file)."""
    from accumulus.ingest.compare import compare_sources

    return compare_sources(
        store,
        sources,
        dim=dim,
        storage_options=storage_options,
        allow_references=allow_references,
    )


@scoped
def inspect(
    store: StoreLike,
    *,
    storage_options: dict | None = None,
    group: str | None = None,
    accumulations: str | Store | None = None,
    allow_references: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Arrays, dimensions, chunk grids, codecs, sizes and accumulation groups of a cube.
    For a sidecar (or with ``accumulations``): the source's, with the sidecar's groups, and
    under "sidecar" its source and whether each group still holds for it."""
    allowed = allow_references
    if accumulations is not None or _is_sidecar(store, storage_options, allowed):
        handle = _datacube(store, storage_options, group, None, accumulations, allowed)
        snapshot = handle.snapshot()
        return describe_cube(snapshot.cube, snapshot.groups)
    return describe_cube(
        open_cube(store, "r", storage_options, group=group, allow_references=allowed)
    )


def _is_sidecar(
    store: StoreLike, storage_options: dict | None, allow_references: Sequence[str] | None
) -> bool:
    if not isinstance(store, str | os.PathLike):
        return False
    try:
        opened = open_store(
            store, "r", storage_options=storage_options, allow_references=allow_references
        )
        root = zarr.open_group(opened, mode="r")
        return sidecar_settings(dict(root.attrs)) is not None
    except Exception:  # not a readable group: the cube's own opening says what is wrong
        return False


def __getattr__(name: str) -> Any:
    """``append`` (``accumulus.ingest.append.append`` inside ``accumulus_scope``), bound when
    first asked for: the ingest machinery loads only for appends."""
    if name != "append":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from accumulus.ingest.append import append as append_granules

    globals()["append"] = scoped(append_granules)
    return globals()["append"]
