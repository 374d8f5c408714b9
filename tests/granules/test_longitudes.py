"""Any longitude convention, against xarray on ``open_mfdataset`` of the granules (rtol 1e-9).

ERA5-like granules run 0..330 with latitude descending, MERRA-2-like ones -180..157.5. A box
is written in either convention, across 0° or across the date line; the reference selects
the same cells by hand, as the grid's own label slices (``pieces``), and concatenates them
west to east. Longitude is chunked (90° a chunk) so that boxes read accumulations: the plans
are counted, and compared with the full scan of the same box.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus.captions import captions
from accumulus.output import result_json

from .layouts import ERA5, MERRA2, Product
from .test_products import open_files

CASES = {
    "era5": (ERA5, {"time": 4, "longitude": 3}),  # 12 longitudes 30° apart
    "merra2": (MERRA2, {"time": 12, "lon": 4}),  # 16 longitudes 22.5° apart
}

# (box as the user writes it, the same cells as slices of the grid's own labels, west to
# east, whether the accumulations can answer it without reading any raw chunk)
BOXES = {
    "era5": [
        # across 0°, in -180..180: 270..330 (a whole chunk) then 0..30 (part of one)
        ((-100.0, 50.0), [(260, 360), (0, 50)], False),
        # the same box in 0..360 but west of east across 0° as well: 260/50
        ((260.0, 50.0), [(260, 360), (0, 50)], False),
        # in -180..180 without crossing anything on this grid: -180..-61 is 180..299
        ((-180.0, -61.0), [(180, 299)], False),
        # across the date line, which a 0..360 grid holds in one piece: 150..210
        ((150.0, -150.0), [(150, 210)], False),
        # whole chunks on both sides of 0°: 270..330 and 0..60
        ((-90.0, 89.0), [(270, 360), (0, 89)], True),
    ],
    "merra2": [
        # across the date line: 90..157.5 and -180..-112.5, a whole chunk each
        ((80.0, -100.0), [(80, 180), (-180, -100)], True),
        # across the date line, written in 0..360
        ((100.0, 200.0), [(100, 180), (-180, -160)], False),
        # in 0..360 without crossing: 200..300 is -160..-60
        ((200.0, 300.0), [(-160, -60)], False),
        # across 0° in 0..360: 300..420 is -60..60
        ((300.0, 420.0), [(-60, 60)], False),
    ],
}


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory) -> tuple[str, Product, str, xr.Dataset]:
    product, chunks = CASES[request.param]
    files: list[Path] = request.getfixturevalue(request.param)
    store = str(tmp_path_factory.mktemp(product.name) / "cube.zarr")
    accumulus.append(store, files, chunks=chunks)
    accumulus.accumulate(store, product.variable, minimal=True)  # entries at chunk ends
    return request.param, product, store, open_files(files, product)


def reference(
    ds: xr.Dataset, product: Product, over: tuple[str, ...], pieces, lat=None
) -> xr.DataArray:
    """xarray's cos(latitude)-weighted mean over the label slices ``pieces``, concatenated."""
    data = ds[product.variable]
    if lat is not None:
        data = data.sel({product.lat: slice(*lat)})
    data = xr.concat([data.sel({product.lon: slice(*p)}) for p in pieces], dim=product.lon)
    weights = np.cos(np.deg2rad(data[product.lat].astype("f8")))
    return data.astype("f8").weighted(weights).mean(over)


def test_boxes_in_any_convention_match_xarray(built):
    name, product, store, ds = built
    cube = accumulus.open(store)
    dims = ds[product.variable].dims
    space = (product.lat, product.lon)
    for box, pieces, aligned in BOXES[name]:
        for over in (space, dims, ("time",)):
            want = reference(ds, product, tuple(d for d in dims if d in over), pieces)
            result = cube.query(product.variable, over, {product.lon: box})
            got = result.data
            assert got.dims == want.dims, box
            np.testing.assert_allclose(got.values, want.values, rtol=1e-9, atol=0)
            assert result.note == "", box  # a global grid: nothing clipped
            if product.lon in got.dims:
                # A map keeps the box's cells west to east, labelled continuously.
                steps = np.diff(got[product.lon].values)
                assert (steps > 0).all(), got[product.lon].values
                np.testing.assert_allclose(
                    got[product.lon].values % 360, want[product.lon].values % 360
                )
                continue
            # Answered from accumulations, not by a scan of the box.
            full = cube.query(product.variable, over, {product.lon: box}, use_accumulation=False)
            np.testing.assert_allclose(got.values, full.data.values, rtol=1e-9, atol=0)
            assert result.stats.accumulation_chunks_read > 0, box
            assert result.stats.raw_chunks_read < full.stats.raw_chunks_read, box
            if aligned:
                assert result.plan.raw_reads == [], result.plan.describe()


# A box across each grid's seam made of whole chunks, and its range in index space (past
# the axis' end: across the seam).
SEAM_BOXES = {
    "era5": ((-90, 89), (9, 15), "90°W–60°E"),  # 270..330 then 0..60: across 0°
    "merra2": ((80, -100), (12, 20), "90°E–112.5°W"),  # 90..157.5 then -180..-112.5
}


def test_a_box_across_the_seam_is_planned_as_two_boxes(built):
    """Each part a difference of accumulation entries (longitude entries end every 3 or 4
    cells, one chunk): entry 4 - entry 3 for the part before the seam, entry 1 after it."""
    name, product, store, _ = built
    box, index_range, region = SEAM_BOXES[name]
    result = accumulus.open(store).query(
        product.variable, (product.lat, product.lon), {product.lon: box}
    )
    assert result.plan.ranges[product.lon] == index_range
    assert [(r.sign, r.entries[product.lon]) for r in result.plan.reads] == [
        (1, 3),
        (-1, 2),
        (1, 0),
    ]
    assert all(r.source == (product.lat, product.lon) for r in result.plan.reads)
    assert result.stats.raw_chunks_read == 0
    assert result.stats.accumulation_chunks_read > 0
    assert region in captions(result).subtitle  # west to east


def test_numeric_ranges_either_way_round(built):
    """ERA5's latitude runs 90..-90: 35/-20 and -20/35 are the same cells, as in xarray's
    ``sel(latitude=slice(35, -20))``."""
    name, product, store, ds = built
    dims = ds[product.variable].dims
    lat = (35.0, -20.0) if name == "era5" else (-20.0, 35.0)
    want = reference(ds, product, dims, [(None, None)], lat=lat)
    for bounds in (lat, lat[::-1]):
        got = accumulus.average(store, product.variable, dims, {product.lat: bounds})
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, atol=0)


def test_a_range_past_the_grid_is_clipped_with_a_note(built):
    _, product, store, ds = built
    dims = ds[product.variable].dims
    cube = accumulus.open(store)
    whole = cube.query(product.variable, dims, {product.lat: (-90, 90)})
    assert whole.note == ""
    # Cells reach half a step past their centres: ERA5's (30° apart) to ±105°.
    clipped = cube.query(product.variable, dims, {product.lat: (-120, 95)})
    np.testing.assert_allclose(clipped.data.values, whole.data.values, rtol=1e-9, atol=0)
    assert clipped.note == (
        f"{product.lat}=-120/95 reaches past the coordinate (-90 to 90): clipped to -90 to 90"
    )
    assert result_json(clipped)["note"] == clipped.note
    assert clipped.note in captions(clipped).caption  # the caption under a picture
    # Times too: a period starting before the first granule.
    first = str(ds["time"].values[0])[:10]
    early = cube.query(product.variable, dims, {"time": ("1999-01-01", None)})
    np.testing.assert_allclose(early.data.values, whole.data.values, rtol=1e-9, atol=0)
    assert early.note.startswith(f"time=1999-01-01/ reaches past the coordinate ({first}T")
    assert f"clipped to {first}T" in early.note
