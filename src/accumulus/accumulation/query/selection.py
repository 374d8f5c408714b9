"""What a query selected, in the words a reader of its answer needs: for each dimension its
kind (time, latitude, longitude), the first and last coordinate labels selected and the
number of steps. Titles of maps and series are written from it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import xarray as xr

from accumulus.coordinates import KINDS, is_kind
from accumulus.raw_cube import RawCube


@dataclass(frozen=True)
class Extent:
    """The part of one dimension a query selected (cell centres, inclusive)."""

    kind: str | None  # "time", "latitude", "longitude", or None for any other dimension
    first: Any  # coordinate label of the first step selected
    last: Any  # ... and of the last
    steps: int
    size: int  # steps along the whole dimension
    across_seam: bool = False  # a longitude range from the grid's end round to its start

    @property
    def whole(self) -> bool:
        return self.steps == self.size


def dimension_kind(cube: RawCube, dim: str) -> str | None:
    """ "time", "latitude", "longitude" or None: how maps and series draw a dimension."""
    return cube.remembered(("kind", dim), lambda: _kind(cube, dim))


def _kind(cube: RawCube, dim: str) -> str | None:
    if isinstance(cube.index(dim), pd.DatetimeIndex | xr.CFTimeIndex):
        return "time"
    name = cube.labels_name(dim)  # the dimension's own labels: lat(latitude) as well
    return next((k for k in KINDS if name is not None and is_kind(cube.raw, name, k)), None)


def selection(
    cube: RawCube,
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Extent]:
    """The extent of each of ``dims`` within the index ``ranges`` (half-open; ``sizes``:
    where they wrap round, as ``ResolvedQuery.sizes``)."""
    extents = {}
    for dim in dims:
        start, stop = ranges[dim]
        index = cube.index(dim)
        if stop <= start:
            continue
        size = (sizes or {}).get(dim, len(index))
        seam = stop > size  # a longitude range across the grid's seam
        last = index[(stop - 1) % size]
        extents[dim] = Extent(
            dimension_kind(cube, dim), index[start], last, stop - start, size, seam
        )
    return extents
