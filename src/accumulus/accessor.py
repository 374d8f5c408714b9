"""The accessor ``da.accumulus`` (``mean``, ``sum``, ``count``): ``accumulus.average`` of the
stored variable a ``DataArray`` was read from (``opened.opened_store`` finds it).

Importing this module registers the accessor. ``import accumulus`` does not import xarray
(the command line starts without it), so the package imports this module once xarray is
imported (``accumulus.__init__``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import xarray as xr

if TYPE_CHECKING:
    from accumulus.accumulation.model.statistics import Stat


@xr.register_dataarray_accessor("accumulus")
class AccumulusAccessor:
    """``da.accumulus.mean(dims, time=slice(a, b), lat=(-10, 10))``: ``accumulus.average`` of
    the stored variable ``da`` was read from, over ``dims`` (default: all of them), within
    inclusive label ranges given as keywords, as ``da.sel(...)`` takes them. The answer is
    the ``DataArray`` ``accumulus.average`` returns, its read counts in ``attrs``. Options:
    ``weights`` (default the accumulations', area where latitudes are found), ``shape``,
    ``plan``, ``use_accumulation``, ``season`` ("JJA", ...), and ``ranges`` (a mapping, for
    dimensions whose names are not keywords)."""

    def __init__(self, data: xr.DataArray) -> None:
        self._data = data

    def mean(self, dim: str | Iterable[str] | None = None, **ranges: Any) -> xr.DataArray:
        """The weighted mean over ``dim``."""
        return self._ask("mean", dim, ranges)

    def sum(self, dim: str | Iterable[str] | None = None, **ranges: Any) -> xr.DataArray:
        """The weighted sum (Σ w·x) over ``dim``."""
        return self._ask("sum", dim, ranges)

    def count(self, dim: str | Iterable[str] | None = None, **ranges: Any) -> xr.DataArray:
        """Σ weights over ``dim``: with ``weights="none"`` the count of valid values, as
        ``DataArray.count`` gives it."""
        return self._ask("count", dim, ranges)

    def var(self, dim: str | Iterable[str] | None = None, **ranges: Any) -> xr.DataArray:
        """The weighted population variance over ``dim``, as ``weighted(w).var(dim)``."""
        return self._ask("var", dim, ranges)

    def std(self, dim: str | Iterable[str] | None = None, **ranges: Any) -> xr.DataArray:
        """The weighted population standard deviation over ``dim``."""
        return self._ask("std", dim, ranges)

    def trend(self, dim: str | Iterable[str] = "time", **ranges: Any) -> xr.DataArray:
        """The least-squares slope per year over ``dim`` (time), per cell."""
        return self._ask("trend", dim, ranges)

    def corr(self, other: str, dim: str | Iterable[str] = "time", **ranges: Any) -> xr.DataArray:
        """Pearson's r with the variable ``other`` of the same store over ``dim``, as
        ``xr.corr``."""
        return self._ask("corr", dim, {**ranges, "with_": other})

    def _ask(
        self, stat: Stat, dim: str | Iterable[str] | None, ranges: dict[str, Any]
    ) -> xr.DataArray:
        from accumulus.api import average

        options = {k: ranges.pop(k) for k in _OPTIONS if k in ranges}
        given: Mapping[str, Any] = options.pop("ranges", None) or {}
        over = [str(d) for d in self._data.dims] if dim is None else dim
        return average(self._data, None, over, {**given, **ranges}, stat=stat, **options)


# What the accessor's methods take besides dimensions' ranges.
_OPTIONS = ("weights", "shape", "plan", "use_accumulation", "ranges", "season", "with_")
