"""Building a variable's ZEP 5 accumulation group with Dask, chunk by chunk.

Each raw chunk is read once and reduced, in one task, to its sums over every accumulated
combination (``chunk_sums.chunk_sums``); which sums are stored is the statistics table's
(``statistics.stored_sums``). Per combination, those per-chunk sums are prefix-summed
along the accumulated axes, thinned to every ``stride``-th chunk and written
(``stream.fill``). Peak memory is a few raw blocks plus one slab's (much smaller) sums,
whatever the size of the array.

Write order keeps readers safe: the group is created marked incomplete (queries ignore it),
arrays are filled, then the group is marked complete and consolidated metadata refreshed.
A new group's chunks are written in place into a local directory (``stores.local.unpublished``):
no reader reads them before that, and a build interrupted leaves the group incomplete, to be
deleted and written again by the next. An update writes into the published group, each
object replaced whole (a temporary file renamed).

The group is written into the cube's own store, or ``into`` a sidecar store beside it (see
``sidecar``), whose groups also record a fingerprint of the source they summed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import prod
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store
from zarr.core.array import AsyncArray
from zarr.core.chunk_grids import ChunkGrid
from zarr.core.sync import sync

from accumulus import compute
from accumulus.accumulation.build import pairs, placement, stream
from accumulus.accumulation.model import pairs as model_pairs
from accumulus.accumulation.model import spec, statistics
from accumulus.accumulation.model.chunk_check import checksummed_codecs, read_problem_text
from accumulus.accumulation.model.groups import read_group, stride_unit
from accumulus.accumulation.model.record import (
    RECORD_KEY,
    build_record,
    missing_objects,
    recorded_missing,
)
from accumulus.accumulation.model.sidecar import SOURCE_KEY, Sidecar, StaleSidecarError, fingerprint
from accumulus.accumulation.model.weights import weight_values
from accumulus.accumulation.model.years import group_times, time_dimension, years
from accumulus.chunk_reader import ChunkReadError
from accumulus.errors import AccumulusError
from accumulus.grid import last_chunk_is_partial, sharding_of
from accumulus.names import check_component, check_names
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import array_at, consolidate
from accumulus.stores.local import unpublished
from accumulus.stores.lock import StoreLock

# Accumulation arrays are chunked to about this many bytes (uncompressed): big enough that
# a time series reads few objects, small enough that reading one entry reads little else.
CHUNK_BUDGET = 256 * 2**10
MIN_CHUNK = 64 * 2**10
# Entries of one accumulation's arrays a build holds back per chunk row along the dimension
# it walks, at most (see ``target_chunks``): about what a row of the latitude accumulation
# of a small-chunk cube holds (33 MB on the benchmark's), which an append rewrites too.
HELD_ROW_BYTES = 32 * 2**20


@dataclass(frozen=True)
class BuildResult:
    variable: str
    action: str  # "built", "rebuilt", "updated" or "up to date"
    group: spec.AccumulationGroup
    arrays: tuple[str, ...]
    seconds: float
    # Stored bytes of each accumulation (by key) and of the raw array, when measured (None
    # where the store cannot list them).
    stored: Mapping[str, int | None] = field(default_factory=dict)
    raw_stored: int | None = None
    # What the request kept from the group's last build, as a person reads it ("" nothing).
    kept: str = ""
    # The pair sums of a correlation kept beside the group: per second variable, what was
    # done ("built", "updated" or "up to date").
    pairs: Mapping[str, str] = field(default_factory=dict)


def build_accumulations(
    cube: RawCube,
    variable: str,
    request: spec.BuildRequest,
    *,
    rebuild: bool = False,
    scheduler: str | None = None,
    progress: compute.Progress | None = None,
    held_lock: StoreLock | None = None,
    into: Sidecar | None = None,
    allow_missing_chunks: bool = False,
) -> BuildResult:
    """Build ``variable``'s accumulation group in ``cube``'s store (or ``into`` a sidecar),
    bring it up to date after the data grew along one dimension (only the new part is
    computed), or confirm it is. A sidecar whose source changed is rebuilt.

    Writes happen under the target store's writers' lock, so no append runs meanwhile:
    ``held_lock`` is that lock when the caller (an append) already holds it; otherwise it is
    taken here, and a busy store is a ``StoreBusyError``. A read-only store is never written.

    A group built again over a finished build (``rebuild``, or replacing a stale one) is
    refused where raw chunks are missing that its last build did not find missing
    (``record``; any, for a group built before records), unless ``allow_missing_chunks``:
    they would be summed as missing values.
    """
    target = _Target.of(cube, into)
    options = (rebuild, scheduler, progress, target, allow_missing_chunks)
    if held_lock is not None or target.store.read_only:
        return _with_pairs(cube, variable, request, _build(cube, variable, request, *options))
    with StoreLock(target.store, target.label, task="accumulate"):
        return _with_pairs(cube, variable, request, _build(cube, variable, request, *options))


def _with_pairs(
    cube: RawCube, variable: str, request: spec.BuildRequest, result: BuildResult
) -> BuildResult:
    """The pair sums of a correlation (``build.pairs``) built or brought up to date after
    the group: those asked for (``request.partners``) and those the cube already keeps, so
    that re-runs and appends keep them current."""
    if cube.store.read_only:
        return result
    root = zarr.open_group(cube.store, mode="r", use_consolidated=False)
    partners = sorted({*request.partners, *model_pairs.partners(root, variable)})
    if not partners:
        return result
    var = cube.variable(variable)
    dim = time_dimension(cube.decoded, var.dims)
    covered = final_coverage(cube, var).get(dim, 0) if dim is not None else 0
    rebuilt = result.action in ("built", "rebuilt")
    done = [
        pairs.build_pairs(cube, variable, other, covered, rebuild=rebuilt) for other in partners
    ]
    if result.action == "up to date" and any(a != "up to date" for a in done):
        result = replace(result, action="updated")
    return replace(result, pairs=dict(zip(partners, done, strict=True)))


@dataclass(frozen=True)
class _Target:
    """Where a group is written: the cube's store, or a sidecar's."""

    store: Store
    label: str
    consolidated: bool
    sidecar: Sidecar | None

    @classmethod
    def of(cls, cube: RawCube, sidecar: Sidecar | None) -> _Target:
        if sidecar is None:
            return cls(cube.store, cube.label, cube.consolidated, None)
        return cls(sidecar.store, sidecar.label, True, sidecar)

    def root(self, cube: RawCube) -> zarr.Group:
        """The target's group as it stands (the cube's snapshot for the cube itself)."""
        if self.sidecar is None:
            return cube.root
        return zarr.open_group(self.store, mode="r", use_consolidated=False)


def _build(
    cube: RawCube,
    variable: str,
    request: spec.BuildRequest,
    rebuild: bool,
    scheduler: str | None,
    progress: compute.Progress | None,
    target: _Target,
    allow_missing_chunks: bool = False,
) -> BuildResult:
    started = time.perf_counter()
    var = cube.variable(variable)
    check_request(var, request)
    if any(statistics.SUMS[t].time_power for t in request.sums):
        years(cube.decoded, var.dims, f"--stats trend of {variable!r}")  # refused before writing
    compute.check_scheduler(scheduler)
    coverage = final_coverage(cube, var)
    wanted = _wanted_group(cube, var, request, coverage)
    for name in (wanted.path, *(a for acc in wanted.accumulations for a in acc.arrays.values())):
        check_component(f"cannot accumulate {variable!r}", name.rpartition("/")[2])
    stored = target.root(cube)
    previous = _stored_record(stored, variable)
    try:
        if target.sidecar is not None:
            target.sidecar.check(cube, variable, stored)
        existing = read_group(cube, variable, stored)
    except StaleSidecarError:
        existing = None  # the source changed under the sums: rebuilt below
    except AccumulusError:
        if not rebuild:
            raise
        existing = None  # damaged (e.g. attributes edited): replaced below
    action = "built" if stored.get(spec.group_name(variable)) is None else "rebuilt"
    if any(statistics.SUMS[t].centred for t in request.sums):
        # An update continues the sums about the reference they were built about.
        kept = existing.reference if existing is not None and not rebuild else None
        wanted = replace(wanted, reference=kept if kept is not None else _reference(var))
    met = False  # an infinity met by an update of a group keeping no tallies
    if existing is not None and not rebuild:
        # A group keeping no tallies of infinities (none met yet, or built before tallies
        # were kept) is brought up to date as it is, until new data hold an infinity.
        full, wanted = wanted, _without_missing_tallies(wanted, existing)
        same = existing.producer == "accumulus" and existing.config() == wanted.config()
        if same and existing.complete:
            covered = dict(existing.coverage) == dict(wanted.coverage)  # to the data's end
            if covered and _placed(existing) == _placed(wanted):
                # The consolidated metadata may still list a group deleted by hand.
                root = zarr.open_group(target.store, mode="r", use_consolidated=False)
                _built_arrays(root, existing, target, f"{cube.label} {variable}")
                return BuildResult(variable, "up to date", existing, (), 0.0)
            grown = _grown_dimension(existing, wanted)
            if grown is not None and _counts_fit(stored, var, existing, wanted):
                try:
                    arrays, seen = _update(
                        cube, var, existing, wanted, grown, scheduler, progress, target
                    )
                except stream.InfinityMet:
                    if existing.infinities is not False:
                        # Built before tallies were kept: infinities are in its sums.
                        wanted, met = full, True
                    else:
                        # The first infinity: the tallies are 0 up to here, so they are
                        # added as such and the update goes on with them. Building the
                        # group again would delete the arrays under the readers of the
                        # published group (until the next consolidation, or a kill).
                        _add_zero_tallies(var, existing, full, target)
                        wanted = full
                        arrays, seen = _update(
                            cube, var, existing, wanted, grown, scheduler, progress, target
                        )
                if not met:
                    infinities = _infinities(wanted, seen, existing.infinities)
                    done = replace(wanted, complete=True, infinities=infinities)
                    if existing.infinities:
                        done = replace(done, infinities=True)
                    made = build_record(cube, var, done, previous, existing.coverage)
                    _publish(cube, var, done, target, made)
                    return BuildResult(
                        variable, "updated", done, arrays, time.perf_counter() - started
                    )
        elif existing.complete:
            raise AccumulusError(
                f"{variable!r} already has accumulations ({_describe(existing)}); asked for "
                f"{_describe(wanted)}. Add --rebuild (rebuild=True) to replace them"
            )
    if scheduler and scheduler != "threads" and cube.label.startswith("memory://"):
        raise AccumulusError("memory:// stores live in this process: use the threads scheduler")
    if not allow_missing_chunks and (previous is not None or _was_complete(stored, variable)):
        _refuse_missing_chunks(var, previous)

    root = _writable_root(target)
    sharded = _sharded_accumulations(cube, var, request)
    # Tallies of infinities are written only once an infinity is met: most data hold none,
    # and two more arrays per accumulation would double what is written at every element.
    lean = wanted if met else _without_tallies(wanted)
    try:
        done, targets = _fill_new(cube, var, lean, root, sharded, scheduler, progress, target)
    except stream.InfinityMet:
        if lean is wanted:
            raise
        done, targets = _fill_new(cube, var, wanted, root, sharded, scheduler, progress, target)
    _publish(cube, var, done, target, build_record(cube, var, done))
    return BuildResult(
        variable, action, done, tuple(sorted(targets)), time.perf_counter() - started
    )


def _wanted_group(
    cube: RawCube, var: VariableInfo, request: spec.BuildRequest, coverage: dict[str, int]
) -> spec.AccumulationGroup:
    """The group ``request`` describes, its optional sums where ``spec.split_for_sums``
    puts them (siblings at chunk ends and months beside combinations at every element)."""
    infinite = statistics.can_be_infinite(var.array.dtype)
    plain, summed = spec.split_for_sums(request, time_dimension(cube.decoded, var.dims))
    parts = [plain, *summed]
    placed = [placement.placements(cube, var, part, coverage) for part in parts]
    # The siblings' entries at chunk ends and months are final or provisional on their own
    # (``Placement.final``: along the dimension ``append`` grows, the last partial chunk's
    # and an open month's are provisional): the coverage is the chosen combinations'.
    chosen = {
        k: p
        for part, ps in zip(parts, placed, strict=True)
        if not part.positioned
        for k, p in ps.items()
    }
    coverage = positioned_coverage(var, request, chosen, coverage)
    accumulations: list[spec.Accumulation] = []
    group = None
    for part, placements in zip(parts, placed, strict=True):
        holders = statistics.stored_arrays(request.weights, infinite, part.sums)
        group = spec.make_group(
            var.name, var.dims, part, coverage, holders, placements, stride_unit(var)
        )
        accumulations.extend(group.accumulations)
    assert group is not None
    return replace(group, accumulations=tuple(accumulations), weights=request.weights)


def _fill_new(
    cube: RawCube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    root: zarr.Group,
    sharded: bool,
    scheduler: str | None,
    progress: compute.Progress | None,
    target: _Target,
) -> tuple[spec.AccumulationGroup, dict[str, zarr.Array]]:
    """Create ``group`` afresh and compute every entry; the group as done, and its arrays."""
    _withdraw(root, group.path, target)
    made = _create_group(root, group)
    targets = _create_arrays(made, var, group, sharded)
    if target.consolidated:
        # Readers see the group at once, marked incomplete, and ignore it until it is done.
        consolidate(target.store)
    weights = weights_of(cube, var, group)
    # Nobody reads the group's chunks until it is published: they are written in place.
    with unpublished(target.store, group.path):
        seen = _fill(cube, var, root, group, weights, 0, None, scheduler, progress)
    untallied = False if statistics.can_be_infinite(var.array.dtype) else None
    done = replace(group, complete=True, infinities=_infinities(group, seen, untallied))
    return done, targets


def _reference(var: VariableInfo) -> float:
    """The value a group's sums of squares are centred on (``statistics``): the mean of the
    first raw chunk's finite values (0 where it has none), near the data's own mean, so that
    a variance cancels little (Σ(x−c)² against Σx²)."""
    first = tuple(slice(0, b.edges[1] if len(b.edges) > 1 else 0) for b in var.bounds)
    values = np.asarray(var.decoder.values(np.asarray(var.array[first])), dtype="f8")
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


def final_coverage(cube: RawCube, var: VariableInfo) -> dict[str, int]:
    """The raw extent whose accumulation entries will not change, per dimension.

    Everything is final, except along the dimension a cube is appended to (the root
    attribute ``accumulus.append_dim``, set by ``accumulus append``): there the last chunk
    may still be filled by the next append, so entries that end inside it are provisional.
    Queries use final entries only, which is what keeps readers of an older metadata
    snapshot right while an append rewrites that chunk's entries in place. Entries that keep
    their values as the chunk fills extend it to the data's end (``positioned_coverage``).
    """
    coverage = dict(zip(var.dims, var.shape, strict=True))
    settings = cube.root.attrs.get("accumulus", {})
    dim = settings.get("append_dim") if isinstance(settings, dict) else None
    if dim in coverage:
        axis = var.axis(dim)
        # A last chunk declared larger than the data it holds (regular or rectilinear) is
        # the one the next append fills.
        if last_chunk_is_partial(var.array, axis):
            coverage[dim] = var.bounds[axis].edges[-2]
    return coverage


def positioned_coverage(
    var: VariableInfo,
    request: spec.BuildRequest,
    placements: Mapping[tuple[str, ...], spec.Placement],
    coverage: Mapping[str, int],
) -> dict[str, int]:
    """``coverage`` extended to the data's end where no entry of the request a query reads
    can change as the last, partial chunk is filled: every combination positioned, and
    along each dimension one sums along, every entry final up to the data's end but the
    one at it (at every element, say, or every 4 days of a month still open; not at chunk
    ends, whose entries end inside the partial chunk). Final entries hold sums of values an
    append does not change, a provisional last one is not read (``Placement.final``), and
    an update starts at the last final entry (``_update_start``), so queries over the last
    chunk's days read only the days after it raw (the default layout on a cube that
    ``append`` grows: days 697-730 of 730 were read raw)."""
    combos = [tuple(d for d in var.dims if d in c) for c in request.combinations]
    if not combos or any(c not in placements for c in combos):
        return dict(coverage)
    out = dict(coverage)
    for dim, covered in coverage.items():
        size = var.shape[var.axis(dim)]
        if covered == size:
            continue
        for placed in placements.values():
            positions = placed.positions.get(dim)
            if positions is not None and (
                placed.final[dim] < len(positions) - 1 or not positions or positions[-1] != size
            ):
                break
        else:
            out[dim] = size
    return out


def _stored_record(stored: zarr.Group, variable: str) -> dict[str, Any] | None:
    """The build record of ``variable``'s group in ``stored``, as written (None: none)."""
    node = stored.get(spec.group_name(variable))
    extension = node.attrs.get(spec.EXTENSION_KEY) if isinstance(node, zarr.Group) else None
    found = extension.get(RECORD_KEY) if isinstance(extension, dict) else None
    return found if isinstance(found, dict) else None


def _was_complete(stored: zarr.Group, variable: str) -> bool:
    """Whether ``variable``'s group in ``stored`` is a finished build (an interrupted first
    build is not one: building again is building it for the first time)."""
    node = stored.get(spec.group_name(variable))
    extension = node.attrs.get(spec.EXTENSION_KEY) if isinstance(node, zarr.Group) else None
    return isinstance(extension, dict) and extension.get("complete") is True


def _refuse_missing_chunks(var: VariableInfo, previous: dict[str, Any] | None) -> None:
    """Refuse to build a group again over raw chunks that are missing (or empty) now but
    were not when it was last built (any, without a record of that build)."""
    missing = missing_objects(var, recorded_missing(previous) or ())
    if missing:
        named = ", ".join(missing[:3]) + (" ..." if len(missing) > 3 else "")
        raise AccumulusError(
            f"{len(missing)} raw chunk(s) of {var.name!r} are missing or empty ({named}): "
            "a build would sum them as missing values; restore them, or add "
            "--allow-missing-chunks (allow_missing_chunks=True)"
        )


def _has_tallies(group: spec.AccumulationGroup) -> bool:
    return any(t in acc.arrays for acc in group.accumulations for t in spec.TALLIES)


def _infinities(group: spec.AccumulationGroup, seen: bool, untallied: bool | None) -> bool | None:
    """What the group records about infinities: whether its tallies count any; without
    tallies, ``untallied``: False when none was met (tallies are written once one is), None
    for a group built before tallies were kept."""
    return seen if _has_tallies(group) else untallied


def _without_tallies(group: spec.AccumulationGroup) -> spec.AccumulationGroup:
    """``group`` keeping no tally arrays (itself when it keeps none)."""
    if not _has_tallies(group):
        return group
    stripped = tuple(
        replace(acc, arrays={t: n for t, n in acc.arrays.items() if t not in spec.TALLIES})
        for acc in group.accumulations
    )
    return replace(group, accumulations=stripped)


def _without_missing_tallies(
    wanted: spec.AccumulationGroup, existing: spec.AccumulationGroup
) -> spec.AccumulationGroup:
    """``wanted`` without the tally arrays ``existing`` lacks (no infinity met yet, or built
    before tallies were kept)."""
    return wanted if _has_tallies(existing) else _without_tallies(wanted)


def _placed(group: spec.AccumulationGroup) -> dict[str, spec.Placement | None]:
    return {acc.key: acc.placement for acc in group.accumulations}


def _grown_dimension(old: spec.AccumulationGroup, new: spec.AccumulationGroup) -> str | None:
    """The one dimension along which the data grew: its final extent, or the positions of
    a positioned accumulation along it (a month grew within a partial chunk). None when
    anything else changed (then the group is built again)."""
    changed = {d for d in new.coverage if old.coverage.get(d) != new.coverage[d]}
    if any(old.coverage.get(d, 0) > new.coverage[d] for d in changed):
        return None
    before = _placed(old)
    for acc in new.accumulations:
        was = before.get(acc.key)
        if acc.placement is None or was is None:
            continue
        for dim in acc.placement.accumulated:
            old_positions, new_positions = was.positions[dim], acc.placement.positions[dim]
            final = was.final[dim]
            # Final entries never move; the others may, as the data grows.
            if new_positions[:final] != old_positions[:final]:
                return None
            if new_positions != old_positions:
                changed.add(dim)
    return changed.pop() if len(changed) == 1 else None


def _update_start(group: spec.AccumulationGroup, dim: str) -> int:
    """Where along ``dim`` entries must be computed again after the data grew: from the
    end of the old final extent, or of the last final entry of a positioned accumulation
    if that ends before it (entries after it were provisional)."""
    start = group.coverage.get(dim, 0)
    for acc in group.accumulations:
        if acc.placement is not None and dim in acc.placement.accumulated:
            final = acc.placement.final[dim]
            start = min(start, acc.placement.positions[dim][final - 1] if final else 0)
    return start


def _counts_fit(
    root: zarr.Group, var: VariableInfo, old: spec.AccumulationGroup, new: spec.AccumulationGroup
) -> bool:
    """Whether the count arrays of positioned accumulations (in ``root``) still hold the
    largest count (their integer type was the smallest that did when they were built)."""
    for acc in new.accumulations:
        if acc.placement is None or spec.COUNT not in acc.arrays:
            continue
        stored = array_at(root, f"{old.path}/{acc.arrays[spec.COUNT]}")
        if placement.largest_count(var, acc) >= np.iinfo(stored.dtype).max:
            return False
    return True


def _publish(
    cube: RawCube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    target: _Target,
    made: dict[str, Any],
) -> None:
    """Write the group's attributes (the switch readers look at), then consolidate. They
    include the build record (``made``: what was summed, ``record``) and, in a sidecar, the
    fingerprint of its source, written in the same document as the coverage they describe."""
    node = zarr.open_group(target.store, mode="r+", path=group.path, use_consolidated=False)
    attributes = spec.group_attributes(group)
    attributes[spec.EXTENSION_KEY][RECORD_KEY] = made
    if target.sidecar is not None:
        attributes[SOURCE_KEY] = fingerprint(cube, var, group.coverage)
    node.attrs.put(attributes)
    if target.consolidated:
        consolidate(target.store)


def _update(
    cube: RawCube,
    var: VariableInfo,
    old: spec.AccumulationGroup,
    group: spec.AccumulationGroup,
    dim: str,
    scheduler: str | None,
    progress: compute.Progress | None,
    target: _Target,
) -> tuple[tuple[str, ...], bool]:
    """Extend every accumulation array past the old coverage along ``dim``: resize the arrays
    to the grown data, then compute only what depends on raw data past the old coverage
    (and the provisional entries of positioned accumulations). Returns the arrays, and
    whether a tally written counts an infinity."""
    root = _writable_root(target)
    arrays = _built_arrays(root, group, target, f"{cube.label} {var.name}")
    names = []
    for array, acc in arrays:  # resized only once every one is known to be there
        array.resize(accumulation_shape(var, acc))
        names.append(array.basename)
    weights = weights_of(cube, var, group)
    start = _update_start(old, dim)
    seen = _fill(cube, var, root, group, weights, start, dim, scheduler, progress)
    return tuple(sorted(names)), seen


def _built_arrays(
    root: zarr.Group, group: spec.AccumulationGroup, target: _Target, cube_and_variable: str
) -> list[tuple[zarr.Array, spec.Accumulation]]:
    """The arrays the group's attributes list, each with its accumulation; one said in one
    line when it is not in the store (deleted by hand, say, while the consolidated metadata
    still lists it): extending or keeping the others would leave a group that no longer
    matches its record."""
    arrays = []
    for acc in group.accumulations:
        for name in sorted(set(acc.arrays.values())):
            try:
                arrays.append((array_at(root, f"{group.path}/{name}"), acc))
            except (KeyError, TypeError):
                raise AccumulusError(
                    f"{target.label}: accumulation array {group.path}/{name} is listed by its "
                    "group but is not in the store; nothing was changed (build the group "
                    f"again: `accumulus accumulate {cube_and_variable} --rebuild`)"
                ) from None
    return arrays


def _fill(cube: RawCube, var: VariableInfo, root: zarr.Group, group: spec.AccumulationGroup, *args):
    """``stream.fill``, a raw chunk that cannot be read said in one line naming it."""
    try:
        times = group_times(cube.decoded, var.dims, var.name, group)
        return stream.fill(root, var, group, *args, times=times)
    except ChunkReadError as failed:
        if not failed.of_the_data:
            raise
        raise AccumulusError(
            f"{cube.label}: cannot read {var.name!r}: {read_problem_text(failed)}; the build "
            "stopped there (restore the chunk, then run it again)"
        ) from None


MAX_STRIDE = 1_000_000  # chunks per entry


def check_request(var: VariableInfo, request: spec.BuildRequest) -> None:
    # The group's paths are made of these names (a cube another tool wrote may have any).
    check_names(f"cannot accumulate {var.name!r}", [var.name], var.dims)
    if not request.combinations:
        raise AccumulusError("no dimension combination to accumulate was given")
    for combo in request.combinations:
        unknown = [d for d in combo if d not in var.dims]
        if unknown or not combo:
            raise AccumulusError(
                f"cannot accumulate {var.name!r} over {list(combo)}: dimension(s) {unknown} "
                f"not among its dimensions {list(var.dims)}"
            )
        if len(set(combo)) != len(combo):
            raise AccumulusError(f"dimension combination {list(combo)} repeats a dimension")
    for dim, stride in request.strides.items():
        if dim not in var.dims:
            raise AccumulusError(
                f"stride given for {dim!r}, which is not a dimension of {var.name!r} "
                f"{list(var.dims)}"
            )
        if int(stride) < 1:
            raise AccumulusError(f"stride for {dim!r} must be a positive integer, got {stride}")
        if int(stride) > MAX_STRIDE:
            # Strides past today's chunk count are allowed (entries appear as appends add
            # chunks); one no archive could reach is a mistake, not a plan.
            raise AccumulusError(
                f"stride {stride} for {dim!r} is larger than any archive's chunk count: use a "
                f"stride from 1 to {MAX_STRIDE} (it counts chunks per entry)"
            )
    for dim in request.at:
        if dim not in var.dims:
            raise AccumulusError(
                f"--at given for {dim!r}, which is not a dimension of {var.name!r} {list(var.dims)}"
            )
        if not any(dim in combo for combo in request.combinations):
            raise AccumulusError(
                f"--at given for {dim!r}, but no accumulated combination has {dim!r}"
            )
    seen = [tuple(sorted(c)) for c in request.combinations]
    if len(set(seen)) != len(seen):
        raise AccumulusError("the same dimension combination is asked for twice")


def _describe(group: spec.AccumulationGroup) -> str:
    combos = "; ".join(f"{a.key} at {a.rule_text()}" for a in group.accumulations)
    stats = statistics.built_stats(group.config()["sums"])
    return f"dims {combos}, weights {group.weights}" + (
        f", stats {','.join(stats)}" if stats else ""
    )


def _writable_root(target: _Target) -> zarr.Group:
    if target.store.read_only:
        raise AccumulusError(f"{target.label} is opened read-only; cannot write accumulations")
    return zarr.open_group(target.store, mode="r+", use_consolidated=False)


def _withdraw(root: zarr.Group, path: str, target: _Target) -> None:
    """Mark a group built before as not complete, where readers look (its attributes, the
    consolidated metadata), before its arrays are deleted: readers then answer from the raw
    data, never from a group whose chunks are going (a build killed in between leaves the
    group withdrawn, and the next build or append makes it again)."""
    node = root.get(path)
    if not isinstance(node, zarr.Group):
        return
    extension = node.attrs.get(spec.EXTENSION_KEY)
    if not isinstance(extension, dict) or extension.get("complete") is not True:
        return
    node.attrs[spec.EXTENSION_KEY] = {**extension, "complete": False}
    if target.consolidated:
        consolidate(target.store)


def _create_group(root: zarr.Group, group: spec.AccumulationGroup) -> zarr.Group:
    if group.path in root:
        del root[group.path]
    return root.create_group(group.path, attributes=spec.group_attributes(group))


def accumulation_shape(var: VariableInfo, acc: spec.Accumulation) -> tuple[int, ...]:
    """Entries along accumulated dimensions, full extent along the others (array_dims order)."""
    return placement.shape(var, acc)


def accumulation_chunks(
    shape: Sequence[int],
    accumulated: Sequence[bool],
    raw_chunks: Sequence[int],
    limits: Sequence[int] | None = None,
    itemsize: int = 8,
    budget: int = CHUNK_BUDGET,
) -> tuple[int, ...]:
    """Chunk shape of an accumulation array, about ``budget`` bytes.

    A query reads one or two entries along an accumulated axis, and ranges along the others.
    So accumulated axes start at one entry per chunk and the others at the raw chunk size;
    the others grow (doubling, up to their extent) while the chunk is under the budget, and
    shrink while it is over; accumulated axes grow only while a chunk is under ``MIN_CHUNK``.
    No axis grows past its ``limits`` entry (default: its extent).
    """
    limits = [min(n, m) for n, m in zip(shape, limits or shape, strict=True)]
    chunks = [1 if acc else max(1, c) for acc, c in zip(accumulated, raw_chunks, strict=True)]
    others = [i for i, acc in enumerate(accumulated) if not acc]

    def nbytes() -> int:
        return prod(chunks) * itemsize

    while nbytes() > budget and any(chunks[i] > 1 for i in others):
        widest = max(others, key=lambda i: chunks[i])
        chunks[widest] = (chunks[widest] + 1) // 2
    # Grow the full-resolution axes up to the budget; the accumulated ones only to avoid
    # tiny objects, as every entry beyond the one or two a query needs is read for nothing.
    for grow_accumulated, target in ((False, budget), (True, MIN_CHUNK)):
        while nbytes() * 2 <= target:
            axes = [
                i
                for i, acc in enumerate(accumulated)
                if acc == grow_accumulated and chunks[i] < limits[i]
            ]
            if not axes:
                break
            most_chunks = max(axes, key=lambda i: shape[i] / chunks[i])
            chunks[most_chunks] = min(chunks[most_chunks] * 2, limits[most_chunks])
    return tuple(chunks)


def target_chunks(
    var: VariableInfo, acc: spec.Accumulation, group: spec.AccumulationGroup, count: bool = False
) -> tuple[int, ...]:
    """Chunk shape of an accumulation array (array_dims order), of sums or of counts
    (``count``: positioned accumulations chunk their counts apart, ``placement.chunks``).

    Along the dimension the build walks in slabs (``batch``, usually time), full-resolution
    chunks grow up to one slab, so each slab writes whole chunks and a long series is read
    in few requests; further (doubling) while a chunk row of all the accumulation's arrays
    stays within ``HELD_ROW_BYTES``, as the build's writer holds its entries back until a
    row is whole: the small arrays of corners a box's series reads (latitude and longitude
    together: 3650 x 2 x 4 entries on the 10-year cube) are then read in one object per
    corner instead of one per slab. When that dimension is kept at full resolution, the
    others keep the raw chunk size: such arrays answer thin strips at a box's edges, and
    wider chunks would be read for nothing. Otherwise (e.g. the time accumulation, read for
    maps) they grow too.
    """
    raw_chunk = {d: max(b.sizes, default=1) for d, b in zip(var.dims, var.bounds, strict=True)}
    shape = accumulation_shape(var, acc)
    batch = stream.batch_dimension(var)
    slab = stream.chunks_per_slab(var, batch, group) * raw_chunk[batch]
    if acc.placement is not None:
        return placement.chunks(var, acc, batch, slab, count)
    extent = dict(zip(acc.array_dims, shape, strict=True))
    limits = []
    for dim in acc.array_dims:
        if dim == batch and dim not in acc.dims:
            arrays = len(set(acc.arrays.values()))
            limits.append(_held_row_length(extent, batch, arrays, slab))
        elif dim not in acc.dims and batch not in acc.dims:
            limits.append(raw_chunk[dim])
        else:
            limits.append(extent[dim])
    return accumulation_chunks(
        shape,
        [d in acc.dims for d in acc.array_dims],
        [raw_chunk[d] for d in acc.array_dims],
        limits,
    )


def _held_row_length(extent: dict[str, int], batch: str, arrays: int, slab: int) -> int:
    """How long along ``batch`` a chunk of ``arrays`` arrays (8-byte entries) of ``extent``
    may grow: one slab, doubled (up to the extent) while a chunk row of all of them stays
    within ``HELD_ROW_BYTES``."""
    step = prod(n for d, n in extent.items() if d != batch) * 8 * arrays
    length = slab
    while length < extent[batch] and min(2 * length, extent[batch]) * step <= HELD_ROW_BYTES:
        length = min(2 * length, extent[batch])
    return length


def accumulation_shards(
    shape: Sequence[int],
    chunks: Sequence[int],
    limits: Sequence[int],
    budget: int,
    itemsize: int = 8,
) -> tuple[int, ...] | None:
    """Shard shape of an accumulation array: whole chunks, doubled along the axis with the
    most shards left while a shard stays within ``budget`` bytes (uncompressed) and no axis
    passes its ``limits`` entry or the array's extent (rounded up to whole chunks). None when
    a shard would hold one chunk: sharding would only add an index to it."""
    shards = list(chunks)
    ceilings = [
        max(c, -(-min(n, top) // c) * c) for n, top, c in zip(shape, limits, chunks, strict=True)
    ]
    while prod(shards) * itemsize * 2 <= budget:
        axes = [i for i, (s, top) in enumerate(zip(shards, ceilings, strict=True)) if s < top]
        if not axes:
            break
        widest = max(axes, key=lambda i: shape[i] / shards[i])
        shards[widest] = min(shards[widest] * 2, ceilings[widest])
    return tuple(shards) if shards != list(chunks) else None


# Bytes (uncompressed) of an accumulation shard when the raw array has no shards to follow.
SHARD_BUDGET = 64 * 2**20


def _sharded_accumulations(cube: RawCube, var: VariableInfo, request: spec.BuildRequest) -> bool:
    """Whether the accumulation arrays are written in shards: as asked, else when the raw
    array is sharded. Shards exist in Zarr v3 only."""
    if request.shards is None:
        return sharding_of(var.array.metadata) is not None
    if request.shards and cube.zarr_format != 3:
        raise AccumulusError(
            f"{cube.label} is Zarr v2: accumulation arrays can be sharded in Zarr v3 only "
            "(drop --shards)"
        )
    return request.shards


def target_shards(
    var: VariableInfo,
    acc: spec.Accumulation,
    chunks: Sequence[int],
    group: spec.AccumulationGroup,
) -> tuple[int, ...] | None:
    """Shards of an accumulation array (array_dims order), so that fine accumulations stay
    few objects: as many bytes as one of the raw array's shards holds, at most
    (``SHARD_BUDGET`` when the raw array is not sharded). Along the dimension the build walks
    in slabs, a shard spans at most what one slab writes, so each shard is written once per
    slab that fills it. Positioned accumulations (written in their own order, ``placement``)
    are not sharded."""
    if acc.placement is not None:
        return None
    budget = SHARD_BUDGET
    if sharding_of(var.array.metadata) is not None:
        stored = ChunkGrid.from_metadata(var.array.metadata)
        budget = prod(max(sizes, default=1) for sizes in stored.chunk_sizes) * 8
    batch = stream.batch_dimension(var)
    per_slab = stream.chunks_per_slab(var, batch, group)
    shape = accumulation_shape(var, acc)
    limits = list(shape)
    axis = acc.array_dims.index(batch)
    if batch in acc.dims:
        limits[axis] = max(1, per_slab // acc.stride(batch))
    else:
        limits[axis] = per_slab * max(var.bounds[var.axis(batch)].sizes, default=1)
    return accumulation_shards(shape, chunks, limits, budget)


def _create_arrays(
    group: zarr.Group, var: VariableInfo, wanted: spec.AccumulationGroup, sharded: bool
) -> dict[str, zarr.Array]:
    made: dict[str, Coroutine[Any, Any, AsyncArray]] = {}
    for acc in wanted.accumulations:
        shape = accumulation_shape(var, acc)
        for name in acc.arrays.values():
            if name in made:
                continue
            count = any(statistics.SUMS[t].is_count for t, n in acc.arrays.items() if n == name)
            chunks = target_chunks(var, acc, wanted, count)
            shards = target_shards(var, acc, chunks, wanted) if sharded else None
            made[name] = _create_array(group, var, acc, name, count, shape, chunks, shards)

    async def every() -> list:
        return await asyncio.gather(*made.values())

    # Together: each creation is a few small writes, waited for one by one otherwise.
    return {name: zarr.Array(a) for name, a in zip(made, sync(every()), strict=True)}


def _create_array(
    group: zarr.Group,
    var: VariableInfo,
    acc: spec.Accumulation,
    name: str,
    count: bool,
    shape: tuple[int, ...],
    chunks: tuple[int, ...],
    shards: tuple[int, ...] | None,
) -> Coroutine[Any, Any, AsyncArray]:
    """One accumulation array of ``acc``, holding sums (or counts, ``count``): its creation,
    to be awaited."""
    v3 = group.metadata.zarr_format == 3
    # A fill value no real sum can take: a missing chunk is detected, not read as 0.
    # A checksum per chunk: bytes changed on disk fail loudly, not as wrong sums.
    extra = checksummed_codecs(3 if v3 else 2)
    if acc.placement is None:
        dtype, fill = ("int64", -1) if count else ("float64", np.nan)
    else:
        dtype, fill = placement.dtype_and_fill(var, acc, count)
        series = placement.is_series(acc, stream.batch_dimension(var))
        sums = [term for term, held_in in acc.arrays.items() if held_in == name]
        itemsize = np.dtype(dtype).itemsize
        bit_shuffle = placement.bit_shuffled(chunks, sums, series, itemsize, 3 if v3 else 2)
        extra = placement.codecs(3 if v3 else 2, bit_shuffle, series)
    return group._async_group.create_array(
        name,
        shape=shape,
        chunks=chunks,
        shards=shards,
        dtype=dtype,
        fill_value=fill,
        attributes=spec.array_attributes(acc),
        dimension_names=acc.array_dims if v3 else None,
        overwrite=True,
        **extra,
    )


def _add_zero_tallies(
    var: VariableInfo, old: spec.AccumulationGroup, group: spec.AccumulationGroup, target: _Target
) -> None:
    """Create the tally arrays of ``group`` that ``old`` (which met no infinity) lacks, 0
    everywhere, beside its arrays: shaped, chunked and sharded as the other arrays of their
    accumulation, typed and compressed as a build makes them. Arrays the published group
    names are not touched."""
    node = _writable_root(target)[group.path]
    assert isinstance(node, zarr.Group)
    made: set[str] = set()
    for acc in group.accumulations:
        held = {n for t, n in acc.arrays.items() if t not in spec.TALLIES}
        sibling = node[sorted(held)[0]]
        assert isinstance(sibling, zarr.Array)
        for term in spec.TALLIES:
            name = acc.arrays.get(term)
            if name is None or name in made:
                continue
            # Replacing what a run killed while adding them left (the group named none).
            array = zarr.Array(
                sync(
                    _create_array(
                        node, var, acc, name, True, sibling.shape, sibling.chunks, sibling.shards
                    )
                )
            )
            array[...] = 0  # a scalar: written chunk by chunk
            made.add(name)


def weights_of(cube: RawCube, var: VariableInfo, group: spec.AccumulationGroup):
    """The group's weights over the whole variable (broadcastable; small unless the weights
    are an array of the variable's full shape)."""
    full = {d: slice(0, n) for d, n in zip(var.dims, var.shape, strict=True)}
    return weight_values(cube.decoded, group.weights, var.name, full)
