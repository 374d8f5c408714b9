"""Accumulations at every element of the dimensions they sum take the same per-segment sums
(nothing is summed): the build takes them once and shares them (``chunk_sums``), and each
accumulation's entries stay its own, whichever changes the shared sums last. Queries read no
raw chunk and equal xarray's answers, in slabs of one raw chunk (prefix sums continued from
slab to slab) and with the series' rows held in chunk order (Zarr v2) or not (v3)."""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.build import chunk_sums, stream
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_accumulations_sharing_their_sums_stay_exact(tmp_path, monkeypatch, zarr_format):
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)  # a slab per raw chunk along time
    shared: list[int] = []  # distinct arrays of sums per block
    block_sums = chunk_sums._block_sums

    def counted(*args, **kwargs):
        found = block_sums(*args, **kwargs)
        shared.append(len({id(s) for s in found}))
        return found

    monkeypatch.setattr(chunk_sums, "_block_sums", counted)
    ds = synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=3)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 7, "lat": 3, "lon": 4}, zarr_format=zarr_format)
    # Time, latitude and latitude+longitude at every element: three accumulations summing
    # nothing, two of them summed in place (time, latitude), one by the writer (longitude).
    at = {"time": 1, "lat": 1, "lon": 1}
    accumulus.accumulate(str(path), VAR, [("time",), ("lat",), ("lat", "lon")], at=at)
    assert shared and max(shared) == 1  # one array of sums for the three
    handle = accumulus.open(str(path))
    questions = [
        (["time"], {"time": ("2001-01-04", "2001-01-26")}),
        (["lat"], {"lat": (-40, 50), "time": ("2001-01-02", "2001-01-29")}),
        (["lat", "lon"], {"time": ("2001-01-03", "2001-01-30"), "lat": (-50, 30), "lon": (2, 12)}),
    ]
    for over, ranges in questions:
        result = handle.query(VAR, over, ranges)
        assert result.stats.raw_chunks_read == 0, over
        box = ds[VAR].sel({d: slice(*r) for d, r in ranges.items()})
        expected = xarray_reference(box, over, "area", "mean")
        np.testing.assert_allclose(np.asarray(result.data), expected.values, rtol=1e-9)
