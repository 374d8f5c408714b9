"""The query plan: which accumulation entries and which raw boxes answer a query.

A query sums a variable over the index box ``ranges`` (half-open, per dimension), reducing
the dimensions ``over`` and keeping the others at full resolution. Along an accumulated
dimension, accumulation entry ``k`` holds the sum over ``[0, positions[k])``, so the sum over
``[p, q)`` for two positions ``p < q`` is ``entry(q) - entry(p)`` (``entry(0) = 0``); over
several accumulated dimensions the same holds by inclusion-exclusion over the corners.

``plan_query`` cuts the box, one dimension at a time, into the part between the innermost
positions (answered from an accumulation) and the thin slabs left at either end, and plans
each slab the same way with whatever accumulation still spans it; what no accumulation spans
is read raw. A chunk-aligned box therefore reads no raw data, and an unaligned one reads raw
data only in its partial boundary chunks. An accumulation with entries at positions of its
own (``reach``: every 4 days of each month, say) may also take the entry just past an end of
a range when it is nearer, and subtract the raw elements between: a day-precise period then
reads at most half a step of raw days at each end. Parts outside the extent the accumulations cover
are read raw, so a plan never returns sums the accumulations do not hold.

Everything here is pure: a plan is data you can print and test.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from accumulus.identity_memo import IdentityMemo

Box = dict[str, tuple[int, int]]


@dataclass(frozen=True)
class AccumulationLayout:
    """Where one accumulation's entries end, per accumulated dimension, and what it covers."""

    dims: tuple[str, ...]
    positions: Mapping[str, tuple[int, ...]]  # entry k sums raw indices [0, positions[dim][k])
    coverage: Mapping[str, int]  # raw extent the sums cover, per variable dimension
    key: str = ""  # which accumulation of the group (``Accumulation.key``), when several
    # Whether a range of one dimension may take the entry just outside an end when it is
    # nearer than the one inside, and subtract the raw elements between (``_nearest_span``):
    # positions not at chunk ends (``month+4``), where fewer raw elements are fewer blocks
    # decoded and fewer raw chunks cut.
    reach: bool = False


# Made by the dozen per question (a season's series: a few per run, then each moved to its
# run's slot): a plain slotted class, never changed once made (a frozen dataclass sets each
# field through object.__setattr__, several times slower to make).
@dataclass(slots=True)
class Read:
    """One term of a plan: ``sign`` x the sums of a box from one source.

    ``source`` is the accumulated dimensions of the accumulation read, or ``()`` for raw data.
    ``entries`` gives the entry index along each accumulated dimension; ``box`` the raw index
    range along every other dimension.
    """

    source: tuple[str, ...]
    sign: int
    entries: Mapping[str, int]
    box: Mapping[str, tuple[int, int]]
    key: str = ""  # the accumulation read (``AccumulationLayout.key``)
    slot: int = 0  # where its sums go along the answer's slots (``QueryPlan.slots``)

    @property
    def is_raw(self) -> bool:
        return not self.source

    def describe(self) -> str:
        parts = [f"{d}@{k}" for d, k in self.entries.items()]
        parts += [f"{d}[{a}:{b}]" for d, (a, b) in self.box.items()]
        what = "raw" if self.is_raw else f"acc({self.key or ','.join(self.source)})"
        into = f" -> [{self.slot}]" if self.slot else ""
        return f"{'+' if self.sign > 0 else '-'} {what} " + " ".join(parts) + into


@dataclass(slots=True)  # (as ``Read``: a season's series plans a dozen)
class QueryPlan:
    dims: tuple[str, ...]
    over: tuple[str, ...]
    ranges: Mapping[str, tuple[int, int]]
    reads: tuple[Read, ...] = field(default_factory=tuple)
    # A shape's cells (``shapes.CellMask``): raw reads sum only these; None for a box.
    mask: Any = None
    # Where ranges wrap round (``plan_query``'s ``sizes``); the axis' size where not given.
    sizes: Mapping[str, int] = field(default_factory=dict)
    # Several answers of one shape from one batch of reads (a seasonal series: one per
    # season-year): their number, each read adding into its ``Read.slot``; None for one.
    slots: int | None = None

    @property
    def raw_reads(self) -> list[Read]:
        return [r for r in self.reads if r.is_raw]

    @property
    def accumulation_reads(self) -> list[Read]:
        return [r for r in self.reads if not r.is_raw]

    def describe(self) -> str:
        return "\n".join(r.describe() for r in self.reads) or "(empty)"


def plan_query(
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    over: Iterable[str],
    layouts: Sequence[AccumulationLayout] = (),
    sizes: Mapping[str, int] | None = None,
) -> QueryPlan:
    """Plan the sums over ``ranges`` reduced along ``over`` from ``layouts`` and raw reads.

    Only accumulations whose dimensions are all in ``over`` can help: the others would sum
    away a dimension the answer keeps.

    A range whose end passes its dimension's size (``sizes``: a longitude's distinct
    columns, ``longitude.period``) runs across the seam of a longitude: it is the box up to
    that size and the box from the axis' start, each planned like any box. One plan holds
    both, so their chunks are read in one batch and each part lands at its place in the
    answer (``execute`` places it modulo the size).
    """
    return _planned(dims, ranges, _Usable.of(dims, over, layouts), sizes, {})


def plan_runs(
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    over: Iterable[str],
    layouts: Sequence[AccumulationLayout],
    sizes: Mapping[str, int] | None,
    dim: str,
    runs: Iterable[tuple[int, int]],
) -> list[QueryPlan]:
    """``plan_query`` of ``ranges`` with each of ``runs`` as the range along ``dim`` (a
    season's runs of days, one box): the same plans, the spans of the layouts along the
    other dimensions found once for all of them."""
    spans: Spans = {}
    usable = _Usable.of(dims, over, layouts)
    return [_planned(dims, {**ranges, dim: run}, usable, sizes, spans) for run in runs]


# The span of a layout's positions within a range, by the positions' identity (a layout's,
# alive while it plans), how it is found (nearest or inner) and the range: a plan's boxes
# share most of theirs, and so do a season's runs (``plan_runs``).
Spans = dict[tuple[int, bool, int, int], tuple[int, int] | None]


@dataclass(frozen=True)
class _Usable:
    """What a plan's boxes take from ``layouts`` (found once for a season's runs): the
    dimensions reduced (``over``), the layouts that reduce only some of those (the others
    would sum away a dimension the answer keeps) and the extent all of them cover, per
    dimension (None without layouts)."""

    over: frozenset[str]
    layouts: list[AccumulationLayout]
    coverage: dict[str, int] | None

    @classmethod
    def of(
        cls, dims: Sequence[str], over: Iterable[str], layouts: Sequence[AccumulationLayout]
    ) -> _Usable:
        reduced = frozenset(over)
        usable = [lay for lay in layouts if set(lay.dims) <= reduced]
        coverage = None
        if usable:
            coverage = {d: min(lay.coverage.get(d, 0) for lay in usable) for d in dims}
        return cls(reduced, usable, coverage)


def _planned(
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    usable: _Usable,
    sizes: Mapping[str, int] | None,
    spans: Spans,
) -> QueryPlan:
    box: Box = {d: (ranges[d][0], ranges[d][1]) for d in dims}
    reads: list[Read] = []
    kept = tuple(d for d in dims if d in usable.over)
    sizes = dict(sizes or {})
    if any(b <= a for a, b in box.values()):
        return QueryPlan(tuple(dims), kept, dict(box), (), sizes=sizes)
    for part in _across_seams(box, sizes):
        inside = _split_off_uncovered(part, usable.coverage, reads)
        if inside is not None:
            _plan_box(inside, usable.layouts, reads, spans)
    return QueryPlan(tuple(dims), kept, dict(box), tuple(reads), sizes=sizes)


def scan_boxes(
    dims: Sequence[str], ranges: Mapping[str, tuple[int, int]], sizes: Mapping[str, int]
) -> list[Box]:
    """The boxes the plain scan of ``ranges`` reads (``plan_query`` without accumulations),
    without the plan: the box, cut where it runs across a longitude's seam."""
    box: Box = {d: (ranges[d][0], ranges[d][1]) for d in dims}
    return [] if any(b <= a for a, b in box.values()) else _across_seams(box, sizes)


def _across_seams(box: Box, sizes: Mapping[str, int]) -> list[Box]:
    """``box`` as boxes within the axes: a range past its axis' end (across a longitude's
    seam) becomes its part up to the end and its part from the start."""
    if all(hi <= sizes.get(dim, hi) for dim, (_, hi) in box.items()):
        return [dict(box)]  # (no seam crossed: most boxes)
    per_dim = []
    for dim, (lo, hi) in box.items():
        size = sizes.get(dim, hi)
        per_dim.append(
            [(dim, (lo, size)), (dim, (0, hi - size))] if hi > size else [(dim, (lo, hi))]
        )
    return [dict(parts) for parts in itertools.product(*per_dim)]


def _split_off_uncovered(
    box: Box, coverage: Mapping[str, int] | None, reads: list[Read]
) -> Box | None:
    """Plan raw reads for the parts of ``box`` beyond the accumulations' ``coverage`` (None:
    no accumulation) and return the covered rest (None when nothing is covered)."""
    if coverage is None:
        return box
    rest = dict(box)
    for dim, (lo, hi) in box.items():
        limit = coverage[dim]
        if hi <= limit:
            continue
        if lo >= limit:
            reads.append(Read((), 1, {}, rest))
            return None
        reads.append(Read((), 1, {}, {**rest, dim: (limit, hi)}))
        rest[dim] = (lo, limit)
    return rest


def _inner_span(positions: Sequence[int], lo: int, hi: int) -> tuple[int, int] | None:
    """The widest [p, q) inside [lo, hi) with p, q in {0} ∪ positions, or None."""
    points = _with_zero(positions)
    i = bisect.bisect_left(points, lo)
    j = bisect.bisect_right(points, hi) - 1
    if i >= len(points) or j < 0 or points[j] <= points[i]:
        return None
    return points[i], points[j]


def _nearest_span(positions: Sequence[int], lo: int, hi: int) -> tuple[int, int] | None:
    """The [p, q) with p, q in {0} ∪ positions that leaves the fewest raw elements to add
    (between ``lo`` and p, q and ``hi`` when inside) or subtract (when outside): each end
    takes the position nearest to it, the inner one on a tie. None when every choice
    leaves as many raw elements as the range holds."""
    points = _with_zero(positions)
    i = bisect.bisect_left(points, lo)  # the first point at or after lo
    j = bisect.bisect_right(points, hi) - 1  # the last point at or before hi
    starts = [points[k] for k in (i, i - 1) if 0 <= k < len(points)]
    ends = [points[k] for k in (j, j + 1) if 0 <= k < len(points)]
    best, left = None, hi - lo
    for p in starts:
        for q in ends:
            raw = abs(p - lo) + abs(hi - q)
            if q > p and raw < left:
                best, left = (p, q), raw
    return best


def _with_zero(positions: Sequence[int]) -> tuple[int, ...]:
    """``(0, *positions)``, made once per positions' tuple (a layout's are kept per
    snapshot): a ten-year cube's daily positions are 3,650, copied at every range."""
    return _ZERO_AND.value(positions, lambda: (0, *positions))


_ZERO_AND: IdentityMemo[tuple[int, ...]] = IdentityMemo()


def _extent(box: Box, dims: Sequence[str]) -> int:
    """The elements of ``box`` along ``dims``: the most a span of each answers."""
    elements = 1
    for dim in dims:
        lo, hi = box[dim]
        elements *= hi - lo
    return elements


def _answered(extent: tuple[int, int], span: tuple[int, int]) -> int:
    """How many elements of ``extent`` a span answers without raw reads: its width when it
    lies inside, less the raw elements it reaches past ``extent`` otherwise."""
    (lo, hi), (p, q) = extent, span
    return (hi - lo) - abs(p - lo) - abs(hi - q)


def _plan_box(
    box: Box, layouts: Sequence[AccumulationLayout], reads: list[Read], found: Spans
) -> None:
    best: tuple[tuple[int, int], AccumulationLayout, dict[str, tuple[int, int]]] | None = None
    for layout in layouts:
        if best is not None and (len(layout.dims), _extent(box, layout.dims)) <= best[0]:
            continue  # it cannot beat the best so far, even answering all of its dimensions
        spans = {}
        nearest = layout.reach and len(layout.dims) == 1
        for dim in layout.dims:
            positions = layout.positions[dim]
            key = (id(positions), nearest, *box[dim])
            if key in found:
                span = found[key]
            else:
                span = found[key] = (_nearest_span if nearest else _inner_span)(
                    positions, *box[dim]
                )
            if span is None:
                break
            spans[dim] = span
        else:
            # Prefer accumulations that reduce more dimensions at once, then the widest span,
            # less what a span reaching past the box leaves to subtract.
            score = (len(layout.dims), prod(_answered(box[d], spans[d]) for d in spans))
            if best is None or score > best[0]:
                best = (score, layout, spans)
    if best is None:
        reads.append(Read((), 1, {}, dict(box)))
        return
    _, layout, spans = best
    _add_corners(box, layout, spans, reads)
    # The slabs left at either end of each accumulated dimension, taken in turn so the
    # pieces do not overlap.
    rest = dict(box)
    for dim in layout.dims:
        lo, hi = box[dim]
        p, q = spans[dim]
        if lo < p:
            _plan_box({**rest, dim: (lo, p)}, layouts, reads, found)
        elif p < lo:  # an entry before the range: the raw elements up to it subtracted
            reads.append(Read((), -1, {}, {**rest, dim: (p, lo)}))
        if q < hi:
            _plan_box({**rest, dim: (q, hi)}, layouts, reads, found)
        elif hi < q:  # an entry past the range
            reads.append(Read((), -1, {}, {**rest, dim: (hi, q)}))
        rest[dim] = (p, q)


def _add_corners(
    box: Box,
    layout: AccumulationLayout,
    spans: Mapping[str, tuple[int, int]],
    reads: list[Read],
) -> None:
    """Inclusion-exclusion: sum over ∏[p, q) = Σ over corners of ± entry(corner)."""
    choices = []
    for dim in layout.dims:
        p, q = spans[dim]
        positions = layout.positions[dim]  # increasing; p and q among them (p may be 0)
        ends = [(bisect.bisect_left(positions, q), 1)]
        if p > 0:
            ends.append((bisect.bisect_left(positions, p), -1))
        choices.append(ends)
    others = {d: r for d, r in box.items() if d not in layout.dims}
    for corner in itertools.product(*choices):
        sign = prod(s for _, s in corner)
        entries = {d: k for d, (k, _) in zip(layout.dims, corner, strict=True)}
        reads.append(Read(layout.dims, sign, entries, others, layout.key))
