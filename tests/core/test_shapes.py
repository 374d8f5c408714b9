"""Shapes: which cells a shape holds (checked against regionmask), how a mask becomes boxes,
and the region sets and files shapes come from."""

from __future__ import annotations

import json

import geopandas
import numpy as np
import pytest
import regionmask
import shapely
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus.accumulation.query.shapes import CellMask, cell_mask, centre_mask, decompose
from accumulus.errors import AccumulusError
from accumulus.regions import (
    MAX_GEOJSON_BYTES,
    named_region,
    region_sets,
    shape_from_file,
    shape_from_geojson,
)


@pytest.mark.parametrize(
    ("region", "step", "lon0"),
    [
        ("ar6:WAF", 1.0, -179.5),
        ("ar6:NPO", 2.5, 1.25),  # across 180°E, on a 0..360 grid
        ("ar6:NZ", 0.5, -179.75),
        ("srex:AMZ", 1.0, 0.5),
        ("giorgi:SAS", 2.0, -180.0),  # centres on the shape's edges (whole degrees)
        ("prudence:AL", 0.25, -179.875),
    ],
)
def test_cells_are_those_regionmask_finds(region, step, lon0):
    shape = named_region(region)
    lats = np.arange(89.5, -90, -step)  # north to south
    lons = lon0 + step * np.arange(round(360 / step))
    ours = centre_mask(shape.geometry, lats, lons)
    # regionmask on the same centres in -180..180 (its own rule for the region's edges).
    wrapped = (lons + 180) % 360 - 180
    theirs = regionmask.Regions([shape.geometry]).mask(wrapped, lats, wrap_lon=False) == 0
    assert ours.sum() > 0
    np.testing.assert_array_equal(ours, np.asarray(theirs))


def test_centres_on_a_shared_border_go_to_one_side_only():
    west = shapely.box(-10, -10, 0, 10)
    east = shapely.box(0, -10, 10, 10)
    lats = np.arange(-9.0, 10.0)
    lons = np.arange(-9.0, 10.0)  # 0 lies on both shapes' border
    a, b = centre_mask(west, lats, lons), centre_mask(east, lats, lons)
    assert not (a & b).any()
    assert (a | b).all() or (a | b)[:, 1:].all()


def test_window_follows_the_variables_axis_order():
    cells = np.array([[True, False, True], [False, True, True]])
    mask = CellMask("lat", "lon", (10, 20), cells)
    assert mask.ranges() == {"lat": (10, 12), "lon": (20, 23)}
    box = {"time": (0, 5), "lat": (9, 12), "lon": (21, 23)}
    window = mask.window(("time", "lon", "lat"), box)
    assert window.shape == (1, 2, 3)
    np.testing.assert_array_equal(window[0], [[False, False, True], [False, True, True]])
    assert mask.window(("lat", "lon"), {"lat": (0, 5), "lon": (0, 5)}).sum() == 0


def test_cell_mask_is_cut_to_the_shapes_window():
    lats, lons = np.arange(-89.5, 90), np.arange(-179.5, 180)
    mask = cell_mask(
        shapely.box(10, 20, 15, 22), "lat", "lon", lats, lons, {"lat": (0, 180), "lon": (0, 360)}
    )
    assert mask.ranges() == {"lat": (110, 112), "lon": (190, 195)}
    assert mask.cells.all() and mask.count == 10
    outside = cell_mask(
        shapely.box(10, 20, 15, 22), "lat", "lon", lats, lons, {"lat": (0, 50), "lon": (0, 360)}
    )
    assert outside.count == 0


@st.composite
def masks_and_edges(draw):
    rows, cols = draw(st.integers(1, 30)), draw(st.integers(1, 30))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    # A blob: cells within a random ellipse, with a few holes.
    y, x = np.mgrid[0:rows, 0:cols]
    cy, cx = rng.uniform(0, rows), rng.uniform(0, cols)
    ry, rx = rng.uniform(1, rows + 1), rng.uniform(1, cols + 1)
    cells = ((y - cy) / ry) ** 2 + ((x - cx) / rx) ** 2 <= 1
    cells &= rng.random((rows, cols)) > draw(st.sampled_from([0.0, 0.05]))
    start = (draw(st.integers(0, 20)), draw(st.integers(0, 20)))
    lat_edges = draw(st.lists(st.integers(0, 60), max_size=12))
    lon_edges = draw(st.lists(st.integers(0, 60), max_size=12))
    along = draw(st.sampled_from(["lon", "lat"]))
    return CellMask("lat", "lon", start, cells), lat_edges, lon_edges, along


@settings(max_examples=150, deadline=None)
@given(masks_and_edges())
def test_whole_and_cut_boxes_cover_every_cell_of_the_mask_once(case):
    mask, lat_edges, lon_edges, along = case
    parts = decompose(mask, lat_edges, lon_edges, along=along)
    (i0, j0), (rows, cols) = mask.start, mask.cells.shape
    covered = np.zeros((rows, cols), dtype=int)
    for box in parts.whole:
        (a, b), (c, d) = box["lat"], box["lon"]
        block = mask.cells[a - i0 : b - i0, c - j0 : d - j0]
        assert block.size and block.all()  # whole boxes hold only cells of the shape
        covered[a - i0 : b - i0, c - j0 : d - j0] += 1
    for box in parts.cut:
        (a, b), (c, d) = box["lat"], box["lon"]
        block = mask.cells[a - i0 : b - i0, c - j0 : d - j0]
        assert block.any() and not block.all()
        covered[a - i0 : b - i0, c - j0 : d - j0] += 1
    assert covered.max() <= 1  # no cell twice
    assert (covered[mask.cells] == 1).all()  # every cell of the shape once
    # Cut boxes lie between consecutive edges across the runs (one row, or one column, of
    # blocks each); whole boxes between edges everywhere (merged blocks).
    across, edges = ("lat", lat_edges) if along == "lon" else ("lon", lon_edges)
    for box in parts.cut:
        (a, b) = box[across]
        assert not any(a < e < b for e in edges)


def test_runs_follow_rows_or_columns():
    """An L: along longitude, its rows' runs (the foot's rows stacked into one box); along
    latitude, its columns' runs (the stem's columns stacked)."""
    cells = np.zeros((4, 5), dtype=bool)
    cells[:, 0:2] = True  # the stem: rows 0-3, columns 0-1
    cells[2:, 2:] = True  # the foot: rows 2-3, columns 2-4
    mask = CellMask("lat", "lon", (10, 20), cells)
    every = range(0, 100)
    rows = decompose(mask, every, every)
    assert rows.cut == ()
    assert rows.whole == (
        {"lat": (10, 12), "lon": (20, 22)},
        {"lat": (12, 14), "lon": (20, 25)},
    )
    columns = decompose(mask, every, every, along="lat")
    assert columns.whole == (
        {"lat": (10, 14), "lon": (20, 22)},
        {"lat": (12, 14), "lon": (22, 25)},
    )


def test_element_edges_cut_no_block():
    rng = np.random.default_rng(1)
    cells = rng.random((12, 17)) > 0.4
    mask = CellMask("lat", "lon", (3, 5), cells)
    parts = decompose(mask, range(0, 40), range(0, 40))
    assert parts.cut == ()
    assert (
        sum((b["lat"][1] - b["lat"][0]) * (b["lon"][1] - b["lon"][0]) for b in parts.whole)
        == cells.sum()
    )


# --------------------------------------------------------------------------------------------
# Region sets and files


def test_region_sets_are_listed_offline_with_their_regions():
    sets = {s["name"]: s for s in region_sets()}
    assert set(sets) == {"ar6", "srex", "giorgi", "prudence"}
    assert len(sets["ar6"]["regions"]) == 58
    assert {"abbrev": "WAF", "name": "Western-Africa"}.items() <= sets["ar6"]["regions"][21].items()
    assert len(sets["srex"]["regions"]) == 26 and len(sets["giorgi"]["regions"]) == 21


def test_named_regions_by_abbreviation_or_name_in_any_case():
    waf = named_region("ar6:WAF")
    assert waf.name == "ar6:WAF" and waf.label == "Western-Africa (AR6 WAF)"
    assert named_region("AR6:western-africa").key == waf.key
    assert named_region("giorgi:Amazon Basin").name == "giorgi:AMZ"
    with pytest.raises(AccumulusError, match="no region set 'ar7'"):
        named_region("ar7:WAF")
    with pytest.raises(AccumulusError, match="no region 'xyz' in ar6; regions: GIC, NWN"):
        named_region("ar6:XYZ")
    with pytest.raises(AccumulusError, match="write SET:NAME"):
        named_region("ar6")


@pytest.fixture
def basins(tmp_path):
    frame = geopandas.GeoDataFrame(
        {"NAME": ["Amazon", "Congo", "Nile"], "code": [1, 2, 3]},
        geometry=[
            shapely.box(-75, -15, -50, 5),
            shapely.box(12, -10, 30, 8),
            shapely.box(25, 0, 35, 30),
        ],
        crs="EPSG:4326",
    )
    return frame


@pytest.mark.parametrize("driver", ["GeoJSON", "ESRI Shapefile"])
def test_a_feature_of_a_file_by_property_value(basins, tmp_path, driver):
    path = tmp_path / ("basins.geojson" if driver == "GeoJSON" else "basins.shp")
    basins.to_file(path, driver=driver)
    amazon = shape_from_file(f"{path}:Amazon")
    assert amazon.geometry.equals(shapely.box(-75, -15, -50, 5))
    assert amazon.label == f"Amazon ({path.name})"
    assert shape_from_file(f"{path}:code=2").geometry.equals(shapely.box(12, -10, 30, 8))
    assert shape_from_file(f"{path}:nile").geometry.equals(shapely.box(25, 0, 35, 30))
    with pytest.raises(AccumulusError, match="3 features; pick one"):
        shape_from_file(path)
    with pytest.raises(AccumulusError, match="no feature has a property equal to 'Danube'"):
        shape_from_file(f"{path}:Danube")
    with pytest.raises(AccumulusError, match="no property 'river'"):
        shape_from_file(f"{path}:river=Nile")


def test_a_file_in_another_crs_is_reprojected(basins, tmp_path):
    path = tmp_path / "mercator.geojson"
    basins.to_crs("EPSG:3857").to_file(path, driver="GeoJSON")
    congo = shape_from_file(f"{path}:Congo")
    assert congo.geometry.bounds == pytest.approx((12, -10, 30, 8), abs=1e-6)


def test_bad_files_are_one_line_errors(tmp_path):
    with pytest.raises(AccumulusError, match="no such file"):
        shape_from_file(tmp_path / "missing.geojson")
    (tmp_path / "junk.geojson").write_text("{not json")
    with pytest.raises(AccumulusError, match="cannot read it as GeoJSON or a shapefile"):
        shape_from_file(tmp_path / "junk.geojson")


def test_uploaded_geojson_feature_collections_points_and_size():
    collection = {
        "type": "FeatureCollection",
        "features": [
            {
                "type": "Feature",
                "properties": {},
                "geometry": json.loads(shapely.to_geojson(shapely.box(0, 0, 1, 1))),
            },
            {
                "type": "Feature",
                "properties": {},
                "geometry": json.loads(shapely.to_geojson(shapely.box(1, 0, 2, 1))),
            },
        ],
    }
    shape = shape_from_geojson(json.dumps(collection))
    assert shape.geometry.area == pytest.approx(2.0)
    with pytest.raises(AccumulusError, match="has no area"):
        shape_from_geojson({"type": "Point", "coordinates": [1, 2]})
    with pytest.raises(AccumulusError, match="not JSON"):
        shape_from_geojson("{")
    with pytest.raises(AccumulusError, match="more than the limit"):
        shape_from_geojson(" " * (MAX_GEOJSON_BYTES + 1))
    with pytest.raises(AccumulusError, match="not a GeoJSON geometry"):
        shape_from_geojson({"type": "Polygon", "coordinates": "x"})
