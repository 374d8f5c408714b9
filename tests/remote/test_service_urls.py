"""The service serves the stores its operator configured, remote ones included, and nothing a
request names: no parameter makes it fetch a URL (no server-side request forgery)."""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

import accumulus
from accumulus.service import create_app
from cubes import VAR, synthetic_dataset, write_cube
from servers import http_server


@pytest.fixture(scope="module")
def remote_service(tmp_path_factory):
    """A service over a cube served by HTTP; yields (client, base URL, server log)."""
    folder = tmp_path_factory.mktemp("ssrf")
    ds = synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=7)
    write_cube(ds, folder / "cube.zarr", {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(str(folder / "cube.zarr"), VAR)
    write_cube(ds, folder / "other.zarr", {"time": 10, "lat": 6, "lon": 8})
    with http_server(folder) as (url, log):
        app = create_app([f"{url}/cube.zarr"])
        with TestClient(app) as client:
            yield client, url, log


def test_a_remote_store_configured_by_the_operator_is_served(remote_service):
    client, _, _ = remote_service
    answer = client.get(f"/api/datasets/cube/{VAR}/average", params={"over": "time"})
    assert answer.status_code == 200, answer.text
    assert answer.json()["variable"] == VAR


def test_no_request_parameter_makes_the_service_fetch_a_url(remote_service):
    client, url, log = remote_service
    elsewhere = f"{url}/other.zarr"
    attempts = [
        f"/api/datasets/{quote(elsewhere, safe='')}",
        f"/api/datasets/{quote(elsewhere, safe='')}/{VAR}/average?over=time",
        f"/api/datasets/cube/{quote(elsewhere, safe='')}/average?over=time",
        f"/api/datasets/cube/{VAR}/average?over=time&weights={quote(elsewhere, safe='')}",
        f"/api/datasets/cube/{VAR}/average?over={quote(elsewhere, safe='')}",
        f"/api/datasets/cube/{VAR}/average?over=time&time={quote(elsewhere, safe='')}/x",
        f"/api/datasets/cube/{VAR}/average?over=time&store={quote(elsewhere, safe='')}",
        f"/api/datasets/cube/{VAR}/average?over=time&format={quote(elsewhere, safe='')}",
        f"/{quote(elsewhere, safe='')}",
        "/api/datasets/..%2Fother.zarr",
    ]
    log.clear()
    for attempt in attempts:
        response = client.get(attempt)
        assert response.status_code < 500, (attempt, response.text)
        assert "other.zarr" not in response.headers.get("location", "")
    fetched = {path for _, path, _ in log.requests}
    assert not any("other.zarr" in path for path in fetched), fetched
