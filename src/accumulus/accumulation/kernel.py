"""The compiled loop behind ``sums.chunk_sums``: several sums of a block along one axis, per
chunk segment, in one call, without materialising any summand.

The block is viewed as ``(P, N, Q)``: the axes before the summed one, the summed one, the
axes after it (a free reshape of a C-ordered block). Each sum Σ w^a·x^b is formed value by
value as it is added, so nothing the size of the block is allocated, and every inner loop
runs along contiguous memory, which LLVM vectorizes. Compiled by numba, cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np


@numba.njit(nogil=True, cache=True, fastmath={"reassoc"})
def axis_sums(
    block: np.ndarray,  # (P, N, Q): values, NaN where missing
    segment: np.ndarray,  # (N,): the chunk segment of each index along the summed axis
    starts: np.ndarray,  # (S + 1,): where each segment starts, and N
    weights: np.ndarray,  # (P_w, N_w, Q_w): N_w is N or 1, Q_w is Q or 1
    weight_of: np.ndarray,  # (P,): the weights row (first index) of each p
    powers: np.ndarray,  # (T, 2): (a, b) of each sum Σ w^a·x^b, a in {0, 1}; b -1/-2: tallies
    out: np.ndarray,  # (T, P, S, Q) float64, added to
) -> None:
    n_pre, n_sum, n_post = block.shape
    for p in range(n_pre):
        w_p = weights[weight_of[p]]
        if n_post == 1:
            # Summing along the contiguous axis: one total per segment.
            values = block[p, :, 0]
            w_n = w_p[:, 0]
            for t in range(powers.shape[0]):
                a, b = powers[t, 0], powers[t, 1]
                for s in range(starts.shape[0] - 1):
                    total = 0.0
                    if a == 1 and w_n.shape[0] > 1:
                        for n in range(starts[s], starts[s + 1]):
                            total += w_n[n] * _summand(values[n], b)
                    else:
                        for n in range(starts[s], starts[s + 1]):
                            total += _summand(values[n], b)
                        if a == 1:
                            total *= w_n[0]
                    out[t, p, s, 0] += total
            continue
        for n in range(n_sum):
            values = block[p, n]
            w_q = w_p[n if w_p.shape[0] > 1 else 0]
            for t in range(powers.shape[0]):
                a, b = powers[t, 0], powers[t, 1]
                target = out[t, p, segment[n]]
                if a == 1 and w_q.shape[0] > 1:
                    for q in range(n_post):
                        target[q] += w_q[q] * _summand(values[q], b)
                else:
                    scale = w_q[0] if a == 1 else 1.0
                    for q in range(n_post):
                        target[q] += scale * _summand(values[q], b)


@numba.njit(inline="always")
def _summand(value, b: int) -> float:
    """x^b for a valid value, 0 for a missing one (NaN); an infinite value counts (b = 0)
    but adds nothing to the sums of x^b (b > 0), which stay finite. b = -1 (-2) is the
    tally of +inf (-inf): 1 where the value is +inf (-inf)."""
    v = np.float64(value)
    if b < 0:
        return 1.0 if v == (np.inf if b == -1 else -np.inf) else 0.0
    if v != v:
        return 0.0
    if b == 0:
        return 1.0
    if v == np.inf or v == -np.inf:
        return 0.0
    if b == 1:
        return v
    return v**b
