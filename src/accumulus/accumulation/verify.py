"""Verifying an accumulation group against the raw data.

The expected entries are recomputed independently of the build: with xarray, as cumulative
sums at full resolution taken at each entry's end (the build sums per chunk, then
prefix-sums the chunk sums), and compared with the stored arrays over the covered extent.
The tolerance follows the rounding error of a sum: relative to the same sums of absolute
summands, so prefix sums of values that cancel are judged fairly. All comparisons run as
one Dask computation (one pass over the raw data).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask
import dask.array as da
import numpy as np
import xarray as xr

from accumulus.accumulation import spec, statistics
from accumulus.accumulation.chunk_check import chunk_problem_text, failing_chunks
from accumulus.accumulation.groups import accumulation_array, read_group, stride_unit_problem
from accumulus.accumulation.weights import weight_values
from accumulus.cube import Cube, VariableInfo

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
    name: str
    acc: spec.Accumulation
    stored: xr.DataArray
    expected: xr.DataArray
    bad: xr.DataArray


def verify_variable(cube: Cube, variable: str) -> VerifyReport:
    var = cube.variable(variable)
    report = VerifyReport(variable)
    try:
        group = read_group(cube, variable)
    except Exception as exc:  # an invalid group is exactly what verify reports
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
    weights = weight_values(
        cube.decoded, group.weights, var.dims, {d: slice(None) for d in var.dims}
    )
    raw = xr.DataArray(var.dask_array(var.grouped_blocks()), dims=var.dims)
    summands = _summands(raw, weights)
    checks: list[_Check] = []
    for acc in group.accumulations:
        try:
            checks += _checks(cube, var, group, acc, summands, report.checked)
        except _Mismatch as problem:
            report.problems.append(str(problem))
    try:
        counts = dask.compute(*[(c.bad.data.sum(), da.argmax(c.bad.data.ravel())) for c in checks])
    except Exception as exc:  # a corrupt chunk (its checksum fails): say which
        failing = [
            problem
            for acc in group.accumulations
            for name in sorted(set(acc.arrays.values()))
            for problem in failing_chunks(accumulation_array(cube, variable, name))
        ]
        text = chunk_problem_text(failing) or f"cannot be read or recomputed: {exc}"
        report.problems.append(f"{group.path}: {text}")
        return report
    for check, (n_bad, first) in zip(checks, counts, strict=True):
        if n_bad:
            report.problems.append(_describe(var, group, check, int(n_bad), int(first)))
    return report


class _Mismatch(Exception):
    pass


def _summands(x: xr.DataArray, weights: np.ndarray | float) -> xr.DataArray:
    """Every sum's summands w^a·x^b (``statistics.SUMS``) and their absolute values,
    stacked along a "term" dimension."""
    valid = x.notnull()
    values = x.fillna(0.0)
    w: xr.DataArray | float = 1.0
    if isinstance(weights, np.ndarray):
        # Keep only the axes the weights vary along: xarray broadcasts by name, not size 1.
        keep = [i for i, n in enumerate(weights.shape) if n != 1 or x.shape[i] == 1]
        w = xr.DataArray(
            weights.reshape([weights.shape[i] for i in keep]), dims=[x.dims[i] for i in keep]
        )
    terms = {
        s.name: (w**s.weight_power * values**s.value_power).where(valid, 0.0)
        for s in statistics.SUMS.values()
    }
    terms |= {f"abs_{t}": abs(v) for t, v in terms.items()}
    stacked = xr.concat(list(terms.values()), dim="term", coords="minimal")
    return stacked.assign_coords(term=list(terms))


def _positions(var: VariableInfo, acc: spec.Accumulation) -> dict[str, tuple[int, ...]]:
    return acc.entry_positions(dict(zip(var.dims, var.bounds, strict=True)))


def _expected(summands: xr.DataArray, var: VariableInfo, acc: spec.Accumulation, entries):
    """Entries recomputed with xarray, by another route than the build's per-segment sums:
    the cumulative sum at full resolution, taken at each entry's end position."""
    out = summands
    ends = _positions(var, acc)
    for dim in acc.prefix_dims:
        positions = np.asarray(ends[dim][: entries[dim]], dtype=int)
        if positions.size == 0:
            out = out.isel({dim: slice(0, 0)})
            continue
        out = out.isel({dim: slice(0, int(positions[-1]))}).cumsum(dim).isel({dim: positions - 1})
    return out.transpose("term", *acc.array_dims)


def _checks(
    cube: Cube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    acc: spec.Accumulation,
    summands: xr.DataArray,
    checked: list[str],
) -> list[_Check]:
    """Lazy comparisons of one accumulation's arrays, over the covered extent (entries past
    the coverage, or not final, are provisional and never read by queries)."""
    arrays = {n: accumulation_array(cube, var.name, n) for n in set(acc.arrays.values())}
    shape = dict(zip(acc.array_dims, next(iter(arrays.values())).shape, strict=True))
    window: dict[str, int] = {}  # entries (accumulated dims) or indices (others) to check
    ends = _positions(var, acc)
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
    others = {d: slice(0, window[d]) for d in var.dims if d not in acc.prefix_dims}
    expected = _expected(summands.isel(others), var, acc, window)
    checks = []
    for term, name in sorted(acc.arrays.items()):
        if name in checked:
            continue
        checked.append(name)
        stored = xr.DataArray(
            da.from_array(arrays[name], chunks=arrays[name].chunks, lock=False).astype("f8"),
            dims=acc.array_dims,
        ).isel({d: slice(0, window[d]) for d in acc.array_dims})
        want = expected.sel(term=term, drop=True)
        stored = stored.chunk(want.chunksizes)  # compare block by block, without re-slicing
        # Sums stored in float32 (as the ZEP 5 reference generator does) carry its rounding.
        dtype = arrays[name].dtype
        rtol = max(RTOL, 16 * np.finfo(dtype).eps) if dtype.kind == "f" else RTOL
        tolerance = rtol * expected.sel(term=f"abs_{term}", drop=True) + 1e-300
        bad = ~(abs(stored - want) <= tolerance)
        checks.append(_Check(name, acc, stored, want, bad))
    return checks


def _describe(
    var: VariableInfo, group: spec.AccumulationGroup, check: _Check, n_bad: int, first: int
) -> str:
    index = np.unravel_index(first, check.bad.shape)
    acc = check.acc
    ends = _positions(var, acc)
    location = ", ".join(
        f"{d} entry {i} (raw [0, {ends[d][i]}))" if d in acc.prefix_dims else f"{d}={i}"
        for d, i in zip(acc.array_dims, index, strict=True)
    )
    got = float(check.stored.data[tuple(index)].compute())
    want = float(check.expected.data[tuple(index)].compute())
    return (
        f"{group.path}/{check.name}: {n_bad} entries differ; first at {location}: "
        f"stored {got}, recomputed {want}"
    )
