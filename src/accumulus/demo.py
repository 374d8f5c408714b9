"""``accumulus demo``: a synthetic daily precipitation cube, its accumulations, and the two
Giovanni-style questions answered both ways (accumulations vs a full scan with xarray+Dask).

The field imitates a satellite precipitation product (TRMM 3B42-like): a seasonal ITCZ that
follows the sun, mid-latitude storm tracks, skewed day-to-day noise, no data poleward of
50°, and scattered missing swaths; CF time encoding and a ``_FillValue``. It is generated
block by block with Dask, so any size streams to disk in bounded memory.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

from accumulus.ingest.layout import ArraySpec, choose_chunks

VARIABLE = "precip"


@dataclass(frozen=True)
class DemoConfig:
    days: int = 1461  # four years, 2000-01-01 .. 2003-12-31
    resolution: float = 1.0  # degrees
    # time, lat, lon; None: what ``append`` chooses for daily granules of this grid once its
    # chunks have grown (a month of steps within 10-100 MiB: 41 x 180 x 360, 10 MiB, at 1°).
    chunks: tuple[int, int, int] | None = None
    start: str = "2000-01-01"
    view_limit: float = 50.0  # degrees of latitude: no data poleward (a satellite's view)
    missing: float = 0.03  # fraction of values missing at random (swaths, bad retrievals)

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.days, round(180 / self.resolution), round(360 / self.resolution))

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape)) * 4

    @property
    def chunk_shape(self) -> tuple[int, int, int]:
        if self.chunks is not None:
            return self.chunks
        _, ny, nx = self.shape
        spec = ArraySpec(
            dims=("time", "lat", "lon"), shape=(1, ny, nx), itemsize=4, is_coordinate=False
        )
        steps, *_ = choose_chunks({VARIABLE: spec}, "time", month=30).chunks[VARIABLE]
        return (min(steps, self.days), ny, nx)


def _block(block_info: dict | None = None, *, config: DemoConfig) -> np.ndarray:
    """One chunk of the field, from a seed derived from its position (reproducible)."""
    location = block_info[None]["array-location"]
    (t0, t1), (y0, y1), (x0, x1) = location
    rng = np.random.default_rng([t0, y0, x0])
    res = config.resolution
    lat = (-90 + res / 2 + res * np.arange(y0, y1))[None, :, None]
    lon = (-180 + res / 2 + res * np.arange(x0, x1))[None, None, :]
    day = np.arange(t0, t1)[:, None, None]
    season = np.sin(2 * np.pi * (day - 80) / 365.25)  # +1 in late June
    itcz = 9.0 * np.exp(-(((lat - 10.0 * season) / 8.0) ** 2))
    storms = 3.5 * np.exp(-(((np.abs(lat) - 45.0) / 10.0) ** 2)) * (1 - 0.4 * np.sign(lat) * season)
    land = 1.0 + 0.35 * np.cos(np.deg2rad(2 * lon)) * np.cos(np.deg2rad(3 * lat))
    # Eastward-travelling synoptic waves: day-to-day weather correlated over thousands of km.
    waves = 1.0 + 0.3 * np.sin(2 * np.pi * (day / 6.0 - lon / 60.0)) * np.cos(np.deg2rad(lat))
    mean = (0.4 + itcz + storms) * land * waves
    shape = (t1 - t0, y1 - y0, x1 - x0)
    values = mean * rng.gamma(0.6, 1 / 0.6, size=shape)
    values[np.broadcast_to(np.abs(lat) > config.view_limit, shape)] = np.nan  # out of view
    values[rng.random(shape) < config.missing] = np.nan  # missing swaths and bad retrievals
    return values.astype("f4")


def demo_dataset(config: DemoConfig) -> xr.Dataset:
    nt, ny, nx = config.shape
    data = da.map_blocks(
        _block, config=config, chunks=da.core.normalize_chunks(config.chunk_shape, config.shape),
        dtype="f4", meta=np.array((), dtype="f4"),
    )  # fmt: skip
    res = config.resolution
    ds = xr.Dataset(
        {
            VARIABLE: (
                ("time", "lat", "lon"),
                data,
                {"long_name": "precipitation rate", "units": "mm/day"},
            )
        },
        coords={
            "time": pd.date_range(config.start, periods=nt, freq="D"),
            "lat": ("lat", -90 + res / 2 + res * np.arange(ny), {"units": "degrees_north"}),
            "lon": ("lon", -180 + res / 2 + res * np.arange(nx), {"units": "degrees_east"}),
        },
        attrs={"title": "accumulus demo: synthetic TRMM-like daily precipitation"},
    )
    ds[VARIABLE].encoding = {"chunks": config.chunk_shape, "_FillValue": -9999.0}
    ds["time"].encoding = {"units": f"days since {config.start}", "calendar": "standard"}
    return ds


def write_demo_cube(path: str | Path, config: DemoConfig) -> None:
    """Write the synthetic cube as Zarr v2 with consolidated metadata, chunk by chunk."""
    path = Path(path)
    if path.exists():
        shutil.rmtree(path)
    demo_dataset(config).to_zarr(path, zarr_format=2, consolidated=True, compute=True)


# ------------------------------------------------------------------------------------------
# The demo itself


@dataclass
class Comparison:
    name: str
    accumulus_seconds: float
    scan_seconds: float
    max_abs_difference: float
    accumulation_chunks: int
    raw_chunks: int
    bytes_read: int
    scan_chunks: int
    scan_bytes: int

    @property
    def speedup(self) -> float:
        return self.scan_seconds / self.accumulus_seconds


def full_scan(path: Path, over: list[str], selection: dict) -> tuple[xr.DataArray, float, int, int]:
    """What a user would otherwise do: xarray + Dask over every chunk of the selection,
    through a counting store (so its requests and bytes can be compared)."""
    from accumulus.stores.counting import CountingStore
    from accumulus.stores.opening import open_store

    store = CountingStore(open_store(str(path)))
    started = time.perf_counter()
    ds = xr.open_zarr(store, consolidated=True)
    data = ds[VARIABLE].sel(selection).astype("f8")
    weights = np.cos(np.deg2rad(ds["lat"]))
    answer = data.weighted(weights).mean(over).compute()
    seconds = time.perf_counter() - started
    chunks = sum(k.startswith(f"{VARIABLE}/") and ".z" not in k for k in store.counts.reads)
    return answer, seconds, chunks, store.counts.read_bytes


def compare(path: Path, name: str, over: list[str], ranges: dict) -> tuple[Comparison, object]:
    from accumulus import api

    selection = {d: slice(*r) for d, r in ranges.items()}
    result = api.query(str(path), VARIABLE, over, ranges)
    scan, scan_seconds, scan_chunks, scan_bytes = full_scan(path, over, selection)
    difference = float(np.nanmax(np.abs(result.data.values - scan.values)))
    stats = result.stats
    comparison = Comparison(
        name,
        stats.seconds,
        scan_seconds,
        difference,
        stats.accumulation_chunks_read,
        stats.raw_chunks_read,
        stats.bytes_read,
        scan_chunks,
        scan_bytes,
    )
    return comparison, result


def map_period(config: DemoConfig) -> tuple[str, str]:
    """The period of the map question, in whole months (the month-end entries the demo
    builds answer it without raw chunks): two years from March of the second year when the
    series holds them (the demo's usual four years), else the whole months of its middle
    half (the half itself when it holds no whole month)."""
    days = pd.date_range(config.start, periods=config.days, freq="D")
    start = pd.Timestamp(year=days[0].year + 1, month=3, day=1)
    end = pd.Timestamp(year=start.year + 2, month=2, day=28)
    if end > days[-1]:
        first, last = days[len(days) // 4], days[max(len(days) // 4, 3 * len(days) // 4 - 1)]
        start = first if first.is_month_start else first + pd.offsets.MonthBegin()
        end = last + pd.offsets.MonthEnd(0)
        if end > days[-1]:
            end = (
                last - pd.offsets.MonthBegin(0 if last.is_month_start else 1) - pd.Timedelta(days=1)
            )
        if start > end:  # no whole month in the middle half: the half itself
            start, end = first, last
    return start.strftime("%Y-%m-%d"), end.strftime("%Y-%m-%d")


def run_demo(
    directory: str | Path,
    config: DemoConfig,
    say: Callable[[str], None],
    progress: Callable[[int, int], None] | None = None,
    fresh: bool = False,
) -> list[Comparison]:
    """Build (or reuse) the demo cube in ``directory``, accumulate, and answer the two
    questions both ways. Returns the comparisons; writes the two plots as PNG."""
    from accumulus import api, output

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "demo.zarr"
    if fresh or not (path / ".zmetadata").exists():
        say(
            f"writing a {config.nbytes / 2**20:.0f} MiB synthetic daily precipitation cube "
            f"{config.shape} (chunks {config.chunk_shape}) to {path} ..."
        )
        started = time.perf_counter()
        write_demo_cube(path, config)
        say(f"  written in {time.perf_counter() - started:.1f} s")
    else:
        say(f"reusing {path} (run with --fresh to regenerate)")

    # Entries at month ends along time (the map's period is whole months), at chunk ends
    # along latitude and longitude (ZEP 5 as written).
    built = api.accumulate(str(path), VARIABLE, at={"time": "month"}, progress=progress)
    combos = ", ".join(f"{'+'.join(a.dims)} at {a.rule_text()}" for a in built.group.accumulations)
    say(
        f"accumulations: {built.action} ({combos}; weights {built.group.weights}) "
        f"in {built.seconds:.1f} s"
    )

    first, last = map_period(config)
    questions = [
        (
            "area-averaged time series over West Africa and the Sahel (0-25N, 20W-40E)",
            ["lat", "lon"],
            {"lat": (0, 25), "lon": (-20, 40)},
            "timeseries.png",
        ),
        (
            f"time-averaged map, {first} to {last}",
            ["time"],
            {"time": (first, last)},
            "map.png",
        ),
    ]
    comparisons = []
    for name, over, ranges, png in questions:
        comparison, result = compare(path, name, over, ranges)
        (directory / png).write_bytes(output.result_png(result))
        comparisons.append(comparison)
        say(f"\n{name}")
        say(
            f"  accumulus: {comparison.accumulus_seconds * 1000:8.1f} ms, "
            f"{comparison.accumulation_chunks} accumulation + {comparison.raw_chunks} raw chunks, "
            f"{comparison.bytes_read / 2**20:.2f} MiB read"
        )
        say(
            f"  full scan: {comparison.scan_seconds * 1000:8.1f} ms, "
            f"{comparison.scan_chunks} raw chunks, {comparison.scan_bytes / 2**20:.2f} MiB read "
            "(xarray + Dask)"
        )
        say(
            f"  agreement: max |difference| = {comparison.max_abs_difference:.2e} mm/day; "
            f"speed-up x{comparison.speedup:.0f}; plot: {directory / png}"
        )
        if comparison.raw_chunks and not comparison.accumulation_chunks:
            say(
                "  (the box cuts the cube's chunks, so entries at chunk ends cannot answer it "
                "and a scan is cheapest; entries at every cell answer any box without raw "
                f"chunks: `accumulus accumulate {path} {VARIABLE} --dims lat,lon --at "
                f"lat=1,lon=1 --into {directory / 'cells.zarr'}`, then ask "
                f"{directory / 'cells.zarr'}; see docs/accumulation.md)"
            )
    return comparisons
