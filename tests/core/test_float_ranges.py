"""Ranges of floating-point labels resolved by NumPy's binary search
(``request.float_positions``) select what pandas' ``slice_indexer`` selects, ascending or
descending, with repeated labels and bounds on, between and beyond them; float32 labels are
left to pandas."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query import request
from accumulus.accumulation.query.request import float_positions, index_range
from accumulus.errors import AccumulusError

LABELS = st.lists(
    st.floats(-1000, 1000, allow_nan=False) | st.sampled_from([0.5, 1.5, -0.5]),
    min_size=1,
    max_size=30,
)
BOUNDS = st.none() | st.floats(-1100, 1100, allow_nan=False) | st.integers(-1100, 1100)


def _pandas(index: pd.Index, start, stop, descending: bool) -> tuple[int, int]:
    sl = index.slice_indexer(stop, start) if descending else index.slice_indexer(start, stop)
    lo, hi, _ = sl.indices(len(index))
    return lo, max(lo, hi)


@settings(max_examples=400, deadline=None)
@given(LABELS, BOUNDS, BOUNDS, st.booleans())
def test_float_positions_match_pandas(labels, start, stop, descending):
    values = np.sort(np.array(labels, dtype="f8"))
    if descending:
        values = values[::-1].copy()
    index = pd.Index(values, name="lat")
    descending = not index.is_monotonic_increasing  # as ``index_range`` tells
    for a, b in ((start, stop), (stop, start)):
        for bounds in ((a, b), (values[0], b), (a, values[-1])):  # on labels too
            expected = _pandas(index, *bounds, descending)
            assert float_positions(index, *bounds, descending) == expected


def _general(index: pd.Index, start, stop):
    """``index_range`` without its quick path (``_quick_range``): the answer, or the error."""
    with patch.object(request, "_quick_range", return_value=None):
        try:
            return index_range(index, "lat", start, stop)
        except AccumulusError as exc:
            return str(exc)


@settings(max_examples=400, deadline=None)
@given(LABELS, BOUNDS, BOUNDS, st.booleans())
def test_quick_ranges_are_the_general_answers(labels, start, stop, descending):
    """``index_range``'s quick path (``_quick_range``) gives what its general one gives,
    whether the range reaches past the coordinate included, and is taken whenever the
    range selects something."""
    values = np.sort(np.array(labels, dtype="f8"))
    index = pd.Index(values[::-1].copy() if descending else values, name="lat")
    pairs = ((start, stop), (values[0], stop), (start, values[-1] + 0.25), (None, None))
    for a, b in pairs:
        expected = _general(index, a, b)
        try:
            found = index_range(index, "lat", a, b)
        except AccumulusError as exc:
            found = str(exc)
        assert found == expected
        if not isinstance(found, str):
            low, high = (b, a) if a is not None and b is not None and a > b else (a, b)
            assert request._quick_range(index, low, high) == found


def test_other_indexes_and_bounds_are_left_to_pandas():
    floats = pd.Index([0.5, 1.5, 2.5])
    assert float_positions(floats, np.nan, None, False) is None
    assert float_positions(floats, None, float("inf"), False) is None
    assert float_positions(floats, True, None, False) is None
    assert float_positions(floats, 2**60, None, False) is None
    assert float_positions(pd.Index([1, 2, 3]), 1, 2, False) is None
    assert float_positions(pd.Index(np.array([0.5, 1.5], dtype="f4")), 1, 2, False) is None
    assert float_positions(pd.Index(["a", "b"]), None, None, False) is None
    # Through index_range, both ways round, ascending and descending.
    assert index_range(floats, "lat", 2.0, 0.0) == ((0, 2), False)
    assert index_range(pd.Index([2.5, 1.5, 0.5]), "lat", 0.0, 2.0) == ((1, 3), False)
    assert index_range(floats, "lat", 0.5, 9.0) == ((0, 3), True)
