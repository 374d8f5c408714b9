"""``accumulus demo``: a synthetic daily precipitation cube, its accumulations (the default
layout), and three Giovanni-style questions answered both ways (accumulations vs a full scan
with xarray+Dask).

The field imitates a satellite precipitation product (TRMM 3B42-like): a seasonal ITCZ that
follows the sun, mid-latitude storm tracks, skewed day-to-day noise, no data poleward of
50°, and scattered missing swaths; CF time encoding and a ``_FillValue``. It is generated
block by block with Dask, so any size streams to disk in bounded memory.
"""

from __future__ import annotations

import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dask.array as da
import numpy as np
import pandas as pd
import xarray as xr

from accumulus.ingest.cadence import steps_per_month
from accumulus.ingest.layout import ArraySpec, choose_chunks

if TYPE_CHECKING:
    from accumulus.accumulation.query.answer import QueryResult

VARIABLE = "precip"
RUNS = 3  # each question is asked this many times each way; medians are reported


@dataclass(frozen=True)
class DemoConfig:
    days: int = 1461  # four years, 2000-01-01 .. 2003-12-31
    resolution: float = 1.0  # degrees
    # time, lat, lon; None: what ``append`` chooses for daily granules of this grid (a
    # month of steps within 10-100 MiB: 41 x 180 x 360, 10 MiB, at 1°).
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
        steps, *_ = choose_chunks({VARIABLE: spec}, "time", month=steps_per_month(86400.0)).chunks[
            VARIABLE
        ]
        return (min(steps, self.days), ny, nx)


def _block(block_info: dict | None = None, *, config: DemoConfig) -> np.ndarray:
    """One chunk of the field, from a seed derived from its position (reproducible)."""
    assert block_info is not None  # dask's map_blocks passes it to a function that takes it
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


def compare(path: Path, name: str, over: list[str], ranges: dict) -> tuple[Comparison, QueryResult]:
    from accumulus import api

    selection = {d: slice(*r) for d, r in ranges.items()}
    # Medians of 3 runs each way: one run on a busy machine can wait for a core.
    results = [api.query(str(path), VARIABLE, over, ranges) for _ in range(RUNS)]
    result = results[-1]
    scans = [full_scan(path, over, selection) for _ in range(RUNS)]
    scan, _, scan_chunks, scan_bytes = scans[-1]
    difference = float(np.nanmax(np.abs(result.data.values - scan.values)))
    stats = result.stats
    comparison = Comparison(
        name,
        statistics.median(r.stats.seconds for r in results),
        statistics.median(s[1] for s in scans),
        difference,
        stats.accumulation_chunks_read,
        stats.raw_chunks_read,
        stats.bytes_read,
        scan_chunks,
        scan_bytes,
    )
    return comparison, result


def map_period(config: DemoConfig) -> tuple[str, str]:
    """The period of the whole-month map question: two years from March of the second year when the
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


def day_period(config: DemoConfig) -> tuple[str, str]:
    """The period of the day-precise map question: from a week past the first third of the
    series to just before its two-thirds (ends that no month or chunk boundary meets)."""
    days = pd.date_range(config.start, periods=config.days, freq="D")
    n = len(days)
    first = min(n - 1, n // 3 + 7)
    last = max(first, min(n - 1, 2 * n // 3 - 3))
    return days[first].strftime("%Y-%m-%d"), days[last].strftime("%Y-%m-%d")


def layout_text(group) -> str:
    """The layout of an accumulation group as the demo names it."""
    return ", ".join(f"{'+'.join(a.dims)} at {a.rule_text()}" for a in group.accumulations)


def _is_default_layout(path: Path) -> bool | None:
    """Whether the cube's group has the layout ``accumulate`` builds with no options (None:
    it has no group yet). A demo cube accumulated by an earlier version is built afresh."""
    from accumulus import api
    from accumulus.accumulation.model import spec
    from accumulus.accumulation.model.positions import rule_slug

    group = api.open(str(path)).accumulation_group(VARIABLE)
    if group is None:
        return None
    time_at = rule_slug(spec.DEFAULT_DATED_RULE)
    return {a.key for a in group.accumulations} == {f"time@{time_at}", "lat,lon@1,1"}


def run_demo(
    directory: str | Path,
    config: DemoConfig,
    say: Callable[[str], None],
    progress: Callable[[int, int], None] | None = None,
    fresh: bool = False,
) -> list[Comparison]:
    """Build (or reuse) the demo cube in ``directory``, accumulate it with the default
    layout, and answer its three questions both ways. Returns the comparisons; writes the
    plots as PNG."""
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

    # The default layout, as `accumulus accumulate CUBE precip` builds it with no options:
    # entries at month ends and every 2 days along time, and at every cell along latitude
    # and longitude.
    rebuild = _is_default_layout(path) is False
    built = api.accumulate(str(path), VARIABLE, progress=progress, reset=rebuild)
    say(
        f"accumulations: {built.action} in {built.seconds:.1f} s; layout (the default of "
        f"`accumulus accumulate`): {layout_text(built.group)}; weights {built.group.weights}"
    )
    stored = sum(v or 0 for v in built.stored.values())
    if stored and built.raw_stored:
        say(
            f"  stored {stored / 2**20:.0f} MiB, {stored / built.raw_stored:.2f}x the raw "
            f"array's {built.raw_stored / 2**20:.0f} MiB"
        )

    first, last = map_period(config)
    day_first, day_last = day_period(config)
    questions: list[tuple[str, list[str], dict[str, Any], str]] = [
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
        (
            f"time-averaged map, {day_first} to {day_last} (day-precise ends)",
            ["time"],
            {"time": (day_first, day_last)},
            "map-days.png",
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
            "(xarray + Dask; medians of 3 runs each way)"
        )
        say(
            f"  agreement: max |difference| = {comparison.max_abs_difference:.2e} mm/day; "
            f"speed-up x{comparison.speedup:.0f}; plot: {directory / png}"
        )
    return comparisons
