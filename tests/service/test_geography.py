"""What the service serves for drawing: coastlines in the box's longitude convention, and the
region sets a shape may name, with their outlines."""

from __future__ import annotations

import numpy as np
import pytest
import shapely

from accumulus.regions import MAX_GEOJSON_BYTES


def test_coastlines_of_a_box_in_either_longitude_convention(client):
    africa = client.get(
        "/api/coastlines", params={"west": -20, "east": 55, "south": -40, "north": 40}
    )
    assert africa.status_code == 200
    points = np.concatenate([np.array(line) for line in africa.json()["lines"]])
    assert np.hypot(points[:, 0] - 18.5, points[:, 1] + 34.4).min() < 0.5  # Cape of Good Hope
    pacific = client.get(
        "/api/coastlines", params={"west": 100, "east": 300, "south": -60, "north": 60}
    )
    points = np.concatenate([np.array(line) for line in pacific.json()["lines"]])
    assert (points[:, 0] > 200).any()  # the Americas, east of 180°E


def test_a_box_turned_inside_out_is_refused_naming_its_side(client):
    response = client.get(
        "/api/coastlines", params={"west": 50, "east": 10, "south": 0, "north": 10}
    )
    assert response.status_code == 422
    assert response.json()["parameter"] == "east"


def test_region_sets_and_a_regions_outline(client):
    sets = {s["name"]: s for s in client.get("/api/regions").json()["sets"]}
    assert set(sets) == {"ar6", "srex", "giorgi", "prudence"}
    waf = next(r for r in sets["ar6"]["regions"] if r["abbrev"] == "WAF")
    assert waf["name"] == "Western-Africa" and waf["bounds"][0] == -20
    outline = client.get("/api/regions/ar6/waf").json()
    assert outline["name"] == "ar6:WAF" and outline["geometry"]["type"] == "Polygon"
    missing = client.get("/api/regions/ar6/atlantis")
    assert missing.status_code == 404 and "no region 'atlantis'" in missing.json()["error"]


def test_shape_named_or_posted_answers_as_the_library(client, cube):
    from accumulus import api
    from accumulus.regions import named_region

    url = "/api/datasets/surface/tas/average"
    params = {"over": "lat,lon", "time": "2001-01-03/2001-01-20"}
    expected = api.query(
        str(cube), "tas", "lat,lon", {"time": ("2001-01-03", "2001-01-20")}, shape="ar6:SAH"
    )
    named = client.get(url, params={**params, "shape": "ar6:SAH"})
    assert named.status_code == 200, named.text
    assert named.json()["values"] == pytest.approx(list(expected.data.values), rel=1e-12)
    assert "Sahara (AR6 SAH)" in named.json()["titles"]["subtitle"]
    geojson = shapely.to_geojson(named_region("ar6:SAH").geometry)
    posted = client.post(url, params=params, content=geojson)
    assert posted.status_code == 200, posted.text
    assert posted.json()["values"] == named.json()["values"]
    box = client.get(url, params=params).json()["values"]
    assert box != named.json()["values"]  # the shape is not the cache's box answer


def test_bad_or_oversized_shapes_are_refused(client):
    url = "/api/datasets/surface/tas/average"
    params = {"over": "lat,lon"}
    unknown = client.get(url, params={**params, "shape": "ar6:Atlantis"})
    assert unknown.status_code == 422 and unknown.json()["parameter"] == "shape"
    point = client.post(url, params=params, content='{"type": "Point", "coordinates": [0, 0]}')
    assert point.status_code == 422 and "no area" in point.json()["error"]
    big = client.post(url, params=params, content=b" " * (MAX_GEOJSON_BYTES + 10))
    assert big.status_code == 413
    outside = client.post(
        url, params=params, content=shapely.to_geojson(shapely.box(1, 1, 1.5, 1.5))
    )
    assert outside.status_code == 422 and "holds no cell centre" in outside.json()["error"]
