"""The service on an icechunk repository: one dataset per ref (``name@ref``), each answering as
of its commit; a branch followed as it gets new commits, between answers."""

from __future__ import annotations

import numpy as np
from fastapi.testclient import TestClient

import accumulus
from accumulus.service import create_app
from cubes import xarray_reference
from ingest.helpers import VAR, truth, write_granules


def values(body: dict) -> np.ndarray:
    return np.array(body["values"], dtype="f8")  # None -> nan


def test_one_dataset_per_ref_and_the_branch_followed(tmp_path):
    t = truth(24)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, 3)]
    url = f"icechunk://{tmp_path / 'archive'}"
    old = accumulus.append(url, granules[:2], chunks={"time": 3}).snapshot
    accumulus.accumulate(url, VAR, ["time", "lat,lon"])
    accumulus.append(url, granules[2:4])
    client = TestClient(create_app([url], refs=[old, "main"]))
    names = [d["name"] for d in client.get("/api/datasets").json()["datasets"]]
    assert names == [f"archive@{old}", "archive@main"]

    def answered(name: str, steps: int) -> None:
        response = client.get(f"/api/datasets/{name}/{VAR}/average?over=time")
        assert response.status_code == 200, response.text
        want = xarray_reference(t.decoded(steps)[VAR], ["time"], "area", "mean")
        np.testing.assert_allclose(values(response.json()), want.values, rtol=1e-9)

    answered(f"archive@{old}", 6)
    answered("archive@main", 12)
    accumulus.append(url, granules[4:])  # a new commit on main while the service runs
    answered("archive@main", 24)
    answered(f"archive@{old}", 6)
