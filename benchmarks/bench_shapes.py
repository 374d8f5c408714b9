"""A country's area-averaged daily series over ten years: ``average --shape`` against what a
user would otherwise run (xarray + Dask: ``da.where(mask).weighted(cos lat).mean``), and
against the floor (fetching and decoding exactly the chunks the plan reads, concurrently).

The cubes hold the demo's synthetic daily precipitation (1° global, 3653 days, written by
xarray) in two layouts real archives use: map chunks (365 days x 45° x 90°, about 6 MB: no
chunk lies wholly inside a country) and time-series chunks (the whole period x 10° x 10°,
about 1.4 MB: a country holds whole chunks, answered from the latitude x longitude
accumulation). Shapes: Brazil from Natural Earth (the 110m countries file that pyogrio
ships), and the IPCC AR6 region N.E.South-America.

Two xarray baselines: ``da.where(mask)`` over the whole grid, as written in most notebooks,
and the careful version that first selects the shape's bounding box (``sel`` of the mask's
window), so reads only the chunks the box touches.

Prints JSON: medians, ratios measured in this run, chunk, request and byte counts.

    python benchmarks/bench_shapes.py [--days 3653] [--repeats 5]
"""

from __future__ import annotations

import argparse
import importlib.util
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import regionmask
import xarray as xr

import accumulus
from accumulus.accumulation.query import Query, run_query
from accumulus.cube import Cube
from accumulus.demo import VARIABLE, DemoConfig
from accumulus.regions import named_region, shape_from_file
from accumulus.storage import CountingStore, is_metadata_key, open_store
from common import DEFAULT_DIR, cube, median_seconds, report


def natural_earth_countries() -> Path:
    spec = importlib.util.find_spec("pyogrio")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "tests" / "fixtures"
    return folder / "naturalearth_lowres" / "naturalearth_lowres.shp"


def xarray_series(store, geometry, *, window: bool):
    """The series as an xarray user computes it (``window``: within the mask's bounding
    box only)."""
    ds = xr.open_zarr(store, consolidated=True)
    wrapped = (ds.lon.values + 180) % 360 - 180
    mask = regionmask.Regions([geometry]).mask(wrapped, ds.lat.values, wrap_lon=False) == 0
    mask = xr.DataArray(
        np.asarray(mask), dims=("lat", "lon"), coords={"lat": ds.lat, "lon": ds.lon}
    )
    if window:
        rows, cols = np.flatnonzero(mask.any("lon")), np.flatnonzero(mask.any("lat"))
        box = {"lat": slice(rows[0], rows[-1] + 1), "lon": slice(cols[0], cols[-1] + 1)}
        ds, mask = ds.isel(box), mask.isel(box)
    data = ds[VARIABLE].where(mask).astype("f8")
    return data.weighted(np.cos(np.deg2rad(ds.lat))).mean(("lat", "lon")).compute(), int(mask.sum())


def chunk_keys(store: CountingStore) -> list[str]:
    return sorted(k for k in store.counts.reads if not is_metadata_key(k))


def floor(path: Path, keys: list[str]) -> float:
    """Fetch and decode exactly ``keys`` (array path + chunk coordinates) concurrently and
    sum each: the least work the plan allows, without any planning or bookkeeping."""
    import zarr

    root = zarr.open_group(str(path), mode="r")

    def one(key: str) -> float:
        name, _, coords = key.rpartition("/")
        if name.endswith("/c"):  # v3 keys: array/c/0/1/2
            name, coords = name[:-2], key.split("/c/", 1)[1].replace("/", ".")
        array = root[name]
        index = tuple(int(c) for c in coords.split("."))
        return float(np.nansum(array.blocks[index]))

    with ThreadPoolExecutor(8) as pool:
        return sum(pool.map(one, keys))


def measure(path: Path, label: str, shape, repeats: int) -> dict:
    def ours():
        store = CountingStore(open_store(str(path)))
        result = run_query(Cube(store, str(path)), Query(VARIABLE, ("lat", "lon"), shape=shape))
        return result, store

    def scan(window: bool):
        store = CountingStore(open_store(str(path)))
        return xarray_series(store, shape.geometry, window=window), store

    seconds, (result, our_store) = median_seconds(ours, repeats)
    scan_seconds, ((expected, cells), scan_store) = median_seconds(
        lambda: scan(False), max(1, repeats // 2)
    )
    window_seconds, ((in_window, _), window_store) = median_seconds(lambda: scan(True), repeats)
    keys = chunk_keys(our_store)
    floor_seconds, _ = median_seconds(lambda: floor(path, keys), repeats)
    return {
        "shape": label,
        "cells": cells,
        "days": int(result.data.sizes["time"]),
        "accumulus_seconds_median": round(seconds, 4),
        "xarray_seconds_median": round(scan_seconds, 4),
        "xarray_window_seconds_median": round(window_seconds, 4),
        "floor_seconds_median": round(floor_seconds, 4),
        "speedup_vs_xarray": round(scan_seconds / seconds, 1),
        "speedup_vs_xarray_window": round(window_seconds / seconds, 1),
        "ratio_to_floor": round(seconds / floor_seconds, 2),
        "max_abs_difference": float(np.nanmax(np.abs(result.data.values - expected.values))),
        "max_abs_difference_window": float(
            np.nanmax(np.abs(result.data.values - in_window.values))
        ),
        "accumulus": {
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "raw_chunks": result.stats.raw_chunks_read,
            "requests": our_store.counts.read_requests,
            "bytes": our_store.counts.read_bytes,
            "boxes_planned": len(result.plan.reads),
        },
        "xarray": reads(scan_store),
        "xarray_window": reads(window_store),
    }


def reads(store: CountingStore) -> dict:
    return {
        "chunks": len(chunk_keys(store)),
        "requests": store.counts.read_requests,
        "bytes": store.counts.read_bytes,
    }


LAYOUTS = {
    "map chunks (365 days x 45° x 90°)": (365, 45, 90),
    "time-series chunks (whole period x 10° x 10°)": (None, 10, 10),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--days", type=int, default=3653)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    shapes = [
        (
            "Brazil (Natural Earth 110m countries)",
            shape_from_file(f"{natural_earth_countries()}:Brazil"),
        ),
        ("IPCC AR6 N.E.South-America (NES)", named_region("ar6:NES")),
    ]
    cubes = []
    for layout, (days_per_chunk, lat, lon) in LAYOUTS.items():
        config = DemoConfig(
            days=args.days, resolution=1.0, chunks=(days_per_chunk or args.days, lat, lon)
        )
        path = cube(args.dir, config)
        if accumulus.open(str(path)).accumulation_group(VARIABLE) is None:
            accumulus.accumulate(str(path), VARIABLE)
        cubes.append(
            {
                "layout": layout,
                "path": str(path),
                "days": config.days,
                "resolution_deg": 1.0,
                "chunks": list(config.chunks),
                "results": [measure(path, label, shape, args.repeats) for label, shape in shapes],
            }
        )
    report({"benchmark": "shape series", "cubes": cubes})


if __name__ == "__main__":
    main()
