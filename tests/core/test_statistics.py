"""Statistics are described once (``accumulation.model.statistics``): adding one is an entry in its
tables, and the build, verify and the query all follow. Shown with the variance, from Σx²
(not a user-facing statistic): built, verified and answered from accumulations, equal to
xarray's ``var`` on the raw data."""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.model import spec, statistics
from cubes import VAR, area_weights, labels, synthetic_dataset, write_cube


def _variance(sums, weighted):
    squares, total, weight = sums
    mean = statistics._ratio(total, weight)
    return statistics._ratio(squares, weight) - mean**2


@pytest.fixture
def with_variance(monkeypatch):
    """The only change needed for a new statistic: its sums and its entry."""
    monkeypatch.setattr(
        statistics,
        "SUMS",
        statistics.SUMS
        | {"wsumsq": statistics.Sum("wsumsq", 1, 2), "sumsq": statistics.Sum("sumsq", 0, 2)},
    )
    monkeypatch.setattr(
        statistics,
        "STATISTICS",
        statistics.STATISTICS
        | {"var": statistics.Statistic("var", ("wsumsq", spec.WSUM, spec.WCOUNT), _variance)},
    )


@pytest.mark.parametrize("weights", ["area", "none"])
def test_a_variance_is_one_entry(tmp_path, with_variance, weights):
    ds = synthetic_dataset({"time": 20, "lat": 9, "lon": 8}, seed=5, nan_fraction=0.2)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 4, "lat": 3, "lon": 4})
    result = accumulus.accumulate(str(path), VAR, weights=weights, minimal=True)  # ZEP 5 names
    time_sums = result.group.find(["time"]).arrays
    # With unit weights Σw·x² is Σx²: one array holds both, named like the other data arrays.
    assert time_sums["wsumsq"] == "acc_wsumsq_time"
    assert time_sums["sumsq"] == ("acc_sumsq_time" if weights == "area" else "acc_wsumsq_time")

    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    assert {time_sums["sumsq"], time_sums["wsumsq"]} <= set(report.checked)

    data = ds[VAR].astype("f8")
    w = area_weights(ds) if weights == "area" else xr_ones(ds)
    for over, box in [
        (["time"], {"time": (4, 16)}),  # aligned: entries only
        (["time"], {"time": (3, 17), "lat": (1, 8)}),  # unaligned: entries and raw chunks
        (["lat", "lon"], {"lat": (0, 9)}),
    ]:
        ranges = {d: labels(ds, d, *r) for d, r in box.items()}
        selection = data.isel({d: slice(*r) for d, r in box.items()})
        expected = selection.weighted(w).var(over)
        for use_accumulation in (True, False):
            result = accumulus.query(
                str(path), VAR, over, ranges, stat="var", use_accumulation=use_accumulation
            )
            if use_accumulation and over == ["time"]:
                assert result.stats.accumulation_chunks_read > 0
            np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def xr_ones(ds):
    return ds["lat"] * 0 + 1.0
