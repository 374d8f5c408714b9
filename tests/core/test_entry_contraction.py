"""An entry slab weighted along one summed axis (``execute._entry_sums``' contraction: a
series' latitude rows) gives Σ w·x over the summed axes, in the answer's order, whatever the
slab's dimensions, the weighted axis, the other axes summed and the order kept: as the
weights multiplied in and summed, to rounding (a matrix-vector product adds in another
order), whether BLAS is handed all its rows at once or in blocks (``BLAS_WHOLE_VALUES``,
``BLAS_BLOCK_VALUES``)."""

from __future__ import annotations

from unittest import mock

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query import execute
from accumulus.accumulation.query.execute import EntryPart, _contraction, _entry_sums


@st.composite
def contractions(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, EntryPart]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.lists(st.integers(1, 7), min_size=ndim, max_size=ndim)))
    axis = draw(st.integers(0, ndim - 1))
    shape = (*shape[:axis], max(2, shape[axis]), *shape[axis + 1 :])  # weights that vary
    others = [a for a in range(ndim) if a != axis]
    also = draw(st.lists(st.sampled_from(others), unique=True)) if others else []
    summed = tuple(sorted({axis, *also}))
    kept = ndim - len(summed)
    order = tuple(draw(st.permutations(range(kept))))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    # Prefix-sum entries: float64 sums, or the counts of an integer type.
    if draw(st.booleans()):
        slab = rng.normal(280.0, 5.0, shape).cumsum(axis=0)
    else:
        slab = rng.integers(0, 3000, shape).astype(draw(st.sampled_from(["u2", "i4", "i8"])))
    weights_shape = [1] * ndim
    weights_shape[axis] = shape[axis]
    weights = rng.uniform(0.01, 1.0, weights_shape)
    if draw(st.booleans()):  # a view of a larger decoded chunk, as a part reads it
        slab = np.concatenate([slab, slab], axis=0)[: shape[0]]
    contract = _contraction(weights, summed)
    assert contract is not None
    part = EntryPart(0, 1, "wsum", (), summed, order, (0,), weights, True, contract)
    return slab, weights, part


@settings(max_examples=300, deadline=None)
@given(contractions(), st.sampled_from([1, 5, 16, None]))
def test_contraction_is_the_weighted_sum(
    case: tuple[np.ndarray, np.ndarray, EntryPart], block: int | None
) -> None:
    slab, weights, part = case
    expected = np.sum(slab * weights, axis=part.summed, dtype="f8").transpose(part.order)
    if block is None:  # as a query takes it
        got = np.asarray(_entry_sums(slab, part))
    else:  # in blocks of at most ``block`` values
        with (
            mock.patch.object(execute, "BLAS_WHOLE_VALUES", 0),
            mock.patch.object(execute, "BLAS_BLOCK_VALUES", block),
        ):
            got = np.asarray(_entry_sums(slab, part))
    assert got.dtype == np.float64
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-13, atol=0)
