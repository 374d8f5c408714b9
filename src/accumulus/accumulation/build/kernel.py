"""The compiled loop behind ``chunk_sums.chunk_sums``: every sum of a block, for several
reductions at once, per chunk segment, in one pass over the block.

The block is viewed as rows: ``(R, Q)``, the last axis ``Q`` and every other axis flattened
into ``R`` (a free reshape of a C-ordered block). Each row is read once: its finite values
(0 where missing or infinite) and its validity (1 or 0) are formed in two small float64
buffers, then added into every reduction's output row (tallies of +inf and -inf, and powers
of x, in a third when asked for). Where a reduction keeps the last axis the adds run
along contiguous memory (which LLVM vectorizes); where it sums the last axis they are
per-segment totals. Which output row an input row adds to, per reduction, is a table made
with NumPy (``chunk_sums._row_table``), so the loop knows nothing of the block's other axes.
Where nothing is summed (entries at every element) each output row is one input row's,
zeroed by the loop just before it is added to.
Nothing the size of the block is allocated. Compiled by numba, cached on disk.

Beside it, the build's other compiled loops: long prefix sums (``prefix_rows``), the
copy of a region of entries into chunk order for its writes (``chunk_order``, used by
``encoded_chunks``), and long prefix sums written straight into a held row in chunk order
(``prefix_into_chunks``, used by ``stream``'s writer).
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, fastmath={"reassoc"})
def block_sums(
    rows: np.ndarray,  # (R, Q): values, NaN where missing
    weights: np.ndarray,  # (R_w, Q_w) float64: Q_w is Q or 1
    weight_of: np.ndarray,  # (R,): the weights row of each row
    row_to: np.ndarray,  # (K, R): each reduction's output row of each row
    columns: np.ndarray,  # (K, S + 1): where segments of the last axis start, then Q
    n_columns: np.ndarray,  # (K,): output columns (Q, or the segment count when summed)
    n_rows: np.ndarray,  # (K,): output rows of each reduction
    sums_last: np.ndarray,  # (K,): whether a reduction sums the last axis (1) or not (0)
    powers: np.ndarray,  # (K, T, 2): (a, b) of each sum Σ w^a·x^b, a in {0, 1}; b -1/-2: tallies
    n_terms: np.ndarray,  # (K,): sums of each reduction
    offsets: np.ndarray,  # (K,): where each reduction's (T, n_rows, n_columns) sums start
    out: np.ndarray,  # flat float64, added to
    fresh: bool,  # out is not zeroed: no reduction sums anything, each row is zeroed here
    reference: float = 0.0,  # powers b >= 2 are of x − reference (centred sums of squares)
) -> None:
    n_rows_in, q_len = rows.shape
    value = np.empty(q_len)
    valid = np.empty(q_len)
    power = np.empty(q_len)
    per_column = weights.shape[1] > 1
    for r in range(n_rows_in):
        infinite = 0.0
        for q in range(q_len):
            # An infinite value is valid (it counts) but adds nothing to the sums of x^b,
            # which stay finite; the tallies count +inf and -inf apart.
            v = np.float64(rows[r, q])
            finite = abs(v) < np.inf
            value[q] = v if finite else 0.0
            valid[q] = 1.0 if v == v else 0.0
            infinite += valid[q] - (1.0 if finite else 0.0)
        wr = weight_of[r]
        for k in range(row_to.shape[0]):
            for t in range(n_terms[k]):
                a, b = powers[k, t, 0], powers[k, t, 1]
                at = offsets[k] + (t * n_rows[k] + row_to[k, r]) * n_columns[k]
                o = out[at : at + n_columns[k]]
                if fresh:  # while it is in cache, not in a pass over all of out before
                    o[:] = 0.0
                if b < 0 and infinite == 0.0:
                    continue  # a tally of a row without infinities adds nothing
                if b >= 2:
                    for q in range(q_len):
                        # 0 where missing or infinite (value 0 there, valid or not).
                        finite = abs(np.float64(rows[r, q])) < np.inf
                        power[q] = (value[q] - reference) ** b if finite else 0.0
                elif b < 0:  # the tally of +inf (b = -1) or -inf (b = -2)
                    tallied = np.inf if b == -1 else -np.inf
                    for q in range(q_len):
                        power[q] = 1.0 if np.float64(rows[r, q]) == tallied else 0.0
                # Each loop reads one buffer named in it: a loop over a buffer chosen at
                # run time is not vectorized.
                if sums_last[k]:
                    for s in range(n_columns[k]):
                        lo, hi = columns[k, s], columns[k, s + 1]
                        total = 0.0
                        if a == 1 and per_column:
                            if b == 0:
                                for q in range(lo, hi):
                                    total += weights[wr, q] * valid[q]
                            elif b == 1:
                                for q in range(lo, hi):
                                    total += weights[wr, q] * value[q]
                            else:
                                for q in range(lo, hi):
                                    total += weights[wr, q] * power[q]
                        else:
                            if b == 0:
                                for q in range(lo, hi):
                                    total += valid[q]
                            elif b == 1:
                                for q in range(lo, hi):
                                    total += value[q]
                            else:
                                for q in range(lo, hi):
                                    total += power[q]
                            if a == 1:
                                total *= weights[wr, 0]
                        o[s] += total
                elif a == 1 and per_column:
                    if b == 0:
                        for q in range(q_len):
                            o[q] += weights[wr, q] * valid[q]
                    elif b == 1:
                        for q in range(q_len):
                            o[q] += weights[wr, q] * value[q]
                    else:
                        for q in range(q_len):
                            o[q] += weights[wr, q] * power[q]
                else:
                    scale = weights[wr, 0] if a == 1 else 1.0
                    if b == 0:
                        for q in range(q_len):
                            o[q] += scale * valid[q]
                    elif b == 1:
                        for q in range(q_len):
                            o[q] += scale * value[q]
                    else:
                        for q in range(q_len):
                            o[q] += scale * power[q]


@numba.njit(nogil=True, cache=True)
def prefix_rows(rows: np.ndarray) -> None:
    """Cumulative sums along each row of a C-ordered ``(R, Q)`` float64 array, in place,
    added in order as ``np.cumsum`` adds them (the same sums to the last bit), at about a
    nanosecond a value where ``np.cumsum`` along the last axis takes four."""
    for r in range(rows.shape[0]):
        total = 0.0
        for q in range(rows.shape[1]):
            total += rows[r, q]
            rows[r, q] = total


@numba.njit(nogil=True, cache=True)
def chunk_order(values: np.ndarray, out: np.ndarray) -> None:
    """Copy ``values`` (``(A, B, Q)``, any strides) into ``out`` (``(GA, GB, Q, CA, CB)``,
    C-ordered) chunk by chunk, for chunks ``(CA, CB, 1)``, each then contiguous, in the order
    a chunk grid is walked (the last axis fastest): ``out[i, j, q, a, b] = values[i*CA + a,
    j*CB + b, q]``, cast to ``out``'s type. Taken one chunk at a time, such a chunk reads one
    value per cache line of ``values``; here each ``(B, Q)`` slice is read once, while it is
    in cache, and written to the ``Q`` chunks it feeds in runs of ``CB`` values. Where
    ``values`` ends inside a chunk, the rest of ``out`` is left as it is."""
    n_a, n_b, n_q = values.shape
    side_a, side_b = out.shape[3], out.shape[4]
    for a in range(n_a):
        i, row = a // side_a, a % side_a
        for q in range(n_q):
            for j in range(out.shape[1]):
                lo = j * side_b
                for b in range(min(side_b, n_b - lo)):
                    out[i, j, q, row, b] = values[a, lo + b, q]


@numba.njit(nogil=True, cache=True)
def prefix_into_chunks(values: np.ndarray, out: np.ndarray, start: int) -> None:
    """Cumulative sums of ``values`` (``(T, Y, X)`` float64, any strides) along ``X``,
    written in chunk order into ``out`` (``(X, GY, CT, CY)``, C-ordered, for chunks ``(CT,
    CY, 1)``) from ``start`` on along ``CT``: ``out[x, y // CY, start + t, y % CY] = Σ_{x' ≤
    x} values[t, y, x']``, cast to ``out``'s type (counts: exact sums of ones), added in
    order as ``prefix_rows`` adds them. One pass where a prefix sum in place, a copy into a
    held row (with the cast) and a copy into chunk order for the writes took three."""
    n_t, n_y, n_x = values.shape
    side = out.shape[3]
    for t in range(n_t):
        for y in range(n_y):
            g, row = y // side, y % side
            total = 0.0
            for x in range(n_x):
                total += values[t, y, x]
                out[x, g, start + t, row] = total
