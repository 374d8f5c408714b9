"""What each sum of an accumulation adds per value, as a query takes it of a raw chunk: pure
functions over NumPy arrays.

For values x (NaN where missing) and weights w, an accumulation holds sums Σ w^a·x^b over
the valid values (``statistics.SUMS``: Σ w·x, Σ w, Σ x and Σ 1, and the tallies of
infinities). A query's sums of a raw chunk over whole axes (``reduce_terms``) are taken with
NumPy: a query sums a few chunks, and loading the build's compiled loop
(``build.chunk_sums``) costs a fresh process more than it saves.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from accumulus.accumulation.model import statistics


def reduce_terms(
    x: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    axes: Sequence[int],
    reference: np.ndarray | float = 0.0,
    times: np.ndarray | float | None = None,
) -> np.ndarray:
    """Each requested sum of a block over ``axes`` (axes of ``x``): ``(len(terms), *rest)``.

    What a query takes of a raw chunk, in NumPy (float64 sums): a query sums a few chunks,
    where loading the build's compiled loop (numba, about half a second of CPU in a fresh
    process) would cost more than it saves. A weighted sum is taken over the axes its
    weights do not vary on first, then weighted: one product per remaining value. Centred
    sums (Σ(x−c)²) are taken about ``reference`` (c: a number, or values broadcastable to
    ``x``, one per cell of the answer); sums against time (Σt^p·x^b) with ``times``, the
    years of each step broadcastable to ``x``."""
    axes = tuple(sorted(axes))
    x = np.asarray(x)
    if x.dtype not in (np.float32, np.float64):
        x = x.astype("f8")
    w = np.asarray(w, dtype="f8")
    w = w.reshape((1,) * (x.ndim - w.ndim) + w.shape)
    finite = np.isfinite(x)
    if finite.all():
        valid, values, infinite = finite, x, False
    else:
        missing = np.isnan(x)
        infinite = bool(np.count_nonzero(finite) + np.count_nonzero(missing) < x.size)
        valid = ~missing if infinite else finite
        values = finite_or_zero(x, finite)
    constant = tuple(a for a in axes if w.shape[a] == 1)
    varying = tuple(a for a in axes if w.shape[a] > 1)
    kept = [n for a, n in enumerate(x.shape) if a not in axes]
    kept_weights = [n for a, n in enumerate(w.shape) if a not in axes]
    single = prod(x.shape[a] for a in constant) == 1  # one value per cell: a raw day of a map
    out = np.empty((len(terms), *kept))
    for i, name in enumerate(terms):
        s = statistics.SUMS[name]
        if s.tally is not None and not infinite:
            out[i, ...] = 0.0  # no value equals the tally's infinity
            continue
        summands = _summands(x, valid, values, s, finite, reference)
        if s.time_power:
            if times is None:
                raise ValueError(f"the sum {name!r} needs the times of the block")
            summands = summands * np.asarray(times, dtype="f8") ** s.time_power
        if not varying:  # into the answer's row as it is summed: no copies of its size
            row = out[i, ...]  # (a view, also of a single value)
            if single:  # converted as it is copied: np.sum over one value costs more
                np.copyto(row, summands.reshape(row.shape), casting="unsafe")
            else:
                np.sum(summands, axis=constant, dtype="f8", out=row)
            if s.weight_power == 1:
                np.multiply(row, w.reshape(kept_weights), out=row)
            continue
        total = np.sum(summands, axis=constant, dtype="f8", keepdims=True)
        if s.weight_power == 1:
            total = total * w
        out[i] = np.sum(total, axis=varying).reshape(kept)
    return out


def finite_or_zero(x: np.ndarray, finite: np.ndarray) -> np.ndarray:
    """Floating-point ``x`` where ``finite``, +0 elsewhere: what ``np.where(finite, x, 0)``
    gives, as the values' bits and'ed with all ones where finite and all zeros elsewhere,
    which is faster (a map's raw day at a period's end: docs/benchmarks.md, "Raw days at a
    map's ends")."""
    bits = np.dtype(f"i{x.dtype.itemsize}")
    mask = np.subtract(0, finite, dtype=bits)  # -1 (all ones) where finite, else 0
    return np.bitwise_and(x.view(bits), mask, out=mask).view(x.dtype)


def _summands(
    x: np.ndarray,
    valid: np.ndarray,
    values: np.ndarray,
    s: statistics.Sum,
    finite: np.ndarray,
    reference: np.ndarray | float,
):
    """What ``s`` adds per value: 1 per valid value (or per value equal to a tally's
    infinity), or the finite value (less ``reference`` for a centred sum) to its power (0
    where missing or infinite)."""
    if s.centred:
        return np.where(finite, values.astype("f8") - reference, 0.0) ** s.value_power
    if s.tally is not None:
        return x == s.tally
    if s.value_power == 0:
        return valid
    if s.value_power == 1:
        return values
    return values.astype("f8") ** s.value_power


def is_linear(terms: Sequence[str]) -> bool:
    """Whether every sum is Σ w^a·x^b with b ≤ 1 (or a tally), not centred or against time:
    sums that ``reduce_packed`` takes on the stored integers."""
    return all(
        (s := statistics.SUMS[t]).value_power <= 1 and not s.centred and not s.time_power
        for t in terms
    )


def reduce_packed(
    x: np.ndarray,
    marks: Sequence[object],
    scale: float,
    offset: float,
    w: np.ndarray | float,
    terms: Sequence[str],
    axes: Sequence[int],
    inside: np.ndarray | None = None,
) -> np.ndarray:
    """``reduce_terms`` of the physical values scale·x + offset of packed integers ``x``
    (missing where x is one of ``marks`` or outside ``inside``, a mask broadcastable to x),
    without them: the sums are linear, Σ(s·x + o) = s·Σx + o·n over the valid values, so x
    and n are summed as integers (exact) over the axes the weights do not vary on, and
    scaled, offset and weighted once per remaining value. ``is_linear(terms)`` only; the
    tallies are 0 (no integer is infinite)."""
    axes = tuple(sorted(axes))
    w = np.asarray(w, dtype="f8")
    w = w.reshape((1,) * (x.ndim - w.ndim) + w.shape)
    constant = tuple(a for a in axes if w.shape[a] == 1)
    varying = tuple(a for a in axes if w.shape[a] > 1)
    kept = [n for a, n in enumerate(x.shape) if a not in axes]
    n = prod(x.shape[a] for a in constant)
    info = np.iinfo(x.dtype)
    # Marks a stored integer can equal (xarray compares the values as floats: 1.5 or 1e9 on
    # int16 masks nothing).
    hits = {int(m) for m in map(float, marks) if m.is_integer() and info.min <= m <= info.max}  # type: ignore[arg-type]
    wide = _exact_dtype(max(-info.min, info.max) * n)
    if inside is None:
        # Σ over the valid values = Σ over all − Σ mark·(times it occurs): no masked copy.
        whole = np.sum(x, axis=constant, dtype=wide, keepdims=True).astype("i8")
        count = np.full(whole.shape, float(n))
        for mark in hits:
            occurs = np.sum(x == mark, axis=constant, dtype=_exact_dtype(n), keepdims=True)
            whole -= mark * occurs.astype("i8")
            count -= occurs
        total = whole.astype("f8")
    else:
        valid = np.broadcast_to(inside, x.shape)
        for mark in hits:
            valid = valid & (x != mark)
        total = np.sum(x * valid, axis=constant, dtype=wide, keepdims=True).astype("f8")
        count = np.sum(valid, axis=constant, dtype=_exact_dtype(n), keepdims=True).astype("f8")
    values = scale * total + offset * count
    out = np.zeros((len(terms), *kept))
    for i, name in enumerate(terms):
        s = statistics.SUMS[name]
        if s.tally is not None:
            continue
        summands = values if s.value_power == 1 else count
        if s.weight_power == 1:
            summands = summands * w
        out[i] = np.sum(summands, axis=varying).reshape(kept)
    return out


def _exact_dtype(bound: int) -> str:
    """The narrowest integer type summing to at most ``bound`` in magnitude exactly (a
    narrow sum casts less, and is faster: docs/benchmarks.md)."""
    return next(t for t in ("i2", "i4", "i8") if bound <= np.iinfo(t).max)
