"""Averages over a shape: which grid cells it holds, and its sums as sums over boxes.

A cell belongs to a shape when its centre does. A centre exactly on the shape's boundary is
decided as regionmask decides it: the point is nudged a hair west and south (1e-8° and
1e-10°) before the test, so regions that share a border split the cells along it without
counting any twice, and our masks equal regionmask's. Longitudes are compared in
(-180, 180], whatever the grid's convention; shapes drawn beyond 180°E are tested a turn east.

The mask is a set of cells in the (latitude, longitude) plane of the variable's index space.
To answer from accumulations, the plane is cut into *blocks* at the chunk edges and the
accumulation positions along both axes. A block wholly inside the shape is a box the planner
answers from accumulations (prefix-sum differences); whole blocks are merged into rectangles
(runs along a row of blocks, stacked while rows repeat them) so a large shape is a few boxes.
Only blocks the shape's edge cuts are read raw, with the mask applied to their values. With
accumulation entries at every element the edge cuts no block, and no raw chunk is read.

Everything here is pure: masks, blocks and plans are data you can print and test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from accumulus.accumulation.plan import AccumulationLayout, QueryPlan, Read, plan_query
from accumulus.accumulation.weights import find_latitude, find_longitude
from accumulus.errors import ParameterError

# regionmask's nudge, so that centres on a boundary go the same way.
NUDGE_LON = 1e-8
NUDGE_LAT = 1e-10

Box = dict[str, tuple[int, int]]


@dataclass(frozen=True, eq=False)
class CellMask:
    """The cells of a shape within a latitude x longitude window of the variable's grid:
    ``cells[i, j]`` is cell (``start[0] + i``, ``start[1] + j``) in index space."""

    lat: str  # dimension names
    lon: str
    start: tuple[int, int]
    cells: np.ndarray  # bool, latitude-major

    @property
    def count(self) -> int:
        return int(np.count_nonzero(self.cells))

    def ranges(self) -> Box:
        """The window, as half-open index ranges."""
        (i0, j0), (rows, cols) = self.start, self.cells.shape
        return {self.lat: (i0, i0 + rows), self.lon: (j0, j0 + cols)}

    def window(self, dims: Sequence[str], box: Mapping[str, tuple[int, int]]) -> np.ndarray:
        """The cells of ``box`` (index ranges, every one of ``dims``) as a boolean array
        broadcastable to the box's values in ``dims`` order (False outside the window)."""
        (i0, j0), (rows, cols) = self.start, self.cells.shape
        (a, b), (c, d) = box[self.lat], box[self.lon]
        out = np.zeros((b - a, d - c), dtype=bool)
        lo_i, hi_i, lo_j, hi_j = max(a, i0), min(b, i0 + rows), max(c, j0), min(d, j0 + cols)
        if lo_i < hi_i and lo_j < hi_j:
            out[lo_i - a : hi_i - a, lo_j - c : hi_j - c] = self.cells[
                lo_i - i0 : hi_i - i0, lo_j - j0 : hi_j - j0
            ]
        if dims.index(self.lon) < dims.index(self.lat):
            out = out.T
        shape = [1] * len(dims)
        shape[dims.index(self.lat)] = b - a
        shape[dims.index(self.lon)] = d - c
        return out.reshape(shape)


def centre_mask(geometry: Any, lats: np.ndarray, lons: np.ndarray) -> np.ndarray:
    """(len(lats), len(lons)) booleans: cells whose centre lies in ``geometry`` (a shapely
    polygon in longitude/latitude degrees)."""
    import shapely

    lats = np.asarray(lats, dtype="f8")
    lons = np.asarray(lons, dtype="f8")
    wrapped = 180.0 - (180.0 - lons) % 360.0  # into (-180, 180]
    x = wrapped - NUDGE_LON
    y = np.where(lats <= -90.0, -90.0 + NUDGE_LAT, lats - NUDGE_LAT)
    xx, yy = np.meshgrid(x, y)
    shapely.prepare(geometry)
    inside = shapely.contains_xy(geometry, xx, yy)
    west, _, east, _ = geometry.bounds
    if east > 180.0:
        inside |= shapely.contains_xy(geometry, xx + 360.0, yy)
    if west < -180.0:
        inside |= shapely.contains_xy(geometry, xx - 360.0, yy)
    return inside


def cell_mask(
    geometry: Any,
    lat: str,
    lon: str,
    lats: np.ndarray,
    lons: np.ndarray,
    ranges: Mapping[str, tuple[int, int]],
) -> CellMask:
    """The shape's cells within ``ranges`` of the grid whose cell centres are ``lats`` and
    ``lons`` (whole coordinates), cut to the smallest window holding them all."""
    (a, b), (c, d) = ranges[lat], ranges[lon]
    inside = centre_mask(geometry, lats[a:b], lons[c:d])
    rows, cols = np.flatnonzero(inside.any(axis=1)), np.flatnonzero(inside.any(axis=0))
    if not rows.size:
        return CellMask(lat, lon, (a, c), np.zeros((0, 0), dtype=bool))
    window = inside[rows[0] : rows[-1] + 1, cols[0] : cols[-1] + 1]
    return CellMask(lat, lon, (a + int(rows[0]), c + int(cols[0])), window)


def shape_cells(cube: Any, var: Any, ranges: Mapping[str, tuple[int, int]], shape: Any) -> CellMask:
    """The cells of ``var`` (a ``cube.VariableInfo``) within ``ranges`` whose centres
    ``shape`` (a ``regions.Shape``) holds; a ``ParameterError`` naming ``shape`` when the
    variable has no latitude/longitude or the shape holds no cell centre."""
    lat, lon = find_latitude(cube.raw, var.dims), find_longitude(cube.raw, var.dims)
    if lat is None or lon is None:
        raise ParameterError(
            "shape",
            f"a shape needs latitude and longitude dimensions; {var.name!r} has {list(var.dims)}",
        )
    lats = np.asarray(cube.index(lat), dtype="f8")
    lons = np.asarray(cube.index(lon), dtype="f8")
    mask = cell_mask(shape.geometry, lat, lon, lats, lons, ranges)
    if mask.count == 0:
        raise ParameterError(
            "shape",
            f"{shape.label} holds no cell centre of {var.name!r} within the ranges asked "
            f"(latitudes {lats.min():g}..{lats.max():g}, longitudes {lons.min():g}.."
            f"{lons.max():g}; shape bounds {', '.join(f'{b:g}' for b in shape.geometry.bounds)})",
        )
    return mask


def kept_cells(mask: CellMask, dims: Sequence[str], over: Sequence[str]) -> np.ndarray | None:
    """Where an answer that keeps latitude or longitude has cells of the shape: a boolean
    array broadcastable to the answer (kept dims in ``dims`` order), or None when both are
    averaged away."""
    if mask.lat in over and mask.lon in over:
        return None
    window = mask.window(dims, mask.ranges())
    axes = tuple(dims.index(d) for d in (mask.lat, mask.lon) if d in over)
    if axes:
        window = window.any(axis=axes, keepdims=True)
    return window.squeeze(axis=tuple(i for i, d in enumerate(dims) if d in over))


# --------------------------------------------------------------------------------------------
# Blocks and boxes


def block_edges(lo: int, hi: int, edges: Iterable[int]) -> list[int]:
    """``[lo, hi)`` cut at the ``edges`` inside it."""
    return [lo, *sorted({e for e in edges if lo < e < hi}), hi]


@dataclass(frozen=True)
class Decomposition:
    """A mask as boxes: ``whole`` ones (every cell inside) and ``cut`` ones (blocks the
    shape's edge cuts, to be read with the mask applied)."""

    whole: tuple[Box, ...]
    cut: tuple[Box, ...]


def decompose(mask: CellMask, lat_edges: Iterable[int], lon_edges: Iterable[int]) -> Decomposition:
    """Cut the mask's window into blocks at the given edges and sort them: whole blocks
    merged into rectangles, cut blocks merged along each row of blocks."""
    window = mask.ranges()
    rows = block_edges(*window[mask.lat], lat_edges)
    cols = block_edges(*window[mask.lon], lon_edges)
    i0, j0 = mask.start
    whole_rects: list[list[int]] = []  # [row lo, row hi, col lo, col hi], open for stacking
    open_rects: dict[tuple[int, int], list[int]] = {}
    cut: list[Box] = []
    for r in range(len(rows) - 1):
        states = []
        for c in range(len(cols) - 1):
            block = mask.cells[rows[r] - i0 : rows[r + 1] - i0, cols[c] - j0 : cols[c + 1] - j0]
            states.append(2 if block.all() else 1 if block.any() else 0)
        still_open = {}
        for state, lo, hi in _runs(states):
            span = (cols[lo], cols[hi])
            if state == 1:
                cut.append({mask.lat: (rows[r], rows[r + 1]), mask.lon: span})
            elif state == 2:
                rect = open_rects.get(span)
                if rect is not None and rect[1] == rows[r]:
                    rect[1] = rows[r + 1]  # the same run as the row above: stack it
                else:
                    rect = [rows[r], rows[r + 1], *span]
                    whole_rects.append(rect)
                still_open[span] = rect
        open_rects = still_open
    whole = tuple({mask.lat: (a, b), mask.lon: (c, d)} for a, b, c, d in whole_rects)
    return Decomposition(whole, tuple(cut))


def _runs(states: Sequence[int]) -> list[tuple[int, int, int]]:
    """Runs of equal states: (state, first index, end index)."""
    runs = []
    start = 0
    for k in range(1, len(states) + 1):
        if k == len(states) or states[k] != states[start]:
            runs.append((states[start], start, k))
            start = k
    return runs


def plan_shape_query(
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    over: Iterable[str],
    layouts: Sequence[AccumulationLayout],
    mask: CellMask,
    chunk_edges: Mapping[str, Sequence[int]],
) -> QueryPlan:
    """Plan the sums over the shape's cells within ``ranges``: whole blocks through the
    planner (accumulations where they span them), cut blocks as masked raw reads. When both
    latitude and longitude are kept (a map), every cell stays apart: the window is planned as
    a box and the answer masked afterwards."""
    over = tuple(over)
    box = {**ranges, **mask.ranges()}
    if mask.lat not in over and mask.lon not in over:
        return _with_mask(plan_query(dims, box, over, layouts), mask)
    edges = {}
    for dim in (mask.lat, mask.lon):
        positions = {p for lay in layouts if dim in lay.dims for p in lay.positions[dim]}
        edges[dim] = set(chunk_edges[dim]) | positions
    parts = decompose(mask, edges[mask.lat], edges[mask.lon])
    reads: list[Read] = []
    for whole in parts.whole:
        reads += plan_query(dims, {**box, **whole}, over, layouts).reads
    reads += [Read((), 1, {}, {**box, **cut}) for cut in parts.cut]
    plan = QueryPlan(tuple(dims), tuple(d for d in dims if d in over), box, tuple(reads))
    return _with_mask(plan, mask)


def _with_mask(plan: QueryPlan, mask: CellMask) -> QueryPlan:
    from dataclasses import replace

    return replace(plan, mask=mask)
