"""A country's area-averaged daily series over ten years: ``average --shape`` against what a
user would otherwise run (xarray + Dask: ``da.where(mask).weighted(cos lat).mean``), and
against the floor (fetching and decoding exactly the chunks the plan reads, concurrently).

The cube is the realistic one of ``realistic.py`` (3650 days x 180 x 360 float32 at 1°,
chunks 73 days x 90° x 90° = 2.4 MB, written by xarray; only read here). Its accumulations
are written beside it (``accumulate --into``, one sidecar per way):

- ``none``: no accumulation, the shape's chunks read raw (accumulus' own scan);
- ``chunk ends``: ZEP 5's default accumulations (time, lat, lon, lat+lon at chunk ends);
- ``lat=1,lon=1``: the lat+lon accumulation with entries at every cell (prefix sums along
  longitude, row by row): every run of the shape's cells along a row is two entries.

Shapes: Brazil from Natural Earth (the 110m countries file that pyogrio ships) and the IPCC
AR6 region Western Africa (``--region ar6:WAF``). Two xarray baselines: ``da.where(mask)``
over the whole grid, as most notebooks write it, and the careful version that first selects
the shape's bounding box. Queries go through an open datacube (its metadata read once), as
the service and a notebook ask them; medians of ``--repeats``.

Prints JSON: medians, ratios measured in this run, chunks (raw and accumulation), requests,
bytes, the planner's estimates, the largest difference from xarray, the machine's load.

    python benchmarks/bench_shapes.py [--repeats 5] [--scan-repeats 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time
from pathlib import Path

import numpy as np
import regionmask
import xarray as xr

import accumulus
from accumulus.regions import Shape, named_region, shape_from_file
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from bench_average import floor_reader
from common import DEFAULT_DIR, median_seconds, report
from realistic import CHUNKS, SHAPE, VARIABLE, realistic_cube

# name -> (combinations, positions) of ``accumulate``; None: no accumulation.
WAYS = {
    "none": None,
    "chunk ends": (None, None),
    "lat=1,lon=1": (["lat,lon"], {"lat": 1, "lon": 1}),
}


def natural_earth_countries() -> Path:
    spec = importlib.util.find_spec("pyogrio")
    assert spec is not None and spec.submodule_search_locations
    folder = Path(spec.submodule_search_locations[0]) / "tests" / "fixtures"
    return folder / "naturalearth_lowres" / "naturalearth_lowres.shp"


def sidecar(cube: Path, directory: Path, name: str) -> tuple[Path, float | None]:
    """The sidecar holding the accumulations of way ``name``, built when missing (and the
    build's seconds then)."""
    combos, at = WAYS[name]  # type: ignore[misc]
    slug = name.replace(" ", "-").replace("=", "").replace(",", "-")
    path = directory / f"{cube.stem}-shapes-{slug}.zarr"
    if path.exists() and accumulus.open(str(path)).accumulation_group(VARIABLE) is not None:
        return path, None
    started = time.perf_counter()
    accumulus.accumulate(str(cube), VARIABLE, combos, at=at, into=str(path))
    return path, time.perf_counter() - started


def xarray_series(store, geometry, *, window: bool):
    """The series as an xarray user computes it (``window``: within the mask's bounding
    box only), and the shape's cell count."""
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


def reads(store: CountingStore) -> dict:
    return {
        "chunks": len([k for k in store.counts.reads if not is_metadata_key(k)]),
        "requests": store.counts.read_requests,
        "bytes": store.counts.read_bytes,
    }


def baselines(cube: Path, shape: Shape, args) -> dict:
    """xarray over the whole grid and within the shape's bounding box."""
    out = {}
    for name, window, repeats in (
        ("xarray", False, args.scan_repeats),
        ("xarray_window", True, args.repeats),
    ):

        def scan(window=window):
            store = CountingStore(open_store(str(cube)))
            return xarray_series(store, shape.geometry, window=window), store

        seconds, ((series, cells), store) = median_seconds(scan, repeats)
        out[name] = {"seconds_median": round(seconds, 4), **reads(store)}
        out[name]["series"], out["cells"] = series, cells
    return out


def measure(cube: Path, side: Path | None, shape: Shape, expected: dict, args) -> dict:
    """The shape's series from an open datacube: warm medians, what the plan reads, its
    floor, and the ratios to xarray and to the floor."""
    handle = accumulus.open(str(side if side else cube))
    use = side is not None

    def ask():
        return handle.query(VARIABLE, ("lat", "lon"), shape=shape, use_accumulation=use)

    ask()  # warm-up: the snapshot is read once
    seconds, result = median_seconds(ask, args.repeats)
    floor_run = floor_reader(handle, result)
    floor_seconds, _ = median_seconds(floor_run, args.repeats)
    got = result.data.values
    out = {
        "seconds_median": round(seconds, 4),
        "floor_seconds_median": round(floor_seconds, 4),
        "over_floor": round(seconds / floor_seconds, 2),
        "plan": {
            "raw_chunks": result.stats.raw_chunks_read,
            "accumulation_chunks": result.stats.accumulation_chunks_read,
            "requests": result.stats.requests,
            "bytes": result.stats.bytes_read,
            "reads": len(result.plan.reads),
            "accumulations": sorted({r.key for r in result.plan.accumulation_reads}),
            "estimates": {k: c.to_dict() for k, c in result.costs.items()},
            "note": result.note,
        },
    }
    for name in ("xarray", "xarray_window"):
        out[f"{name}_over_accumulus"] = round(expected[name]["seconds_median"] / seconds, 1)
        want = expected[name]["series"].values
        out[f"max_relative_difference_{name}"] = float(np.nanmax(np.abs(got - want) / want))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--scan-repeats", type=int, default=2)
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR)
    args = parser.parse_args()
    load_before = os.getloadavg()
    cube = realistic_cube(args.dir)
    sides, builds = {}, {}
    for name, way in WAYS.items():
        sides[name], builds[name] = sidecar(cube, args.dir, name) if way else (None, None)
    shapes = [
        ("Brazil (Natural Earth 110m)", shape_from_file(f"{natural_earth_countries()}:Brazil")),
        ("IPCC AR6 Western Africa (ar6:WAF)", named_region("ar6:WAF")),
    ]
    results = []
    for label, shape in shapes:
        expected = baselines(cube, shape, args)
        ways = {name: measure(cube, sides[name], shape, expected, args) for name in WAYS}
        results.append(
            {
                "shape": label,
                "cells": expected["cells"],
                **{k: {n: v for n, v in expected[k].items() if n != "series"}
                   for k in ("xarray", "xarray_window")},
                "accumulus": ways,
            }
        )  # fmt: skip
    report(
        {
            "benchmark": "a shape's 10-year daily series: accumulus vs xarray where(mask)",
            "cube": {
                "store": str(cube),
                "shape": list(SHAPE),
                "chunks": list(CHUNKS),
                "chunk_mib": round(int(np.prod(CHUNKS)) * 4 / 2**20, 2),
            },
            "accumulations": {
                name: {
                    "sidecar": str(sides[name]),
                    "build_seconds": None if builds[name] is None else round(builds[name], 1),
                }
                for name in WAYS
                if WAYS[name]
            },
            "results": results,
            "load_average_1_5_15": {"before": load_before, "after": os.getloadavg()},
            "cpus": os.cpu_count(),
        }
    )


if __name__ == "__main__":
    main()
