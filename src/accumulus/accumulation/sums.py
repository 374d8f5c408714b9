"""The accumulation math: pure functions over NumPy arrays.

For values x (NaN where missing) and weights w, an accumulation holds sums Σ w^a·x^b over
the valid values (``statistics.SUMS``: Σ w·x, Σ w, Σ x and Σ 1). A block's sums per raw
chunk (``chunk_sums``) are taken by a compiled loop (``kernel.axis_sums``), every sum in
one pass along one axis, without a copy of the block per sum; prefix sums of per-segment
sums, taken where entries end (every ``stride`` chunks for ZEP 5, at the positions of an
``--at`` rule otherwise), are the accumulation entries (``prefix_entries``).
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod

import numpy as np

from accumulus.accumulation import statistics


def chunk_sums(
    x: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    reductions: Sequence[tuple[int, ...]],
    edges: Sequence[Sequence[int]] | None = None,
) -> dict[tuple[int, ...], np.ndarray]:
    """The requested sums of a block, per raw chunk along each set of axes in ``reductions``.

    ``w`` broadcasts against ``x``. ``edges[a]`` lists where raw chunks start inside the
    block along axis ``a`` (``[0]`` when the block is one chunk there, the default).
    Returns ``{axes: float64 array of shape (len(terms), *x.shape with the chunk count on
    axes)}``. The block itself is summed along one axis per reduction (all sums in one
    pass); the other axes of a reduction are summed from that much smaller result, and a
    reduction containing another requested one starts from it.
    """
    x = np.asarray(x)
    x = x.reshape(1) if x.ndim == 0 else x
    edges = [list(e) for e in edges] if edges is not None else [[0]] * x.ndim
    w = np.asarray(w, dtype="f8")
    w = w.reshape((1,) * (x.ndim - w.ndim) + w.shape)
    done: dict[tuple[int, ...], np.ndarray] = {}
    for axes in sorted({tuple(sorted(r)) for r in reductions}, key=len):
        if x.size == 0:
            shape = [len(edges[a]) if a in axes else n for a, n in enumerate(x.shape)]
            done[axes] = np.zeros((len(terms), *shape))
            continue
        base = max((c for c in done if set(c) < set(axes)), key=len, default=None)
        if base is None:
            # Sum the block along the axis that shrinks it most (each index is its own
            # segment when no axis is summed: the summands themselves).
            axis = max(axes, key=lambda a: x.shape[a] / len(edges[a]), default=0)
            base = (axis,) if axes else ()
            if base not in done:
                starts = edges[axis] if axes else range(x.shape[0])
                done[base] = _axis_sums(x, w, terms, axis, starts)
        out = done[base]
        for a in axes:
            if a not in base:
                out = np.add.reduceat(out, edges[a], axis=a + 1)
        done[axes] = out
    return {tuple(r): done[tuple(sorted(r))] for r in reductions}


def _axis_sums(
    x: np.ndarray, w: np.ndarray, terms: Sequence[str], axis: int, starts: Sequence[int]
) -> np.ndarray:
    """Each sum of ``x`` along ``axis`` per segment beginning at ``starts`` (numba):
    ``(len(terms), *x.shape with len(starts) on axis)``."""
    from accumulus.accumulation.kernel import axis_sums  # numba: imported when first used

    shape = x.shape
    pre, n, post = prod(shape[:axis]), shape[axis], prod(shape[axis + 1 :])
    bounds = np.array([*starts, n], dtype="int64")
    segment = np.repeat(np.arange(len(starts), dtype="int64"), np.diff(bounds))
    # A weighted sum along an axis the weights do not vary on is taken as the weight
    # times the unweighted sum: fewer sums to take from the block.
    constant = w.shape[axis] == 1
    direct = tuple(dict.fromkeys(statistics.unweighted(t) if constant else t for t in terms))
    w_pre, w_post = w.shape[:axis], w.shape[axis + 1 :]
    if all(d == 1 for d in w_post):
        weights = w.reshape(prod(w_pre), w.shape[axis], 1)
    else:  # weights varying after the axis: as wide as the block's rows
        weights = np.broadcast_to(w, (*w_pre, w.shape[axis], *shape[axis + 1 :]))
        weights = np.ascontiguousarray(weights).reshape(prod(w_pre), w.shape[axis], post)
    weight_of = np.broadcast_to(np.arange(prod(w_pre)).reshape(w_pre), shape[:axis]).ravel()
    out = np.zeros((len(direct), pre, len(starts), post))
    axis_sums(
        np.ascontiguousarray(x).reshape(pre, n, post),
        segment,
        bounds,
        weights,
        np.ascontiguousarray(weight_of, dtype="int64"),
        statistics.powers(direct),
        out,
    )
    out = out.reshape(len(direct), *shape[:axis], len(starts), *shape[axis + 1 :])
    return np.stack(
        [out[direct.index(t)] if t in direct else w * out[direct.index(statistics.unweighted(t))]
         for t in terms]
    )  # fmt: skip


def reduce_terms(
    x: np.ndarray, w: np.ndarray | float, terms: Sequence[str], axes: Sequence[int]
) -> np.ndarray:
    """Each requested sum of a block over ``axes`` (axes of ``x``): ``(len(terms), *rest)``."""
    axes = tuple(sorted(axes))
    reduced = chunk_sums(x, w, terms, [axes])[axes]
    return reduced.reshape([n for i, n in enumerate(reduced.shape) if i - 1 not in axes])


def prefix_entries(
    segment_sums: np.ndarray, axis: int, keep: Sequence[int], *, in_place: bool = False
) -> np.ndarray:
    """Accumulation entries along ``axis`` from the sums of consecutive segments: the
    cumulative sums ending after each segment in ``keep`` (the segments that end where an
    entry ends: every ``stride``-th chunk for ZEP 5, any position for ``--at``).
    ``in_place``: ``segment_sums`` (float64) may be overwritten."""
    prefix = segment_sums if in_place else np.array(segment_sums, dtype="f8")
    # Slice by slice: as fast along a short axis (a few chunks) as along a long one,
    # where np.cumsum walks every short row on its own.
    steps = np.moveaxis(prefix, axis, 0)
    for i in range(1, steps.shape[0]):
        steps[i] += steps[i - 1]
    keep = np.asarray(keep, dtype="int64")
    if len(keep) == prefix.shape[axis] and (keep == np.arange(len(keep))).all():
        return prefix  # every segment ends an entry (entries at every element)
    return prefix.take(keep, axis=axis)
