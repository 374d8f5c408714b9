"""Chunk rules: parsing, calendar chunk sizes in every calendar, and where an append's
chunks fall."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.grid import (
    AppendChunks,
    ChunkBounds,
    append_chunk_sizes,
    calendar_chunk_sizes,
    chunk_sizes,
    parse_chunk_rules,
)

from .conftest import daily_times, period_counts

# --------------------------------------------------------------------------------------------
# Parsing


@pytest.mark.parametrize(
    ("spec", "rules"),
    [
        ("time=month", {"time": "month"}),
        ("time=YEAR", {"time": "year"}),
        ("time=per-granule", {"time": "per-granule"}),
        ("lat=90", {"lat": 90}),
        ("time=31,28,31", {"time": (31, 28, 31)}),
        ("time=month,lat=90", {"time": "month", "lat": 90}),
        ("time=31,28, 31,lat=90,lon=3,3", {"time": (31, 28, 31), "lat": 90, "lon": (3, 3)}),
        (["time=month", "lat=45"], {"time": "month", "lat": 45}),
        (
            {"time": [31, 29], "lat": "90", "lon": "month"},
            {"time": (31, 29), "lat": 90, "lon": "month"},
        ),
    ],
)
def test_parse_chunk_rules(spec, rules):
    assert parse_chunk_rules(spec) == rules


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("time=0", "positive integers, got 0"),
        ("time=-3", "positive integers, got -3"),
        ("time=31,0,31", "positive integers, got 0"),
        ("time=weekly", "expected a chunk size, a list of sizes, or one of month"),
        ("time=31,x", "expected a chunk size"),
        ("31,28", "expected dim=rule"),
        ("=5", "no dimension name"),
        ("time=month,time=5", "given twice"),
        ("", "expected dim=rule"),
        ([], "no rule given"),
        ({"time": True}, "positive integers"),
    ],
)
def test_parse_errors_name_the_option(spec, message):
    with pytest.raises(AccumulusError, match=message):
        parse_chunk_rules(spec)


# --------------------------------------------------------------------------------------------
# Calendar chunk sizes


@pytest.mark.parametrize(
    "calendar", ["standard", "proleptic_gregorian", "noleap", "all_leap", "360_day", "julian"]
)
def test_month_and_year_sizes_match_xarray_resample(calendar):
    times = daily_times(calendar, "1999-12-15", 1200)  # covers the leap year 2000 and 2004
    assert list(calendar_chunk_sizes(times, "month")) == period_counts(times, "MS")
    assert list(calendar_chunk_sizes(times, "year")) == period_counts(times, "YS")


@pytest.mark.parametrize(
    ("calendar", "february_2004"), [("standard", 29), ("noleap", 28), ("360_day", 30)]
)
def test_leap_february(calendar, february_2004):
    times = daily_times(calendar, "2004-01-01", 120)
    sizes = chunk_sizes("month", 120, dim="time", times=times)
    assert sizes[1] == february_2004
    assert sizes[0] == (30 if calendar == "360_day" else 31)


def test_sub_daily_data_in_months():
    times = daily_times("noleap", "2001-01-01", 8 * 59, freq="3h")
    assert chunk_sizes("month", len(times), dim="time", times=times) == (8 * 31, 8 * 28)


def test_integer_and_list_rules():
    assert chunk_sizes(10, 25, dim="lat") == (10, 10, 5)
    assert chunk_sizes(40, 25, dim="lat") == (25,)
    assert chunk_sizes((5, 20), 25, dim="lat") == (5, 20)


@pytest.mark.parametrize(
    ("rule", "times", "message"),
    [
        ((5, 5), None, "add up to 10, but dimension 'lat' has length 25"),
        ("per-granule", None, "applies to appends"),
        ("month", None, "has no time coordinate"),
        ("month", np.arange(25.0), "needs a CF time coordinate, but 'lat' holds values of type"),
    ],
)
def test_rule_errors(rule, times, message):
    with pytest.raises(AccumulusError, match=message):
        chunk_sizes(rule, 25, dim="lat", times=times)


# --------------------------------------------------------------------------------------------
# Appends


def _append_in_granules(times, rule, granule_lengths):
    """Append ``times`` granule by granule, returning the declared sizes after each."""
    sizes: tuple[int, ...] = ()
    done = 0
    history = []
    for n in granule_lengths:
        result = append_chunk_sizes(sizes, times[:done], times[done : done + n], rule)
        history.append((sizes, result, done + n))
        sizes, done = result.sizes, done + n
    return history


def _check_append_invariants(history):
    for old, result, length in history:
        kept = old[:-1] if result.rewrite is not None else old
        assert result.sizes[: len(kept)] == kept  # existing chunks keep their size
        assert sum(result.sizes[:-1]) < length <= sum(result.sizes)  # last chunk holds data


@pytest.mark.parametrize("calendar", ["standard", "noleap", "360_day"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_monthly_appends_of_daily_granules(calendar, seed):
    times = daily_times(calendar, "2003-12-20", 140)
    rng = np.random.default_rng(seed)
    lengths = []
    while sum(lengths) < len(times):
        lengths.append(int(min(rng.integers(1, 25), len(times) - sum(lengths))))
    history = _append_in_granules(times, "month", lengths)
    _check_append_invariants(history)
    # A steady daily cadence never changes a stored chunk: each month is declared whole.
    assert all(result.rewrite is None for _, result, _ in history)
    final = ChunkBounds.from_sizes(history[-1][1].sizes)
    data_sizes = [min(b, len(times)) - a for a, b in itertools.pairwise(final.edges)]
    assert data_sizes == period_counts(times, "MS")
    last_month_days = int(xr.DataArray(times[-1:], dims="t").dt.days_in_month[0])
    assert history[-1][1].sizes[-1] == last_month_days


def test_yearly_appends_of_monthly_means():
    times = daily_times("noleap", "2001-03-01", 30, freq="MS")
    history = _append_in_granules(times, "year", [4, 4, 7, 15])
    _check_append_invariants(history)
    assert history[0][1] == AppendChunks((10,))  # March..December 2001
    assert history[-1][1].sizes == (10, 12, 12) and history[-1][1].rewrite is None


def test_a_gap_closes_the_month_early():
    times = daily_times("standard", "2003-01-01", 90)
    first = append_chunk_sizes((), times[:0], times[:40], "month")
    assert first == AppendChunks((31, 28))  # February declared whole, 9 days held
    # The next granule starts on March 1 (February 10-28 never came): February closes at 9
    # days, a chunk whose size changes, so the append must rewrite it.
    after_gap = append_chunk_sizes(first.sizes, times[:40], times[59:70], "month")
    assert after_gap == AppendChunks((31, 9, 31), rewrite=1)


def test_irregular_times_close_each_chunk_and_reopen_it():
    times = daily_times("standard", "2003-01-01", 31)[[0, 1, 5, 6, 20, 21, 22, 30]]
    first = append_chunk_sizes((), times[:0], times[:2], "month")
    assert first == AppendChunks((2,))  # two values show no frequency: the chunk is closed
    second = append_chunk_sizes(first.sizes, times[:2], times[2:5], "month")
    # Same month: the closed chunk grows to take the new days, so it is rewritten.
    assert second == AppendChunks((5,), rewrite=0)


def test_append_to_a_rechunked_cube_extends_its_last_month():
    times = daily_times("360_day", "2003-01-01", 75)
    sizes = chunk_sizes("month", 45, dim="time", times=times[:45])  # rechunk: (30, 15)
    result = append_chunk_sizes(sizes, times[:45], times[45:75], "month")
    assert result == AppendChunks((30, 30, 30), rewrite=1)


def test_integer_rule_fills_the_last_chunk_like_a_regular_grid():
    times = np.arange(100)
    history = _append_in_granules(times, 12, [5, 20, 1, 30, 44])
    _check_append_invariants(history)
    assert all(result.rewrite is None for _, result, _ in history)
    assert ChunkBounds.from_sizes(history[-1][1].sizes).edges[:-1] == tuple(range(0, 100, 12))


def test_per_granule_keeps_each_granule_a_chunk():
    times = np.arange(60)
    lengths = [7, 1, 19, 3, 30]
    history = _append_in_granules(times, "per-granule", lengths)
    assert history[-1][1].sizes == tuple(lengths)
    assert all(result.rewrite is None for _, result, _ in history)
    # A month still open (declared whole) is closed at its data when granules take over.
    days = daily_times("standard", "2003-01-01", 20)
    result = append_chunk_sizes((31,), days[:10], days[10:20], "per-granule")
    assert result == AppendChunks((10, 10), rewrite=0)


def test_explicit_sizes_for_the_appended_values():
    result = append_chunk_sizes((4, 4), np.arange(8), np.arange(8, 20), (5, 7))
    assert result == AppendChunks((4, 4, 5, 7))
    with pytest.raises(AccumulusError, match=r"add up to 11, but 12 values are appended"):
        append_chunk_sizes((4, 4), np.arange(8), np.arange(8, 20), (5, 6))


def test_nothing_appended_changes_nothing():
    assert append_chunk_sizes((31, 28), np.arange(40), [], "month") == AppendChunks((31, 28))


@pytest.mark.parametrize(("sizes", "length"), [((10,), 11), ((10, 5), 10), ((0, 5), 3), ((), 4)])
def test_sizes_that_do_not_fit_the_existing_length(sizes, length):
    with pytest.raises(ValueError, match="existing length"):
        append_chunk_sizes(sizes, np.arange(length), np.arange(3), 5)


# --------------------------------------------------------------------------------------------
# Appends to published chunks: no existing chunk changes size


def _published_history(times, rule, granule_lengths):
    """Declared sizes after each granule, appended with ``published=True``."""
    sizes: tuple[int, ...] = ()
    done = 0
    history = []
    for n in granule_lengths:
        result = append_chunk_sizes(
            sizes, times[:done], times[done : done + n], rule, published=True
        )
        assert result.rewrite is None
        assert result.sizes[: len(sizes)] == sizes  # every declared chunk keeps its size
        assert sum(result.sizes[:-1]) < done + n <= sum(result.sizes)
        history.append(result.sizes)
        sizes, done = result.sizes, done + n
    return history


@pytest.mark.parametrize("calendar", ["standard", "noleap", "360_day"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_published_months_are_those_of_a_steady_cadence(calendar, seed):
    """Without gaps, and once three values show the frequency, the published rule gives one
    chunk per month, as the unpublished one does."""
    times = daily_times(calendar, "2003-12-20", 140)
    rng = np.random.default_rng(seed)
    lengths = [3]
    while sum(lengths) < len(times):
        lengths.append(int(min(rng.integers(1, 25), len(times) - sum(lengths))))
    published = _published_history(times, "month", lengths)
    unpublished = [result.sizes for _, result, _ in _append_in_granules(times, "month", lengths)]
    assert published == unpublished
    final = ChunkBounds.from_sizes(published[-1])
    data_sizes = [min(b, len(times)) - a for a, b in itertools.pairwise(final.edges)]
    assert data_sizes == period_counts(times, "MS")


def test_published_month_goes_on_in_a_new_chunk_after_too_few_values():
    """Daily granules of one day: one and two values show no frequency, so their chunks are
    closed at their data and the month goes on in a new chunk (not a rewritten one); from the
    third value on, months are declared whole. Month boundaries stay chunk boundaries."""
    times = daily_times("standard", "2004-01-30", 40)
    history = _published_history(times, "month", [1] * 40)
    assert history[0] == (1,)  # January 30
    assert history[1] == (1, 1)  # January 31, in a chunk of its own
    assert history[2] == (1, 1, 29)  # February 2004, from its 1st day: 29 days
    assert history[-1] == (1, 1, 29, 31)  # March declared whole, 8 days held


def test_published_month_cut_short_by_a_gap_lends_its_room_to_the_next():
    times = daily_times("standard", "2003-01-01", 90)
    first = append_chunk_sizes((), times[:0], times[:40], "month", published=True)
    assert first == AppendChunks((31, 28))  # February declared whole, 9 days held
    # February 10-28 never come: March 1-11 fill February's declared chunk (19 days of room)
    # instead of shrinking it, and the chunks after realign with the months.
    kept = times[list(range(40)) + list(range(59, 90))]
    after_gap = append_chunk_sizes(first.sizes, kept[:40], kept[40:51], "month", published=True)
    assert after_gap == AppendChunks((31, 28))
    later = append_chunk_sizes(after_gap.sizes, kept[:51], kept[51:], "month", published=True)
    assert later == AppendChunks((31, 28, 12))  # March 20-31 (kept ends on March 31)


def test_published_per_granule_and_integer_rules():
    assert _published_history(np.arange(60), "per-granule", [7, 1, 19, 3, 30])[-1] == (
        7,
        1,
        19,
        3,
        30,
    )
    days = daily_times("standard", "2003-01-01", 40)
    # A month still open takes the next granule's values instead of being closed early.
    opened = append_chunk_sizes((31,), days[:10], days[10:40], "per-granule", published=True)
    assert opened == AppendChunks((31, 9))
    assert _published_history(np.arange(100), 12, [5, 20, 1, 30, 44])[-1] == (12,) * 9
