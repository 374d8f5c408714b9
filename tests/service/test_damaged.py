"""Damaged stores and hostile values: the service answers 4xx or 503 naming the dataset, never
a 500, never a server path or an internal class name."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from damaged_stores import break_metadata, damaged_cube, with_text_and_dates
from fastapi.testclient import TestClient
from service_cubes import CHUNKS, dataset, write_cube

from accumulus.service import create_app

AVERAGE = "/api/datasets/{name}/{var}/average?over={over}"


def no_leak(response, *paths: Path) -> None:
    for path in paths:
        assert str(path) not in response.text
    assert "Store(" not in response.text and "Traceback" not in response.text


def test_invalid_consolidated_metadata_degrades_health_and_answers_503(tmp_path):
    cube = write_cube(tmp_path / "cube.zarr", dataset("2001-01-01", 40, 12, 16), CHUNKS,
                      zarr_format=2)  # fmt: skip
    client = TestClient(create_app([str(cube)]))
    assert client.get("/api/health").json()["status"] == "ok"
    break_metadata(cube)
    health = client.get("/api/health")
    assert health.status_code == 200 and health.json()["status"] == "degraded"
    assert ".zmetadata is not valid JSON" in health.json()["datasets"]["cube"]
    listing = client.get("/api/datasets")
    assert listing.status_code == 200 and listing.json()["datasets"] == []
    assert ".zmetadata is not valid JSON" in listing.json()["unavailable"]["cube"]
    for url in ("/api/datasets/cube", AVERAGE.format(name="cube", var="tas", over="lat,lon")):
        response = client.get(url)
        assert response.status_code == 503, response.text
        assert response.json()["error"].startswith("dataset 'cube' cannot be read now: ")
        no_leak(response, tmp_path)


def test_strings_and_dates_are_not_averageable(tmp_path):
    cube = with_text_and_dates(tmp_path / "mixed.zarr")
    client = TestClient(create_app([str(cube)]))
    (described,) = client.get("/api/datasets").json()["datasets"]
    assert [v["name"] for v in described["variables"]] == ["tas"]
    document = client.get("/openapi.json").json()
    average = document["paths"]["/api/datasets/{dataset}/{variable}/average"]["get"]
    enum = next(p for p in average["parameters"] if p["name"] == "variable")["schema"]["enum"]
    assert enum == ["tas"]
    for var, what in (("station", "strings"), ("observed", "dates once decoded")):
        response = client.get(AVERAGE.format(name="mixed", var=var, over="lat"))
        assert response.status_code == 422 and response.json()["parameter"] == "variable"
        assert what in response.json()["error"]
    weights = client.get(AVERAGE.format(name="mixed", var="tas", over="lat,lon") + "&weights=time")
    assert weights.status_code == 422 and weights.json()["parameter"] == "weights"
    assert "weights must be numbers" in weights.json()["error"]


@pytest.mark.parametrize(
    ("damage", "says"),
    [
        ("scribble", "cannot read 'tas'"),
        ("fifo", "not a regular file"),
        ("symlink", "Too many levels of symbolic links"),
        ("directory", "it is a directory"),
    ],
)
def test_a_damaged_chunk_is_a_503_naming_it(tmp_path, damage, says):
    cube = damaged_cube(tmp_path / "cube.zarr", damage)
    client = TestClient(create_app([str(cube)]))
    response = client.get(AVERAGE.format(name="cube", var="tas", over="time,lat,lon")
                          + "&accumulation=false")  # fmt: skip
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error.startswith("dataset 'cube': ") and says in error
    no_leak(response, tmp_path)


def test_other_scripts_digits_are_not_numbers(client):
    response = client.get(
        AVERAGE.format(name="surface", var="tas", over="lat,lon") + "&lat=\u0661\u0660/\u0662\u0660"
    )  # ١٠/٢٠ fmt: skip
    assert response.status_code == 422 and response.json()["parameter"] == "lat"


def test_a_scalar_csv_writes_a_missing_value_as_an_empty_cell(client):
    # A box of one missing cell: tas[::7, 1, 2] is NaN, so time=2001-01-01 there is missing.
    url = AVERAGE.format(name="surface", var="tas", over="time,lat,lon") + "&format=csv"
    point = "&time=2001-01-01/2001-01-01&lat=-67.5/-67.5&lon=-123.75/-123.75&weights=none"
    response = client.get(url + point)
    assert response.status_code == 200, response.text
    assert response.text == "tas\n\n"


def test_a_store_removed_while_served_names_no_path(tmp_path):
    cube = write_cube(tmp_path / "gone.zarr", dataset("2001-01-01", 40, 12, 16), CHUNKS)
    client = TestClient(create_app([str(cube)]))
    shutil.rmtree(cube)
    response = client.get(AVERAGE.format(name="gone", var="tas", over="lat,lon"))
    assert response.status_code == 503
    no_leak(response, tmp_path)


@pytest.mark.parametrize(
    "statistic",
    ["stat=var", "stat=std", "stat=trend", "stat=corr&with=tas", "season=DJF&accumulation=false"],
)
def test_every_statistic_refuses_a_fifo_chunk(tmp_path, statistic):
    """A FIFO among the chunks would block a reader forever: every statistic's reads (a
    centred statistic's reference chunk, a correlation's pairs) go through the guard."""
    cube = damaged_cube(tmp_path / "cube.zarr", "fifo")
    client = TestClient(create_app([str(cube)]))
    response = client.get(AVERAGE.format(name="cube", var="tas", over="lat,lon") + f"&{statistic}")
    assert response.status_code == 503, response.text
    assert "not a regular file" in response.json()["error"]
    no_leak(response, tmp_path)
