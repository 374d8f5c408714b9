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
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack, cast

import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus import coordinates
from accumulus.accumulation.model import spec, statistics
from accumulus.accumulation.model.groups import AccumulationGroups, read_group
from accumulus.accumulation.model.positions import Rule, parse_at, rule_text
from accumulus.accumulation.model.record import recorded_request, stored_record
from accumulus.accumulation.model.sidecar import Sidecar, sidecar_settings
from accumulus.accumulation.model.sidecar import (
    StaleSidecarError as StaleSidecarError,  # re-exported
)
from accumulus.accumulation.model.weights import resolve_weights
from accumulus.accumulation.query.answer import QueryResult as QueryResult  # re-exported
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.query.request import QUERY_DOC, QueryOptions, Range, split_list
from accumulus.accumulation.query.request import SEASONS as SEASONS  # re-exported
from accumulus.accumulation.query.request import STATS as STATS  # re-exported
from accumulus.accumulation.query.request import Query as Query  # re-exported
from accumulus.accumulation.query.request import ResolvedQuery as ResolvedQuery  # re-exported
from accumulus.accumulation.query.request import malformed_range as malformed_range  # re-exported
from accumulus.accumulation.query.request import split_range as split_range  # re-exported
from accumulus.datacube import Datacube
from accumulus.datacube import DatacubeSnapshot as DatacubeSnapshot  # re-exported
from accumulus.destinations import check_store, removed_on_failure
from accumulus.errors import AccumulusError, Interrupted, ParameterError
from accumulus.grid import period_keys
from accumulus.hierarchy import find_cube_group
from accumulus.inspection import describe_cube, stored_bytes
from accumulus.numeric import check_numeric
from accumulus.opened import opened_store
from accumulus.partial_decode import blosc_chain
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.scope import scoped
from accumulus.stores.opening import Mode, open_store, store_label
from accumulus.stores.transactional import history, retried_on_conflict, transaction_of

if TYPE_CHECKING:
    # Builds, verification and ingestion bring in Dask, h5py and numba: each function
    # imports its module when called, so that a query (``average --json``) loads none.
    from accumulus.accumulation.build.accumulate import BuildResult
    from accumulus.accumulation.build.verify import VerifyReport
    from accumulus.compute import Progress
    from accumulus.ingest.compare import SourceComparison

StoreLike = str | Store | RawCube | Datacube


class Opening(TypedDict, total=False):
    """How ``open``, ``answer``, ``query``, ``average``, ``verify`` and ``inspect`` find the
    cube (keyword arguments): fsspec's ``storage_options``; the ``group`` of the store
    (default: the one group holding the variable); ``accumulations``, a store holding its
    accumulation groups beside it (made with ``accumulate(..., into=)``; a store so made may
    also be given in place of the cube); ``allow_references``, where a reference set
    (``.json``, ``.parq``) may read besides its own location (directories and URL prefixes;
    see docs/remote.md); ``ref``, of an icechunk repository (``icechunk://``), the branch, tag
    or snapshot id read (default: branch ``main``; see docs/transactional.md)."""

    storage_options: dict[str, Any] | None
    group: str | None
    accumulations: str | Store | None
    allow_references: Sequence[str] | None
    ref: str | None


class QueryKeywords(Opening, QueryOptions, total=False):
    """The keyword arguments of ``query`` and ``average``: how to find the cube, and the
    options of the question."""


@scoped
def open(store: StoreLike, *, variable: str | None = None, **opening: Unpack[Opening]) -> Datacube:
    """Open a datacube for queries: its metadata is read once per snapshot, and
    ``.average(...)``/``.query(...)`` reuse it until a writer publishes a new one. The cube
    is found as ``Opening`` says."""
    handle = _datacube(store, variable, **opening)
    handle.snapshot()  # a store that cannot be read is refused now
    return handle


def _datacube(store: StoreLike, variable: str | None, **opening: Unpack[Opening]) -> Datacube:
    if isinstance(store, Datacube | RawCube) and opening.get("accumulations") is not None:
        raise AccumulusError("accumulations= is given with a store path or URL, not an open cube")
    if isinstance(store, Datacube):
        return store
    if isinstance(store, RawCube):
        return Datacube.pinned(store)
    return Datacube.open(store, variable=variable, **opening)


@scoped
def open_cube(
    store: StoreLike,
    mode: Mode = "r",
    storage_options: dict[str, Any] | None = None,
    *,
    group: str | None = None,
    variable: str | None = None,
    allow_references: Sequence[str] | None = None,
    ref: str | None = None,
) -> RawCube:
    """Open a datacube snapshot (reads its metadata once): the group ``group`` of the store,
    or the one group holding ``variable`` (or data variables). An open ``Datacube`` gives its
    current snapshot."""
    if isinstance(store, RawCube):
        return store
    if isinstance(store, Datacube):
        return store.cube
    opened = open_store(
        store,
        mode,
        storage_options=storage_options,
        allow_references=allow_references,
        ref=ref,
    )
    label = None if isinstance(store, Store) else str(store)
    where = label or store_label(opened)
    path = find_cube_group(opened, group, variable, where)
    return RawCube(opened, label, group=path)


@scoped
@retried_on_conflict  # an icechunk branch that moved while it built: built again on its head
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
    reset: bool = False,
    shards: bool | None = None,
    progress: Progress | None = None,
    storage_options: dict[str, Any] | None = None,
    group: str | None = None,
    into: str | os.PathLike[str] | None = None,
    allow_missing_chunks: bool = False,
    allow_references: Sequence[str] | None = None,
    minimal: bool = False,
    ref: str | None = None,
    stats: Sequence[str] | None = None,
) -> BuildResult:
    """Build the ZEP 5 accumulation group of ``variable``.

    With no ``dims``, ``at``, ``strides`` or ``minimal``, the default layout
    (``spec.default_layout``): time at month ends and every 2 days of each month, and
    latitude+longitude at every cell, so series over any box and maps over whole months read
    no raw chunk, and a map over other days at most a day at each end (``inspect`` reports
    what they take). ``minimal``: ZEP 5 as written
    only (every dimension alone plus latitude+longitude, at chunk ends).

    ``dims``: the dimension combinations to accumulate, e.g. ``[("time",), ("lat", "lon")]``
    (a string "lat,lon" also works); with ``minimal``, ``at`` or ``strides`` the default is
    every dimension alone plus the latitudes' and longitudes' dimensions together.
    ``weights``: "area" (cos latitude, 1-D or 2-D: ``accumulus.coordinates``), "none", or the
    name of an array of the dataset; default the cell areas ``cell_measures`` names, else
    "area" where latitudes are found, else "none".
    ``strides``: accumulate every k chunks along a dimension (default 1).
    ``at``: where entries end along a dimension instead of chunk ends, e.g.
    ``{"time": "month"}``, ``{"time": 1}`` (every element), ``{"lat": 1, "lon": 1}``,
    ``{"time": ["2001-01-01", "2006-01-01"]}`` (labels), or the text ``"time=month"``.
    ``shards``: write the accumulation arrays in shards (Zarr v3), so that fine
    accumulations stay few objects; by default when the variable is sharded.
    A variable accumulated before keeps what its group was built with (combinations, strides,
    positions, weights) where these arguments are not given: re-running does nothing, or
    computes only what the data grew by; ``rebuild=True`` builds the same group again. A
    configuration given that differs from the group's needs ``rebuild=True``; ``reset=True``
    builds from the defaults and what is given, forgetting the group's (implies ``rebuild``).
    ``BuildResult.kept`` says what was kept. ``stats``: statistics whose extra sums to store
    beside the default ones, e.g. ``["var"]`` (Σw(x−c)² for ``stat="var"``/``"std"``); by
    default those the group holds, or none. Building a group again is refused where raw
    chunks are missing that were not missing when it was last built (they would be summed
    as missing values), unless ``allow_missing_chunks``. ``allow_references``: as for ``open``.
    ``into``: write them into this store (created if missing, in an existing directory)
    beside ``store``, which is then only read (a URL, a reference file, anything
    read-only). The store records
    ``store`` and a fingerprint of what was summed; running again extends it after the
    source grew and rebuilds it when the source changed.
    ``ref``: of an icechunk repository, the branch the group is committed to (one commit;
    default ``main``).
    """
    from accumulus.accumulation.build.accumulate import build_accumulations, check_request
    from accumulus.accumulation.build.pairs import check_partner, partner_of

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
                ref=ref,
            )
            var = cube.variable(variable)
            check_numeric(cube.raw, cube.decoded, variable, "a variable to accumulate")
            side = open_store(into, "w", storage_options=storage_options) if into else None
            kept, unknown = (None, None) if reset or minimal else _built_with(cube, variable, side)
            request, kept_text = _request(
                cube, variable, dims, weights, strides, at, kept, minimal=minimal
            )
            request = replace(request, shards=shards)
            if stats is not None:
                plain, partners = partner_of(list(stats))
                if partners and into is not None:
                    raise AccumulusError("--stats corr:VAR2 is kept in the cube, not a sidecar")
                for other in partners:
                    check_partner(cube, var, other)  # before anything is written
                request = replace(
                    request, sums=statistics.extra_sums(plain), partners=tuple(partners)
                )
            elif kept is not None:
                request = replace(request, sums=kept.sums)
            if unknown is not None:
                kept_text = f"what it was built with cannot be read ({unknown}); built anew"
            sidecar = None
            if side is not None:
                check_request(var, request)  # before anything is written
                sidecar = Sidecar.for_writing(side, os.fspath(into), os.fspath(store), cube)  # type: ignore[arg-type]
            result = build_accumulations(
                cube,
                variable,
                request,
                rebuild=rebuild or reset,
                scheduler=scheduler,
                progress=progress,
                into=sidecar,
                allow_missing_chunks=allow_missing_chunks,
            )
            result = replace(result, kept=kept_text)
            # An icechunk repository: the group lands in one commit, or not at all.
            written = transaction_of(cube.store if side is None else side)
            if written is not None:
                written.commit(f"accumulate {variable}: {result.action}")
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


def _built_with(
    cube: RawCube, variable: str, side: Store | None
) -> tuple[spec.BuildRequest | None, str | None]:
    """The request ``variable``'s group was built from (in the cube, or in the sidecar store
    ``side``): from the group as it reads, else from its build record (a group whose
    attributes were edited since). (None, why) when there is a group but neither says; (None,
    None) when there is none, or another producer's (whose weights are not known)."""
    root = cube.root if side is None else _existing_root(side)
    if root is None or not _has_group(root, variable):
        return None, None
    try:
        group = read_group(cube, variable, root)
    except AccumulusError as error:
        group, problem = None, str(error).removeprefix(f"{cube.label}: ")
    if group is not None:
        return (group.request(), None) if group.producer == "accumulus" else (None, None)
    recorded = recorded_request(stored_record(root, variable))
    return (recorded, None) if recorded is not None else (None, problem)


def _existing_root(side: Store) -> zarr.Group | None:
    try:
        return zarr.open_group(side, mode="r", use_consolidated=False)
    except (zarr.errors.GroupNotFoundError, FileNotFoundError):
        return None  # a sidecar not made yet


def _has_group(root: zarr.Group, variable: str) -> bool:
    try:
        return root.get(spec.group_name(variable)) is not None
    except (AccumulusError, ValueError):  # a group whose attributes are not JSON is one
        return True


def _request(
    cube: RawCube,
    variable: str,
    dims: Iterable[Sequence[str] | str] | None,
    weights: spec.Weights | None,
    strides: Mapping[str, int] | None,
    at: str | Mapping[str, Any] | None,
    kept: spec.BuildRequest | None,
    *,
    minimal: bool = False,
) -> tuple[spec.BuildRequest, str]:
    """The request: what is given, and for the rest what the group was built with (``kept``)
    or else the defaults (``spec.default_layout`` when nothing at all is given, the ZEP 5
    layout when ``minimal``, ``at`` or ``strides`` are); and what was kept, as a person reads
    it ("" when nothing)."""
    var = cube.variable(variable)
    default_at: dict[str, Rule] = {}
    if dims is not None:
        combos = [_combination(c) for c in dims]
    elif kept is not None:  # in the variable's order, as the defaults are
        combos = sorted(kept.combinations, key=lambda c: (len(c), [var.dims.index(d) for d in c]))
    else:
        found = [coordinates.find(cube.raw, var.dims, k, variable) for k in coordinates.KINDS]
        horizontal = [d for c in found if c is not None for d in c.dims] if all(found) else []
        if minimal or at is not None or strides:
            combos = spec.default_combinations(var.dims, horizontal)
        else:  # no options: the layout that answers from accumulations
            dated = [
                d
                for d in var.dims
                if d not in horizontal and _holds_dates(cube, d) and _steps_read_alone(var, d)
            ]
            combos, default_at = spec.default_layout(var.dims, horizontal, dated)
    accumulated = {d for combo in combos for d in combo}
    kept_at = {d: r for d, r in (kept.at if kept else {}).items() if d in accumulated}
    kept_strides = {d: s for d, s in (kept.strides if kept else {}).items() if d in accumulated}
    given_at = {**default_at, **parse_at(at)}
    request = spec.BuildRequest(
        combinations=tuple(combos),
        strides={**kept_strides, **(strides or {})},
        at={**kept_at, **given_at},
        weights=resolve_weights(
            cube.decoded, variable, weights if weights is not None or kept is None else kept.weights
        ),
    )
    if kept is None:
        return request, ""
    parts = []
    if dims is None:
        parts.append("dims " + ", ".join("+".join(c) for c in combos))
    positions = {d: r for d, r in kept_at.items() if d not in given_at and r != "chunk"}
    if positions:
        parts.append("--at " + ",".join(f"{d}={rule_text(r)}" for d, r in positions.items()))
    steps = {d: s for d, s in kept_strides.items() if d not in (strides or {}) and s != 1}
    if steps:
        parts.append("--stride " + ",".join(f"{d}={s}" for d, s in steps.items()))
    if weights is None:
        parts.append(f"weights {request.weights}")
    return request, ("kept from the last build: " + "; ".join(parts)) if parts else ""


def _holds_dates(cube: RawCube, dim: str) -> bool:
    """Whether ``dim``'s coordinate holds dates (in any CF calendar): calendar positions
    (``--at DIM=month+2``) can be placed along it."""
    try:
        period_keys(np.asarray(cube.index(dim)), "month")
    except ValueError:
        return False
    return True


def _steps_read_alone(var: VariableInfo, dim: str) -> bool:
    """Whether a step of the raw data along ``dim`` is read without decoding the rest of its
    chunk: chunks one step long, or Blosc chunks whose blocks ``partial_decode`` cuts (what
    ``append`` writes). Else (zlib, zstd, sharded) a day at a map's end would decode its
    whole chunk, so the default keeps an entry at every step."""
    sizes = var.bounds[var.axis(dim)].sizes
    return max(sizes, default=1) == 1 or blosc_chain(var.array.metadata) is not None


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
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    **opening: Unpack[Opening],
) -> QueryResult:
    """The ``QueryResult`` of ``query`` (a ``Query``) on ``store``, found as ``Opening`` says:
    data, plan and measured stats. Chunks are read and reduced within about
    ``memory_bytes``; a chunk larger than that is refused before it is read."""
    # The store's snapshot is read once, by the query itself.
    return _datacube(store, query.variable, **opening).answer(query, memory_bytes)


def query(
    store: StoreLike | xr.Dataset | xr.DataArray,
    variable: str | None = None,
    over: Iterable[str] | str | None = None,
    ranges: Mapping[str, Range] | None = None,
    *,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    **keywords: Unpack[QueryKeywords],
) -> QueryResult:
    opening, options = _split(keywords)
    if isinstance(store, xr.Dataset | xr.DataArray):
        opened = store if isinstance(store, xr.DataArray) else store.get(variable or "")
        store, found, variable = opened_store(store, variable)
        if opening.get("group") is None:
            opening["group"] = found
        if over is None and opened is not None:
            over = [str(d) for d in opened.dims]  # as xarray's mean() with no dimension
    if variable is None:
        raise ParameterError("variable", "name the variable to average")
    if over is None:
        raise ParameterError("over", "name the dimensions to average over, e.g. over='lat,lon'")
    question = Query.asked(variable, over, ranges, **options)
    return answer(store, question, memory_bytes=memory_bytes, **opening)


@scoped
def average(
    store: StoreLike | xr.Dataset | xr.DataArray,
    variable: str | None = None,
    over: Iterable[str] | str | None = None,
    ranges: Mapping[str, Range] | None = None,
    **keywords: Unpack[QueryKeywords],
) -> xr.DataArray:
    return query(store, variable, over, ranges, **keywords).data


def _split(keywords: QueryKeywords) -> tuple[Opening, QueryOptions]:
    """A query's keyword arguments as how to find the cube and what is asked of it."""
    where = Opening.__optional_keys__
    opening = {k: v for k, v in keywords.items() if k in where}
    options = {k: v for k, v in keywords.items() if k not in where}
    return cast(Opening, opening), cast(QueryOptions, options)


_ONE_SHOT = (
    "One question of ``store``: ``open(store)`` keeps its metadata for the next. "
    "``store`` may be an ``xarray.Dataset`` or ``DataArray`` opened from a Zarr store: the "
    "store it was read from is asked (a ``DataArray`` names its variable, and by default "
    "``over`` is every dimension, as in ``mean()``); one whose values are not the store's "
    "(computed, selected, or never stored) is refused. "
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
    store: StoreLike, variable: str | None = None, **opening: Unpack[Opening]
) -> list[VerifyReport]:
    """Recompute accumulations from the raw data and compare (all variables by default).
    A sidecar (or a cube with ``accumulations``) is verified against its source: a group
    whose source changed since it was built is reported stale, the others recomputed from
    the source's raw data."""
    cube, groups = _snapshot(store, variable, opening)
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
    storage_options: dict[str, Any] | None = None,
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
def inspect(store: StoreLike, **opening: Unpack[Opening]) -> dict[str, Any]:
    """Arrays, dimensions, chunk grids, codecs, sizes and accumulation groups of a cube.
    For a sidecar (or with ``accumulations``): the source's, with the sidecar's groups, and
    under "sidecar" its source and whether each group still holds for it. An icechunk
    repository's commits, down from the ref read, are under "history" (snapshot, time,
    message, granules and extent as of each)."""
    cube, groups = _snapshot(store, None, opening)
    info = describe_cube(cube, groups)
    commits = history(cube.store)
    if commits:
        info["history"] = [asdict(commit) for commit in commits]
    return info


def _snapshot(
    store: StoreLike, variable: str | None, opening: Opening
) -> tuple[RawCube, AccumulationGroups | None]:
    """The cube ``verify`` and ``inspect`` look at; with a sidecar's accumulation groups
    when ``store`` is one, or ``accumulations`` names one (None: the cube's own)."""
    storage_options, allowed = opening.get("storage_options"), opening.get("allow_references")
    ref = opening.get("ref")
    if opening.get("accumulations") is not None or _is_sidecar(
        store, storage_options, allowed, ref
    ):
        snapshot = _datacube(store, variable, **opening).snapshot()
        return snapshot.cube, snapshot.groups
    group = opening.get("group")
    cube = open_cube(
        store,
        "r",
        storage_options,
        group=group,
        variable=variable,
        allow_references=allowed,
        ref=ref,
    )
    return cube, None


def _is_sidecar(
    store: StoreLike,
    storage_options: dict[str, Any] | None,
    allow_references: Sequence[str] | None,
    ref: str | None = None,
) -> bool:
    if not isinstance(store, str | os.PathLike):
        return False
    try:
        opened = open_store(
            store, "r", storage_options=storage_options, allow_references=allow_references, ref=ref
        )
        root = zarr.open_group(opened, mode="r")
    # Not a readable group (ours: AccumulusError; zarr's and the store's errors): the cube's
    # own opening says what is wrong.
    except Exception:
        return False
    return sidecar_settings(dict(root.attrs)) is not None


def __getattr__(name: str) -> Any:
    """``append`` (``accumulus.ingest.append.append`` inside ``accumulus_scope``), bound when
    first asked for: the ingest machinery loads only for appends."""
    if name != "append":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from accumulus.ingest.append import append as append_granules

    globals()["append"] = scoped(append_granules)
    return globals()["append"]
