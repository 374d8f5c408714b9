"""Averages over shapes equal xarray's ``da.where(mask).weighted(w).mean(...)`` on the raw
data, with the mask computed by regionmask (independently of accumulus), on random grids,
chunkings and shapes, with chunk-level and with positioned accumulations (``--at``); only the
chunks the shape's edge cuts are read raw, and none with entries at every element."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import regionmask
import shapely
import xarray as xr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.accumulation.model import statistics
from accumulus.accumulation.model.groups import AccumulationGroups
from accumulus.accumulation.query.answer import read_answer, usable_layouts
from accumulus.accumulation.query.budget import DEFAULT_MEMORY_BYTES
from accumulus.accumulation.query.cost import plan_cost, storage_of
from accumulus.accumulation.query.execute import chunk_work
from accumulus.accumulation.query.request import Query, resolve
from accumulus.accumulation.query.shapes import shape_plans
from accumulus.errors import AccumulusError
from accumulus.raw_cube import RawCube
from accumulus.regions import as_shape, named_region
from accumulus.stores.opening import open_store
from cubes import VAR, area_weights, write_cube


def grid_dataset(nt, nlat, nlon, *, step, west, descending, seed, nan_fraction=0.1):
    rng = np.random.default_rng(seed)
    lat = -60 + step / 2 + step * np.arange(nlat)
    lat = lat[::-1] if descending else lat
    lon = west + step / 2 + step * np.arange(nlon)
    values = rng.uniform(0.1, 10.0, (nt, nlat, nlon)).astype("f4")
    values[rng.random(values.shape) < nan_fraction] = np.nan
    ds = xr.Dataset(
        {VAR: (("time", "lat", "lon"), values, {"units": "mm/day"})},
        coords={"time": pd.date_range("2001-01-01", periods=nt), "lat": lat, "lon": lon},
    )
    ds.lat.attrs.update(units="degrees_north")
    ds.lon.attrs.update(units="degrees_east")
    return ds


def regionmask_mask(geometry, ds) -> xr.DataArray:
    """The independent mask: regionmask on centres in -180..180."""
    wrapped = (ds.lon.values + 180) % 360 - 180
    mask = regionmask.Regions([geometry]).mask(wrapped, ds.lat.values, wrap_lon=False) == 0
    return xr.DataArray(
        np.asarray(mask), dims=("lat", "lon"), coords={"lat": ds.lat, "lon": ds.lon}
    )


def reference(ds, mask, over, stat, ranges, weights="area"):
    data = ds[VAR].sel({d: slice(*r) for d, r in ranges.items()}).astype("f8")
    data = data.where(mask.sel(lat=data.lat, lon=data.lon))
    w = area_weights(data) if weights == "area" else xr.ones_like(data.lat, dtype="f8")
    weighted = data.weighted(w)
    if stat == "mean":
        return weighted.mean(over)
    if stat == "sum":
        return weighted.sum(over)
    return weighted.sum_of_weights(over)


@st.composite
def polygons(draw, lon0, lon1, lat0, lat1):
    """A random star-shaped polygon (its points around a centre), at times with a hole."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    cx, cy = rng.uniform(lon0, lon1), rng.uniform(lat0, lat1)
    n = draw(st.integers(3, 12))
    angles = np.sort(rng.uniform(0, 2 * np.pi, n))
    radius = rng.uniform(2, max(3, (lon1 - lon0) / 2), n)
    points = np.c_[cx + radius * np.cos(angles), cy + radius * np.sin(angles) * 0.7]
    polygon = shapely.make_valid(shapely.Polygon(points))
    if draw(st.booleans()):
        polygon = polygon.difference(shapely.Point(cx, cy).buffer(radius.min() / 3))
    return shapely.make_valid(polygon)


@st.composite
def cases(draw):
    nt, nlat, nlon = draw(st.integers(3, 12)), draw(st.integers(4, 24)), draw(st.integers(4, 30))
    step = draw(st.sampled_from([1.0, 2.5]))
    west = draw(st.sampled_from([-30.0, 150.0]))  # 150: across 180°E, in 0..360
    return {
        "sizes": (nt, nlat, nlon),
        "step": step,
        "west": west,
        "descending": draw(st.booleans()),
        "seed": draw(st.integers(0, 2**16)),
        "chunks": (
            draw(st.integers(1, nt)),
            draw(st.integers(1, nlat)),
            draw(st.integers(1, nlon)),
        ),
        "polygon": draw(polygons(west, west + step * nlon, -60, -60 + step * nlat)),
        "over": draw(
            st.sampled_from([("lat", "lon"), ("lon",), ("lat",), ("time",), ("time", "lat", "lon")])
        ),
        "stat": draw(st.sampled_from(["mean", "mean", "sum", "count"])),
        "time_range": draw(st.sampled_from([None, (1, 3)])),
    }


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_shape_averages_equal_xarray_where_mask(tmp_path_factory, case):
    check_against_xarray(tmp_path_factory, case)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=cases())
def test_shape_averages_equal_xarray_where_mask_long_run(tmp_path_factory, case):
    check_against_xarray(tmp_path_factory, case)


def dataset_and_shape(case):
    """The case's dataset, and its polygon as files and region sets give shapes: in
    -180..180, the part east of 180°E moved a turn west."""
    nt, nlat, nlon = case["sizes"]
    ds = grid_dataset(
        nt,
        nlat,
        nlon,
        step=case["step"],
        west=case["west"],
        descending=case["descending"],
        seed=case["seed"],
    )
    polygon = case["polygon"]
    east_of_180 = shapely.intersection(polygon, shapely.box(180, -90, 540, 90))
    geometry = shapely.union(
        shapely.intersection(polygon, shapely.box(-180, -90, 180, 90)),
        shapely.affinity.translate(east_of_180, -360),
    )
    return ds, geometry


def time_ranges(ds, case):
    if not case["time_range"]:
        return {}
    a, b = case["time_range"]
    times, last = ds.time.values, ds.sizes["time"] - 1
    return {"time": (str(times[min(a, last)])[:10], str(times[min(b, last)])[:10])}


def assert_equal_to_reference(got, expected, stat):
    expected = expected.sel({d: got[d] for d in got.dims}).transpose(*got.dims)
    if stat == "mean":
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, equal_nan=True)
    else:
        # Sums and counts of cells outside the shape are missing, not 0 as xarray's; where
        # no value is valid a count is 0 (xarray's sum_of_weights is NaN).
        inside = ~np.isnan(got.values)
        want = np.asarray(expected.values)
        if stat == "count":
            want = np.where(np.isnan(want), 0.0, want)
        np.testing.assert_allclose(got.values[inside], want[inside], rtol=1e-9)


def check_against_xarray(tmp_path_factory, case):
    ds, geometry = dataset_and_shape(case)
    mask = regionmask_mask(geometry, ds)
    if not mask.any():
        return  # the shape missed every centre: refused, tested below
    path = tmp_path_factory.mktemp("shape") / "cube.zarr"
    write_cube(ds, path, dict(zip(("time", "lat", "lon"), case["chunks"], strict=True)))
    accumulus.accumulate(str(path), VAR)
    ranges = time_ranges(ds, case)
    cube = accumulus.open(str(path))
    expected = reference(ds, mask, list(case["over"]), case["stat"], ranges)
    for use_accumulation in (True, False):
        result = cube.query(
            VAR,
            case["over"],
            ranges,
            stat=case["stat"],
            shape=geometry,
            use_accumulation=use_accumulation,
        )
        assert_equal_to_reference(result.data, expected, case["stat"])


# --------------------------------------------------------------------------------------------
# Positioned accumulations: a mask is a union of row (or column) runs, each a box, so entries
# at every element answer a shape without reading a raw chunk.


@st.composite
def positioned_cases(draw):
    case = draw(cases())
    at = {
        "lat": draw(st.sampled_from([1, 1, 2, "chunk"])),
        "lon": draw(st.sampled_from([1, 1, 3, "chunk"])),
    }
    if at == {"lat": "chunk", "lon": "chunk"}:
        at["lat"] = 1
    case["at"] = at
    case["combos"] = draw(
        st.sampled_from(
            [["lat,lon"], ["lat", "lon"], ["lat", "lon", "lat,lon"], ["time", "lat,lon"]]
        )
    )
    case["weights"] = draw(st.sampled_from(["area", "none"]))
    return case


@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=positioned_cases())
def test_shapes_from_positioned_accumulations_equal_xarray(tmp_path_factory, case):
    check_positioned(tmp_path_factory, case)


@pytest.mark.slow
@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=positioned_cases())
def test_shapes_from_positioned_accumulations_equal_xarray_long_run(tmp_path_factory, case):
    check_positioned(tmp_path_factory, case)


def check_positioned(tmp_path_factory, case):
    """The query's answer (the cheapest plan, and the accumulations' plan) and the answer of
    every way the planner offers equal xarray's; with entries at every element of the
    dimensions averaged over, one of those ways reads no raw chunk."""
    ds, geometry = dataset_and_shape(case)
    mask = regionmask_mask(geometry, ds)
    if not mask.any():
        return
    path = tmp_path_factory.mktemp("positioned") / "cube.zarr"
    write_cube(ds, path, dict(zip(("time", "lat", "lon"), case["chunks"], strict=True)))
    accumulus.accumulate(str(path), VAR, case["combos"], at=case["at"], weights=case["weights"])
    over, stat, weights = list(case["over"]), case["stat"], case["weights"]
    ranges = time_ranges(ds, case)
    expected = reference(ds, mask, over, stat, ranges, weights)
    cube = accumulus.open(str(path))
    for plan in ("cheaper", "accumulation"):
        result = cube.query(VAR, over, ranges, stat=stat, shape=geometry, plan=plan)
        assert_equal_to_reference(result.data, expected, stat)

    query = Query(VAR, tuple(over), ranges, stat, shape=as_shape(geometry))
    plans = every_way(path, query, expected)
    every_element = case["at"] == {"lat": 1, "lon": 1}
    answerable = (
        ("lat,lon" in case["combos"] and {"lat", "lon"} <= set(over))
        or ("lat" in case["combos"] and "lat" in over)
        or ("lon" in case["combos"] and "lon" in over)
    )
    if every_element and answerable:
        assert any(not p.raw_reads for p in plans), [p.describe() for p in plans]


def every_way(path, query, expected):
    """Each plan ``shapes.shape_plans`` offers, read and finished into the statistic, equal
    to ``expected``; the plans."""
    cube = RawCube(open_store(str(path)), str(path))
    groups = AccumulationGroups(cube)
    resolved = resolve(cube, query, groups)
    var = resolved.variable
    stat = statistics.STATISTICS[query.stat]
    terms = stat.sums_for(weighted=resolved.weights != "none", infinite=True)
    layouts, _ = usable_layouts(groups, var, resolved.weights, terms)
    edges = {d: b.edges for d, b in zip(var.dims, var.bounds, strict=True)}
    plans = shape_plans(var.dims, resolved.ranges, resolved.over, layouts, resolved.mask, edges)
    for plan in plans:
        values, _ = read_answer(cube, groups, resolved, plan)
        coords = {d: cube.decoded[d].values[slice(*resolved.ranges[d])] for d in resolved.kept}
        got = xr.DataArray(values, dims=resolved.kept, coords=coords)
        assert_equal_to_reference(got, expected, query.stat)
    return plans


def test_only_the_chunks_the_edge_cuts_are_read_raw(tmp_path):
    """A country-sized box shape on a grid of 4x4-cell chunks: whole chunks come from the
    lat+lon accumulation; raw reads are exactly the chunks the shape's edge cuts, each once
    per time chunk."""
    ds = grid_dataset(20, 40, 40, step=1.0, west=0.0, descending=False, seed=3, nan_fraction=0.0)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 10, "lat": 4, "lon": 4})
    accumulus.accumulate(str(path), VAR)
    diamond = shapely.Polygon([(20, -58), (38, -40), (20, -22), (2, -40)])
    result = accumulus.open(str(path)).query(VAR, "lat,lon", shape=diamond)
    mask = regionmask_mask(diamond, ds)
    expected = reference(ds, mask, ["lat", "lon"], "mean", {})
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    # The chunks (4x4 cells) holding some but not all of the shape's cells.
    cells = mask.values.reshape(10, 4, 10, 4)
    per_chunk = cells.sum(axis=(1, 3))
    cut = int(((per_chunk > 0) & (per_chunk < 16)).sum())
    assert (per_chunk == 16).sum() > 10  # many whole chunks, from accumulations
    assert result.stats.raw_chunks_read == cut * 2  # two time chunks
    assert result.stats.accumulation_chunks_read > 0
    # Without accumulations: every chunk holding a cell of the shape, raw.
    scan = accumulus.open(str(path)).query(VAR, "lat,lon", shape=diamond, use_accumulation=False)
    assert scan.stats.raw_chunks_read == int((per_chunk > 0).sum()) * 2
    np.testing.assert_allclose(scan.data.values, expected.values, rtol=1e-9)


def test_a_region_of_a_set_on_a_real_file(tmp_path):
    """NOAA's SST anomalies (eofs): the equatorial Pacific of AR6, on 0..360 longitudes."""
    from core.test_real_data import example_file

    source = example_file("eofs", "sst_ndjfm_anom.nc")
    raw = xr.open_dataset(source)
    path = tmp_path / "sst.zarr"
    ds = raw[["sst"]]
    for v in ds.variables.values():
        v.encoding.clear()
    ds.to_zarr(path, encoding={"sst": {"chunks": (10, 6, 10)}})
    accumulus.accumulate(str(path), "sst")
    epo = named_region("ar6:EPO")
    got = accumulus.average(str(path), "sst", "latitude,longitude", shape="ar6:EPO")
    wrapped = (raw.longitude.values + 180) % 360 - 180
    mask = (
        regionmask.Regions([epo.geometry]).mask(wrapped, raw.latitude.values, wrap_lon=False) == 0
    )
    mask = xr.DataArray(
        np.asarray(mask),
        dims=("latitude", "longitude"),
        coords={"latitude": raw.latitude, "longitude": raw.longitude},
    )
    data = raw.sst.where(mask)
    expected = data.weighted(np.cos(np.deg2rad(raw.latitude.astype("f8")))).mean(
        ["latitude", "longitude"]
    )
    assert int(mask.sum()) > 20
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9)


def test_a_shape_outside_the_grid_or_without_latitude_is_refused(tmp_path):
    ds = grid_dataset(4, 8, 8, step=1.0, west=0.0, descending=False, seed=1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 2, "lat": 4, "lon": 4})
    with pytest.raises(AccumulusError, match="holds no cell centre"):
        accumulus.average(str(path), VAR, "lat,lon", shape=shapely.box(100, 10, 110, 20))
    with pytest.raises(AccumulusError, match="no region 'atlantis'"):
        accumulus.average(str(path), VAR, "lat,lon", shape="ar6:Atlantis")


def test_a_cut_chunk_summed_slab_by_slab(tmp_path):
    """A small memory budget sums a raw chunk in slabs of latitude rows: the shape's cells of
    each slab are the ones counted."""
    # Room for one chunk in flight (three quarters of the budget; float64 at most), so that
    # slabs are as small as they go (4096 values).
    one_chunk = 3 * 120 * 60 * 8 * 4 // 3
    ds = grid_dataset(3, 120, 60, step=0.5, west=0.0, descending=True, seed=5)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 3, "lat": 120, "lon": 60})
    accumulus.accumulate(str(path), VAR)
    diamond = shapely.Polygon([(15, -59), (29, -30), (15, -1), (1, -30)])
    mask = regionmask_mask(diamond, ds)
    cube = accumulus.open(str(path))
    for over, use_accumulation in [(("lat", "lon"), True), (("lon",), True), (("time",), False)]:
        result = cube.query(
            VAR, over, shape=diamond, memory_bytes=one_chunk, use_accumulation=use_accumulation
        )
        got = result.data  # within the shape's window
        expected = reference(ds, mask, list(over), "mean", {})
        expected = expected.sel({d: got[d] for d in got.dims}).transpose(*got.dims)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, equal_nan=True)
        assert result.stats.raw_chunks_read == 1


def test_a_shape_with_a_range_across_the_seam_is_refused(tmp_path):
    """On a global 0..360 grid, lon=350/10 runs across the seam; a shape finds its own cells
    on both sides, so the two together are refused in one line naming the shape."""
    ds = grid_dataset(2, 8, 360, step=1.0, west=0.0, descending=False, seed=2)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 2, "lat": 8, "lon": 90})
    across = shapely.box(-15, -58, 15, -53)  # both sides of 0°E
    with pytest.raises(AccumulusError, match="across the grid's seam"):
        accumulus.average(str(path), VAR, "lat,lon", {"lon": (350, 10)}, shape=across)
    got = accumulus.open(str(path)).query(VAR, "lat,lon", shape=across)
    expected = reference(ds, regionmask_mask(across, ds), ["lat", "lon"], "mean", {})
    np.testing.assert_allclose(got.data.values, expected.values, rtol=1e-9)


def test_a_region_reads_no_raw_chunk_with_entries_at_every_cell(tmp_path):
    """AR6 Western Africa's series on a 1° grid in chunks it does not fill. With entries at
    every cell (``--at lat=1,lon=1``: prefix sums along longitude, row by row) one way to
    answer reads no raw chunk: each run of its cells along a row (stacked while rows repeat
    it) is two entries. The query runs whichever way reads least by the planner's estimate.
    With chunk-end accumulations only the chunks its edge cuts are read raw."""
    ds = grid_dataset(40, 120, 360, step=1.0, west=-180.0, descending=False, seed=7)
    waf = named_region("ar6:WAF")
    mask = regionmask_mask(waf.geometry, ds)
    expected = reference(ds, mask, ["lat", "lon"], "mean", {})
    chunks = {"time": 10, "lat": 30, "lon": 30}

    path = tmp_path / "every-cell.zarr"
    write_cube(ds, path, chunks)
    accumulus.accumulate(str(path), VAR, ["lat,lon"], at={"lat": 1, "lon": 1})
    plans = every_way(path, Query(VAR, ("lat", "lon"), shape=waf), expected)
    runs = [p for p in plans if not p.raw_reads]
    assert len(runs) == 1
    rows = mask.values[:, mask.values.any(axis=0)][mask.values.any(axis=1)]
    run_count = sum(1 + int(np.count_nonzero(np.diff(r.astype(int)) == 1)) for r in rows)
    assert 0 < len(runs[0].reads) <= 2 * run_count  # two entries a run, fewer when stacked
    result = accumulus.open(str(path)).query(VAR, "lat,lon", shape=waf, plan="accumulation")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    cube = RawCube(open_store(str(path)), str(path))
    groups = AccumulationGroups(cube)
    var = cube.variable(VAR)
    terms = statistics.STATISTICS["mean"].sums_for(weighted=True, infinite=True)
    storage, over = storage_of(cube.store), ("lat", "lon")
    costs = [
        plan_cost((r for r, _ in chunk_work(groups, var, p, terms).values()), var, storage, terms,
                  over, DEFAULT_MEMORY_BYTES)
        for p in plans
    ]  # fmt: skip
    assert result.costs["accumulation"] == min(costs, key=lambda c: c.seconds)

    path = tmp_path / "chunk-ends.zarr"
    write_cube(ds, path, chunks)
    accumulus.accumulate(str(path), VAR, ["lat,lon"])
    result = accumulus.open(str(path)).query(VAR, "lat,lon", shape=waf, plan="accumulation")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    cells = mask.values.reshape(4, 30, 12, 30).sum(axis=(1, 3))
    cut = int(((cells > 0) & (cells < 900)).sum())
    assert result.stats.raw_chunks_read == cut * 4  # four time chunks


def test_the_command_line_averages_over_a_region_and_a_shape_file(tmp_path):
    """``average --region SET:NAME`` and ``--shape FILE:VALUE`` (a feature picked by a
    property) as a user runs them: the JSON equals xarray's where(mask), its titles name the
    shape and say centres decide, and the PNG is drawn."""
    import json

    from core.test_cli import run

    ds = grid_dataset(12, 120, 360, step=1.0, west=-180.0, descending=False, seed=11)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 6, "lat": 30, "lon": 30})
    run("accumulate", str(path), VAR, "--dims", "lat,lon", "--at", "lat=1,lon=1")
    lake = shapely.Polygon([(30, -5), (36, -3), (34, 4), (29, 2)])
    features = [
        {"type": "Feature", "properties": {"name": name}, "geometry": shapely.geometry.mapping(g)}
        for name, g in (("Victoria", lake), ("Elsewhere", shapely.box(-60, -30, -50, -20)))
    ]
    geojson = tmp_path / "lakes.geojson"
    geojson.write_text(json.dumps({"type": "FeatureCollection", "features": features}))
    for option, geometry, label in (
        (("--region", "ar6:WAF"), named_region("ar6:WAF").geometry, "Western-Africa"),
        (("--shape", f"{geojson}:victoria"), lake, "Victoria"),
    ):
        png = tmp_path / "series.png"
        proc = run("average", str(path), VAR, "--over", "lat,lon", *option, "--json",
                   "--png", str(png), "--plan", "accumulation")  # fmt: skip
        out = json.loads(proc.stdout)
        expected = reference(ds, regionmask_mask(geometry, ds), ["lat", "lon"], "mean", {})
        np.testing.assert_allclose(out["values"], expected.values, rtol=1e-9)
        assert out["plan"]["accumulation_chunks_read"] > 0
        titles = " ".join(str(t) for t in out["titles"].values())
        assert label in titles and "centre inside" in titles, titles
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
