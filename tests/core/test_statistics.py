"""Statistics are described once (``accumulation.model.statistics``): adding one is an entry in its
tables, and the build, verify and the query all follow. Shown with the mean cube, from Σx³
(not a user-facing statistic): built, verified and answered from accumulations, equal to
xarray's weighted mean of x³ on the raw data."""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.model import spec, statistics
from cubes import VAR, area_weights, labels, synthetic_dataset, write_cube


def _mean_cube(sums, weighted, reference):
    cubes, weight = sums
    return statistics._ratio(cubes, weight)


@pytest.fixture
def with_mean_cube(monkeypatch):
    """The only change needed for a new statistic: its sums and its entry."""
    monkeypatch.setattr(
        statistics,
        "SUMS",
        statistics.SUMS
        | {"wsumcb": statistics.Sum("wsumcb", 1, 3), "sumcb": statistics.Sum("sumcb", 0, 3)},
    )
    monkeypatch.setattr(
        statistics,
        "STATISTICS",
        statistics.STATISTICS
        | {"meancube": statistics.Statistic("meancube", ("wsumcb", spec.WCOUNT), _mean_cube)},
    )


@pytest.mark.parametrize("weights", ["area", "none"])
def test_a_statistic_is_one_entry(tmp_path, with_mean_cube, weights):
    ds = synthetic_dataset({"time": 20, "lat": 9, "lon": 8}, seed=5, nan_fraction=0.2)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 3, "lon": 4})
    result = accumulus.accumulate(str(path), VAR, weights=weights, minimal=True)  # ZEP 5 names
    time_sums = result.group.find(["time"]).arrays
    # With unit weights Σw·x³ is Σx³: one array holds both, named like the other data arrays.
    assert time_sums["wsumcb"] == "acc_wsumcb_time"
    assert time_sums["sumcb"] == ("acc_sumcb_time" if weights == "area" else "acc_wsumcb_time")

    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    assert {time_sums["sumcb"], time_sums["wsumcb"]} <= set(report.checked)

    data = ds[VAR].astype("f8")
    w = area_weights(ds) if weights == "area" else xr_ones(ds)
    for over, box in [
        (["time"], {"time": (4, 16)}),  # aligned: entries only
        (["time"], {"time": (3, 17), "lat": (1, 8)}),  # unaligned: entries and raw chunks
        (["lat", "lon"], {"lat": (0, 9)}),
    ]:
        ranges = {d: labels(ds, d, *r) for d, r in box.items()}
        selection = data.isel({d: slice(*r) for d, r in box.items()})
        expected = (selection**3).weighted(w).mean(over)
        for use_accumulation in (True, False):
            result = accumulus.query(
                str(path), VAR, over, ranges, stat="meancube", use_accumulation=use_accumulation
            )
            if use_accumulation and over == ["time"]:
                assert result.stats.accumulation_chunks_read > 0
            np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def xr_ones(ds):
    return ds["lat"] * 0 + 1.0
