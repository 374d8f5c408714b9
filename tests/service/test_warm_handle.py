"""An open datacube answering many questions: what it keeps between queries (parsed metadata
documents, coordinates, per-snapshot memos) never changes an answer, and a new snapshot
(an append, a rebuilt accumulation) is answered from whole."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from service_cubes import CHUNKS, append_days, area_mean, dataset, write_cube

import accumulus

# Label ranges on the 40-day 12 x 16 test grid (chunks 8 x 5 x 6): aligned and unaligned.
QUESTIONS = [
    ("time", {"time": ("2001-01-03", "2001-02-06")}),
    ("time", {}),
    ("lat,lon", {"lat": (-40, 50), "lon": (-100, 120)}),
    ("lat,lon", {"lon": (150, -160)}),  # across the grid's seam
    ("time,lat", {"time": ("2001-01-09", "2001-01-24"), "lat": (-80, 10)}),
]


def _expected(ds, over: str, ranges: dict):
    west, east = ranges.get("lon", (None, None))
    seam = west is not None and west > east  # east of the west edge, or west of the east one
    selected = {d: slice(*r) for d, r in ranges.items() if not (d == "lon" and seam)}
    if seam:
        ds = ds.sel(lon=ds.lon[(ds.lon >= west) | (ds.lon <= east)])
    return area_mean(ds, over.split(","), **selected)


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_repeated_questions_and_a_new_snapshot(tmp_path: Path, cube_data, zarr_format):
    path = write_cube(tmp_path / "c.zarr", cube_data, CHUNKS, zarr_format=zarr_format)
    handle = accumulus.open(str(path))
    for over, ranges in QUESTIONS:
        first = handle.average("tas", over, ranges)
        again = handle.average("tas", over, ranges)
        np.testing.assert_array_equal(first.values, again.values)  # same bits
        want = _expected(cube_data, over, ranges)
        np.testing.assert_allclose(first.values, want.values, rtol=1e-9)
        assert list(first.dims) == list(want.dims)
        for dim in first.dims:
            np.testing.assert_array_equal(first[dim].values, want[dim].values)

    before = handle.snapshot()
    assert handle.snapshot() is before  # unchanged metadata: the same snapshot
    extra = dataset(start="2001-02-10", ntime=8, nlat=12, nlon=16, seed=1)
    append_days(path, extra)
    accumulus.accumulate(str(path), "tas")  # brings the accumulations up to date
    grown = cube_data.combine_first(extra)
    after = handle.snapshot()
    assert after is not before and after.cube.variable("tas").shape[0] == 48
    assert len(after.cube.index("time")) == 48
    for over, ranges in QUESTIONS:
        got = handle.query("tas", over, ranges)
        want = _expected(grown, over, ranges)
        np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9)
        if "time" not in over and not ranges.get("time"):
            assert got.data.sizes["time"] == 48
