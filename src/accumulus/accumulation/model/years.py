"""Time in years, as trends are taken against: days since the first time of the cube, over
365.25 (``statistics``: the sums Σt, Σt², Σt·x). Counting from the first time keeps t small,
so that n·Σt² − (Σt)² cancels few digits."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from accumulus.accumulation.model import spec, statistics
from accumulus.errors import AccumulusError

DAYS_PER_YEAR = 365.25


def time_dimension(ds: xr.Dataset, dims: Sequence[str]) -> str | None:
    """The one dimension of ``dims`` whose coordinate holds dates (datetime64 or cftime);
    None when there is none or more than one."""
    found = [d for d in dims if d in ds.coords and _is_dates(ds[d])]
    return found[0] if len(found) == 1 else None


def years(ds: xr.Dataset, dims: Sequence[str], what: str) -> tuple[str, np.ndarray]:
    """The time dimension of ``dims`` and each of its steps in years since its first step
    (float64), or an error naming ``what`` needs them."""
    dim = time_dimension(ds, dims)
    if dim is None:
        raise AccumulusError(
            f"{what} needs one time dimension among {list(dims)}: none holds dates"
        )
    values = ds[dim].values
    if values.size == 0:
        return dim, np.zeros(0)
    if np.issubdtype(values.dtype, np.datetime64):
        days = (values - values[0]) / np.timedelta64(1, "D")
    else:  # cftime dates: differences are timedeltas
        days = np.array([(v - values[0]).total_seconds() / 86400 for v in values])
    return dim, np.asarray(days, dtype="f8") / DAYS_PER_YEAR


def along(values: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    """``values`` shaped to broadcast along ``axis`` of an ``ndim``-dimensional array."""
    return values.reshape([-1 if a == axis else 1 for a in range(ndim)])


def group_times(
    ds: xr.Dataset, dims: Sequence[str], variable: str, group: spec.AccumulationGroup
) -> np.ndarray | None:
    """The years of each step, broadcastable to the variable (``dims``), for a group
    keeping sums against time (a trend's); None for the others."""
    timed = any(statistics.SUMS[t].time_power for acc in group.accumulations for t in acc.arrays)
    if not timed:
        return None
    dim, steps = years(ds, dims, f"the trend sums of {variable!r}")
    return along(steps, list(dims).index(dim), len(dims))


def _is_dates(coordinate: xr.DataArray) -> bool:
    if np.issubdtype(coordinate.dtype, np.datetime64):
        return True
    return (
        coordinate.dtype == object
        and coordinate.size > 0
        and hasattr(coordinate.values.flat[0], "calendar")
    )
