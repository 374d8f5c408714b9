"""What ``GET /api/datasets`` says about a dataset: dimensions with their coordinate ranges,
variables with units, and which accumulations exist and how far they cover.

Built from the snapshot's ``RawCube`` alone (no chunk listing, unlike ``accumulus inspect``,
which also sizes every array), so it is cheap enough to answer on every request.
"""

from __future__ import annotations

from typing import Any

from accumulus.accumulation.query.selection import dimension_kind
from accumulus.api import StaleSidecarError
from accumulus.errors import AccumulationReadError
from accumulus.numeric import numeric_problem
from accumulus.output import label
from accumulus.raw_cube import RawCube
from accumulus.service.datasets import DatasetSnapshot


def describe_snapshot(snapshot: DatasetSnapshot) -> dict[str, Any]:
    cube = snapshot.cube
    return {
        "name": snapshot.dataset,
        "snapshot": snapshot.token,
        "zarr_format": cube.zarr_format,
        "consolidated": cube.consolidated,
        "dimensions": {str(d): _dimension(cube, str(d)) for d in cube.raw.dims},
        "variables": [_variable(snapshot, name) for name in averageable(cube)],
    }


def averageable(cube: RawCube) -> list[str]:
    """The data variables that hold numbers (strings and dates cannot be averaged)."""
    return [v for v in cube.data_variables if numeric_problem(cube.raw, cube.decoded, v) is None]


def _dimension(cube: RawCube, dim: str) -> dict[str, Any]:
    index = cube.index(dim)
    kind = dimension_kind(cube, dim)
    labels = cube.labels_name(dim)  # the dimension's own, or lat(latitude)
    coord = cube.raw.variables[labels] if labels is not None else None
    units = coord.attrs.get("units") if coord is not None and kind != "time" else None
    return {
        "size": len(index),
        "kind": kind,
        "first": label(index[0]) if len(index) else None,
        "last": label(index[-1]) if len(index) else None,
        "ascending": bool(index.is_monotonic_increasing),
        "units": units,
    }


def _variable(snapshot: DatasetSnapshot, name: str) -> dict[str, Any]:
    cube = snapshot.cube
    var = cube.variable(name)
    attrs = cube.raw[name].attrs
    try:
        accumulation, stale = _accumulation(snapshot, name), None
    except (StaleSidecarError, AccumulationReadError) as exc:
        # Not to be used (a stale sidecar; attributes or raw chunks changed since the build).
        accumulation, stale = None, str(exc)
    return {
        "name": name,
        "dims": list(var.dims),
        "shape": list(var.shape),
        "dtype": str(cube.raw[name].dtype),
        "units": attrs.get("units"),
        "long_name": attrs.get("long_name"),
        "accumulation": accumulation,
        "stale": stale,
    }


def _accumulation(snapshot: DatasetSnapshot, name: str) -> dict[str, Any] | None:
    cube = snapshot.cube
    group = snapshot.current.groups.group(name)
    if group is None:
        return None
    var = cube.variable(name)
    coverage = {}
    for dim, size in zip(var.dims, var.shape, strict=True):
        covered = int(group.coverage.get(dim, 0))
        through = cube.index(dim)[min(covered, size) - 1] if covered and size else None
        coverage[dim] = {
            "covered": covered,
            "size": size,
            "through": None if through is None else label(through),
        }
    return {
        "weights": group.weights,
        "complete": group.complete,
        "producer": group.producer,
        "combinations": [
            {"dims": list(a.dims), "strides": list(a.strides)} for a in group.accumulations
        ],
        "coverage": coverage,
    }
