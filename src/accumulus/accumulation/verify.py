"""Verifying an accumulation group against the raw data.

The expected entries are recomputed independently of the build: with xarray, each raw index
along an accumulated dimension is labelled with the entry group it falls in, the summands
are summed per group (``groupby``) and cumulatively summed, and the result is compared with
the stored arrays. The tolerance follows the rounding error of a sum: relative to the sum of
absolute summands, so prefix sums of values that cancel are judged fairly.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dask.array as da
import numpy as np
import xarray as xr

from accumulus.accumulation import spec
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


def verify_variable(cube: Cube, variable: str) -> VerifyReport:
    var = cube.variable(variable)
    report = VerifyReport(variable)
    try:
        group = cube.accumulation_group(variable)
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
    raw = _raw(var)
    weights = weight_values(
        cube.decoded, group.weights, var.dims, {d: slice(None) for d in var.dims}
    )
    summands = _summands(raw, weights)
    for acc in group.accumulations:
        for term, name in sorted(acc.arrays.items()):
            if name in report.checked:
                continue
            report.checked.append(name)
            problem = _check_array(cube, var, group, acc, term, name, summands)
            if problem:
                report.problems.append(problem)
    return report


def _raw(var: VariableInfo) -> xr.DataArray:
    return xr.DataArray(var.dask_array(), dims=var.dims)


def _summands(x: xr.DataArray, weights: np.ndarray | float) -> dict[str, xr.DataArray]:
    valid = x.notnull()
    values = x.fillna(0.0)
    w: xr.DataArray | float = 1.0
    if isinstance(weights, np.ndarray):
        # Keep only the axes the weights vary along: xarray broadcasts by name, not size 1.
        keep = [i for i, n in enumerate(weights.shape) if n != 1 or x.shape[i] == 1]
        w = xr.DataArray(
            weights.reshape([weights.shape[i] for i in keep]), dims=[x.dims[i] for i in keep]
        )
    return {
        spec.SUM: values,
        spec.COUNT: valid.astype("f8"),
        spec.WSUM: (values * w).where(valid, 0.0),
        spec.WCOUNT: (w * valid).where(valid, 0.0),
    }


def _expected(
    summand: xr.DataArray, var: VariableInfo, acc: spec.Accumulation, entries: dict[str, int]
) -> xr.DataArray:
    """Entries recomputed with xarray: label every index with its entry group, sum per group,
    then cumulative-sum over groups."""
    out = summand
    for dim in acc.dims:
        bounds = var.bounds[var.axis(dim)]
        positions = np.asarray(bounds.strided_edges(acc.stride(dim))[: entries[dim]])
        if positions.size == 0:
            return out.isel({dim: slice(0, 0)})
        out = out.isel({dim: slice(0, int(positions[-1]))})  # what no entry holds is left out
        labels = np.searchsorted(positions, np.arange(int(positions[-1])), side="right")
        out = out.groupby(xr.DataArray(labels, dims=dim, name=f"{dim}_entry")).sum()
        out = out.rename({f"{dim}_entry": dim}).cumsum(dim)
    return out.transpose(*acc.array_dims)


def _check_array(
    cube: Cube,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    acc: spec.Accumulation,
    term: str,
    name: str,
    summands: dict[str, xr.DataArray],
) -> str | None:
    """Compare one stored array with its recomputation over the covered extent (entries past
    the coverage are provisional and never read by queries)."""
    where = f"{group.path}/{name}"
    stored_array = cube.accumulation_array(var.name, name)
    shape = dict(zip(acc.array_dims, stored_array.shape, strict=True))
    window: dict[str, int] = {}  # entries (accumulated dims) or indices (others) to check
    for dim in var.dims:
        covered = group.coverage.get(dim, 0)
        if dim in acc.dims:
            positions = var.bounds[var.axis(dim)].strided_edges(acc.stride(dim))
            window[dim] = sum(p <= covered for p in positions[: shape[dim]])
        else:
            window[dim] = covered
        if shape[dim] < window[dim]:
            return (
                f"{where}: extent {shape[dim]} along {dim!r} is less than the {window[dim]} covered"
            )
    if 0 in window.values():  # no final entry yet (fewer chunks than the stride): no check
        return None
    summand = summands[term].isel({d: slice(0, window[d]) for d in var.dims if d not in acc.dims})
    expected = _expected(summand, var, acc, window)
    scale = _expected(abs(summand), var, acc, window)
    try:
        bound = cube.bind(stored_array, cube.store)
        stored = xr.DataArray(
            da.from_array(bound, chunks=bound.chunks, lock=False).astype("f8"),
            dims=acc.array_dims,
        ).isel({d: slice(0, window[d]) for d in acc.array_dims})
        tolerance = RTOL * scale + 1e-300
        bad = ~(abs(stored - expected) <= tolerance)
        n_bad, first = da.compute(bad.data.sum(), da.argmax(bad.data.ravel()))
    except Exception as exc:
        return f"{where}: cannot be read or recomputed: {exc}"
    if n_bad == 0:
        return None
    index = np.unravel_index(int(first), bad.shape)
    location = ", ".join(
        f"{d} entry {i} (raw [0, {var.bounds[var.axis(d)].strided_edges(acc.stride(d))[i]}))"
        if d in acc.dims
        else f"{d}={i}"
        for d, i in zip(acc.array_dims, index, strict=True)
    )
    got = float(stored.data[tuple(index)].compute())
    want = float(expected.data[tuple(index)].compute())
    return (
        f"{where}: {int(n_bad)} entries differ; first at {location}: "
        f"stored {got}, recomputed {want}"
    )
