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
import math
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, partial
from math import prod
from typing import Any

import numpy as np
import zarr
from zarr.abc.store import Store

from accumulus.accumulation.model import spec, statistics
from accumulus.accumulation.model.chunk_check import read_problem_text
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.accumulation.model.sums import is_linear, reduce_packed, reduce_terms
from accumulus.accumulation.model.weights import arranged_weights, varying_dims, weight_values
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES, ReadBudget, read_budget, slabs
from accumulus.accumulation.query.plan import QueryPlan, Read
from accumulus.accumulation.query.row_prefix import RowPrefix, row_sums
from accumulus.chunk_reader import (
    ChunkReadError,
    ChunkRequest,
    ChunkRequests,
    ReadCounts,
    keeps_decoded,
    read_chunks,
)
from accumulus.errors import AccumulationReadError, AccumulusError
from accumulus.grid import ChunkBounds, array_bounds
from accumulus.raw_cube import RawCube, VariableInfo

Region = tuple[slice, ...]

# Benchmarks set this to False to measure packed integers decoded to float64 before summing
# (``reduce_terms``) in the same run.
SUM_PACKED = True


# Parts are made by the dozen per query: plain slotted classes (a frozen dataclass sets each
# field through object.__setattr__, several times slower to make); never changed once made.
@dataclass(slots=True)
class RawPart:
    """A raw chunk's share of one raw read: ``sign`` x the sums over ``local`` (slices of
    the chunk), whose index ranges are ``box``, added at ``out`` of the total."""

    index: int  # position in the plan: parts are added in this order
    sign: int
    local: Region
    box: Mapping[str, tuple[int, int]]
    out: tuple[int | slice, ...]


@dataclass(slots=True)
class EntryPart:
    """An accumulation chunk's share of one accumulation read, for one term: the entries
    and ranges ``local`` of the chunk, summed along ``summed`` (dimensions averaged over),
    transposed by ``order`` (to the variable's order) and added at ``out`` of the total."""

    index: int
    sign: int
    term: str
    local: tuple[slice | int, ...]
    summed: tuple[int, ...]
    order: tuple[int, ...]
    out: tuple[int | slice, ...]
    # The weights to multiply the entries by before summing (an accumulation whose weights
    # factor out stores Σx and the count), broadcastable to the slab; None for none.
    weights: np.ndarray | float | None = None
    # False for a group built before infinities were tallied apart, over values that can
    # be infinite: a non-finite entry may be an infinity summed in, not a missing chunk.
    tallied: bool = True
    # ``weights`` as (axis, values) when they vary along one summed axis (``_contraction``).
    contract: tuple[int, np.ndarray] | None = None
    # The weights over the chunk's rows along the axis they vary along, as the chunk's
    # weighted prefix sums along it (a process that keeps decoded chunks): summed from those.
    rows: RowPrefix | None = None


Part = RawPart | EntryPart
Work = dict[str, tuple[ChunkRequest, list[Part]]]  # chunk key -> the chunk, its parts
# The most slab weights kept per variable of a snapshot (``chunk_work``): a series' few.
WEIGHTS_REMEMBERED = 4096
# The chunks a plan's reads cut, by array object and coordinates, in the order first cut:
# the array, coordinates and store, the parts of the chunk read and their boxes of it
# (slices: an entry's index as a slice of one).
Chunks = dict[
    tuple[int, tuple[int, ...]],
    tuple[zarr.Array[Any], tuple[int, ...], Store | None, list[Part], list[Region]],
]
# Where a read lies along one dimension of a chunk (``_along``): the chunk, the selection in
# it (an entry's index, or a slice), the same as a slice, the range's part in it (None for
# an entry).
Along = tuple[int, int | slice, slice, tuple[int, int] | None]
# The weights of a slab and their contraction (``_contraction``), by what they depend on.
WeightsMemo = dict[Any, tuple[Any, tuple[int, np.ndarray] | None]]


@dataclass
class ExecutedPlan:
    terms: tuple[str, ...]  # the sums, in order: those asked for, without the tallies when
    # nothing read could hold an infinity (no raw chunk, no tally of an accumulation) or
    # none was met
    # (len(terms), *answer shape). This thread's working space (``_scratch``): valid until
    # it executes another plan, so answers made from it are copies.
    sums: np.ndarray
    # Σ |entries| added into each sum of weights (0 for the other sums): a difference of
    # prefix sums cancels to within a few ulps of this, not always to 0 (``noise_floor``).
    # None when no floating-point entry was added into one (integer counts cancel exactly).
    entry_magnitude: np.ndarray | None
    counts: ReadCounts
    accumulation_chunks: int
    raw_chunks: int


def execute(
    cube: RawCube,
    groups: AccumulationGroups,
    var: VariableInfo,
    plan: QueryPlan,
    terms: Sequence[str],
    weights: spec.Weights,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    work: Work | None = None,
    *,
    checked: bool = False,
    reference: float = 0.0,
    times: np.ndarray | None = None,
) -> ExecutedPlan:
    """Σ over the plan's reads of sign x sums, holding about ``memory_bytes`` at most: the
    chunks in flight are bounded by their decoded size, and a raw chunk is summed slab by
    slab (see ``budget``). ``work``: the plan's ``chunk_work``, when already listed.

    Floating-point entries are checked (``_checked_entries``) only when the answer is not
    finite: a missing chunk's NaN, or an infinity summed in, reaches every sum it is added
    to, so the plan is then read again with every slab ``checked``, which says which chunk
    it was. Integer entries (counts) are always checked: their fill value is a number.

    ``reference``: what raw chunks' centred sums (Σ(x−c)²) are taken about (the group's
    reference value when entries are read too). ``times``: the years of
    each step, broadcastable to the variable, for sums against time (a trend's)."""
    if work is None:
        work = chunk_work(groups, var, plan, terms)
    if checked:  # every slab checked as it is stored, not summed from a derived form
        work = {k: (replace(r, derive=None), parts) for k, (r, parts) in work.items()}
    budget = read_budget(memory_bytes)
    kept = [plan.ranges[d][1] - plan.ranges[d][0] for d in var.dims if d not in plan.over]
    if plan.slots is not None:
        kept.insert(0, plan.slots)
    # Σ |entries| of the sums of weights, whose differences may leave rounding noise where
    # no value is valid (``noise_floor``), is kept beside them; the other sums need none.
    noisy = {t for t in terms if statistics.SUMS[t].is_weight}
    rows = (
        tuple(terms) if _reads_tallies(work) else tuple(t for t in terms if t not in spec.TALLIES)
    )
    total = _OrderedTotal((len(rows), *kept))
    reduce_axes = tuple(var.axis(d) for d in plan.over)

    def consume(request: ChunkRequest, chunk: np.ndarray) -> None:
        for part in work[request.key][1]:
            if isinstance(part, RawPart):
                sums = _raw_sums(
                    cube, var, chunk[part.local], part, reduce_axes, terms, weights, budget, plan,
                    reference, times,
                )  # fmt: skip
                # Its first rows: without the tallies when it holds no infinity (``_raw_sums``).
                total.add(part.index, (slice(len(sums)), *part.out[1:]), part.sign, sums)
            elif request.derive is not None:  # the chunk's prefix sums (``EntryPart.rows``)
                total.add(part.index, part.out, part.sign, _entry_sums_from_rows(chunk, part),
                          noisy=part.term in noisy, finite=part.tallied)  # fmt: skip
            else:
                slab = chunk[part.local]
                if checked or slab.dtype.kind != "f":
                    slab = _checked_entries(groups.label, request, slab, part.tallied)
                total.add(part.index, part.out, part.sign, _entry_sums(slab, part),
                          noisy=part.term in noisy and slab.dtype.kind == "f",
                          finite=part.tallied)  # fmt: skip

    try:
        counts = read_chunks(
            (request for request, _ in work.values()),
            consume,
            budget.in_flight_bytes,
            cube.store,
        )
    except ChunkReadError as failed:
        if not failed.of_the_data:
            raise
        raise _read_error(cube, var, failed, groups.label) from None
    if any(t in spec.TALLIES for t in rows) and not total.reached(
        [k for k, t in enumerate(rows) if t in spec.TALLIES]
    ):  # no infinity met: the tallies (the last rows) are 0, left out as when none is read
        rows = tuple(t for t in rows if t not in spec.TALLIES)
    sums = total.result(len(rows))
    if not checked and not _finite(sums, total.floating):
        return execute(
            cube, groups, var, plan, terms, weights, memory_bytes, work,
            checked=True, reference=reference, times=times,
        )  # fmt: skip
    raw_prefix = var.array.store_path.path + "/"
    raw = sum(key.startswith(raw_prefix) for key in work)
    return ExecutedPlan(rows, sums, total.magnitude, counts, len(work) - raw, raw)


def _finite(sums: np.ndarray, floating: set[int]) -> bool:
    """Whether the rows of ``sums`` that floating-point values were added into are finite
    (integers, counts, are: a map's count needs no pass over it). A NaN anywhere is their
    least and greatest, an infinity one of them: two passes without an array of flags,
    faster than ``isfinite(...).all()``. (Their sum, one pass, would warn of inf - inf and
    of an overflow, where these warn of nothing.) The rows from the first to the last of
    them are taken as one block (a count between them is finite): one call each, not one
    per row."""
    if not sums.size or not floating:
        return True
    block = sums[min(floating) : max(floating) + 1]
    return math.isfinite(block.min()) and math.isfinite(block.max())


def _reads_tallies(work: Work) -> bool:
    """Whether any chunk read can hold an infinity: a raw chunk, or an accumulation's tally
    (tallies come after the other sums, so the others keep their rows without them)."""
    return any(
        isinstance(part, RawPart) or part.term in spec.TALLIES
        for _, parts in work.values()
        for part in parts
    )


def noise_floor(magnitude: np.ndarray) -> np.ndarray:
    """Below this a sum taken from prefix-sum differences is rounding noise, not data: each
    difference of float64 entries is exact to about 2**-52 of the entries it adds, so 1e-14
    of their magnitude leaves a wide margin, while any real weight (a cell's cos(latitude) >
    1e-3) is far above it for any cube that fits in memory."""
    return 1e-14 * magnitude


def _raw_sums(
    cube: RawCube,
    var: VariableInfo,
    stored: np.ndarray,
    part: RawPart,
    axes: tuple[int, ...],
    terms: Sequence[str],
    weights: spec.Weights,
    budget: ReadBudget,
    plan: QueryPlan,
    reference: float = 0.0,
    times: np.ndarray | None = None,
) -> np.ndarray:
    """The sums of a raw chunk's part, decoded and summed slab by slab so that the working
    arrays stay within the budget whatever the chunk's size; one row per term, or, for a
    part of one slab that holds no infinity, the rows before the tallies. With a shape
    (``plan.mask``) only its cells count: the others are NaN, as missing values are."""
    box = {d: slice(*part.box[d]) for d in var.dims}
    w = _weights_over(cube, var, weights, box)
    if times is not None:  # the part's steps (times vary along the time axis only)
        times = times[
            tuple(
                box[d] if n > 1 else slice(None) for d, n in zip(var.dims, times.shape, strict=True)
            )
        ]
    inside = None if plan.mask is None else plan.mask.window(var.dims, part.box)
    kept = [a for a in range(stored.ndim) if a not in axes]
    if (
        inside is None
        and times is None
        and stored.dtype.kind == "f"
        and stored.size <= budget.slab_values
        and _plain(terms, w, axes)
    ):  # one slab: its sums as reduce_terms writes them, not added to a zeroed total;
        # without the tallies (the last terms) when it holds no infinity: rows of 0 that
        # would be added into the total, and looked at by the answer, for nothing.
        values = var.decoder.values(stored)
        if not np.isinf(values).any():
            terms = [t for t in terms if t not in spec.TALLIES]
        return reduce_terms(values, w, terms, axes)
    sums = np.zeros((len(terms), *(stored.shape[a] for a in kept)), dtype="f8")
    # Packed integers summed as they are, scaled once per sum (the float64 values of every
    # cell cost more than the rest of a raw CO2 map: docs/benchmarks.md, "Packed integers").
    packing = var.decoder.packing(stored.dtype) if SUM_PACKED and is_linear(terms) else None
    for slab in slabs(stored.shape, budget.slab_values):
        if packing is not None:
            sums[(slice(None), *(slab[a] for a in kept))] += reduce_packed(
                stored[slab], packing.marks, packing.scale, packing.offset,
                _broadcast_slab(w, slab), terms, axes,
                None if inside is None else _broadcast_slab(inside, slab),
            )  # fmt: skip
            continue
        values = var.decoder.values(stored[slab])
        if inside is not None:
            values = np.where(_broadcast_slab(inside, slab), values, np.nan)
        sums[(slice(None), *(slab[a] for a in kept))] += reduce_terms(
            values,
            _broadcast_slab(w, slab),
            terms,
            axes,
            reference,
            None if times is None else _broadcast_slab(times, slab),
        )
    return sums


def _plain(terms: Sequence[str], w: Any, axes: tuple[int, ...]) -> bool:
    """Whether one ``reduce_terms`` call takes the sums of a raw part in one pass each, into
    the answer's rows: linear sums (``is_linear``), weights that do not vary along the axes
    summed (the few raw steps at a range's end: docs/benchmarks.md, "A few raw days at a
    range's end")."""
    if isinstance(w, np.ndarray) and any(a < w.ndim and w.shape[a] > 1 for a in axes):
        return False
    return is_linear(terms)


def _broadcast_slab(array: Any, slab: Region) -> Any:
    """The slab of an array broadcastable to the chunk (size-1 axes stay whole); a scalar
    as it is."""
    if not isinstance(array, np.ndarray):
        return array
    return array[tuple(s if n > 1 else slice(None) for s, n in zip(slab, array.shape, strict=True))]


def chunk_work(
    groups: AccumulationGroups, var: VariableInfo, plan: QueryPlan, terms: Sequence[str]
) -> Work:
    """Every stored chunk the plan reads (by key, in plan order) and what it contributes
    (at its read's slot of the answer, when the plan has ``slots``)."""
    # A shape's many reads share the weights of their slabs, and so do the queries of a
    # snapshot over the same boxes: kept with the groups, a bounded number of them.
    weights_memo: WeightsMemo = groups.remembered(("slab weights", var.name), dict)
    if len(weights_memo) > WEIGHTS_REMEMBERED:
        weights_memo.clear()
    readings: dict[Any, _Reading] = {}  # what every read of one accumulation shares
    placed = _Placement.of(plan, var)
    listing = _Listing()
    for read in plan.reads:
        if read.is_raw:
            _raw_parts(var, plan, read, placed, listing.counter, listing.chunks)
            continue
        reading = readings.get(read.key or read.source)
        if reading is None:
            # The same for every query of the snapshot asking the same sums over the
            # same dimensions: worked out once (docs/benchmarks.md, "Per-question cost").
            key = ("source", var.name, read.key or read.source, tuple(plan.over), tuple(terms))
            source = groups.remembered(key, partial(_source, groups, var, read, plan, terms))
            reading = readings[read.key or read.source] = _Reading.of(
                groups, var, source, placed, weights_memo
            )
        _entry_parts(reading, read, placed, listing)
    work: Work = {}
    # What the requests of an array's chunks share (its facts, a regular grid's chunk spec
    # and size) worked out once per snapshot, not by every plan again: a question reads a
    # few chunks of each of a few arrays.
    requests = groups.remembered(("chunk requests",), ChunkRequests)
    for array, coords, store, parts, boxes in listing.chunks.values():
        # Each chunk decoded only as far as its parts reach (``ChunkRequest.needed``), or
        # whole and kept, an accumulation's, when the process keeps decoded chunks.
        keep = array is not var.array
        prefix = _shared_rows(parts)
        if len(boxes) == 1:
            request = requests.request(array, coords, store, boxes[0], None, keep, prefix)
        else:
            needed = _reached(boxes)
            request = requests.request(array, coords, store, needed, tuple(boxes), keep, prefix)
        other = work.get(request.key)
        if other is not None:  # the same chunk of another handle on the same array
            parts = [*other[1], *parts]
            boxes = [*(other[0].regions or [other[0].needed]), *boxes]
            request = replace(
                other[0], needed=_reached(boxes), regions=tuple(boxes), derive=_shared_rows(parts)
            )
        work[request.key] = (request, parts)
    return work


def _shared_rows(parts: Sequence[Part]) -> RowPrefix | None:
    """The prefix sums every part of a chunk can be summed from (``EntryPart.rows``), if
    they all can from the same."""
    first = parts[0]
    prefix = first.rows if isinstance(first, EntryPart) else None
    if prefix is None:
        return None
    for part in parts:
        if not isinstance(part, EntryPart) or part.rows is None or part.rows.form != prefix.form:
            return None
    return prefix


def _reached(boxes: Sequence[Region]) -> Region:
    """The smallest box of a chunk that holds every part of it (``boxes``: theirs)."""
    # (A seasonal series' chunks hold a run's slab each, dozens: along most dimensions the
    # parts share their slice, the same object, taken as it is.)
    first, *others = boxes
    reached = list(first)
    for box in others:
        for k, along in enumerate(box):
            so_far = reached[k]
            if along is not so_far and along != so_far:
                reached[k] = slice(min(so_far.start, along.start), max(so_far.stop, along.stop))
    return tuple(reached)


def _entry_sums(slab: np.ndarray, part: EntryPart) -> np.ndarray:
    """An entry slab's contribution (before its sign): weighted, summed along the
    dimensions averaged over and in the variable's order, converted to float64 as it is
    computed. The slab is the decoded chunk's, left unchanged (other parts may read it); the
    result may be this thread's scratch space (``_scratch``), to be added before the next."""
    if part.contract is not None:  # weights along one summed axis: Σ w·x in one product
        axis, weights = part.contract
        # A matrix-vector product (BLAS), the other summed axes summed after it: less CPU
        # than one einsum doing all of it on a series' slabs, whose weighted axis is short
        # (docs/benchmarks.md, "Statistics, session stats48").
        moved, rest, order = _contraction_steps(slab.ndim, axis, part.summed, part.order)
        product = _matrix_vector(slab if moved is None else slab.transpose(moved), weights)
        if rest:
            product = product.sum(axis=rest)
        return product if order is None else product.transpose(order)
    elif part.weights is not None:
        shape = np.broadcast_shapes(slab.shape, np.shape(part.weights))
        values: np.ndarray = np.multiply(slab, part.weights, out=_scratch(shape, 0), dtype="f8")
        if part.summed:
            values = values.sum(axis=part.summed)
    elif part.summed and any(slab.shape[a] > 1 for a in part.summed):
        values = slab.sum(axis=part.summed, dtype="f8")
    elif part.summed:  # summed along axes of one entry (a map's time): the entries as they
        # are, converted as they are added, not summed into a copy first (the same values)
        values = slab.reshape([n for a, n in enumerate(slab.shape) if a not in part.summed])
    else:
        values = slab  # converted as it is added
    return values.transpose(part.order)


def _entry_sums_from_rows(form: np.ndarray, part: EntryPart) -> np.ndarray:
    """``_entry_sums`` of a slab weighed along one axis it is summed along, from its chunk's
    weighted prefix sums along that axis (``part.rows``): two rows of them."""
    assert part.rows is not None
    along = part.rows.axis  # the chunk's
    product = row_sums(form, part.local, along)
    order = part.order
    if len(part.summed) == 1:  # the rows' axis alone (a series' box): nothing more to sum
        return product if order == _IN_ORDER[len(order)] else product.transpose(order)
    # Among the slab's axes (its entries' axes dropped):
    axis = sum(not isinstance(s, int) for s in part.local[:along])
    slab_ndim = sum(not isinstance(s, int) for s in part.local)
    _, rest, in_order = _contraction_steps(slab_ndim, axis, part.summed, order)
    if rest:
        product = product.sum(axis=rest)
    return product if in_order is None else product.transpose(in_order)


# The axes of an array of each number of dimensions in their order (as ``transpose`` takes).
_IN_ORDER = [tuple(range(n)) for n in range(65)]


# A matrix-vector product of more values than ``BLAS_WHOLE_VALUES`` is handed to BLAS in
# blocks of at most ``BLAS_BLOCK_VALUES``: OpenBLAS computes small products in the calling
# thread, larger ones on its own threads too, which then spin waiting for work and compete
# with the reader's for the cores. A series' slabs take less CPU whole, in a query, than in
# blocks (figures: docs/benchmarks.md, "Statistics, session stats48").
BLAS_WHOLE_VALUES = 2**16
BLAS_BLOCK_VALUES = 8192


def _matrix_vector(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """``matrix @ vector`` in float64; a large one (``BLAS_WHOLE_VALUES``) with the
    matrix's rows (its next-to-last axis) in blocks of at most ``BLAS_BLOCK_VALUES`` values
    (every output is one row's product, whichever block holds it)."""
    if matrix.ndim < 2 or matrix.size <= BLAS_WHOLE_VALUES:
        return np.asarray(np.matmul(matrix, vector))
    rows = max(1, BLAS_BLOCK_VALUES // max(1, matrix.shape[-1]))
    if matrix.shape[-2] <= rows:
        product: np.ndarray = np.matmul(matrix, vector)
        return product
    out = np.empty(matrix.shape[:-1])
    for start in range(0, matrix.shape[-2], rows):
        block = slice(start, start + rows)
        np.matmul(matrix[..., block, :], vector, out=out[..., block])
    return out


@cache
def _contraction_steps(
    ndim: int, axis: int, summed: tuple[int, ...], order: tuple[int, ...]
) -> tuple[tuple[int, ...] | None, tuple[int, ...], tuple[int, ...] | None]:
    """How a contraction (``_entry_sums``) is taken, the same few for every part of every
    query, worked out once: the slab's axes with ``axis`` moved last (None: it is last), the
    other summed axes as numbered after the product, and the order of the kept ones (None:
    as they are)."""
    moved = None if axis == ndim - 1 else (*(a for a in range(ndim) if a != axis), axis)
    rest = tuple(a - (a > axis) for a in summed if a != axis)
    return moved, rest, None if order == tuple(range(len(order))) else order


def _contraction(
    weights: np.ndarray | float | None, summed: tuple[int, ...]
) -> tuple[int, np.ndarray] | None:
    """(axis, weights along it) when slab weights vary along one axis only, and the slab
    is summed along it (a series' latitude rows): multiplying and summing are then one
    matrix-vector product."""
    if not isinstance(weights, np.ndarray):
        return None
    varying = [a for a, n in enumerate(weights.shape) if n > 1]
    if len(varying) != 1 or varying[0] not in summed:
        return None
    return varying[0], np.ascontiguousarray(weights.reshape(-1), dtype="f8")


_SCRATCH = threading.local()
# The most working space a thread keeps for the next query, per use (float64 values).
SCRATCH_VALUES = 2**20
# Values at most this many (float64) are taken in new memory rather than the scratch: the
# allocator reuses blocks this small (under its threshold for mapping new memory).
SMALL_VALUES = 2**12


def _scratch(shape: tuple[int, ...], which: int) -> np.ndarray:
    """Float64 working space of ``shape`` (uninitialised) kept by this thread for its next
    use: memory a query would otherwise ask of the system again and again (on a virtual
    machine each new page is a fault, as costly as summing it), for values that are used
    before the same space is asked for again. Uses: 0 and 1 an entry slab's weighted values
    and their magnitudes, 2 and 3 the total and its magnitude (``_zeroed``). Larger than
    ``SCRATCH_VALUES``: fresh memory, not kept."""
    size = prod(shape)
    if size > SCRATCH_VALUES:
        return np.empty(shape)
    spaces: list[np.ndarray] | None = getattr(_SCRATCH, "spaces", None)
    if spaces is None:
        spaces = _SCRATCH.spaces = [np.empty(0) for _ in range(4)]
    if spaces[which].size < size:
        spaces[which] = np.empty(size)
    return spaces[which][:size].reshape(shape)


def _zeroed(shape: tuple[int, ...], which: int) -> np.ndarray:
    """``_scratch`` space filled with zeros."""
    if prod(shape) > SCRATCH_VALUES:
        return np.zeros(shape)
    space = _scratch(shape, which)
    space.fill(0.0)
    return space


class _OrderedTotal:
    """The running total, adding parts in plan order whatever order they arrive in: the
    same question gives the same bits every time. A part that arrives early waits (a copy:
    they are small, already reduced) until those before it are in. Beside it, Σ |part| of
    the parts marked ``noisy`` (``ExecutedPlan.entry_magnitude``), from the first of them.

    The total is working space (``_scratch``) not filled with zeros first: a row (a term)
    whose first part covers all of it is written by that part (0 ± the part: the same bits
    as adding it to zeros), one pass instead of two; any other row is zeroed when first
    reached, or at the end."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self._total = _scratch(shape, 2)
        self._unset = [True] * shape[0]  # rows not written yet (their space undefined)
        # Rows every part of which so far was a whole row of counts of one integer type:
        # summed in that type (``_counted``), converted into the total once.
        self._counted: dict[int, np.ndarray] = {}
        self._row_size = prod(shape[1:])
        self.magnitude: np.ndarray | None = None
        self.floating: set[int] = set()  # rows floating-point values were added into
        self._waiting: dict[int, tuple[tuple[Any, ...], int, np.ndarray, bool, bool]] = {}
        self._next = 0
        self._lock = threading.Lock()

    def add(
        self,
        index: int,
        where: tuple[Any, ...],
        sign: int,
        value: np.ndarray,
        *,
        noisy: bool = False,
        finite: bool = False,
    ) -> None:
        """Add ``sign`` x ``value`` at ``where`` (``noisy``: into the magnitudes too).
        ``finite``: the value holds no infinity (an accumulation's entries, infinities
        tallied apart), so no inf - inf can arise and no warning needs silencing."""
        with self._lock:
            if index != self._next:
                self._waiting[index] = (where, sign, np.array(value), noisy, finite)
                return
            self._add(where, sign, value, noisy, finite)
            while self._next in self._waiting:
                self._add(*self._waiting.pop(self._next))

    def _add(
        self, where: tuple[Any, ...], sign: int, value: np.ndarray, noisy: bool, finite: bool
    ) -> None:
        first = where[0]  # the rows of the part: one, or a range
        integer = value.dtype.kind in "iu"
        if integer and self._counted_in(first, sign, value):
            self._next += 1
            return
        into = self._total[(*where, ...)]  # a view, also of a single value
        unset = self._unset
        if type(first) is int:  # (one row, a series' part: no list of rows made)
            rows: Sequence[int] = (first,)
            if self._counted and first in self._counted:
                self._convert(first)  # converted before anything else is added to it
            whole = unset[first] and into.size == self._row_size
            if unset[first]:
                unset[first] = False
                if not whole:
                    self._total[first, ...].fill(0.0)
        else:
            rows = range(self.shape[0])[first]
            if self._counted:
                for row in rows:
                    if row in self._counted:
                        self._convert(row)
            fresh = [row for row in rows if unset[row]]
            whole = len(fresh) == len(rows) and into.size == len(rows) * self._row_size
            for row in fresh:
                unset[row] = False
                if not whole:
                    self._total[row, ...].fill(0.0)
        start = 0.0 if whole else into
        add = np.add if sign > 0 else np.subtract
        if finite:  # (entering ``errstate`` costs several times a small part's add)
            add(start, value, out=into, casting="unsafe")
        else:
            # Sums holding infinities meet here as inf - inf = NaN, which the answer does not
            # use (the infinities' tallies, or the raw data, decide it): no warning for the
            # user.
            with np.errstate(invalid="ignore"):
                add(start, value, out=into, casting="unsafe")
        if not integer:
            self.floating.update(rows)
        if noisy:
            if self.magnitude is None:
                self.magnitude = _zeroed(self.shape, 3)
            size = self.magnitude[(*where, ...)]
            if value.dtype.kind != "u":
                # A small part's (a series') in new memory: freed blocks of that size are
                # reused without asking the system for pages, and cost less than the scratch.
                out = None if value.size <= SMALL_VALUES else _scratch(value.shape, 1)
                value = np.abs(value, out=out, dtype="f8")
            np.add(size, value, out=size, casting="unsafe")
        self._next += 1

    def _counted_in(self, row: Any, sign: int, value: np.ndarray) -> bool:
        """Whether a part was added into its row's integer sum (``_counted``): a whole row
        of counts, the row's first part (added) or after parts of the same type. A count
        array's type holds the largest count of its variable (``placement.count_dtype``),
        so the row's sum, a count of valid values, does too: summed with wrapping
        arithmetic, it is exact whatever the order of the parts, and the same float64 as
        their sum in float64. About half the CPU of adding each part to float64."""
        if not isinstance(row, int) or value.dtype.kind not in "iu":
            return False
        if value.size != self._row_size:
            return False
        held = self._counted.get(row)
        if held is not None and held.dtype == value.dtype:
            (np.add if sign > 0 else np.subtract)(held, value, out=held)
            return True
        if self._unset[row] and sign > 0:
            self._unset[row] = False
            self._counted[row] = np.array(value, order="C")
            return True
        return False

    def _convert(self, row: int) -> None:
        """A row's integer sum into the total, converted as it is copied (about half the
        CPU of a ufunc casting from a small integer type)."""
        into = self._total[row, ...]
        np.copyto(into, self._counted.pop(row).reshape(into.shape), casting="unsafe")

    def reached(self, rows: Sequence[int]) -> bool:
        """Whether any part was added into one of ``rows``."""
        return not all(self._unset[row] for row in rows)

    def result(self, rows: int | None = None) -> np.ndarray:
        """The total, or its first ``rows`` rows."""
        assert not self._waiting
        total = self._total if rows is None else self._total[:rows]
        for row in list(self._counted):
            if row < len(total):
                self._convert(row)
        for row, unset in enumerate(self._unset[: len(total)]):
            if unset:  # no part reached it
                total[row, ...].fill(0.0)
        return total


def _raw_parts(
    var: VariableInfo,
    plan: QueryPlan,
    read: Read,
    placed: _Placement,
    counter: Iterator[int],
    chunks: Chunks,
) -> None:
    """The raw chunks a raw read cuts, and the part of each it reads (numbered by
    ``counter``), added to ``chunks``."""
    per_dim = []
    for dim, bounds in zip(var.dims, var.bounds, strict=True):
        lo, hi = read.box[dim]
        edges = bounds.edges
        per_dim.append(
            [(c, max(lo, edges[c]), min(hi, edges[c + 1]), edges[c])
             for c in bounds.chunks_overlapping(lo, hi)]
        )  # fmt: skip
    for combo in itertools.product(*per_dim):
        coords = tuple(c for c, _, _, _ in combo)
        local = tuple(slice(a - start, b - start) for _, a, b, start in combo)
        box = {d: (a, b) for d, (_, a, b, _) in zip(var.dims, combo, strict=True)}
        out = (slice(None), *placed(box, read.slot))
        part = RawPart(next(counter), read.sign, local, box, out)
        _add(chunks, var.array, coords, None, part, local)


def _add(
    chunks: Chunks, array: zarr.Array[Any], coords: tuple[int, ...], store: Store | None,
    part: Part, region: Region,
) -> None:  # fmt: skip
    """A chunk's part, and its box of the chunk, added to the chunks listed."""
    known = chunks.get((id(array), coords))
    if known is None:
        chunks[id(array), coords] = (array, coords, store, [part], [region])
    else:
        known[3].append(part)
        known[4].append(region)


@dataclass(frozen=True)
class _Source:
    """What every read of one accumulation in a plan shares: its array dimensions left
    after its entries are picked (``remaining``), those summed and the order of the others
    in the answer, whether its sums are finite (``tallied``), the dimensions the weights
    vary along, and the terms read, by the chunk bounds of their arrays (the same for every
    term of an accumulation, as a build writes them): (bounds, ((row, term, array,
    weighted), ...))."""

    group: spec.AccumulationGroup
    array_dims: tuple[str, ...]
    remaining: tuple[str, ...]
    summed: tuple[int, ...]
    order: tuple[int, ...]
    tallied: bool
    varying: tuple[str, ...]
    grids: tuple[tuple[tuple[Any, ...], tuple[tuple[int, str, zarr.Array[Any], bool], ...]], ...]


def _source(
    groups: AccumulationGroups, var: VariableInfo, read: Read, plan: QueryPlan,
    terms: Sequence[str],
) -> _Source:  # fmt: skip
    group = groups.group(var.name)
    assert group is not None
    acc = group.by_key(read.key) if read.key else group.find(read.source)
    assert acc is not None
    remaining = tuple(d for d in acc.array_dims if d not in read.entries)
    summed = tuple(remaining.index(d) for d in plan.over if d in remaining)
    kept_order = [d for d in remaining if d not in plan.over]
    order = tuple(kept_order.index(d) for d in var.dims if d in kept_order)
    # Sums are finite unless the group was built before infinities were tallied apart (it
    # keeps no tallies and records nothing; a group that met none records False).
    tallied = (
        all(t in acc.arrays for t in spec.TALLIES)
        or group.infinities is False
        or not statistics.can_be_infinite(var.array.dtype)
    )
    # (Compared, not hashed: hashing a dimension's edges costs more than comparing them.)
    grids: list[tuple[tuple[Any, ...], list[tuple[int, str, zarr.Array[Any], bool]]]] = []
    for t, term in enumerate(terms):
        held = statistics.held_term(acc, term)
        if term in spec.TALLIES and (held is None or not group.infinities):
            # No infinity was summed (or a group built before tallies, whose entries are
            # then checked to be finite): its tallies are all 0, not read.
            continue
        assert held is not None
        holder, weighted = held
        array = groups.array(var.name, acc.arrays[holder])
        bounds = array_bounds(array)
        alike = next((members for other, members in grids if other == bounds), None)
        if alike is None:
            alike = []
            # Along a dimension chunked alike in another grid, that grid's bounds object: a
            # plan finds where a read lies along it once for both (``_Listing.spans``).
            bounds = tuple(
                next((o[k] for o, _ in grids if o[k] == along), along)
                for k, along in enumerate(bounds)
            )
            grids.append((bounds, alike))
        alike.append((t, term, array, weighted))
    varying = weights_vary_along(groups.cube, group.weights, var)
    return _Source(
        group, tuple(acc.array_dims), remaining, summed, order, tallied, varying,
        tuple((bounds, tuple(members)) for bounds, members in grids),
    )  # fmt: skip


@dataclass(slots=True)
class _Reading:
    """A plan's reads of one accumulation (``source``): where their slabs land in the answer
    and their weights' key are worked out from the slabs' ranges by their positions among
    the array's dimensions: ``kept``, those of the dimensions kept (with their ranges' starts
    and sizes, ``_Placement``), ``varying``, those of the dimensions the weights vary along
    (None: a dimension the array does not have). Both are worked out once for each slab of
    the other dimensions than the first (``_rest``), and along the first once per chunk
    there, unless the weights vary along it (``first_varying``: once per slab)."""

    groups: AccumulationGroups
    var: VariableInfo
    source: _Source
    kept: list[tuple[int, int, int]]
    varying: list[tuple[str, int | None]]
    first_at: int | None  # the first dimension's place among those kept (None: not kept)
    first_varying: bool
    # The weights of slabs already listed, by what they depend on (the slab's dimensions
    # and its ranges along those the weights vary along).
    weights_memo: WeightsMemo

    @classmethod
    def of(
        cls, groups: AccumulationGroups, var: VariableInfo, source: _Source,
        placement: _Placement, weights_memo: WeightsMemo,
    ) -> _Reading:  # fmt: skip
        dims = source.array_dims
        kept = [(dims.index(d), lo, size) for d, lo, size in placement.kept]
        varying = [(d, dims.index(d) if d in dims else None) for d in source.varying]
        first_at = next((k for k, (i, _, _) in enumerate(kept) if i == 0), None)
        return cls(
            groups, var, source, kept, varying, first_at, any(i == 0 for _, i in varying),
            weights_memo,
        )  # fmt: skip

    def slab_weights(
        self, extents: tuple[tuple[int, int] | None, ...]
    ) -> tuple[Any, tuple[int, np.ndarray] | None]:
        """A slab's weights (its ranges ``extents``, None for an entry), and as
        ``_contraction`` gives them."""
        source = self.source
        weights, remaining, summed = source.group.weights, source.remaining, source.summed
        key = self._weights_key(extents)
        if key not in self.weights_memo:
            box = {d: e for d, e in zip(source.array_dims, extents, strict=True) if e}
            w = _slab_weights(self.groups.cube, self.var, weights, remaining, box)
            self.weights_memo[key] = w, _contraction(w, summed)
        return self.weights_memo[key]

    def _weights_key(self, extents: tuple[tuple[int, int] | None, ...]) -> tuple[Any, ...]:
        """What a slab's weights depend on: the accumulation's weights, dimensions and those
        summed, and the slab's ranges along the dimensions they vary along."""
        source = self.source
        return (
            source.group.weights, source.remaining, source.summed,
            tuple([(d, None if i is None else extents[i]) for d, i in self.varying]),
        )  # fmt: skip

    def row_prefix(
        self,
        extents: tuple[tuple[int, int] | None, ...],
        dim: int,
        rows: tuple[int, int],
    ) -> RowPrefix | None:
        """The weighted prefix sums (``RowPrefix``) along the array's dimension ``dim`` of
        the chunk holding a slab (its ranges ``extents``) whose weights are contracted along
        it, that chunk's rows ``rows`` along it; None when their weights are not contracted."""
        whole = (*extents[:dim], rows, *extents[dim + 1 :])
        key = ("row prefix", dim, self._weights_key(whole))
        found = self.weights_memo.get(key)
        if found is None:
            _, contract = self.slab_weights(whole)
            prefix = None if contract is None else RowPrefix(dim, contract[1])
            found = self.weights_memo[key] = (prefix, None)
        prefix = found[0]
        return prefix if isinstance(prefix, RowPrefix) else None


def _entry_parts(reading: _Reading, read: Read, placement: _Placement, listing: _Listing) -> None:
    """The accumulation chunks holding a read's entries, and the slab of each it reads
    (numbered by ``listing.counter``), added to ``listing.chunks``. Where the chunks lie is
    worked out once for all the terms whose arrays are chunked alike, along each dimension
    once per plan for each range or entry (``listing.spans``), and along all but the first
    once per plan for the reads alike there (``listing.rests``: a seasonal series' runs
    differ only in their time ranges)."""
    source = reading.source
    summed, order, tallied = source.summed, source.order, source.tallied
    kept, first_at, first_varying = reading.kept, reading.first_at, reading.first_varying
    counter, chunks, spans = listing.counter, listing.chunks, listing.spans
    sign, store = read.sign, reading.groups.store
    slot = (read.slot,) if placement.slotted else ()
    first = source.array_dims[0]
    entry = read.entries.get(first)
    # Where the process keeps chunks decoded, slabs weighed along one dimension they are
    # summed along (a series' rows of latitude) are summed from their chunks' weighted
    # prefix sums along it (``along``, the array's): a slab of one row too, so that no chunk
    # is kept in both forms.
    prefixed = (
        keeps_decoded() and tallied and not first_varying and len(source.varying) == 1
        and source.varying[0] in source.remaining
        and source.remaining.index(source.varying[0]) in source.summed
    )  # fmt: skip
    along = source.array_dims.index(source.varying[0]) if prefixed else 0
    for bounds_of, members, rows in _rest(reading, read, listing):
        bounds = bounds_of[0]
        where = (id(bounds), entry) if entry is not None else (id(bounds), *read.box[first])
        items = spans.get(where)
        if items is None:
            items = spans[where] = _along(bounds, entry, read.box.get(first))
        for c, selection, sliced, extent in items:
            # Where the slab's range along the first dimension lands, when it is kept: at
            # its place among the dimensions kept (``first_at``).
            landing = None if first_at is None else _landing(extent, *kept[first_at][1:])
            for row in rows:
                coords = (c, *row.coords)
                local = (selection, *row.local)
                region = (sliced, *row.region)
                if landing is None:
                    at = (*slot, *row.at)
                else:
                    at = (*slot, *row.at[:first_at], landing, *row.at[first_at:])
                # The slab's weights, looked up once for its weighted terms (once for all
                # the slabs along the first dimension when they do not vary along it).
                weighed = None if first_varying else row.weighed
                for t, term, array, weighted in members:
                    w, contract, prefix = None, None, None
                    if weighted:
                        if weighed is None:
                            weighed = reading.slab_weights((extent, *row.extents))
                            if not first_varying:
                                row.weighed = weighed
                        w, contract = weighed
                        if prefixed and array.dtype.kind in "fiu":
                            if row.prefix is None:
                                edges = bounds_of[along].edges
                                c_along = coords[along]
                                chunk_rows = (int(edges[c_along]), int(edges[c_along + 1]))
                                row.prefix = (
                                    reading.row_prefix((extent, *row.extents), along, chunk_rows)
                                    or False
                                )
                            prefix = row.prefix if isinstance(row.prefix, RowPrefix) else None
                    part = EntryPart(
                        next(counter), sign, term, local, summed, order, (t, *at), w, tallied,
                        contract, prefix,
                    )  # fmt: skip
                    _add(chunks, array, coords, store, part, region)


@dataclass(slots=True)
class _RestSlab:
    """A read's slab along all of an accumulation's dimensions but the first, in one chunk
    there: the chunk's coordinates, the slab's selection in it and as slices, its ranges
    (None for an entry), where its ranges along the dimensions kept land in the answer (in
    their order, the first dimension's left out) and its weights once looked up, for all the
    slabs along the first dimension joined to it (``_entry_parts``)."""

    coords: tuple[int, ...]
    local: tuple[int | slice, ...]
    region: Region
    extents: tuple[tuple[int, int] | None, ...]
    at: tuple[slice, ...]
    weighed: tuple[Any, tuple[int, np.ndarray] | None] | None = None
    # Its chunk's weighted prefix sums, once looked up (False: none; ``_entry_parts``).
    prefix: RowPrefix | bool | None = None


# Per grid of an accumulation (its terms' arrays chunked alike): the chunk bounds along each
# dimension, the terms, and the slabs along all but the first (``_RestSlab``).
Rest = list[
    tuple[
        tuple[ChunkBounds, ...], tuple[tuple[int, str, zarr.Array[Any], bool], ...], list[_RestSlab]
    ]
]


@dataclass(slots=True)
class _Listing:
    """A plan's chunks as they are listed (``chunk_work``): the chunks and their parts, the
    parts' places in the plan, and what reads alike share (``_entry_parts``)."""

    chunks: Chunks = field(default_factory=dict)
    counter: Iterator[int] = field(default_factory=itertools.count)
    # Where a read's range or entry along one dimension lies in the chunks, by the
    # dimension's bounds and the range or entry (``_along``).
    spans: dict[tuple[Any, ...], list[Along]] = field(default_factory=dict)
    # A read's slabs along all the dimensions but the first, by its accumulation and its
    # ranges and entries along those (``_rest``).
    rests: dict[tuple[Any, ...], Rest] = field(default_factory=dict)


def _rest(reading: _Reading, read: Read, listing: _Listing) -> Rest:
    """The slabs a read cuts along all its accumulation's dimensions but the first, per
    grid, in the order of their chunks (the last dimension's fastest)."""
    source, kept = reading.source, reading.kept
    dims = source.array_dims
    key = (
        id(source),
        *[read.entries[d] if d in read.entries else read.box[d] for d in dims[1:]],
    )  # fmt: skip
    rest = listing.rests.get(key)
    if rest is not None:
        return rest
    rest = []
    for bounds_of, members in source.grids:
        per_dim = []
        for dim, bounds in zip(dims[1:], bounds_of[1:], strict=True):
            entry = read.entries.get(dim)
            where = (id(bounds), entry) if entry is not None else (id(bounds), *read.box[dim])
            found = listing.spans.get(where)
            if found is None:
                found = listing.spans[where] = _along(bounds, entry, read.box.get(dim))
            per_dim.append(found)
        rows = []
        for combo in itertools.product(*per_dim):
            coords, local, region, extents = zip(*combo, strict=True) if combo else ((),) * 4
            at = tuple([_landing(extents[i - 1], lo, size) for i, lo, size in kept if i])
            rows.append(_RestSlab(coords, local, region, extents, at))
        rest.append((bounds_of, members, rows))
    listing.rests[key] = rest
    return rest


def _along(bounds: ChunkBounds, entry: int | None, extent: tuple[int, int] | None) -> list[Along]:
    """Where an entry, or else a range, lies along one dimension of an accumulation's
    chunks: per chunk, (chunk, the selection in it, as a slice, the range's part in it or
    None for an entry)."""
    if entry is not None:
        chunk, offset = bounds.chunk_of(entry)
        return [(chunk, offset, slice(offset, offset + 1), None)]
    assert extent is not None
    lo, hi = extent
    edges = bounds.edges
    found: list[Along] = []
    for c in bounds.chunks_overlapping(lo, hi):
        a, b = max(lo, edges[c]), min(hi, edges[c + 1])
        local = slice(a - edges[c], b - edges[c])
        found.append((c, local, local, (a, b)))
    return found


def weights_vary_along(cube: RawCube, weights: spec.Weights, var: VariableInfo) -> tuple[str, ...]:
    """The dimensions of ``var`` that ``weights`` vary along, worked out once per snapshot."""
    return cube.remembered(
        ("weights vary along", weights, var.name),
        lambda: varying_dims(cube.decoded, weights, var.name),
    )


def _slab_weights(
    cube: RawCube,
    var: VariableInfo,
    weights: spec.Weights,
    slab_dims: Sequence[str],
    box: Mapping[str, tuple[int, int]],
) -> np.ndarray | float:
    """The weights over an entry slab (axes ``slab_dims``, index ranges ``box``), for an
    accumulation whose weights factor out: they do not vary along its entries' dimensions,
    so any index along those (0) gives them."""
    where = {d: slice(*box[d]) if d in box else slice(0, 1) for d in var.dims}
    w = _weights_over(cube, var, weights, where)
    if not isinstance(w, np.ndarray):
        return w
    w = w.reshape([n for d, n in zip(var.dims, w.shape, strict=True) if d in slab_dims])
    in_var_order = [d for d in var.dims if d in slab_dims]
    return w.transpose([in_var_order.index(d) for d in slab_dims])


def _weights_over(
    cube: RawCube, var: VariableInfo, weights: spec.Weights, box: Mapping[str, slice]
) -> np.ndarray | float:
    """``weight_values`` over an index box. Area weights are cut from the whole latitude
    column's, worked out once per snapshot (``RawCube.remembered``): every query weighs its
    slabs, and each of them looked the coordinate up in the dataset again. An array's are
    read through the reader's store (``RawCube.decoded_values``): in the service, bounded and
    stopped with their request like the chunks they weigh."""
    if weights == "none":  # (``weight_values`` looks the variable up in the dataset first)
        return 1.0
    if weights.startswith("array:"):
        name = weights.removeprefix("array:")
        values = cube.decoded_values(name, box)
        return arranged_weights(name, values, cube.raw[name].dims, var.dims)
    if weights != "area":
        return weight_values(cube.decoded, weights, var.name, box)
    everywhere = dict.fromkeys(var.dims, slice(None))
    whole = cube.remembered(
        ("area weights", var.name),
        lambda: weight_values(cube.decoded, weights, var.name, everywhere),
    )
    assert isinstance(whole, np.ndarray)
    sizes = zip(var.dims, whole.shape, strict=True)
    return whole[tuple(box[d] if n > 1 else slice(None) for d, n in sizes)]


@dataclass(frozen=True, slots=True)
class _Placement:
    """Where a box lands in the answer (its kept dimensions, after its read's slot when the
    plan has ``slots``): modulo the axis' size (where the plan's ranges wrap), so that the
    part of a longitude range past the grid's seam follows the part before it."""

    slotted: bool
    # The dimensions kept, in the answer's order: (dimension, its range's start, its size).
    kept: tuple[tuple[str, int, int], ...]

    @classmethod
    def of(cls, plan: QueryPlan, var: VariableInfo) -> _Placement:
        sizes = {**dict(zip(var.dims, var.shape, strict=True)), **plan.sizes}
        kept = tuple((d, plan.ranges[d][0], sizes[d]) for d in plan.dims if d not in plan.over)
        return cls(plan.slots is not None, kept)

    def __call__(self, box: Mapping[str, tuple[int, int]], slot: int) -> tuple[int | slice, ...]:
        out: list[int | slice] = [slot] if self.slotted else []
        for d, lo, size in self.kept:
            out.append(_landing(box[d], lo, size))
        return tuple(out)


def _landing(extent: tuple[int, int] | None, lo: int, size: int) -> slice:
    """Where a range along a kept dimension lands in the answer, whose range starts at
    ``lo`` on an axis of ``size``."""
    assert extent is not None  # (a dimension kept is read over a range, not at an entry)
    start = (extent[0] - lo) % size
    return slice(start, start + extent[1] - extent[0])


class InfiniteEntriesError(AccumulationReadError):
    """Accumulation entries hold infinities: sums built before infinite values were tallied
    apart (``statistics``); the raw data answers instead."""


def _checked_entries(
    label: str, request: ChunkRequest, slab: np.ndarray, tallied: bool = True
) -> np.ndarray:
    """Entries as stored, refusing the fill value of a chunk that is not stored (NaN, -1
    for int64 counts, the type's largest value for unsigned ones): a missing chunk must never
    read as zero. Sums are finite (infinities are tallied apart); a non-finite entry of a
    group built before that (not ``tallied``) is an infinity summed in (NaN: both signs),
    whose differences would be NaN: the raw data answers instead."""
    if slab.dtype.kind == "f":
        if not tallied and not np.isfinite(slab).all():
            raise InfiniteEntriesError(
                f"{label}: accumulation array {request.array.path} holds infinities (built "
                "before accumulus tallied them apart; `accumulus accumulate --rebuild` "
                "replaces it)"
            )
        missing = bool(np.isnan(slab).any())
    elif not slab.size:
        missing = False
    elif slab.dtype.kind == "u":  # (the extreme of a slab: no array of flags)
        missing = bool(slab.max() == _FILL_UNSIGNED[slab.dtype.itemsize])
    else:
        missing = bool(slab.min() < 0)
    if missing:
        raise AccumulationReadError(
            f"{label}: accumulation array {request.array.path} has a missing chunk "
            f"({request.key}); run `accumulus verify` or rebuild"
        )
    return slab


# The fill value of an unsigned count array, by item size: the type's largest value
# (``np.iinfo`` makes an object per call).
_FILL_UNSIGNED = {n: (1 << (8 * n)) - 1 for n in (1, 2, 4, 8)}


def _read_error(
    cube: RawCube, var: VariableInfo, failed: ChunkReadError, groups_label: str
) -> AccumulusError:
    if isinstance(failed.cause, AccumulusError):
        return failed.cause
    problem = read_problem_text(failed)
    if failed.request.array.path == var.array.path:
        return AccumulusError(f"{cube.label}: cannot read {var.name!r}: {problem}")
    return AccumulationReadError(
        f"{groups_label}: cannot read accumulation array {failed.request.array.path}: {problem}"
    )
