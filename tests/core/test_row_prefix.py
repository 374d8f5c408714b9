"""A chunk's weighted prefix sums along its rows (``row_prefix``): any run of rows' weighted
sum from two of them, equal to the product it replaces within a few ulps."""

from __future__ import annotations

import numpy as np
import pytest

from accumulus.accumulation.query.row_prefix import RowPrefix, row_sums


@pytest.mark.parametrize("seed", range(6))
def test_any_rows_weighted_sum_from_two_prefix_rows(seed):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in rng.integers(1, 9, size=3))
    axis = int(rng.integers(0, 3))
    chunk = rng.normal(280, 5, size=shape).cumsum(axis=2)
    held = int(rng.integers(1, shape[axis] + 1))  # rows past the array's end weigh 0
    weights = rng.uniform(0.01, 1, size=held)
    prefix = RowPrefix(axis, weights)
    form = prefix(chunk)
    assert form.shape == prefix.shape(shape) and form.dtype == prefix.dtype
    for _ in range(20):
        lo = int(rng.integers(0, held))
        hi = int(rng.integers(lo, held + 1))
        local: list[slice | int] = [slice(None)] * 3
        local[axis] = slice(lo, hi)
        other = next(a for a in range(3) if a != axis)
        local[other] = int(rng.integers(0, shape[other]))  # an entry: its axis dropped
        got = row_sums(form, tuple(local), axis)
        rows_at = axis - (other < axis)  # the rows' axis in the selection
        expected = np.moveaxis(chunk[tuple(local)], rows_at, -1) @ weights[lo:hi]
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-9 * np.abs(chunk).max())


def test_the_forms_name_follows_its_axis_and_weights():
    weights = np.linspace(0.1, 1, 5)
    assert RowPrefix(1, weights).form == RowPrefix(1, weights.copy()).form
    assert RowPrefix(1, weights).form != RowPrefix(0, weights).form
    assert RowPrefix(1, weights).form != RowPrefix(1, weights[::-1].copy()).form
    assert RowPrefix(1, weights).form.replace("-", "").isalnum()


@pytest.mark.parametrize("dtype", ["u2", "i8"])
def test_a_missing_chunks_counts_are_not_numbers_in_the_form(dtype):
    """Counts take float64 forms; a count array's fill value (a missing chunk's: the type's
    largest unsigned, -1 signed) is no count: every sum over it is NaN."""
    counts = np.arange(12, dtype=dtype).reshape(4, 3)
    weights = np.array([0.5, 1.0, 2.0])
    form = RowPrefix(1, weights)(counts)
    assert form.dtype == np.dtype("f8")
    np.testing.assert_array_equal(row_sums(form, (2, slice(0, 3)), 1), counts[2] @ weights)
    counts[2, 1] = np.iinfo(dtype).max if dtype == "u2" else -1
    form = RowPrefix(1, weights)(counts)
    assert np.isnan(row_sums(form, (2, slice(0, 3)), 1))
    assert row_sums(form, (2, slice(0, 1)), 1) == 0.5 * counts[2, 0]  # rows before it
    assert row_sums(form, (1, slice(0, 3)), 1) == counts[1] @ weights  # other entries
