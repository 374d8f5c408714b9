"""Verifying an accumulation group against the raw data.

The expected entries are recomputed by another route than the build's: the summands
w^a·x^b of every sum (``statistics.SUMS``; 1 where x is +inf or -inf for the tallies) are
formed with Dask and NumPy, summed per piece
between raw chunk edges and entry positions with ``np.add.reduceat`` (the build uses its
compiled kernel), and prefix-summed with ``np.cumsum``, then compared with the stored arrays
over the covered extent. The tolerance follows the rounding error of a sum: relative to the
same sums of absolute summands, so prefix sums of values that cancel are judged fairly.

The raw data is walked as the build walks it: along its batch dimension, in slabs of whole
chunks (``stream.chunks_per_slab``), each read once for every accumulation. Along the batch
dimension the prefix sums continue from a running total of the slabs before, and each slab
is compared with the stored entries it ends. So memory is set by the slab, not the array.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import dask.array as da
import numpy as np
import zarr

from accumulus import compute
from accumulus.accumulation.build import stream
from accumulus.accumulation.build.pairs import verify_pairs
from accumulus.accumulation.model import spec, statistics
from accumulus.accumulation.model.chunk_check import chunk_problem_text, failing_chunks
from accumulus.accumulation.model.groups import accumulation_array, read_group, stride_unit_problem
from accumulus.accumulation.model.record import RECORD_KEY, objects_problem
from accumulus.accumulation.model.weights import weight_values
from accumulus.accumulation.model.years import group_times
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import missing_chunks

RTOL = 1e-9


@dataclass
class VerifyReport:
    variable: str
    checked: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


@dataclass
class _Check:
    """One stored array compared with its recomputed sum (``term``), slab after slab:
    ``window`` is the extent compared (array_dims order), and the first differing entry (in
    C order over the window) is kept with its stored and recomputed values."""

    name: str
    term: str
    acc: spec.Accumulation
    array: zarr.Array
    window: tuple[int, ...]
    ends: Mapping[str, tuple[int, ...]]  # per prefix dimension: where each entry ends
    n_bad: int = 0
    first: tuple[int, tuple[int, ...], float, float] | None = None  # flat index, index, got, want
    nonzero: bool = False  # whether any recomputed entry is not 0 (for a tally: an infinity)

    def record(self, offset: tuple[int, ...], got: np.ndarray, want: np.ndarray, scale: np.ndarray):
        """Compare one slab's stored entries (starting at ``offset``) with recomputed ones."""
        # Sums stored in float32 (as the ZEP 5 reference generator does) carry its rounding.
        self.nonzero = self.nonzero or bool(want.any())
        dtype = self.array.dtype
        rtol = max(RTOL, 16 * np.finfo(dtype).eps) if dtype.kind == "f" else RTOL
        bad = ~(np.abs(got.astype("f8") - want) <= rtol * scale + 1e-300)
        if not bad.any():
            return
        self.n_bad += int(bad.sum())
        local = np.unravel_index(int(np.argmax(bad.ravel())), bad.shape)
        index = tuple(int(o + i) for o, i in zip(offset, local, strict=True))
        flat = int(np.ravel_multi_index(index, self.window))
        if self.first is None or flat < self.first[0]:
            self.first = (flat, index, float(got[local]), float(want[local]))


def verify_variable(cube: RawCube, variable: str, root: zarr.Group | None = None) -> VerifyReport:
    """Recompute ``variable``'s accumulations from ``cube``'s raw data and compare them with
    its group, in ``cube`` or in ``root`` (a sidecar's)."""
    var = cube.variable(variable)
    report = VerifyReport(variable)
    try:
        group = read_group(cube, variable, root)
    # An invalid group is exactly what verify reports: ours (AccumulusError) or zarr's on
    # metadata it cannot read.
    except Exception as exc:
        report.problems.append(str(exc))
        return report
    if group is None:
        return report
    if not group.complete:
        report.problems.append(
            f"{group.path} is incomplete (a build was interrupted): run accumulate again"
        )
        return report
    unit_problem = stride_unit_problem(var, group)
    if unit_problem:
        report.problems.append(unit_problem)
        return report
    # The raw chunks the build summed, by their sizes now: when they changed, that is the
    # problem (the sums differ because of it), said in one line.
    holder = cube.root if root is None else root
    extension: Any = holder[group.path].attrs.get(spec.EXTENSION_KEY)  # JSON
    changed = objects_problem(var, group, (extension or {}).get(RECORD_KEY))
    if changed:
        report.problems.append(changed)
        return report
    missing = _missing_objects(cube, var, group, root)
    if missing:
        report.problems.append(missing)
        return report
    checks: list[_Check] = []
    for acc in group.accumulations:
        try:
            checks += _checks(cube, var, group, acc, report.checked, root)
        except _Mismatch as problem:
            report.problems.append(str(problem))
    try:
        _compare(cube, var, group, checks)
    # A corrupt chunk (the codecs' errors: its checksum fails; the store's), which dask
    # raises as it is: say which.
    except Exception as exc:
        failing = [
            problem
            for acc in group.accumulations
            for name in sorted(set(acc.arrays.values()))
            for problem in failing_chunks(accumulation_array(cube, variable, name, root))
        ]
        text = chunk_problem_text(failing) or f"cannot be read or recomputed: {exc}"
        report.problems.append(f"{group.path}: {text}")
        return report
    for check in checks:
        if check.n_bad:
            report.problems.append(_describe(group, check))
    if root is None:  # a correlation's pair sums, kept in the cube (``build.pairs``)
        checked, problems = verify_pairs(cube, variable, cube.root)
        report.checked += checked
        report.problems += problems
    if group.infinities is False and any(c.nonzero for c in checks if c.term in spec.TALLIES):
        # Queries do not read tallies the group says are all 0.
        report.problems.append(
            f"{group.path}: says its values hold no infinity, but the data holds some: "
            "rebuild it with `accumulus accumulate --rebuild`"
        )
    return report


class _Mismatch(Exception):
    pass


def _missing_objects(
    cube: RawCube, var: VariableInfo, group: spec.AccumulationGroup, root: zarr.Group | None
) -> str | None:
    """What of ``group``'s chunk objects its store no longer holds, in one line (a missing
    chunk reads as its fill value, which the comparison would blame on the sums)."""
    for name in sorted({n for acc in group.accumulations for n in acc.arrays.values()}):
        array = accumulation_array(cube, var.name, name, root)
        missing = missing_chunks(array)
        if missing:
            return (
                f"{array.path}: {len(missing)} chunk objects missing (first "
                f"{array.path}/{missing[0]}): deleted or lost; "
                f"`accumulus accumulate {cube.label} {var.name} --rebuild` writes them again"
            )
    return None


def _checks(
    cube: RawCube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    acc: spec.Accumulation,
    checked: list[str],
    root: zarr.Group | None,
) -> list[_Check]:
    """The comparisons of one accumulation's arrays, over the covered extent (entries past
    the coverage, or not final, are provisional and never read by queries)."""
    arrays = {n: accumulation_array(cube, var.name, n, root) for n in set(acc.arrays.values())}
    shape = dict(zip(acc.array_dims, next(iter(arrays.values())).shape, strict=True))
    window: dict[str, int] = {}  # entries (accumulated dims) or indices (others) to check
    ends = acc.entry_positions(dict(zip(var.dims, var.bounds, strict=True)))
    for dim in var.dims:
        covered = group.coverage.get(dim, 0)
        if acc.placement is not None and dim in acc.prefix_dims:
            window[dim] = acc.placement.final[dim]
        elif dim in acc.prefix_dims:
            window[dim] = sum(p <= covered for p in ends[dim][: shape[dim]])
        else:
            window[dim] = covered
        if shape[dim] < window[dim]:
            raise _Mismatch(
                f"{group.path}/{acc.key}: extent {shape[dim]} along {dim!r} is less than "
                f"the {window[dim]} covered"
            )
    if 0 in window.values():  # no final entry yet (fewer chunks than the stride): no check
        checked.extend(n for n in sorted(arrays) if n not in checked)
        return []
    checks = []
    for term, name in sorted(acc.arrays.items()):
        if name in checked:
            continue
        checked.append(name)
        extent = tuple(window[d] for d in acc.array_dims)
        checks.append(_Check(name, term, acc, arrays[name], extent, ends))
    return checks


def _compare(
    cube: RawCube, var: VariableInfo, group: spec.AccumulationGroup, checks: list[_Check]
) -> None:
    """Walk the raw data slab by slab along the batch dimension and compare every check."""
    if not checks:
        return
    dim = stream.batch_dimension(var)
    axis = var.axis(dim)
    edges = var.bounds[axis].edges
    per_slab = stream.chunks_per_slab(var, dim, group)
    stop = max(_raw_extent(c, dim) for c in checks)
    weights = weight_values(
        cube.decoded, group.weights, var.name, {d: slice(None) for d in var.dims}
    )
    x = var.dask_array(var.grouped_blocks(keep=dim))
    times = group_times(cube.decoded, var.dims, var.name, group)
    totals: dict[tuple[str, bool], np.ndarray] = {}  # running sums along dim, before the slab
    for first in range(0, len(edges) - 1, per_slab):
        lo, hi = edges[first], edges[min(first + per_slab, len(edges) - 1)]
        if lo >= stop:
            break
        index = [slice(None)] * len(var.dims)
        index[axis] = slice(lo, hi)
        w = weights
        if isinstance(w, np.ndarray) and w.shape[axis] > 1:
            w = w[tuple(index)]
        t = times
        if t is not None and t.shape[axis] > 1:
            t = t[tuple(index)]
        sums = _slab_sums(var, x[tuple(index)], w, checks, (lo, hi), group.reference or 0.0, t)
        for check in checks:
            _compare_slab(var, check, dim, (lo, hi), sums, totals)


def _raw_extent(check: _Check, dim: str) -> int:
    """How far along ``dim`` the raw data must be read to recompute ``check``'s window."""
    count = check.window[check.acc.array_dims.index(dim)]
    if dim not in check.acc.prefix_dims:
        return count
    return check.ends[dim][count - 1]


Cuts = tuple[tuple[int, tuple[int, ...]], ...]  # (axis, where pieces start) per summed axis


def _cuts(var: VariableInfo, check: _Check) -> Cuts:
    """Where the pieces summed for ``check`` start along each of its prefix axes: at every
    raw chunk edge (blocks are whole chunks) and every entry's end."""
    cuts = []
    for dim in check.acc.prefix_dims:
        edges = var.bounds[var.axis(dim)].edges
        inside = (p for p in check.ends[dim] if p < edges[-1])
        cuts.append((var.axis(dim), tuple(sorted({*edges[:-1], *inside}))))
    return tuple(sorted(cuts))


def _slab_sums(
    var: VariableInfo,
    x: da.Array,
    w: np.ndarray | float,
    checks: list[_Check],
    slab: tuple[int, int],
    reference: float = 0.0,
    times: np.ndarray | None = None,
) -> dict[tuple[str, Cuts, bool], np.ndarray]:
    """Sums per piece of one slab (raw ``slab`` along the batch axis), for every (term, cuts)
    the checks need and for the same sums of absolute summands: ``{(term, cuts, absolute):
    array}``, shaped like the slab with the piece count on the cut axes. Centred sums are
    of x − ``reference``; sums against time are weighted by ``times`` (years) to their
    power."""
    valid = ~da.isnan(x)
    # Infinite values count (x^0 = 1) but add nothing to the sums of x^b, b > 0: the
    # tallies count them (``statistics``).
    values = da.where(da.isfinite(x), x, 0.0)
    wanted = sorted({(c.term, _cuts(var, c)) for c in checks})
    lazy = {}
    for term, cuts in wanted:
        s = statistics.SUMS[term]
        if s.tally is not None:
            summand = (x == s.tally).astype("f8")
        else:
            about = values - reference if s.centred else values
            # Centred: 0 where infinite, as the build leaves them out of every power of x.
            kept = (valid & da.isfinite(x)) if s.centred else valid
            factor = w**s.weight_power
            if s.time_power:
                assert times is not None
                factor = factor * times**s.time_power
            summand = da.where(kept, factor * about**s.value_power, 0.0)
        lazy[term, cuts, False] = _piece_totals(summand, var, cuts, slab)
        # A count's summands are never negative: its absolute sums are its sums.
        absolute = summand if s.is_count else abs(summand)
        lazy[term, cuts, True] = _piece_totals(absolute, var, cuts, slab)
    computed = compute.run(list(lazy.values()))
    return dict(zip(lazy, computed, strict=True))


def _piece_totals(x: da.Array, var: VariableInfo, cuts: Cuts, slab: tuple[int, int]) -> da.Array:
    """Sums of ``x`` (raw ``slab`` along the batch axis, in blocks of whole raw chunks) per
    piece along each cut axis, with NumPy."""
    batch = var.axis(stream.batch_dimension(var))
    starts = []  # each block's start along each axis, in raw indices
    for a, sizes in enumerate(x.chunks):
        begin = slab[0] if a == batch else 0
        starts.append(np.cumsum((begin, *sizes[:-1])).tolist())
    cut_at = dict(cuts)

    def inner(a: int, i: int) -> list[int]:
        lo = starts[a][i]
        return [c - lo for c in cut_at[a] if lo <= c < lo + x.chunks[a][i]]

    def reduce(block: np.ndarray, block_id: tuple[int, ...]) -> np.ndarray:
        for a in cut_at:
            block = np.add.reduceat(block, inner(a, block_id[a]), axis=a)
        return block

    chunks = tuple(
        tuple(len(inner(a, i)) for i in range(len(sizes))) if a in cut_at else sizes
        for a, sizes in enumerate(x.chunks)
    )
    return x.map_blocks(reduce, chunks=chunks, dtype="f8")  # type: ignore[call-arg,arg-type]  # dask's stubs for the method form


def _compare_slab(
    var: VariableInfo,
    check: _Check,
    dim: str,
    slab: tuple[int, int],
    sums: dict[tuple[str, Cuts, bool], np.ndarray],
    totals: dict[tuple[str, bool], np.ndarray],
) -> None:
    """Prefix-sum one slab's piece sums into the entries it ends and compare them."""
    acc = check.acc
    cuts = _cuts(var, check)
    window = dict(zip(acc.array_dims, check.window, strict=True))
    batch = var.axis(dim)
    recomputed = []
    for absolute in (False, True):
        out = sums[check.term, cuts, absolute]
        for d in var.dims:
            a = var.axis(d)
            if a == batch:
                continue
            if d in acc.prefix_dims:
                starts = dict(cuts)[a]
                # Piece j ends where piece j + 1 starts (the last at the axis' end).
                pieces = [bisect.bisect_left(starts, p) - 1 for p in check.ends[d][: window[d]]]
                out = np.take(np.cumsum(out, axis=a), pieces, axis=a)
            else:
                out = np.take(out, np.arange(window[d]), axis=a)
        lo, hi = slab
        if dim in acc.prefix_dims:
            # Continue from the slabs before, and keep the pieces that end an entry.
            key = (check.name, absolute)
            out = np.cumsum(out, axis=batch)
            if key in totals:
                out += totals[key]
            totals[key] = np.take(out, [-1], axis=batch)
            kept = [c for c in dict(cuts)[batch] if lo <= c < hi]
            piece_ends = [*kept[1:], hi]
            positions = check.ends[dim][: window[dim]]
            start = bisect.bisect_right(positions, lo)  # the first entry this slab ends
            stop = bisect.bisect_right(positions, hi)
            ending = [piece_ends.index(p) for p in positions[start:stop]]
            out = np.take(out, ending, axis=batch)
        else:
            start, stop = lo, min(hi, window[dim])
            out = np.take(out, np.arange(max(0, stop - start)), axis=batch)
        recomputed.append(out)
    if recomputed[0].shape[batch] == 0:
        return
    order = [var.axis(d) for d in acc.array_dims]
    want, scale = (r.transpose(order) for r in recomputed)
    offset = tuple(start if d == dim else 0 for d in acc.array_dims)
    region = tuple(slice(o, o + n) for o, n in zip(offset, want.shape, strict=True))
    check.record(offset, np.asarray(check.array[region]), want, scale)


def _describe(group: spec.AccumulationGroup, check: _Check) -> str:
    assert check.first is not None
    _, index, got, want = check.first
    location = ", ".join(
        f"{d} entry {i} (raw [0, {check.ends[d][i]}))" if d in check.acc.prefix_dims else f"{d}={i}"
        for d, i in zip(check.acc.array_dims, index, strict=True)
    )
    why = ""
    if not np.isfinite(got) and np.isfinite(want):
        why = (
            " (its sums hold infinities: built before accumulus tallied them apart; "
            "`accumulus accumulate --rebuild` replaces it)"
        )
    return (
        f"{group.path}/{check.name}: {check.n_bad} entries differ; first at {location}: "
        f"stored {got}, recomputed {want}{why}"
    )
