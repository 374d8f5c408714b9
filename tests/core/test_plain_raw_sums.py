"""``reduce_terms`` with weights that do not vary along the axes summed (a raw part's sums at
a range's end, ``execute._plain``) sums each term straight into its row of the answer (a
sum over one value per cell copied into it): the same bits as summing with the weights'
axes kept, weighting, then reshaping. Its values with the non-finite ones zeroed
(``finite_or_zero``) are ``np.where``'s, bit for bit."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.model import statistics
from accumulus.accumulation.model.sums import finite_or_zero, reduce_terms
from accumulus.accumulation.query.execute import _plain

LINEAR = [
    statistics.WSUM,
    statistics.WCOUNT,
    statistics.SUM,
    statistics.COUNT,
    statistics.POSINF,
    statistics.NEGINF,
]


@settings(max_examples=80, deadline=None)
@given(
    shape=st.lists(st.integers(1, 7), min_size=1, max_size=3),
    dtype=st.sampled_from(["f4", "f8"]),
    holes=st.sampled_from(["none", "nan", "nan+inf"]),
    weighted=st.sampled_from(["one", "scalar", "kept"]),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_sums_into_rows_are_the_kept_axes_sums(shape, dtype, holes, weighted, data, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(0, 1e3, size=shape).astype(dtype)
    if holes != "none":
        x.flat[rng.integers(0, x.size, x.size // 3 + 1)] = np.nan
    if holes == "nan+inf":
        x.flat[rng.integers(0, x.size)] = np.inf
        x.flat[rng.integers(0, x.size)] = -np.inf
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    w: np.ndarray | float = 1.0
    if weighted == "scalar":
        w = 0.37
    elif weighted == "kept":
        w = rng.uniform(0.1, 1, size=[1 if a in axes else n for a, n in enumerate(shape)])
    terms = data.draw(st.lists(st.sampled_from(LINEAR), min_size=1, max_size=6, unique=True))
    assert _plain(terms, w, axes)
    want = _kept_then_weighted(x, w, terms, axes)
    got = reduce_terms(x, w, terms, axes)
    np.testing.assert_array_equal(got, want, strict=True)


def _kept_then_weighted(x, w, terms, axes) -> np.ndarray:
    """Each sum over ``axes`` with the axes kept, times the weights, reshaped."""
    finite, missing = np.isfinite(x), np.isnan(x)
    values = np.where(finite, x, 0)
    w = np.asarray(w, dtype="f8").reshape((1,) * (x.ndim - np.ndim(w)) + np.shape(w))
    kept = [n for a, n in enumerate(x.shape) if a not in axes]
    out = np.zeros((len(terms), *kept))
    for i, name in enumerate(terms):
        term = statistics.SUMS[name]
        if term.tally is not None:
            summands = x == term.tally
        else:
            summands = ~missing if term.value_power == 0 else values
        total = np.sum(summands, axis=axes, dtype="f8", keepdims=True)
        if term.weight_power == 1:
            total = total * w
        out[i] = total.reshape(kept)
    return out


def test_not_plain():
    """Centred sums, sums against time and weights varying along a summed axis go the
    general way."""
    assert not _plain([statistics.SUMSQ], 1.0, (0,))
    assert not _plain([statistics.TSUM], 1.0, (0,))
    assert not _plain([statistics.SUM], np.ones((3, 1)), (0,))


@settings(max_examples=60, deadline=None)
@given(
    dtype=st.sampled_from(["<f4", "<f8", ">f4", ">f8"]),
    shape=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    strided=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_finite_or_zero_is_where_bit_for_bit(dtype, shape, strided, seed):
    """The values' bits masked: ``np.where(finite, x, 0)`` bit for bit, for NaN, both
    infinities, -0.0 and subnormals, in either byte order, on a strided view too."""
    rng = np.random.default_rng(seed)
    specials = np.array([np.nan, np.inf, -np.inf, -0.0, 0.0, 1e-310, -1e-40], dtype=dtype)
    x = rng.normal(0, 1e3, size=[2 * n for n in shape]).astype(dtype)
    x.flat[rng.integers(0, x.size, x.size // 2)] = rng.choice(specials, x.size // 2)
    if strided:
        x = x[tuple(slice(None, None, 2) for _ in shape)]
    finite = np.isfinite(x)
    got = finite_or_zero(x, finite)
    want = np.where(finite, x, 0).astype(x.dtype)
    assert got.dtype == x.dtype and got.shape == x.shape
    assert got.tobytes() == want.tobytes()
