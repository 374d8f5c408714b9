"""Performing a query plan: every chunk it needs, read in one batch, summed as it arrives.

A plan (``plan.QueryPlan``) is a list of signed reads: accumulation entries and raw boxes.
``execute`` turns it into the set of stored chunks those reads touch (raw chunks cut by a
raw box, accumulation chunks holding the entries read) and what each chunk contributes to
the answer, then reads them all at once (``chunk_reader.read_chunks``). Each chunk is reduced
where it is decoded, to the sums the query needs over the part of it the plan reads, and
added into the total: nothing as large as the box is ever assembled. The sums come back as
one array of shape ``(len(terms), *answer shape)``.
"""

from __future__ import annotations

import itertools
import threading
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from accumulus.accumulation import spec
from accumulus.accumulation.groups import AccumulationGroups
from accumulus.accumulation.plan import QueryPlan, Read
from accumulus.accumulation.weights import weight_values
from accumulus.chunk_reader import ChunkReadError, ChunkRequest, ReadCounts, read_chunks
from accumulus.cube import Cube, VariableInfo
from accumulus.errors import AccumulationReadError, AccumulusError
from accumulus.grid import array_bounds

Region = tuple[slice, ...]


@dataclass(frozen=True)
class _RawPart:
    """A raw chunk's share of one raw read: ``sign`` x the sums over ``local`` (slices of
    the chunk, variable order), added at ``out`` (slices of the answer, kept dims)."""

    sign: int
    local: Region
    box: Mapping[str, tuple[int, int]]  # the part's index ranges, every dimension


@dataclass(frozen=True)
class _EntryPart:
    """An accumulation chunk's share of one accumulation read, for one term."""

    sign: int
    term: int  # index into the query's terms
    local: tuple[slice | int, ...]  # the entries (ints) and ranges (slices) it holds
    summed: tuple[int, ...]  # axes of the selected slab summed away (dims averaged over)
    order: tuple[int, ...]  # then transposed to the variable's order of the kept dims
    out: Region


@dataclass
class ExecutedPlan:
    sums: np.ndarray  # (len(terms), *answer shape)
    counts: ReadCounts
    accumulation_chunks: int
    raw_chunks: int


def execute(
    cube: Cube,
    groups: AccumulationGroups,
    var: VariableInfo,
    plan: QueryPlan,
    terms: Sequence[str],
    weights: str,
) -> ExecutedPlan:
    """Σ over the plan's reads of sign x sums."""
    kept = [d for d in var.dims if d not in plan.over]
    origin = {d: plan.ranges[d][0] for d in var.dims}
    total = np.zeros((len(terms), *(plan.ranges[d][1] - origin[d] for d in kept)), dtype="f8")
    parts: dict[str, list] = defaultdict(list)
    requests: dict[str, ChunkRequest] = {}
    for read in plan.reads:
        if read.is_raw:
            for request, part in _raw_parts(var, read):
                requests[request.key] = request
                parts[request.key].append(part)
        else:
            group = groups.group(var.name)
            assert group is not None
            for request, part in _entry_parts(groups, var, group, read, plan, terms):
                requests[request.key] = request
                parts[request.key].append(part)
    raw_prefix = var.array.store_path.path + "/"
    lock = threading.Lock()
    reduce_axes = tuple(var.axis(d) for d in plan.over)

    def out_region(box: Mapping[str, tuple[int, int]]) -> Region:
        return tuple(slice(box[d][0] - origin[d], box[d][1] - origin[d]) for d in kept)

    def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
        for part in parts[request.key]:
            if isinstance(part, _RawPart):
                box = {d: slice(*part.box[d]) for d in var.dims}
                values, valid = var.decoder.masked(chunk[part.local])
                w = weight_values(cube.decoded, weights, var.dims, box)
                sums = reduce_chunk(values, valid, w, terms, reduce_axes)
                with lock:
                    total[(slice(None), *out_region(part.box))] += part.sign * sums
            else:
                slab = _checked_entries(cube, var, request, chunk[part.local], terms[part.term])
                if part.summed:
                    slab = slab.sum(axis=part.summed)
                slab = slab.transpose(part.order)
                with lock:
                    total[(part.term, *part.out)] += part.sign * slab

    try:
        counts = read_chunks(requests.values(), consume)
    except ChunkReadError as failed:
        raise _read_error(cube, var, failed) from None
    raw = sum(key.startswith(raw_prefix) for key in requests)
    return ExecutedPlan(total, counts, len(requests) - raw, raw)


def reduce_chunk(
    values: np.ndarray,
    valid: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    axes: Sequence[int],
) -> np.ndarray:
    """The requested sums of one block over ``axes``: ``(len(terms), *other axes)``.

    Missing values (``valid`` False) count in no sum. Sums are taken in float64 whatever the
    stored type. Weights do not vary along most axes (cos(latitude) varies along one), so the
    values are first summed along the axes where the weights are constant, and only the
    much smaller partial sums are multiplied by the weights."""
    axes = tuple(axes)
    weighted = isinstance(w, np.ndarray)
    varying = tuple(a for a in axes if weighted and w.shape[a] != 1)
    flat = tuple(a for a in axes if a not in varying)
    zeroed = np.where(valid, values, 0)
    partial_sum = np.sum(zeroed, axis=flat, dtype="f8", keepdims=True)
    partial_count = np.count_nonzero(valid, axis=flat, keepdims=True).astype("f8")
    out = []
    for term in terms:
        if term == spec.SUM:
            summed = partial_sum
        elif term == spec.COUNT:
            summed = partial_count
        elif term == spec.WSUM:
            summed = partial_sum * w
        elif term == spec.WCOUNT:
            summed = partial_count * w
        else:
            raise ValueError(f"unknown sum {term!r}")
        out.append(np.sum(summed, axis=varying, keepdims=True).squeeze(axis=axes))
    return np.stack(out)


def _raw_parts(var: VariableInfo, read: Read):
    """The raw chunks a raw read cuts, and the part of each it reads."""
    per_dim = []
    for dim, bounds in zip(var.dims, var.bounds, strict=True):
        lo, hi = read.box[dim]
        per_dim.append(
            [(c, max(lo, bounds.edges[c]), min(hi, bounds.edges[c + 1]), bounds.edges[c])
             for c in bounds.chunks_overlapping(lo, hi)]
        )  # fmt: skip
    for combo in itertools.product(*per_dim):
        coords = tuple(c for c, _, _, _ in combo)
        local = tuple(slice(a - start, b - start) for _, a, b, start in combo)
        box = {d: (a, b) for d, (_, a, b, _) in zip(var.dims, combo, strict=True)}
        yield ChunkRequest(var.array, coords), _RawPart(read.sign, local, box)


def _entry_parts(
    groups: AccumulationGroups,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    read: Read,
    plan: QueryPlan,
    terms: Sequence[str],
):
    """The accumulation chunks holding a read's entries, and the slab of each it reads."""
    acc = group.find(read.source)
    assert acc is not None
    over = plan.over
    kept = [d for d in var.dims if d not in over]
    for t, term in enumerate(terms):
        array = groups.array(var.name, acc.arrays[term])
        bounds = array_bounds(array)
        per_dim = []
        for dim, b in zip(acc.array_dims, bounds, strict=True):
            if dim in read.entries:
                chunk, offset = b.chunk_of(read.entries[dim])
                per_dim.append([(chunk, offset, None)])
            else:
                lo, hi = read.box[dim]
                per_dim.append(
                    [(c, slice(max(lo, b.edges[c]) - b.edges[c], min(hi, b.edges[c + 1])
                      - b.edges[c]), (max(lo, b.edges[c]), min(hi, b.edges[c + 1])))
                     for c in b.chunks_overlapping(lo, hi)]
                )  # fmt: skip
        remaining = [d for d in acc.array_dims if d not in read.entries]
        summed = tuple(remaining.index(d) for d in over if d in remaining)
        kept_order = [d for d in remaining if d not in over]
        order = tuple(kept_order.index(d) for d in var.dims if d in kept_order)
        for combo in itertools.product(*per_dim):
            coords = tuple(c for c, _, _ in combo)
            local = tuple(sel for _, sel, _ in combo)
            ranges = {d: rng for d, (_, _, rng) in zip(acc.array_dims, combo, strict=True) if rng}
            out = tuple(
                slice(ranges[d][0] - plan.ranges[d][0], ranges[d][1] - plan.ranges[d][0])
                for d in kept
            )
            yield ChunkRequest(array, coords), _EntryPart(read.sign, t, local, summed, order, out)


def _checked_entries(
    cube: Cube, var: VariableInfo, request: ChunkRequest, slab: np.ndarray, term: str
) -> np.ndarray:
    """Entries as float64, refusing the fill value of a chunk that is not stored (NaN, or
    -1 for counts): a missing chunk must never read as zero."""
    if np.isnan(slab).any() if slab.dtype.kind == "f" else (slab < 0).any():
        raise AccumulationReadError(
            f"{cube.label}: accumulation array {request.array.path} has a missing chunk "
            f"({request.key}); run `accumulus verify` or rebuild"
        )
    return np.asarray(slab, dtype="f8")


def _read_error(cube: Cube, var: VariableInfo, failed: ChunkReadError) -> AccumulusError:
    if isinstance(failed.cause, AccumulusError):
        return failed.cause
    if failed.request.array.path == var.array.path:
        return AccumulusError(
            f"{cube.label}: cannot read {var.name!r} chunk {failed.request.key}: {failed.cause}"
        )
    return AccumulationReadError(
        f"{cube.label}: cannot read accumulation array {failed.request.array.path} "
        f"(chunk {failed.request.key}): {failed.cause}"
    )
