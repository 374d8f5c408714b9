"""The query planner, checked as pure data: its reads combine to the right sums, aligned
boxes read no raw data, unaligned ones read raw data only in their boundary chunks."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query import plan as plan_module
from accumulus.accumulation.query.plan import (
    AccumulationLayout,
    QueryPlan,
    plan_query,
    plan_runs,
    scan_boxes,
)
from accumulus.grid import ChunkBounds


def execute_with_numpy(values: np.ndarray, dims, plan: QueryPlan, layouts) -> np.ndarray:
    """Combine a plan's reads, computing each accumulation entry directly as a prefix sum."""
    kept = [d for d in dims if d not in plan.over]
    out = np.zeros([plan.ranges[d][1] - plan.ranges[d][0] for d in kept])
    by_dims = {lay.dims: lay for lay in layouts}
    for read in plan.reads:
        index = []
        for d in dims:
            if d in read.entries:
                end = by_dims[read.source].positions[d][read.entries[d]]
                index.append(slice(0, end))
            else:
                index.append(slice(*read.box[d]))
        part = values[tuple(index)]
        part = part.sum(axis=tuple(i for i, d in enumerate(dims) if d in plan.over))
        where = tuple(
            slice(read.box[d][0] - plan.ranges[d][0], read.box[d][1] - plan.ranges[d][0])
            for d in kept
        )
        out[where] += read.sign * part
    return out


@st.composite
def problems(draw, reach=False):
    ndim = draw(st.integers(1, 3))
    dims = ("a", "b", "c")[:ndim]
    bounds = {}
    for d in dims:
        size = draw(st.integers(1, 12))
        bounds[d] = ChunkBounds.regular(size, draw(st.integers(1, size)))
    combos = [c for r in range(1, ndim + 1) for c in itertools.combinations(dims, r)]
    chosen = draw(st.lists(st.sampled_from(combos), max_size=4, unique=True))
    strides = {d: draw(st.integers(1, 3)) for d in dims}
    coverage = {d: draw(st.sampled_from([b.size, *b.edges])) for d, b in bounds.items()}
    layouts = [
        AccumulationLayout(
            c,
            {
                d: tuple(p for p in bounds[d].strided_edges(strides[d]) if p <= coverage[d])
                for d in c
            },
            coverage,
            reach=reach,
        )
        for c in chosen
    ]
    ranges = {}
    for d, b in bounds.items():
        lo = draw(st.integers(0, b.size - 1))
        ranges[d] = (lo, draw(st.integers(lo + 1, b.size)))
    over = draw(st.lists(st.sampled_from(dims), min_size=1, unique=True))
    return dims, bounds, layouts, ranges, over


@settings(max_examples=300, deadline=None)
@given(problems(), st.integers(0, 2**16))
def test_plan_sums_equal_direct_sums(problem, seed):
    _check_sums(problem, seed)


def _check_sums(problem, seed):
    dims, bounds, layouts, ranges, over = problem
    values = np.random.default_rng(seed).random([bounds[d].size for d in dims])
    plan = plan_query(dims, ranges, over, layouts)
    got = execute_with_numpy(values, dims, plan, layouts)
    direct = values[tuple(slice(*ranges[d]) for d in dims)]
    expected = direct.sum(axis=tuple(i for i, d in enumerate(dims) if d in over))
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=300, deadline=None)
@given(problems(reach=True), st.integers(0, 2**16))
def test_plans_reaching_past_the_range_sum_the_same(problem, seed):
    _check_sums(problem, seed)


@settings(max_examples=200, deadline=None)
@given(problems(), st.booleans(), st.data())
def test_runs_planned_together_are_planned_as_each_alone(problem, reach, data):
    """``plan_runs`` (a season's runs of one box, the spans along the other dimensions
    found once): the plans ``plan_query`` makes of each run."""
    dims, bounds, layouts, ranges, over = problem
    layouts = [AccumulationLayout(lay.dims, lay.positions, lay.coverage, reach=reach)
               for lay in layouts]  # fmt: skip
    dim = data.draw(st.sampled_from(dims))
    size = bounds[dim].size
    runs = []
    for _ in range(data.draw(st.integers(0, 4))):
        lo = data.draw(st.integers(0, size - 1))
        runs.append((lo, data.draw(st.integers(lo + 1, size))))
    alone = [plan_query(dims, {**ranges, dim: run}, over, layouts) for run in runs]
    assert plan_runs(dims, ranges, over, layouts, None, dim, runs) == alone


@settings(max_examples=300, deadline=None)
@given(problems(), st.booleans())
def test_layouts_that_cannot_win_are_not_scored(problem, reach):
    """A layout is not scored where answering all of its dimensions could not beat the best
    found (``plan._extent``): the plans of every layout scored, the first of the best."""
    dims, _, layouts, ranges, over = problem
    layouts = [AccumulationLayout(lay.dims, lay.positions, lay.coverage, str(k), reach)
               for k, lay in enumerate(layouts)]  # fmt: skip
    pruned = plan_query(dims, ranges, over, layouts)
    with pytest.MonkeyPatch.context() as every:
        every.setattr(plan_module, "_extent", lambda box, dims: 2**62)  # all scored
        scored = plan_query(dims, ranges, over, layouts)
    assert pruned == scored


def test_a_later_layout_answering_more_is_still_chosen():
    """The first layout answers 9 of the box's 10 steps along its dimension, the second
    all 10 along its own: the second is scored (it could beat the first) and chosen."""
    coverage = {"t": 10, "x": 10}
    first = AccumulationLayout(("t",), {"t": (9,)}, coverage, "t")
    second = AccumulationLayout(("x",), {"x": (10,)}, coverage, "x")
    plan = plan_query(("t", "x"), {"t": (0, 10), "x": (0, 10)}, ("t", "x"), [first, second])
    assert [read.key for read in plan.accumulation_reads] == ["x"] and not plan.raw_reads


def test_an_entry_past_an_end_is_taken_when_nearer():
    # Entries every 4 days from each month's start (month+4), a range of days 1-29.
    layout = AccumulationLayout(
        ("t",), {"t": (4, 8, 12, 16, 20, 24, 28, 31)}, {"t": 31, "x": 5}, "t", reach=True
    )
    plan = plan_query(("t", "x"), {"t": (1, 30), "x": (0, 5)}, ("t",), [layout])
    assert plan.describe().splitlines() == [
        "+ acc(t) t@7 x[0:5]",  # days 0-30, less the raw days outside the range
        "- raw t[0:1] x[0:5]",
        "- raw t[30:31] x[0:5]",
    ]
    # On a tie, the entry inside; where every choice leaves as many raw days, all raw.
    plan = plan_query(("t", "x"), {"t": (3, 10), "x": (0, 5)}, ("t",), [layout])
    assert [r.describe() for r in plan.raw_reads] == ["+ raw t[3:4] x[0:5]", "+ raw t[8:10] x[0:5]"]
    plan = plan_query(("t", "x"), {"t": (6, 10), "x": (0, 5)}, ("t",), [layout])
    assert plan.describe() == "+ raw t[6:10] x[0:5]"
    # Without reach (chunk ends), only entries inside the range.
    inner = AccumulationLayout(("t",), layout.positions, layout.coverage, "t")
    plan = plan_query(("t", "x"), {"t": (1, 30), "x": (0, 5)}, ("t",), [inner])
    assert all(r.sign > 0 for r in plan.raw_reads)
    # An exact span of another accumulation beats one reaching past the range.
    months = AccumulationLayout(("t",), {"t": (31,)}, layout.coverage, "m", reach=True)
    plan = plan_query(("t", "x"), {"t": (4, 28), "x": (0, 5)}, ("t",), [months, layout])
    assert not plan.raw_reads and {r.key for r in plan.reads} == {"t"}
    values = np.random.default_rng(1).random((31, 5))
    for lay in (layout, inner):
        plan = plan_query(("t", "x"), {"t": (1, 30), "x": (0, 5)}, ("t",), [lay])
        got = execute_with_numpy(values, ("t", "x"), plan, [lay])
        np.testing.assert_allclose(got, values[1:30].sum(axis=0), rtol=1e-12)


@settings(max_examples=300, deadline=None)
@given(problems())
def test_raw_reads_stay_in_boundary_chunks(problem):
    """With per-chunk accumulations covering everything, raw data is read only in chunks
    that the range cuts (partially covers)."""
    dims, bounds, _, ranges, over = problem
    full = {d: b.size for d, b in bounds.items()}
    layouts = [
        AccumulationLayout(c, {d: bounds[d].strided_edges(1) for d in c}, full)
        for r in range(1, len(dims) + 1)
        for c in itertools.combinations(dims, r)
    ]
    plan = plan_query(dims, ranges, over, layouts)
    for read in plan.raw_reads:
        for d in over:
            lo, hi = ranges[d]
            cut = set()
            for edge in (lo, hi):
                if edge not in bounds[d].edges:
                    cut.add(bounds[d].chunk_of(min(edge, bounds[d].size - 1))[0])
            touched = set(bounds[d].chunks_overlapping(*read.box[d]))
            assert touched <= cut, (d, read, cut)


def test_aligned_box_reads_no_raw_data():
    bounds = {"time": ChunkBounds.regular(100, 10), "lat": ChunkBounds.regular(18, 6)}
    full = {"time": 100, "lat": 18}
    layouts = [
        AccumulationLayout(("time",), {"time": bounds["time"].strided_edges(1)}, full),
        AccumulationLayout(("lat",), {"lat": bounds["lat"].strided_edges(1)}, full),
    ]
    plan = plan_query(("time", "lat"), {"time": (20, 70), "lat": (0, 18)}, ["time"], layouts)
    assert plan.raw_reads == []
    assert [(r.sign, dict(r.entries)) for r in plan.reads] == [
        (1, {"time": 6}),
        (-1, {"time": 1}),
    ]


def test_missing_combination_falls_back_to_raw():
    plan = plan_query(("time", "lat"), {"time": (0, 50), "lat": (0, 6)}, ["time", "lat"], [])
    assert len(plan.reads) == 1 and plan.reads[0].is_raw


def test_range_past_coverage_reads_raw_there():
    bounds = ChunkBounds.regular(100, 10)
    layout = AccumulationLayout(("time",), {"time": bounds.strided_edges(1)[:6]}, {"time": 60})
    plan = plan_query(("time",), {"time": (0, 100)}, ["time"], [layout])
    raw = [dict(r.box) for r in plan.raw_reads]
    assert raw == [{"time": (60, 100)}]
    assert [dict(r.entries) for r in plan.accumulation_reads] == [{"time": 5}]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 12), st.integers(0, 12)), min_size=1, max_size=3),
    st.data(),
)
def test_scan_boxes_are_the_plain_plans_reads(pairs, data):
    """The boxes the planner costs a plain scan by (``scan_boxes``) are those its plan
    without accumulations reads: across a seam (a range past its axis' size) and empty."""
    dims = [f"d{k}" for k in range(len(pairs))]
    widths = [data.draw(st.integers(0, 4)) for _ in dims]
    ranges = {
        d: (min(a, b), max(a, b) + w) for d, (a, b), w in zip(dims, pairs, widths, strict=True)
    }
    sizes = {d: data.draw(st.integers(1, 14)) for d in dims if data.draw(st.booleans())}
    ranges = {d: (lo % sizes[d], lo % sizes[d] + hi - lo) if d in sizes else (lo, hi)
              for d, (lo, hi) in ranges.items()}  # fmt: skip
    plan = plan_query(dims, ranges, dims[:1], [], sizes)
    assert scan_boxes(dims, ranges, sizes) == [dict(read.box) for read in plan.reads]
