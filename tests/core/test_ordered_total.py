"""The running total of ``execute`` (``_OrderedTotal``) gives the bits of adding every part
with its sign, in plan order, into float64 zeros, whatever order the parts arrive in and
whatever their type (whole rows of counts are summed in their own type, converted once);
and only the rows floating-point values reached are checked to be finite (``_finite``)."""

from __future__ import annotations

import warnings

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query.execute import _finite, _OrderedTotal


@settings(max_examples=60, deadline=None)
@given(
    rows=st.integers(1, 3),
    cells=st.integers(1, 9),
    parts=st.integers(1, 6),
    seed=st.integers(0, 2**32 - 1),
)
def test_total_is_the_signed_sum_in_plan_order(rows: int, cells: int, parts: int, seed: int):
    rng = np.random.default_rng(seed)
    listed = []
    for _ in range(parts):
        row = int(rng.integers(rows))
        lo = int(rng.integers(cells))
        hi = int(rng.integers(lo, cells)) + 1
        if rng.random() < 0.5:
            lo, hi = 0, cells  # a whole row, as a map's parts are
        dtype = rng.choice(["u2", "i8", "f8"])
        if dtype == "f8":
            value = rng.normal(0, 1e6, hi - lo) * rng.choice([1.0, -0.0])
            listed.append(((row, slice(lo, hi)), int(rng.choice([1, -1])), value))
            continue
        # Counts: a later prefix entry less an earlier one (a count of valid values, never
        # negative, as a query's are), in either order in the plan.
        later = rng.integers(0, 1000, hi - lo).astype(dtype)
        earlier = (later * rng.random(hi - lo)).astype(dtype)
        pair = [((row, slice(lo, hi)), 1, later), ((row, slice(lo, hi)), -1, earlier)]
        listed.extend(pair[:: int(rng.choice([1, -1]))])
    parts = len(listed)

    expected = np.zeros((rows, cells))
    for where, sign, value in listed:
        expected[where] = (expected[where] + value) if sign > 0 else (expected[where] - value)

    total = _OrderedTotal((rows, cells))
    for index in rng.permutation(parts):  # arriving in any order
        where, sign, value = listed[index]
        # (Said finite or not: the same bits, with or without silencing inf - inf.)
        total.add(int(index), where, sign, value, finite=bool(rng.random() < 0.5))
    got = total.result()
    assert got.tobytes() == expected.tobytes()
    assert total.floating == {where[0] for where, _, value in listed if value.dtype.kind == "f"}


def test_infinities_meeting_warn_nothing():
    """Raw sums holding +inf and -inf meet as NaN (the tallies decide the answer): no
    RuntimeWarning for the user."""
    total = _OrderedTotal((1, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        total.add(0, (0, slice(0, 2)), 1, np.array([np.inf, 1.0]))
        total.add(1, (0, slice(0, 2)), -1, np.array([np.inf, 2.0]))
        total.add(2, (0, slice(0, 2)), 1, np.array([3.0, 4.0]), finite=True)
    got = total.result()
    assert np.isnan(got[0, 0]) and got[0, 1] == 3.0


def test_only_rows_reached_by_floats_are_checked():
    sums = np.zeros((2, 3))
    sums[0, 1] = np.nan
    assert not _finite(sums, {0})
    assert not _finite(sums, {0, 1})
    sums[0, 1] = np.inf
    assert not _finite(sums, {0, 1})
    # Row 0 held only integers (never NaN): not looked at.
    assert _finite(sums, {1})
    assert _finite(np.zeros((0, 3)), {0})
    assert _finite(sums, set())
    # Rows of floats apart, a row of counts between them (a finite number): each looked at.
    sums = np.zeros((4, 3))
    sums[1] = 7.0
    assert _finite(sums, {0, 2})
    sums[2, 0] = -np.inf
    assert not _finite(sums, {0, 2})
    assert _finite(sums, {0, 1})


def test_counts_wrapping_in_their_type_are_exact():
    """A row of counts summed in its own type: a partial sum may pass the type's largest
    value (here 300 in uint8), the row's sum (a count, which the type holds) is exact."""
    parts = [200, -150, 250, -240]
    total = _OrderedTotal((1, 2))
    for index, count in enumerate(parts):
        value = np.full(2, abs(count), dtype="u1")
        total.add(index, (0, slice(0, 2)), 1 if count > 0 else -1, value)
    assert total.result().tolist() == [[60.0, 60.0]]
    assert total.floating == set()


def test_rows_never_reached_can_be_left_out():
    """A total's last rows that no part reached (a query's tallies when no infinity was met:
    ``execute``) are left out of its result; the rows kept are as with them."""
    total = _OrderedTotal((4, 3))
    total.add(0, (slice(0, 2), slice(0, 3)), 1, np.arange(6.0).reshape(2, 3))
    total.add(1, (1, slice(1, 3)), -1, np.array([1, 2], dtype="u2"))
    assert not total.reached([2, 3]) and total.reached([1, 3])
    assert total.result(2).tolist() == [[0.0, 1.0, 2.0], [3.0, 3.0, 3.0]]
