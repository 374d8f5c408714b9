"""Statistics described once: which sums each needs, how they combine, how it is finished.

In the style of flox's ``Aggregation`` table. Every sum is Σ w^a·x^b over the valid values
(x a decoded value, w its weight; a missing value adds nothing), so every sum is additive:
the sums of disjoint blocks combine by addition. That is what lets prefix sums at chunk
boundaries (ZEP 5) answer any range, and it is the only way sums ever combine here — in a
block's reduction (``build.chunk_sums``), in the prefix sums a build stores, and in the
signed pieces of a query plan.

A statistic names the sums it needs when weighted; unweighted (weights "none", w = 1) it
uses the same sums with a = 0. ``finish`` turns the combined sums into the answer, with
xarray's conventions.

Infinite values are valid (they carry weight, as xarray counts them) but are kept out of
every sum of x^b with b > 0: a prefix sum that met one would carry it to every later entry,
and the difference of two such entries is NaN. They are counted instead, +inf and -inf
apart, in two *tallies* (sums whose summand is 1 where x is +inf, resp. -inf), and an answer
whose range holds any is rebuilt from them as xarray's sum would come out (``finish``): +inf
alone gives +inf, -inf alone -inf, both NaN. Weights are taken as positive there (cos
latitude, cell areas). Tallies exist where values can be infinite (floating-point data).

Adding a statistic is one ``Statistic`` entry (and a ``Sum`` entry
for each sum no statistic needed before): the build stores every sum of ``SUMS``, verify
checks each, and the query asks for the ones its statistic names. A sum marked ``optional``
is stored only when a build asks for a statistic that needs it (``accumulate --stats var``):
the default build does not grow.

Sums of squares are *centred*: Σ w^a·(x − c)^b about one reference value c per group
(``AccumulationGroup.reference``, the mean of the first raw chunk's valid values), so that
the variance Σw(x−c)²/Σw − (m−c)² cancels only (m−c)², not m² (temperatures in kelvin:
mean 280, spread 5). A query reading raw chunks only, without a group, takes them about
the mean of the first raw chunk it selects.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from accumulus.accumulation.model.spec import (
    COUNT,
    NEGINF,
    POSINF,
    SUM,
    SUMSQ,
    TALLIES,
    TSUM,
    TTSUM,
    TXSUM,
    WCOUNT,
    WSUM,
    WSUMSQ,
    Accumulation,
    Weights,
)
from accumulus.errors import AccumulusError


@dataclass(frozen=True)
class Sum:
    """Σ w^a·x^b over the valid values of a block (x^b over finite ones when b > 0), or, for
    a tally, how many values equal ``tally`` (+inf or -inf)."""

    name: str  # as the accumulation group names it (spec.WSUM, ...)
    weight_power: int  # a: 0 or 1
    value_power: int  # b: 0, 1, 2, ...
    tally: float | None = None  # a tally's value (+inf or -inf); None for a sum
    # Stored only when a statistic that needs it is asked for (``extra_sums``).
    optional: bool = False
    # Taken of x − c, c the group's reference value (``centred``), not of x.
    centred: bool = False
    # p of Σ t^p·x^b, t the time in years since the first step (``years``): a trend's sums.
    time_power: int = 0

    @property
    def is_count(self) -> bool:
        """Σ1 or a tally, an exact integer (stored as int64)."""
        return self.weight_power == 0 and self.value_power == 0 and self.time_power == 0

    @property
    def is_weight(self) -> bool:
        """Σw or Σ1 (or a tally): a sum of weights, 0 where no value is valid."""
        return self.value_power == 0 and self.time_power == 0

    @property
    def code(self) -> int:
        """b as the compiled loop takes it: the power of x, -1 for the +inf tally, -2 for
        the -inf tally."""
        if self.tally is None:
            return self.value_power
        return -1 if self.tally > 0 else -2


SUMS: dict[str, Sum] = {
    s.name: s
    for s in (
        Sum(WSUM, 1, 1),  # Σ w·x   ZEP 5 _DATA_WEIGHTED
        Sum(WCOUNT, 1, 0),  # Σ w     ZEP 5 _WEIGHTS
        Sum(SUM, 0, 1),  # Σ x     ZEP 5 _DATA_UNWEIGHTED
        Sum(COUNT, 0, 0),  # Σ 1     valid values
        Sum(POSINF, 0, 0, np.inf),  # values that are +inf
        Sum(NEGINF, 0, 0, -np.inf),  # values that are -inf
        Sum(WSUMSQ, 1, 2, optional=True, centred=True),  # Σ w·(x−c)²  var, std
        Sum(SUMSQ, 0, 2, optional=True, centred=True),  # Σ (x−c)²
        Sum(TSUM, 0, 0, optional=True, time_power=1),  # Σ t     trend
        Sum(TTSUM, 0, 0, optional=True, time_power=2),  # Σ t²
        Sum(TXSUM, 0, 1, optional=True, centred=True, time_power=1),  # Σ t·(x−c)
    )
}


@functools.cache
def unweighted(name: str) -> str:
    """The sum that ``name`` becomes when every weight is 1 (Σw·x -> Σx, Σw -> Σ1)."""
    return _twin(name, weight_power=0)


def _twin(name: str, weight_power: int) -> str:
    """The sum with the same power of x as ``name`` and w to ``weight_power`` (every weighted
    sum of the table has its unweighted twin; an unweighted one without a weighted twin is
    its own)."""
    this = SUMS[name]
    twins = [
        s.name
        for s in SUMS.values()
        if (s.weight_power, s.value_power, s.tally, s.time_power)
        == (weight_power, this.value_power, this.tally, this.time_power)
    ]
    if not twins and weight_power == 1:
        return name
    return twins[0]


def powers(names: Sequence[str]) -> np.ndarray:
    """(a, b) of each named sum, as the compiled loop takes them: int64 (len(names), 2)."""
    return np.array([(SUMS[n].weight_power, SUMS[n].code) for n in names], dtype="int64").reshape(
        len(names), 2
    )


# finish(sums, weighted, reference): ``reference`` is what the centred sums are about (the
# others ignore it).
Finish = Callable[[Sequence[np.ndarray], bool, float], np.ndarray]


@dataclass(frozen=True)
class Statistic:
    """A statistic: the sums it needs (weighted form) and how its answer is finished from
    them (``finish(sums, weighted, reference)``, the sums in the order named)."""

    name: str
    sums: tuple[str, ...]
    finish: Finish
    has_units: bool = True  # the answer carries the variable's units (a count does not)
    sums_values: bool = True  # an infinite value makes it infinite (not so a count)
    # An infinite value makes it NaN (xarray's var: (inf − inf)² is NaN), not infinite.
    nan_at_infinity: bool = False
    units_power: int = 1  # the answer's units are the variable's to this power (var: 2)
    per_year: bool = False  # the answer's units are the variable's per year (a trend)
    # The answer is unchanged when every weight of a cell's values is multiplied by one
    # factor (a ratio of weighted sums: mean, var, std): where the weights vary only along
    # dimensions the answer keeps, it can be taken from the sums without weights.
    scale_free: bool = False

    @property
    def centred(self) -> bool:
        """Whether it needs sums about a reference value (``SUMS[...].centred``)."""
        return any(s in SUMS and SUMS[s].centred for s in self.sums)

    @property
    def timed(self) -> bool:
        """Whether it needs sums against time (``SUMS[...].time_power``)."""
        return any(s in SUMS and SUMS[s].time_power for s in self.sums)

    def sums_for(self, weighted: bool, infinite: bool = False) -> tuple[str, ...]:
        """The sums it needs, and the tallies after them when values can be ``infinite``."""
        sums = self.sums if weighted else tuple(unweighted(s) for s in self.sums)
        return (*sums, *TALLIES) if infinite and self.sums_values else sums

    def answer(
        self, sums: Sequence[np.ndarray], weighted: bool, reference: float = 0.0
    ) -> np.ndarray:
        """The answer from the sums ``sums_for`` named (tallies last, when there), the
        centred ones (``centred``) about ``reference``, the others as read (Σw·x, not
        Σw·(x−c): the finish takes c off as it goes)."""
        values = self.finish(sums[: len(self.sums)], weighted, reference)
        if len(sums) == len(self.sums):
            return values
        posinf, neginf = sums[len(self.sums) :]
        if self.nan_at_infinity:
            infinite = (np.asarray(posinf) > 0) | (np.asarray(neginf) > 0)
            if not infinite.any():  # (as a rule: no new array of the answer's size)
                return values
            return np.where(infinite, np.nan, values)
        return with_infinities(values, posinf, neginf)


def with_infinities(values: np.ndarray, posinf: np.ndarray, neginf: np.ndarray) -> np.ndarray:
    """``values`` (from the finite values) where the range holds no infinity; otherwise what
    xarray's sum of them all comes to: +inf, -inf, or NaN when it holds both."""
    positive, negative = np.asarray(posinf > 0), np.asarray(neginf > 0)
    if not (positive.any() or negative.any()):
        return values
    values = np.array(values, dtype="f8")
    values[positive] = np.inf
    values[negative] = -np.inf
    values[positive & negative] = np.nan
    return values


def _ratio(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """numerator / denominator, NaN where the denominator is 0 (no valid value)."""
    out = np.full(np.shape(numerator), np.nan)
    np.divide(numerator, denominator, out=out, where=np.asarray(denominator != 0))
    return out


def _mean(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # xarray: the mean over no valid value is NaN.
    return _ratio(sums[0], sums[1])


def _sum(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # xarray: a sum over no valid value is 0.
    return sums[0]


def _count(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # xarray: ``count()`` of nothing is 0, but ``weighted(w).sum_of_weights()`` of 0 is NaN.
    return np.where(sums[0] != 0, sums[0], np.nan) if weighted else sums[0]


def _variance(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # Σw(x−m)²/Σw from the centred sums S2 = Σw(x−c)², S1 = Σw·x − c·Σw = Σw(x−c) and
    # W = Σw: (S2 − S1²/W)/W, never below 0 (rounding). NaN where no value is valid, as
    # xarray's.
    squares, linear, weight = sums
    # Into the answer's one array, a pass per operation: each temporary of a map's size was
    # fresh memory, paged in anew (docs/benchmarks.md).
    out = np.multiply(weight, reference, out=np.empty(np.shape(weight)))
    np.subtract(linear, out, out=out)
    np.multiply(out, out, out=out)
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(out, weight, out=out)
        np.subtract(squares, out, out=out)
        np.divide(out, weight, out=out)
    np.maximum(out, 0.0, out=out)
    np.copyto(out, np.nan, where=np.asarray(weight) == 0)
    return out


def _std(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    values = _variance(sums, weighted, reference)
    return np.sqrt(values, out=values)


def _trend(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # The least-squares slope of x against t: (nΣt(x−c) − ΣtΣ(x−c)) / (nΣt² − (Σt)²), with
    # Σ(x−c) = Σx − c·n (about c, ΣtΣ(x−c) cancels only what the spread does), unweighted
    # (per cell, a weight is the same at every step); NaN below 2 valid values or where
    # they are all at one time. (Three arrays of the answer's shape, as ``_variance``.)
    count, total, times, squares, products = sums
    denominator = np.multiply(count, reference, out=np.empty(np.shape(count)))
    np.subtract(total, denominator, out=denominator)
    np.multiply(times, denominator, out=denominator)
    numerator = np.multiply(count, products, out=np.empty(np.shape(count)))
    numerator -= denominator
    np.multiply(count, squares, out=denominator)
    out = np.multiply(times, times, out=np.empty(np.shape(count)))
    denominator -= out
    with np.errstate(divide="ignore", invalid="ignore"):
        np.divide(numerator, denominator, out=out)
    np.copyto(out, np.nan, where=(np.asarray(count) < 2) | ~(denominator > 0))
    return out


# The sums of a correlation, over the pairs where both values are valid: n, Σa, Σb, Σa²,
# Σb², Σab, each value less its variable's reference (``pair_sums``); not sums of one
# variable, so not in ``SUMS``.
PAIR_SUMS = ("pairs", "pair_a", "pair_b", "pair_aa", "pair_bb", "pair_ab")


def pair_sums(
    a: np.ndarray, b: np.ndarray, axes: tuple[int, ...], references: tuple[float, float]
) -> np.ndarray:
    """``PAIR_SUMS`` of the pairs of ``a`` and ``b`` (same shape, NaN where missing) over
    ``axes``, then the tallies of infinities (in either): ``(8, *rest)``."""
    valid = ~np.isnan(a) & ~np.isnan(b)
    finite = valid & np.isfinite(a) & np.isfinite(b)
    x = np.where(finite, a - references[0], 0.0)
    y = np.where(finite, b - references[1], 0.0)
    parts = (finite, x, y, x * x, y * y, x * y)
    infinite = valid & ~finite
    plus = infinite & ((a == np.inf) | (b == np.inf))
    minus = infinite & ~plus
    return np.stack([np.sum(p, axis=axes, dtype="f8") for p in (*parts, plus, minus)])


def _correlation(sums: Sequence[np.ndarray], weighted: bool, reference: float) -> np.ndarray:
    # Pearson's r from the pair sums: cov / sqrt(var_a var_b), each as S2/n − (S1/n)²;
    # NaN where a variance is 0 or fewer than 2 pairs are valid, as xr.corr (one pair's
    # variances are 0, but differences of prefix sums leave rounding there). (Four arrays of the
    # answer's shape, as ``_variance``; where n is 0 every one is NaN.)
    n, a, b, aa, bb, ab = sums
    with np.errstate(divide="ignore", invalid="ignore"):
        mean_a = np.divide(a, n, out=np.empty(np.shape(n)))
        mean_b = np.divide(b, n, out=np.empty(np.shape(n)))
        cov = np.divide(ab, n, out=np.empty(np.shape(n)))
        spare = np.multiply(mean_a, mean_b, out=np.empty(np.shape(n)))
        cov -= spare
        var_a = np.divide(aa, n, out=spare)
        var_a -= np.square(mean_a, out=mean_a)
        np.maximum(var_a, 0.0, out=var_a)
        var_b = np.divide(bb, n, out=mean_a)
        var_b -= np.square(mean_b, out=mean_b)
        np.maximum(var_b, 0.0, out=var_b)
        spread = np.sqrt(np.multiply(var_a, var_b, out=var_a), out=var_a)
        np.divide(cov, spread, out=cov)
    np.copyto(cov, np.nan, where=(spread == 0) | (np.asarray(n) < 2))
    return cov


# The names of the statistics below, for type checkers (``Query.stat``); a test keeps them
# equal to the table's keys.
Stat = Literal["mean", "sum", "count", "var", "std", "trend", "corr"]

STATISTICS: dict[str, Statistic] = {
    s.name: s
    for s in (
        Statistic("mean", (WSUM, WCOUNT), _mean, scale_free=True),
        Statistic("sum", (WSUM,), _sum),
        Statistic("count", (WCOUNT,), _count, has_units=False, sums_values=False),
        Statistic(
            "var",
            (WSUMSQ, WSUM, WCOUNT),
            _variance,
            nan_at_infinity=True,
            units_power=2,
            scale_free=True,
        ),
        Statistic("std", (WSUMSQ, WSUM, WCOUNT), _std, nan_at_infinity=True, scale_free=True),
        Statistic(
            "trend",
            (COUNT, SUM, TSUM, TTSUM, TXSUM),
            _trend,
            nan_at_infinity=True,
            per_year=True,
        ),
        # Of two variables: its sums are over pairs (``pair_sums``), read from raw chunks.
        Statistic("corr", PAIR_SUMS, _correlation, has_units=False, nan_at_infinity=True),
    )
}

# What ``accumulate --stats`` names, and the optional sums each adds to a build.
BUILT_STATS: dict[str, tuple[str, ...]] = {
    "var": (WSUMSQ, SUMSQ),
    "trend": (TSUM, TTSUM, TXSUM),
}


def extra_sums(stats: Sequence[str]) -> tuple[str, ...]:
    """The optional sums a build stores for ``stats`` (names of ``BUILT_STATS``; ``std`` is
    ``var``'s), or an error naming the one not known."""
    names: list[str] = []
    for stat in stats:
        key = "var" if stat == "std" else stat
        if key not in BUILT_STATS:
            known = ", ".join([*BUILT_STATS, "corr:VAR2"])
            raise AccumulusError(f"--stats: no sums to build for {stat!r}: use {known}")
        names.extend(BUILT_STATS[key])
    return tuple(dict.fromkeys(names))


def built_stats(sums: Sequence[str]) -> tuple[str, ...]:
    """The statistics of ``BUILT_STATS`` whose optional sums are among ``sums`` (an
    accumulation whose weights factor out keeps the unweighted ones only)."""
    return tuple(k for k, needed in BUILT_STATS.items() if set(needed) & set(sums))


def can_be_infinite(dtype: np.dtype) -> bool:
    """Whether values of this (stored) type can be infinite: floating point."""
    return np.dtype(dtype).kind == "f"


def stored_sums(weights: Weights) -> tuple[str, ...]:
    """The sums a build computes with ``weights``: all of them; with unit weights only the
    unweighted ones, as each weighted sum equals its unweighted twin. (An accumulation
    stores those it has arrays for: no tallies where values cannot be infinite.)"""
    if weights == "none":
        return tuple(dict.fromkeys(unweighted(s) for s in SUMS))
    return tuple(SUMS)


def stored_arrays(
    weights: Weights, infinite: bool = True, extra: Sequence[str] = ()
) -> dict[str, str]:
    """Each sum of an accumulation -> the sum whose array holds it. With unit weights a sum
    and its unweighted twin share one array, named after the weighted sum (ZEP 5's
    _DATA_WEIGHTED then holds Σx), except that Σw and Σ1 share the count's. Tallies only
    when values can be ``infinite``; optional sums only those named in ``extra``."""
    names = [
        s for s in SUMS if (infinite or s not in TALLIES) and (not SUMS[s].optional or s in extra)
    ]
    if weights != "none":
        return {s: s for s in names}
    holders = {}
    for name in names:
        twin = unweighted(name)
        holders[name] = twin if SUMS[twin].is_count else _twin(twin, weight_power=1)
    return holders


def held_term(acc: Accumulation, name: str) -> tuple[str, bool] | None:
    """The sum of ``acc``'s arrays that gives the sum ``name``, and whether it must be
    multiplied by the weights first (an accumulation whose weights factor out stores Σx
    and the count; Σw·x = w·Σx and Σw = w·count); None when ``acc`` cannot give it."""
    if name in acc.arrays:
        return name, False
    twin = unweighted(name)
    if acc.factored and SUMS[name].weight_power == 1 and twin in acc.arrays:
        return twin, True
    return None
