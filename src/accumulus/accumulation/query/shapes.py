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
Only blocks the shape's edge cuts are read raw, with the mask applied to their values.

A mask is also a union of row runs, each a box one row tall (stacked while rows repeat
them). An accumulation that keeps latitude at full resolution (along longitude only, or
``--at lat=1,lon=1`` with area weights, stored as prefix sums along longitude row by row)
answers any such box from two entries per run when its entries are at every longitude: no
raw chunk is read. Columns likewise, for accumulations that keep longitude. ``shape_plans``
offers each way that applies; the query runs the one that reads least (``cost``).

Everything here is pure: masks, blocks and plans are data you can print and test.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from accumulus import coordinates
from accumulus.accumulation.query.plan import AccumulationLayout, QueryPlan, Read, plan_query
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
    polygon in longitude/latitude degrees). A curvilinear grid's centres are given as two
    arrays of the grid's shape instead, and so is the mask."""
    import shapely

    lats = np.asarray(lats, dtype="f8")
    lons = np.asarray(lons, dtype="f8")
    wrapped = 180.0 - (180.0 - lons) % 360.0  # into (-180, 180]
    x = wrapped - NUDGE_LON
    y = np.where(lats <= -90.0, -90.0 + NUDGE_LAT, lats - NUDGE_LAT)
    xx, yy = (x, y) if lats.ndim == 2 else np.meshgrid(x, y)
    shapely.prepare(geometry)
    inside: np.ndarray = shapely.contains_xy(geometry, xx, yy)
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
    ``lons`` (whole coordinates; 2-D on (``lat``, ``lon``) for a curvilinear grid, whose
    rows and columns ``lat`` and ``lon`` then name), cut to the smallest window holding
    them all."""
    (a, b), (c, d) = ranges[lat], ranges[lon]
    if lats.ndim == 2:
        inside = centre_mask(geometry, lats[a:b, c:d], lons[a:b, c:d])
    else:
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
    lat, lon = (coordinates.find(cube.raw, var.dims, k, var.name) for k in coordinates.KINDS)
    if lat is None or lon is None or lat.curvilinear != lon.curvilinear:
        raise ParameterError(
            "shape",
            f"a shape needs the latitudes and longitudes of {var.name!r} (both 1-D, or both "
            f"2-D); found {_named(lat, 'no latitudes')} and {_named(lon, 'no longitudes')}",
        )
    if lat.curvilinear:  # rows and columns: the dimensions of the 2-D latitudes
        rows, cols = lat.dims
        lats, lons = (
            np.asarray(cube.decoded[c.name].transpose(rows, cols).values, dtype="f8")
            for c in (lat, lon)
        )
    else:
        rows, cols = lat.dims[0], lon.dims[0]
        lats = np.asarray(cube.index(rows), dtype="f8")
        lons = np.asarray(cube.index(cols), dtype="f8")
    mask = cell_mask(shape.geometry, rows, cols, lats, lons, ranges)
    if mask.count == 0:
        raise ParameterError(
            "shape",
            f"{shape.label} holds no cell centre of {var.name!r} within the ranges asked "
            f"(latitudes {lats.min():g}..{lats.max():g}, longitudes {lons.min():g}.."
            f"{lons.max():g}; shape bounds {', '.join(f'{b:g}' for b in shape.geometry.bounds)})",
        )
    return mask


def _named(found: Any, missing: str) -> str:
    return missing if found is None else f"{found.name}{list(found.dims)}"


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


def decompose(
    mask: CellMask,
    lat_edges: Iterable[int],
    lon_edges: Iterable[int],
    *,
    along: str | None = None,
) -> Decomposition:
    """Cut the mask's window into blocks at the given edges and sort them: whole blocks
    merged into rectangles, cut blocks merged into runs. ``along``: the dimension the runs
    follow: longitude (the default: runs along each row of blocks, stacked while the rows
    below repeat them) or latitude (runs down each column, stacked across columns)."""
    window = mask.ranges()
    rows = np.asarray(block_edges(*window[mask.lat], lat_edges)) - mask.start[0]
    cols = np.asarray(block_edges(*window[mask.lon], lon_edges)) - mask.start[1]
    states = _block_states(mask.cells, rows, cols)
    across, run_dim = mask.lat, mask.lon
    if along == mask.lat:
        states, rows, cols = states.T, cols, rows
        across, run_dim = mask.lon, mask.lat
    origin = {mask.lat: mask.start[0], mask.lon: mask.start[1]}

    def box(a: int, b: int, c: int, d: int) -> Box:
        spans = {
            across: (origin[across] + int(a), origin[across] + int(b)),
            run_dim: (origin[run_dim] + int(c), origin[run_dim] + int(d)),
        }
        return {mask.lat: spans[mask.lat], mask.lon: spans[mask.lon]}

    whole, cut = _rectangles(states, rows, cols)
    return Decomposition(tuple(box(*r) for r in whole), tuple(box(*r) for r in cut))


CUT, WHOLE = 1, 2  # block states (0: no cell of the shape)


def _block_states(cells: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Per block (between consecutive ``rows`` and ``cols``, local indices): 0 when it holds
    no cell of the shape, ``CUT`` when some, ``WHOLE`` when all."""
    counts = np.add.reduceat(cells.astype(np.int64), rows[:-1], axis=0)
    counts = np.add.reduceat(counts, cols[:-1], axis=1)
    sizes = np.outer(np.diff(rows), np.diff(cols))
    return np.where(counts == sizes, WHOLE, np.where(counts > 0, CUT, 0))


def _rectangles(
    states: np.ndarray, rows: np.ndarray, cols: np.ndarray
) -> tuple[list[list[int]], list[list[int]]]:
    """Whole rectangles and cut runs, as (row lo, row hi, col lo, col hi): runs of equal
    states along each row of blocks; a whole run is stacked onto the rectangle above when
    that one spans the same columns and ends where the run's row begins."""
    whole: list[list[int]] = []
    cut: list[list[int]] = []
    open_rects: dict[tuple[int, int], list[int]] = {}
    for r in range(states.shape[0]):
        still_open = {}
        for state, lo, hi in _runs(states[r]):
            span = (int(cols[lo]), int(cols[hi]))
            if state == CUT:
                cut.append([int(rows[r]), int(rows[r + 1]), *span])
            elif state == WHOLE:
                rect = open_rects.get(span)
                if rect is not None and rect[1] == rows[r]:
                    rect[1] = int(rows[r + 1])  # the same run as the row above: stack it
                else:
                    rect = [int(rows[r]), int(rows[r + 1]), *span]
                    whole.append(rect)
                still_open[span] = rect
        open_rects = still_open
    return whole, cut


def _runs(states: np.ndarray) -> list[tuple[int, int, int]]:
    """Runs of equal nonzero states: (state, first index, end index)."""
    change = np.flatnonzero(np.diff(states)) + 1
    starts, ends = np.r_[0, change], np.r_[change, len(states)]
    return [
        (int(states[a]), int(a), int(b)) for a, b in zip(starts, ends, strict=True) if states[a]
    ]


def shape_plans(
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    over: Iterable[str],
    layouts: Sequence[AccumulationLayout],
    mask: CellMask,
    chunk_edges: Mapping[str, Sequence[int]],
) -> list[QueryPlan]:
    """The ways to sum the shape's cells within ``ranges`` (the query runs the cheapest).

    - **Blocks**, always: the window cut at the chunk edges and the positions of the
      accumulations along latitude and longitude; whole blocks through the planner
      (accumulations where they span them), cut blocks as masked raw reads.
    - **Row runs**, when an accumulation keeps latitude at full resolution (an accumulation
      along longitude only, or ``--at lat=1,lon=1`` with area weights, which stores prefix
      sums along longitude row by row): every row's runs of cells, stacked while rows repeat
      them, each a box through the planner. Entries at every longitude then answer every
      run, and no raw chunk is read.
    - **Column runs**, likewise, when an accumulation keeps longitude at full resolution.

    When both latitude and longitude are kept (a map), every cell stays apart: the window
    is planned as a box and the answer masked afterwards."""
    over = tuple(over)
    box = {**ranges, **mask.ranges()}
    # A span reaching past a block along latitude or longitude would subtract raw cells
    # outside it, which the masked raw reads leave out: there, spans stay inside.
    layouts = [
        replace(lay, reach=False) if {mask.lat, mask.lon} & set(lay.dims) else lay
        for lay in layouts
    ]
    if mask.lat not in over and mask.lon not in over:
        return [replace(plan_query(dims, box, over, layouts), mask=mask)]
    usable = [lay for lay in layouts if set(lay.dims) <= set(over)]
    edges = {
        dim: set(chunk_edges[dim]).union(*(lay.positions[dim] for lay in usable if dim in lay.dims))
        for dim in (mask.lat, mask.lon)
    }
    ways = [decompose(mask, edges[mask.lat], edges[mask.lon])]
    every = {dim: range(*span) for dim, span in mask.ranges().items()}
    for kept, along in ((mask.lat, mask.lon), (mask.lon, mask.lat)):
        if any(kept not in lay.dims for lay in usable):
            runs = decompose(mask, every[mask.lat], every[mask.lon], along=along)
            if runs not in ways:
                ways.append(runs)
    plans = []
    for parts in ways:
        reads: list[Read] = []
        for whole in parts.whole:
            reads += plan_query(dims, {**box, **whole}, over, layouts).reads
        reads += [Read((), 1, {}, {**box, **cut}) for cut in parts.cut]
        plans.append(
            QueryPlan(tuple(dims), tuple(d for d in dims if d in over), box, tuple(reads), mask)
        )
    return plans
