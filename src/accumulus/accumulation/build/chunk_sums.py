"""The build's sums: a block's sums per raw chunk, and the prefix sums that are the entries.

For values x (NaN where missing) and weights w, an accumulation holds sums Σ w^a·x^b over
the valid values (``model.statistics.SUMS``: Σ w·x, Σ w, Σ x and Σ 1). A block's sums per
raw chunk (``chunk_sums``) are taken by a compiled loop (``kernel.block_sums``), every sum in
one pass, without a copy of the block per sum; prefix sums of per-segment sums, taken where
entries end (every ``stride`` chunks for ZEP 5, at the positions of an ``--at`` rule
otherwise), are the accumulation entries (``prefix_entries``). Pure functions over NumPy
arrays; ``model.sums`` says what each sum adds per value, as a query takes it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from math import prod

import numpy as np

from accumulus.accumulation.model import statistics
from accumulus.accumulation.model.spec import COUNT, WCOUNT, WSUM

PLAIN = {(0, 0), (0, 1)}  # (weight, value) powers of Σ1 and Σx
STEP_VALUES = 4096  # values a step holds at least, for sums along the first axis in NumPy


def chunk_sums(
    x: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    reductions: Sequence[tuple[int, ...]],
    edges: Sequence[Sequence[int]] | None = None,
    empty: Callable[[int], np.ndarray] | None = None,
    reference: float = 0.0,
    times: np.ndarray | None = None,
) -> dict[tuple[int, ...], np.ndarray]:
    """The requested sums of a block, per raw chunk along each set of axes in ``reductions``.

    ``w`` broadcasts against ``x``. ``edges[a]`` lists where raw chunks start inside the
    block along axis ``a`` (``[0]`` when the block is one chunk there, the default).
    Returns ``{axes: float64 array of shape (len(terms), *x.shape with the chunk count on
    axes)}``. Reductions containing no other requested one are taken from the block, all
    in one pass (``kernel.block_sums``); the others are summed from the largest requested
    one they contain, which is much smaller than the block. ``empty(n)`` gives the float64
    space the pass fills (default: a new array). Centred sums (Σ(x−c)²) are taken about
    ``reference`` (c); sums against time (Σt^p·x^b) with ``times``, the years of each
    step broadcastable to ``x``.
    """
    x = np.asarray(x)
    x = x.reshape(1) if x.ndim == 0 else x
    if any(statistics.SUMS[t].time_power for t in terms):
        return _timed_sums(x, w, terms, reductions, edges, reference, times)
    edges = [list(e) for e in edges] if edges is not None else [[0]] * x.ndim
    w = np.asarray(w, dtype="f8")
    w = w.reshape((1,) * (x.ndim - w.ndim) + w.shape)
    wanted = sorted({tuple(sorted(r)) for r in reductions}, key=len)
    if x.size == 0:
        done = {
            axes: np.zeros(
                (len(terms), *(len(edges[a]) if a in axes else n for a, n in enumerate(x.shape)))
            )
            for axes in wanted
        }
    else:
        first = [axes for axes in wanted if not any(set(c) < set(axes) for c in wanted)]
        found = _block_sums(x, w, terms, first, edges, empty, reference)
        done = dict(zip(first, found, strict=True))
    for axes in wanted:
        if axes in done:
            continue
        base = max((c for c in done if set(c) < set(axes)), key=len)
        out = done[base]
        for a in axes:
            if a not in base:
                out = np.add.reduceat(out, edges[a], axis=a + 1)
        done[axes] = out
    return {tuple(r): done[tuple(sorted(r))] for r in reductions}


def _timed_sums(
    x: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    reductions: Sequence[tuple[int, ...]],
    edges: Sequence[Sequence[int]] | None,
    reference: float,
    times: np.ndarray | None,
) -> dict[tuple[int, ...], np.ndarray]:
    """``chunk_sums`` of terms some of which are against time: Σt^p·x^b is the compiled
    loop's weighted sum with t^p for weights (of x − c where centred), one pass per power
    of t; the rows are then put in the order of ``terms``."""
    if times is None:
        raise ValueError("sums against time need the times of the block")
    passes: list[tuple[list[str], list[str], np.ndarray | float, np.ndarray]] = []
    plain = [t for t in terms if not statistics.SUMS[t].time_power]
    if plain:
        passes.append((plain, plain, w, x))
    for power in sorted({statistics.SUMS[t].time_power for t in terms} - {0}):
        names = [t for t in terms if statistics.SUMS[t].time_power == power]
        # Σt^p·x as Σw·x and Σt^p as Σw, with w = t^p.
        codes = [WSUM if statistics.SUMS[t].value_power == 1 else WCOUNT for t in names]
        centred = any(statistics.SUMS[t].centred for t in names)
        values = x.astype("f8") - reference if centred else x
        passes.append((names, codes, np.asarray(times, dtype="f8") ** power, values))
    rows: dict[str, dict[tuple[int, ...], np.ndarray]] = {}
    for names, codes, weights, values in passes:
        done = chunk_sums(values, weights, codes, reductions, edges, None, reference)
        for k, name in enumerate(names):
            rows[name] = {axes: sums[k] for axes, sums in done.items()}
    return {axes: np.stack([rows[t][axes] for t in terms]) for axes in rows[terms[0]]}


def load_kernel(dtype: np.dtype) -> None:
    """Load the compiled loop for blocks of ``dtype``: numba's first call in a process
    takes a third of a second, which a caller can spend while it reads."""
    chunk_sums(np.zeros((1, 1), dtype=dtype), 1.0, [COUNT], [(0,)])


def _block_sums(
    x: np.ndarray,
    w: np.ndarray,
    terms: Sequence[str],
    reductions: Sequence[tuple[int, ...]],
    edges: Sequence[Sequence[int]],
    empty: Callable[[int], np.ndarray] | None = None,
    reference: float = 0.0,
) -> list[np.ndarray]:
    """Each sum of ``x`` per segment along the axes of each reduction, in one compiled pass
    over the block (numba): ``(len(terms), *x.shape with the segment count on the axes)``
    per reduction."""
    if x.dtype not in (np.float32, np.float64) or not x.dtype.isnative:
        x = x.astype("f8")
    rows = np.ascontiguousarray(x).reshape(-1, x.shape[-1])
    weights = np.ascontiguousarray(w).reshape(-1, w.shape[-1])
    weight_of = _row_index(w.shape[:-1], x.shape[:-1]).ravel()
    last = x.ndim - 1
    shapes, direct, tables = [], [], []
    # Along an axis cut at every index each segment is one value: nothing to sum there.
    cut = [tuple(a for a in axes if len(edges[a]) < x.shape[a]) for axes in reductions]
    # Reductions alike once cut (every element of the axes they sum an entry: the default
    # layout's map and series sum nothing) take the same sums: taken once, shared.
    reductions = list(dict.fromkeys(cut))
    for axes in reductions:
        shape = [len(edges[a]) if a in axes else n for a, n in enumerate(x.shape)]
        shapes.append(shape)
        # A weighted sum over axes the weights do not vary on is taken as the weight times
        # the unweighted sum: fewer sums to take from the block.
        constant = all(w.shape[a] == 1 for a in axes)
        direct.append(
            tuple(dict.fromkeys(statistics.unweighted(t) if constant else t for t in terms))
        )
        tables.append(_row_table(x.shape[:-1], shape[:-1], axes, edges))
    columns = np.zeros((len(reductions), len(edges[last]) + 1), dtype="int64")
    for k, axes in enumerate(reductions):
        columns[k] = [*edges[last], x.shape[last]] if last in axes else 0
    n_columns = np.array([s[-1] for s in shapes], dtype="int64")
    n_rows = np.array([prod(s[:-1]) for s in shapes], dtype="int64")
    n_terms = np.array([len(d) for d in direct], dtype="int64")
    powers = np.zeros((len(reductions), max(n_terms), 2), dtype="int64")
    for k, names in enumerate(direct):
        powers[k, : len(names)] = statistics.powers(names)
    sizes = n_terms * n_rows * n_columns
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype("int64")
    # Zeroed by a write, not by calloc: the kernel adds into it (a read before the first
    # write), and each page of calloc's memory read first is the shared zero page, copied on
    # the write that follows: a fault and a TLB flush across the process's threads per page
    # (measured with perf on a build at every element: docs/benchmarks.md). Where no
    # reduction sums anything, each output row takes one input row: the kernel zeroes it
    # first, which spares a pass over all of it here.
    fresh = not any(reductions)
    out = (empty or np.empty)(int(sizes.sum()))
    # Values and counts summed along the first axis at most (maps at every element, or at
    # a few positions along time): in NumPy, step by step where steps are summed (so only
    # where a step holds many values: each is a few NumPy calls).
    plain = all(
        (not axes or (axes == (0,) and x[0].size >= STEP_VALUES))
        and {tuple(p) for p in powers[k, : n_terms[k]].tolist()} <= PLAIN
        for k, axes in enumerate(reductions)
    )
    if plain:
        views = [
            out[offsets[k] : offsets[k] + sizes[k]].reshape(n_terms[k], *shapes[k])
            for k in range(len(reductions))
        ]
        for k, axes in enumerate(reductions):
            if not axes:
                _each_value(x, powers[k, : n_terms[k], 1], views[k])
        summed = [(views[k], powers[k, : n_terms[k], 1]) for k, a in enumerate(reductions) if a]
        if summed:
            _sums_along_first(x, edges[0], summed)
    else:
        _compiled_block_sums(
            rows,
            weights,
            weight_of,
            tables,
            columns,
            n_columns,
            n_rows,
            [last in axes for axes in reductions],
            powers,
            n_terms,
            offsets,
            out,
            fresh,
            reference,
        )
    results = []
    for k, names in enumerate(direct):
        sums = out[offsets[k] : offsets[k] + sizes[k]].reshape(len(names), *shapes[k])
        if names != tuple(terms):  # weighted sums from their unweighted twins
            twins = [(t, t if t in names else statistics.unweighted(t)) for t in terms]
            sums = np.stack([sums[names.index(u)] * (1 if u == t else w) for t, u in twins])
        results.append(sums)
    return [results[reductions.index(axes)] for axes in cut]


def _each_value(x: np.ndarray, value_powers: np.ndarray, out: np.ndarray) -> None:
    """The sums of segments one value long, Σx (power 1) or Σ1 (power 0) for each of
    ``value_powers``, into ``out[t]``: each value (0 where missing or infinite) or its
    validity (1 or 0, infinities valid), the same bytes as the compiled loop's. NumPy passes
    over the block are slower than the loop, but need no loop loaded, which costs a fresh
    process more (docs/benchmarks.md, "Build CPU")."""
    missing = np.isnan(x)
    for t, power in enumerate(value_powers.tolist()):
        into = out[t]
        if power == 1:
            np.add(x, 0.0, out=into)  # -0.0 as 0.0, as the loop adds each value to 0.0
            np.putmask(into, ~np.isfinite(x), 0.0)
        else:
            np.logical_not(missing, out=into)


def _sums_along_first(
    x: np.ndarray, starts: Sequence[int], summed: Sequence[tuple[np.ndarray, np.ndarray]]
) -> None:
    """Σx (power 1) and Σ1 (power 0) over the segments of the first axis starting at
    ``starts``, into each ``(out, value_powers)`` of ``summed``: ``out[t, s]``. Each step
    (a map) is made once and added to its segment's sums, in the order (and so to the bits)
    the compiled loop adds them: the first step of a segment added to 0.0 (-0.0 as 0.0),
    each next one to the sums. A step's values are taken as they are where finite and 0
    elsewhere by ANDing their bits with all ones or none, in the raw type (half the bytes
    of float64 for float32 data), one pass cheaper than a masked assignment."""
    bounds = [*starts, x.shape[0]]
    shape = x.shape[1:]
    bits = f"i{x.dtype.itemsize}"
    finite = np.empty(shape, dtype=bool)
    keep = np.empty(shape, dtype=bits)
    value = np.empty(shape, dtype=x.dtype)
    valid = np.empty(shape, dtype=bool)
    for s, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        if lo == hi:
            for out, _ in summed:
                out[:, s] = 0.0
        for r in range(lo, hi):
            np.isfinite(x[r], out=finite)
            np.negative(finite.view("u1"), out=keep, dtype=bits)  # all ones where finite
            np.bitwise_and(x[r].view(bits), keep, out=value.view(bits))
            np.isnan(x[r], out=valid)
            np.logical_not(valid, out=valid)
            for out, powers in summed:
                for t, power in enumerate(powers.tolist()):
                    into = out[t, s]
                    term = value if power == 1 else valid
                    if r == lo:
                        np.add(term, 0.0, out=into, dtype="f8")
                    else:
                        np.add(into, term, out=into, dtype="f8")


def _compiled_block_sums(
    rows: np.ndarray,
    weights: np.ndarray,
    weight_of: np.ndarray,
    tables: list[np.ndarray],
    columns: np.ndarray,
    n_columns: np.ndarray,
    n_rows: np.ndarray,
    sums_last: list[bool],
    powers: np.ndarray,
    n_terms: np.ndarray,
    offsets: np.ndarray,
    out: np.ndarray,
    fresh: bool,
    reference: float,
) -> None:
    """``kernel.block_sums`` (``out`` zeroed first unless ``fresh``)."""
    from accumulus.accumulation.build.kernel import block_sums  # numba: imported when first used

    if not fresh:
        out.fill(0.0)
    block_sums(
        rows,
        weights,
        weight_of,
        np.stack(tables),
        columns,
        n_columns,
        n_rows,
        np.array(sums_last, dtype="int64"),
        powers,
        n_terms,
        offsets,
        out,
        fresh,
        float(reference),
    )


def _row_index(shape: tuple[int, ...], rows: tuple[int, ...]) -> np.ndarray:
    """For an array of ``shape`` broadcast to ``rows``: the flat index of each element."""
    return np.ascontiguousarray(
        np.broadcast_to(np.arange(prod(shape), dtype="int64").reshape(shape), rows)
    )


def _row_table(
    rows: tuple[int, ...],
    out_rows: Sequence[int],
    axes: tuple[int, ...],
    edges: Sequence[Sequence[int]],
) -> np.ndarray:
    """The output row (flat, of ``out_rows``) each block row (flat, of ``rows``) adds to:
    along the summed ``axes``, the segment an index lies in; along the others, itself."""
    table = np.zeros(rows, dtype="int64")
    stride = 1
    for a in reversed(range(len(rows))):
        if a in axes:
            bounds = [*edges[a], rows[a]]
            index = np.repeat(np.arange(len(edges[a]), dtype="int64"), np.diff(bounds))
        else:
            index = np.arange(rows[a], dtype="int64")
        table += (index * stride).reshape([-1 if b == a else 1 for b in range(len(rows))])
        stride *= out_rows[a]
    return table.ravel()


LONG_AXIS = 64  # segments along the last axis beyond which rows are prefix-summed whole


def prefix_entries(
    segment_sums: np.ndarray, axis: int, keep: Sequence[int], *, in_place: bool = False
) -> np.ndarray:
    """Accumulation entries along ``axis`` from the sums of consecutive segments: the
    cumulative sums ending after each segment in ``keep`` (the segments that end where an
    entry ends: every ``stride``-th chunk for ZEP 5, any position for ``--at``).
    ``in_place``: ``segment_sums`` (float64) may be overwritten."""
    prefix = segment_sums if in_place else np.array(segment_sums, dtype="f8")
    if axis == prefix.ndim - 1 and prefix.shape[axis] > LONG_AXIS:
        # Along a long last axis (entries at every element) each row is contiguous and
        # long: walked once, row by row (slice by slice, every slice would be strided:
        # twice the time), by the compiled loop when the rows are contiguous.
        if prefix.flags.c_contiguous:
            from accumulus.accumulation.build.kernel import prefix_rows  # numba: loaded by builds

            prefix_rows(prefix.reshape(-1, prefix.shape[axis]))
        else:
            np.cumsum(prefix, axis=axis, out=prefix)
    else:
        # Slice by slice: as fast along a short axis (a few chunks) as along a long one,
        # where np.cumsum walks every short row on its own (much slower for a few chunks).
        steps = np.moveaxis(prefix, axis, 0)
        for i in range(1, steps.shape[0]):
            steps[i] += steps[i - 1]
    kept = np.asarray(keep, dtype="int64")
    if len(kept) == prefix.shape[axis] and (kept == np.arange(len(kept))).all():
        return prefix  # every segment ends an entry (entries at every element)
    return prefix.take(kept, axis=axis)
