"""``append``, the one entry point: it checks the caller's options and the destination, takes
the store's lock and runs the phases in order, each handing its immutable value to the next."""

from __future__ import annotations

import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import cast

from zarr.abc.store import Store

from accumulus.compute import Progress
from accumulus.errors import AccumulusError, Interrupted
from accumulus.grid import GROW, NAMED_RULES, ChunkRule
from accumulus.ingest.append.check import check
from accumulus.ingest.append.create import create
from accumulus.ingest.append.destination import open_target, remove_if_empty
from accumulus.ingest.append.recover import recover
from accumulus.ingest.append.values import Request, Target
from accumulus.ingest.append.write import write
from accumulus.ingest.granules import GRANULE_TYPES, GranuleLike, InGroup, resolve_group
from accumulus.ingest.journal import CREATING, read_journal
from accumulus.ingest.layout import ChunkChoice
from accumulus.stores.group import group_label, group_view
from accumulus.stores.lock import StoreLock
from accumulus.stores.opening import store_label
from accumulus.stores.stable_shards import StableShardStore
from accumulus.stores.transactional import (
    TransactionConflict,
    is_repository_url,
    transaction_of,
)


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
    snapshot: str | None = None  # the icechunk commit it made, for a repository


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
    ref: str | None = None,
) -> AppendResult:
    """Append ``granules`` (NetCDF4/HDF5 files, Zarr stores or ``xarray.Dataset`` objects)
    to the cube at ``store`` along ``dim``, creating it from the first granule if needed.

    On creation: ``chunks`` ({dim: size}), by default chunks of about 100 MiB; ``chunking``
    along ``dim``: a size (regular chunks, like ``chunks={dim: size}``), or ``"month"``,
    ``"year"`` (a chunk per calendar period of the time coordinate), ``"per-granule"``
    (each granule its own chunk) or ``"grow"`` (chunks chosen from bytes that grow with the
    cube up to that size, so a young cube decodes what it holds), which need Zarr v3 (a
    rectilinear chunk grid); ``zarr_format`` 2 or 3: by default 2 (3 with such a rule or with
    ``shards``). On an existing cube they
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
    location. ``ref``: of an icechunk repository, the branch to commit to (default ``main``).
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
    repository = is_repository_url(label) or (
        isinstance(store, Store) and transaction_of(store) is not None
    )
    if repository and zarr_format == 2:
        raise AccumulusError(f"{label}: icechunk repositories hold Zarr v3 only (--zarr-format 3)")
    # An icechunk repository commits each run once; a run whose branch moved meanwhile is
    # done again on the new head (its granules may already be there, or conflict).
    for attempt in range(_TRANSACTION_ATTEMPTS):
        try:
            return _append_once(store, label, items, dim, group, request, started, ref)
        except TransactionConflict:
            if isinstance(store, Store) or attempt == _TRANSACTION_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")


_TRANSACTION_ATTEMPTS = 5


def _append_once(
    store: str | os.PathLike[str] | Store,
    label: str,
    items: list[GranuleLike],
    dim: str,
    group: str | None,
    request: Request,
    started: float,
    ref: str | None,
) -> AppendResult:
    """One run of the phases on ``store``, committed once when it is an icechunk session
    (on the branch ``ref``)."""
    # The destination is checked before any granule is read.
    target_store, new_directory = open_target(store, label, request.storage_options, ref)
    transaction = transaction_of(target_store)
    if transaction is not None:
        request = _in_repository(request)
        from accumulus.ingest.virtual_repository import holds_virtual_cube

        if holds_virtual_cube(transaction):
            raise AccumulusError(
                f"{label} holds a virtual cube (references to its granules): append to it "
                "with --virtual"
            )
    snapshot = None
    try:
        group = resolve_group(
            items[0], dim, group, request.storage_options, request.allow_references
        )
        granules = [_in_group(item, group, dim) for item in items]
        # Shards rewritten keep their old inner chunks in place, for readers of the old index.
        target_store = StableShardStore(target_store)
        # A group of the cube is a store of its own: journal, lock and metadata inside it.
        target_store, label = group_view(target_store, group), group_label(label, group)
        with StoreLock(target_store, label) as lock:
            target = Target(target_store, label, dim, lock)
            recovered = recover(target, request)
            checked = check(target, request, recovered, granules)
            choice = written = None
            if checked.batch is not None:
                cube = recovered.cube
                if cube is None:
                    cube, choice = create(target, request, checked.batch)
                written = write(target, request, cube, checked.batch)
        if transaction is not None:  # the one commit: data, journal and accumulations
            snapshot = transaction.commit(_message(dim, written.appended if written else ()))
        request.progress(request.steps, request.steps)
    except KeyboardInterrupt:
        raise Interrupted(_kept(target_store, label, dim)) from None
    finally:
        if new_directory is not None:
            remove_if_empty(new_directory)
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
        snapshot=snapshot,
    )


def _in_repository(request: Request) -> Request:
    """``request`` for an icechunk repository, which holds Zarr v3 only."""
    return replace(request, zarr_format=3)


def _message(dim: str, appended: Sequence[str]) -> str:
    """An append's commit message: the granules it appended, by name."""
    if not appended:
        return f"append along {dim}: no new granules (recovery only)"
    shown = ", ".join(appended[:_NAMED])
    more = f" and {len(appended) - _NAMED} more" if len(appended) > _NAMED else ""
    return f"append {len(appended)} granule(s) along {dim}: {shown}{more}"


_NAMED = 50


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


def _chunking_rule(
    chunking: ChunkRule | None, chunks: Mapping[str, int], dim: str
) -> ChunkRule | None:
    """The chunking asked for along ``dim``: a named rule, a chunk size, or None."""
    if chunking is None:
        return chunks.get(dim)
    rule = chunking.strip().lower() if isinstance(chunking, str) else chunking
    if isinstance(rule, str) and rule.isdigit():
        rule = int(rule)
    if rule not in (*NAMED_RULES, GROW) and not (type(rule) is int and rule > 0):
        raise AccumulusError(
            f"--chunking {chunking}: expected {', '.join((*NAMED_RULES, GROW))} or a chunk size"
        )
    if dim in chunks and chunks[dim] != rule:
        raise AccumulusError(
            f"--chunks {dim}={chunks[dim]} and --chunking {rule} disagree; give one of them"
        )
    return rule


def _zarr_format(asked: int | None, rule: ChunkRule | None, sharded: bool = False) -> int:
    """The format of a new cube: as asked, else 2 (the format every reader opens as it is),
    3 where chunks vary along the append dimension (a named rule) or are sharded."""
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
    if isinstance(granules, GRANULE_TYPES):  # the types of a GranuleLike
        return [cast(GranuleLike, granules)]
    return list(cast(Iterable[GranuleLike], granules))


def _in_group(item: GranuleLike, group: str, dim: str) -> InGroup:
    """``item`` read from ``group`` with its nested groups along ``dim``."""
    return InGroup(item.item if isinstance(item, InGroup) else item, group, dim)
