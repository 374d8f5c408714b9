"""A weighted mean whose weights vary only along dimensions the answer keeps (area weights
in a map averaged over time) is summed without them, as they divide out; every other
weighted question keeps them. Either way the answer is xarray's, and says it is weighted."""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 40, "lat": 12, "lon": 16}
CHUNKS = {"time": 10, "lat": 6, "lon": 8}
QUESTIONS = [
    (("time",), {"time": ("2001-01-04", "2001-02-03")}),  # weights cancel
    (("time", "lon"), {"time": ("2001-01-04", "2001-02-03")}),  # they cancel: lat is kept
    (("lat",), {}),  # summed along latitude: weighted
    (("lat", "lon"), {"lat": (-50.0, 40.0), "lon": (5.0, 100.0)}),  # weighted
]


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("cancel") / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=21)
    write_cube(ds, path, CHUNKS)
    # Entries at every day and every latitude row: the weights factor out of these sums.
    accumulus.accumulate(str(path), VAR, ["time", "lat"], at={"time": 1, "lat": 1})
    return path, ds


@pytest.mark.parametrize("use_accumulation", [True, False])
@pytest.mark.parametrize(("over", "ranges"), QUESTIONS)
def test_weighted_means_equal_xarray(cube, over, ranges, use_accumulation):
    path, ds = cube
    result = accumulus.open(str(path)).query(VAR, over, ranges, use_accumulation=use_accumulation)
    selection = {d: slice(*r) for d, r in ranges.items()}
    expected = xarray_reference(ds[VAR].sel(selection), list(over), "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    assert result.weights == "area" and result.data.attrs["weights"] == "area"
    if use_accumulation:
        assert result.stats.raw_chunks_read == 0
