"""The public functions of accumulus (re-exported from ``accumulus``).

Stores are given as a path or URL (directory, ``file://``, ``.zip``, ``memory://name``,
``s3://bucket/prefix``), a zarr ``Store``, or an open ``Cube``. ``group`` names the group of
the store a function works on ("Grid" in an IMERG cube); by default the one group holding
the variable (a cube without groups: its root).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import xarray as xr
from zarr.abc.store import Store

from accumulus.accumulation import spec
from accumulus.accumulation.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.build import BuildResult, build_accumulations
from accumulus.accumulation.query import Query, QueryResult, run_query
from accumulus.accumulation.verify import VerifyReport, verify_variable
from accumulus.accumulation.weights import find_latitude, find_longitude, resolve_weights
from accumulus.compute import Progress
from accumulus.cube import Cube
from accumulus.errors import AccumulusError
from accumulus.hierarchy import find_cube_group
from accumulus.ingest.append import AppendResult as AppendResult  # re-exported
from accumulus.ingest.append import append as append  # re-exported
from accumulus.ingest.compare import SourceComparison, compare_sources
from accumulus.inspection import describe_cube
from accumulus.numeric import check_numeric
from accumulus.storage import open_store, store_label

StoreLike = str | Store | Cube


def open_cube(
    store: StoreLike,
    mode: str = "r",
    storage_options: dict | None = None,
    *,
    group: str | None = None,
    variable: str | None = None,
) -> Cube:
    """Open a datacube snapshot (reads its metadata once): the group ``group`` of the store,
    or the one group holding ``variable`` (or data variables)."""
    if isinstance(store, Cube):
        return store
    opened = open_store(store, mode, storage_options=storage_options)  # type: ignore[arg-type]
    label = None if isinstance(store, Store) else str(store)
    where = label or store_label(opened)
    path = find_cube_group(opened, group, variable, where)
    return Cube(opened, label, group=path)


def accumulate(
    store: StoreLike,
    variable: str,
    dims: Iterable[Sequence[str] | str] | None = None,
    *,
    weights: str | None = None,
    strides: Mapping[str, int] | None = None,
    scheduler: str | None = None,
    rebuild: bool = False,
    progress: Progress | None = None,
    storage_options: dict | None = None,
    group: str | None = None,
) -> BuildResult:
    """Build the ZEP 5 accumulation group of ``variable``.

    ``dims``: the dimension combinations to accumulate, e.g. ``[("time",), ("latitude",
    "longitude")]`` (a string "latitude,longitude" also works); default every dimension alone
    plus latitude+longitude together. ``weights``: "area" (cos latitude; the default when a
    latitude dimension exists), "none", or the name of an array of the dataset.
    ``strides``: accumulate every k chunks along a dimension (default 1).
    Re-running with the same configuration does nothing; another configuration needs
    ``rebuild=True``.
    """
    cube = open_cube(store, "r+", storage_options, group=group, variable=variable)
    var = cube.variable(variable)
    check_numeric(cube.raw, cube.decoded, variable, "a variable to accumulate")
    if dims is None:
        lat, lon = find_latitude(cube.raw, var.dims), find_longitude(cube.raw, var.dims)
        combos = spec.default_combinations(var.dims, lat, lon)
    else:
        combos = [_combination(c) for c in dims]
    request = spec.BuildRequest(
        combinations=tuple(combos),
        strides=dict(strides or {}),
        weights=resolve_weights(cube.decoded, variable, weights),
    )
    return build_accumulations(
        cube, variable, request, rebuild=rebuild, scheduler=scheduler, progress=progress
    )


def _combination(combo: Sequence[str] | str) -> tuple[str, ...]:
    if isinstance(combo, str):
        combo = [d.strip() for d in combo.split(",")]
    if not combo or any(not d for d in combo):
        raise AccumulusError(f"empty dimension name in combination {combo!r}")
    return tuple(combo)


def query(
    store: StoreLike,
    variable: str,
    over: Iterable[str] | str,
    ranges: Mapping[str, tuple[Any, Any]] | None = None,
    *,
    stat: str = "mean",
    weights: str | None = None,
    use_accumulation: bool = True,
    storage_options: dict | None = None,
    memory_bytes: int = DEFAULT_MEMORY_BYTES,
    group: str | None = None,
) -> QueryResult:
    """Like ``average`` but returns the whole ``QueryResult``: data, plan and measured stats.
    Raw reads stream within about ``memory_bytes``."""
    cube = open_cube(store, "r", storage_options, group=group, variable=variable)
    if isinstance(over, str):
        over = [d.strip() for d in over.split(",") if d.strip()]
    request = Query(
        variable=variable,
        over=tuple(over),
        ranges=dict(ranges or {}),
        stat=stat,
        weights=weights,
        use_accumulation=use_accumulation,
    )
    return run_query(cube, request, memory_bytes=memory_bytes)


def average(
    store: StoreLike,
    variable: str,
    over: Iterable[str] | str,
    ranges: Mapping[str, tuple[Any, Any]] | None = None,
    *,
    stat: str = "mean",
    weights: str | None = None,
    use_accumulation: bool = True,
    storage_options: dict | None = None,
    group: str | None = None,
) -> xr.DataArray:
    """The ``stat`` ("mean", "sum" or "count" = Σ weights) of ``variable`` over the dimensions
    ``over``, within inclusive label ``ranges`` ({dim: (start, end)}, like
    ``sel(dim=slice(start, end))``). Equals ``da.sel(...).weighted(w).mean(over)`` on the raw
    data. The plan's numbers (chunks and bytes read, seconds) are in the result's ``attrs``.
    """
    return query(
        store,
        variable,
        over,
        ranges,
        stat=stat,
        weights=weights,
        use_accumulation=use_accumulation,
        storage_options=storage_options,
        group=group,
    ).data


def verify(
    store: StoreLike,
    variable: str | None = None,
    *,
    storage_options: dict | None = None,
    group: str | None = None,
) -> list[VerifyReport]:
    """Recompute accumulations from the raw data and compare (all variables by default)."""
    cube = open_cube(store, "r", storage_options, group=group, variable=variable)
    names = [variable] if variable else cube.data_variables
    reports = [verify_variable(cube, name) for name in names]
    if variable is None:
        reports = [r for r in reports if r.checked or r.problems]
    return reports


def verify_sources(
    store: str | os.PathLike[str],
    sources: Sequence[str | os.PathLike[str]],
    *,
    dim: str | None = None,
    storage_options: dict | None = None,
) -> list[SourceComparison]:
    """Compare the cube with the files it was made from, as xarray decodes them: every
    variable, value for value; differences by variable and index range. ``dim``: what the
    sources were appended along (default: the cube's; none for a converted file)."""
    return compare_sources(store, sources, dim=dim, storage_options=storage_options)


def inspect(
    store: StoreLike, *, storage_options: dict | None = None, group: str | None = None
) -> dict[str, Any]:
    """Arrays, dimensions, chunk grids, codecs, sizes and accumulation groups of a cube."""
    return describe_cube(open_cube(store, "r", storage_options, group=group))
