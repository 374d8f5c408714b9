"""The accumulation math: pure functions over NumPy arrays.

For values x (NaN where missing) and weights w, the four sums an accumulation may hold are
Σ w·x, Σ w, Σ x and Σ 1, each over the valid values only. Prefix sums of per-chunk sums,
taken every ``stride`` chunks, are the ZEP 5 accumulation entries.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from accumulus.accumulation.spec import COUNT, SUM, WCOUNT, WSUM


def block_terms(x: np.ndarray, w: np.ndarray | float, terms: Sequence[str]) -> np.ndarray:
    """The summands of each requested sum over one block: shape ``(len(terms), *x.shape)``.

    ``w`` broadcasts against ``x``. Missing values (NaN) contribute nothing to any sum.
    """
    x = np.asarray(x, dtype="f8")
    valid = ~np.isnan(x)
    values = np.where(valid, x, 0.0)
    out = np.empty((len(terms), *x.shape), dtype="f8")
    for i, term in enumerate(terms):
        if term == SUM:
            out[i] = values
        elif term == COUNT:
            out[i] = valid
        elif term == WCOUNT:
            out[i] = np.where(valid, w, 0.0)
        elif term == WSUM:
            out[i] = np.where(valid, values * w, 0.0)
        else:
            raise ValueError(f"unknown sum {term!r}")
    return out


def reduce_terms(
    x: np.ndarray, w: np.ndarray | float, terms: Sequence[str], axes: Sequence[int]
) -> np.ndarray:
    """Each requested sum of a block over ``axes`` (axes of ``x``): ``(len(terms), *rest)``."""
    stacked = block_terms(x, w, terms)
    return stacked.sum(axis=tuple(a + 1 for a in axes))


def prefix_entries(chunk_sums: np.ndarray, axis: int, stride: int) -> np.ndarray:
    """ZEP 5 entries along ``axis`` from per-chunk sums: entry k = Σ of chunks [0, (k+1)·stride).

    A trailing group of fewer than ``stride`` chunks has no entry.
    """
    prefix = np.cumsum(chunk_sums, axis=axis)
    index = [slice(None)] * prefix.ndim
    index[axis] = slice(stride - 1, None, stride)
    return prefix[tuple(index)]


def chunk_sums(
    x: np.ndarray,
    w: np.ndarray | float,
    terms: Sequence[str],
    reductions: Sequence[tuple[int, ...]],
    edges: Sequence[Sequence[int]] | None = None,
) -> dict[tuple[int, ...], np.ndarray]:
    """The requested sums of a block, per raw chunk along each set of axes in ``reductions``.

    ``edges[a]`` lists where raw chunks start inside the block along axis ``a`` (``[0]``
    when the block is one chunk there, the default). Returns ``{axes: array of shape
    (len(terms), *x.shape with the chunk count on axes)}``. Reductions share work: a sum
    over (lat, lon) is taken from the sum over lat when that one is wanted too.
    """
    edges = edges if edges is not None else [[0]] * x.ndim
    cache: dict[tuple[int, ...], np.ndarray] = {(): block_terms(x, w, terms)}
    for axes in sorted({tuple(sorted(r)) for r in reductions}, key=len):
        base = max((c for c in cache if set(c) <= set(axes)), key=len)
        out = cache[base]
        for a in axes:
            if a not in base:
                out = np.add.reduceat(out, edges[a], axis=a + 1)
        cache[axes] = out
    return {tuple(r): cache[tuple(sorted(r))] for r in reductions}
