"""The accumulation math the build and the query run (``sums``, its compiled loop), checked
against a plain NumPy computation on random blocks: shapes of 1 to 4 axes, chunk edges
inside the block, weights varying along any axes, float32 and float64, NaN holes and
infinities of both signs, every sum of the statistics table (the tallies of +inf and -inf
too; the sums of squares about a reference value; the sums against time with the times of
the block's first axis)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.build.chunk_sums import LONG_AXIS, chunk_sums, prefix_entries
from accumulus.accumulation.model import statistics
from accumulus.accumulation.model.sums import reduce_terms


def direct(x, w, name, axes, edges, reference=0.0, times=None):
    """One sum per chunk segment along ``axes``, by NumPy slicing: w^a·t^p·x^b over valid x
    (x − reference for a centred sum; infinite x count in x^0 only), or 1 where x is the
    tally's infinity."""
    s = statistics.SUMS[name]
    w = np.broadcast_to(np.asarray(w, dtype="f8"), x.shape)
    t = np.broadcast_to(np.asarray(1.0 if times is None else times, dtype="f8"), x.shape)
    shifted = x.astype("f8") - (reference if s.centred else 0.0)
    values = np.where(np.isfinite(x), shifted, 0.0)
    factor = w**s.weight_power * t**s.time_power
    summands = np.where(np.isnan(x), 0.0, factor * values**s.value_power)
    if s.tally is not None:
        summands = (x == s.tally).astype("f8")
    for a in axes:
        bounds = [*edges[a], x.shape[a]]
        parts = [
            summands.take(range(lo, hi), axis=a).sum(axis=a, keepdims=True)
            for lo, hi in itertools.pairwise(bounds)
        ]
        summands = np.concatenate(parts, axis=a)
    return summands


@st.composite
def blocks(draw):
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(ndim))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    x = rng.normal(1.0, 2.0, size=shape).astype(draw(st.sampled_from(["f4", "f8"])))
    x[rng.random(shape) < draw(st.sampled_from([0.0, 0.3, 1.0]))] = np.nan
    infinite = rng.random(shape) < draw(st.sampled_from([0.0, 0.2]))
    x[infinite] = np.where(rng.random(shape) < 0.5, np.inf, -np.inf)[infinite]
    varying = [draw(st.booleans()) for _ in shape]
    w = rng.uniform(0.1, 1.0, size=[n if v else 1 for n, v in zip(shape, varying, strict=True)])
    if draw(st.booleans()) and not any(varying):
        w = 1.0
    edges = [sorted({0, *draw(st.lists(st.integers(0, n - 1), max_size=3))}) for n in shape]
    combos = [c for r in range(ndim + 1) for c in itertools.combinations(range(ndim), r)]
    reductions = draw(st.lists(st.sampled_from(combos), min_size=1, max_size=4, unique=True))
    names = draw(st.permutations(list(statistics.SUMS)))
    terms = names[: draw(st.integers(1, len(names)))]
    reference = draw(st.sampled_from([0.0, 1.5]))
    times = rng.uniform(0, 10, size=[shape[0], *(1 for _ in shape[1:])])
    return x, w, edges, reductions, terms, reference, times


@settings(max_examples=300, deadline=None)
@given(blocks())
def test_chunk_sums_equal_numpy(block):
    x, w, edges, reductions, terms, reference, times = block
    # Working space as a reused buffer may hold it: any sum left unwritten shows as NaN.
    got = chunk_sums(x, w, terms, reductions, edges, lambda n: np.full(n, np.nan), reference, times)
    for axes in reductions:
        expected = np.stack([direct(x, w, t, axes, edges, reference, times) for t in terms])
        np.testing.assert_allclose(got[axes], expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(blocks())
def test_reduce_terms_sums_whole_axes(block):
    x, w, _, reductions, terms, reference, times = block
    axes = max(reductions, key=len) or (0,)
    expected = np.stack([direct(x, w, t, axes, [[0]] * x.ndim, reference, times) for t in terms])
    expected = expected.reshape([n for i, n in enumerate(expected.shape) if i - 1 not in axes])
    got = reduce_terms(x, w, terms, axes, reference, times)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=100, deadline=None)
@given(
    st.integers(1, 3),
    st.integers(1, 9),
    st.integers(1, 4),
    st.integers(0, 2**16),
)
def test_prefix_entries_are_cumulative_sums_where_kept(ndim, n, stride, seed):
    rng = np.random.default_rng(seed)
    axis = int(rng.integers(0, ndim))
    shape = [int(rng.integers(1, 4)) for _ in range(ndim)]
    shape[axis] = n
    chunk_sums = rng.normal(size=shape)
    got = prefix_entries(chunk_sums, axis, range(stride - 1, n - n % stride, stride))
    expected = np.cumsum(chunk_sums, axis=axis).take(
        range(stride - 1, n - n % stride, stride), axis=axis
    )
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("layout", ["contiguous", "strided"])
def test_prefix_entries_along_a_long_last_axis_add_as_numpy_does(layout):
    # Entries at every element along a long last axis: the compiled loop (contiguous rows)
    # or NumPy (others) adds in order, so the sums equal np.cumsum's to the last bit.
    rng = np.random.default_rng(7)
    sums = rng.normal(size=(2, 5, 3, 2 * (LONG_AXIS + 3))) * 1e3
    if layout == "strided":
        sums = sums[..., ::2]
    n = sums.shape[-1]
    expected = np.cumsum(sums, axis=-1)
    assert np.array_equal(prefix_entries(sums, 3, range(n)), expected)
    kept = [0, 5, n - 1]
    assert np.array_equal(prefix_entries(sums, 3, kept), expected.take(kept, axis=3))
    assert np.array_equal(prefix_entries(sums.copy(), 3, range(n), in_place=True), expected)


def test_a_large_block_is_summed_without_per_sum_copies():
    """A 2.4 MB float32 chunk, all four sums over three reductions: the answer is right and
    the result arrays are all the block's reduction allocates (not one float64 copy of the
    block per sum)."""
    import tracemalloc

    rng = np.random.default_rng(0)
    x = rng.gamma(0.6, 1.0, size=(73, 90, 90)).astype("f4")
    x[rng.random(x.shape) < 0.1] = np.nan
    w = np.cos(np.deg2rad(np.linspace(-89.5, 89.5, 90))).reshape(1, 90, 1)
    terms = tuple(statistics.SUMS)[:4]
    chunk_sums(x, w, terms, [(1,)])  # compile and load the loop first (not along axis 0: NumPy)
    tracemalloc.start()
    got = chunk_sums(x, w, terms, [(0,), (1,), (2,), (1, 2)], [[0]] * 3)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < x.size * 8  # less than one float64 copy of the block
    for axes, sums in got.items():
        expected = np.stack([direct(x, w, t, axes, [[0]] * 3) for t in terms])
        np.testing.assert_allclose(sums, expected, rtol=1e-9)


@pytest.mark.parametrize("dtype", ["f4", "f8"])
@pytest.mark.parametrize("starts", [[0, 1, 2, 3, 4], [0, 2, 3]])
def test_values_and_counts_along_the_first_axis_are_taken_without_the_compiled_loop(
    monkeypatch, dtype, starts
):
    """Segments along the first axis only (maps at every step, ``--at time=1``, or at a few,
    ``--at time=month``): Σx, Σw·x, Σ1 and Σw are the values (0 where missing or infinite,
    -0.0 as 0.0) and validities summed per segment, weighted after, in the same bytes as
    the compiled loop's (which a sum of squares still takes), which is not called for them."""
    from accumulus.accumulation.build import chunk_sums as module

    rng = np.random.default_rng(7)
    x = rng.normal(1.0, 2.0, size=(5, 4, 6)).astype(dtype)
    x[rng.random(x.shape) < 0.3] = np.nan
    x[0, 0, :3] = [np.inf, -np.inf, -0.0]
    x[:, 1, 1] = -0.0
    w = rng.uniform(0.1, 1.0, size=(1, 4, 1))
    terms = [statistics.SUM, statistics.COUNT, statistics.WSUM, statistics.WCOUNT]
    edges = [starts, [0], [0]]
    compiled = chunk_sums(x, w, [*terms, statistics.SUMSQ], [(0,)], edges)[(0,)][:4]

    def refused(*args, **kwargs):
        raise AssertionError("the compiled loop was called")

    monkeypatch.setattr(module, "_compiled_block_sums", refused)
    monkeypatch.setattr(module, "STEP_VALUES", 1)  # (steps this small: the loop otherwise)
    got = chunk_sums(x, w, terms, [(0,)], edges, lambda n: np.full(n, np.nan))[(0,)]
    values = np.where(np.isfinite(x), x, 0).astype("f8")
    valid = (~np.isnan(x)).astype("f8")
    per_segment = [np.add.reduceat(a, starts, axis=0) for a in (values, valid)]
    expected = np.stack([*per_segment, per_segment[0] * w, per_segment[1] * w])
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert np.array_equal(got, compiled)
    assert np.array_equal(np.signbit(got), np.signbit(compiled))
    assert not np.signbit(got[:, 0, 1, 1]).any()  # (-0.0 given, every step)
