"""The service takes the statistics' parameters as the library does: ``stat`` (var, std,
trend, corr), ``with`` and ``season``; answers equal xarray's."""

from __future__ import annotations

import numpy as np
import xarray as xr
from fastapi.testclient import TestClient

import accumulus
from accumulus.service import create_app
from cubes import VAR, area_weights, synthetic_dataset


def test_the_service_answers_statistics(tmp_path):
    ds = synthetic_dataset({"time": 70, "lat": 5, "lon": 4}, seed=3, nan_fraction=0.2)
    ds["tas"] = ds[VAR] * 0.5 + synthetic_dataset(ds.sizes, seed=4, var="tas")["tas"]
    path = tmp_path / "cube.zarr"
    ds.to_zarr(path, zarr_format=2, consolidated=True)
    accumulus.accumulate(str(path), VAR, stats=["var"])
    client = TestClient(create_app([str(path)]))
    url = "/api/datasets/cube/precip/average"
    data, w = ds[VAR].astype("f8"), area_weights(ds)

    def values(**params):
        answer = client.get(url, params=params)
        assert answer.status_code == 200, answer.text
        return np.array(answer.json()["values"], dtype="f8")

    np.testing.assert_allclose(
        values(over="time", stat="var"), data.weighted(w).var("time").values, rtol=1e-9
    )
    np.testing.assert_allclose(
        values(over="time", stat="corr", **{"with": "tas"}),
        xr.corr(data, ds["tas"].astype("f8"), dim="time").values,
        rtol=1e-9,
    )
    january = data.where(data.time.dt.month == 1, drop=True)
    np.testing.assert_allclose(
        values(over="lat,lon", season="JAN"),
        [january.weighted(w).mean(["time", "lat", "lon"]).item()],
        rtol=1e-9,
    )
    refused = client.get(url, params={"over": "time", "season": "WINTER"})
    assert refused.status_code == 422 and "season" in refused.text
