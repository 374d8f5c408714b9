"""What a query selected, in the words a reader of its answer needs: for each dimension its
kind (time, latitude, longitude), the first and last coordinate labels selected and the
number of steps. Titles of maps and series are written from it."""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
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
) -> Selection:
    """The extent of each of ``dims`` within the index ``ranges`` (half-open; ``sizes``:
    where they wrap round, as ``ResolvedQuery.sizes``), worked out when first looked at."""
    return Selection(cube, tuple(dims), dict(ranges), dict(sizes or {}))


class Selection(Mapping[str, Extent]):
    """``selection``'s extents by dimension, found when first asked for: most answers are
    used for their values alone, and the labels of a date cost pandas tens of microseconds
    to pick out, per dimension, per answer."""

    def __init__(
        self,
        cube: RawCube,
        dims: tuple[str, ...],
        ranges: dict[str, tuple[int, int]],
        sizes: dict[str, int],
    ) -> None:
        self._asked = (cube, dims, ranges, sizes)
        self._extents: dict[str, Extent] | None = None

    def _found(self) -> dict[str, Extent]:
        if self._extents is None:
            self._extents = _extents(*self._asked)
        return self._extents

    def __getitem__(self, dim: str) -> Extent:
        return self._found()[dim]

    def __iter__(self) -> Iterator[str]:
        return iter(self._found())

    def __len__(self) -> int:
        return len(self._found())

    def __repr__(self) -> str:
        return repr(self._found())


def _extents(
    cube: RawCube,
    dims: Sequence[str],
    ranges: Mapping[str, tuple[int, int]],
    sizes: Mapping[str, int],
) -> dict[str, Extent]:
    extents = {}
    for dim in dims:
        start, stop = ranges[dim]
        index = cube.index(dim)
        if stop <= start:
            continue
        size = sizes.get(dim, len(index))
        seam = stop > size  # a longitude range across the grid's seam
        last = index[(stop - 1) % size]
        extents[dim] = Extent(
            dimension_kind(cube, dim), index[start], last, stop - start, size, seam
        )
    return extents
