"""Granules with known contents, and the independent expectations the append tests compare to.

``Truth`` is the whole dataset the granules are cut from, as stored (packed int16 with a
scale factor and fill value, times as hours since 2000-03-01 12:00) and as xarray decodes it.
Granules are NetCDF4 files written by netCDF4 (netcdf-c) with zlib+shuffle compression, a
time-bounds variable and static latitude/longitude coordinates, like TRMM 3B42RT files.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import xarray as xr

UNITS = "hours since 2000-03-01 12:00:00"
FILL = -999
SCALE = 0.01
VAR = "precip"
REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Truth:
    packed: np.ndarray  # (time, lat, lon) int16, FILL where missing
    hours: np.ndarray  # time, in UNITS
    lat: np.ndarray
    lon: np.ndarray

    @property
    def steps(self) -> int:
        return len(self.hours)

    def decoded(self, n: int | None = None) -> xr.Dataset:
        """The first ``n`` steps as xarray decodes them (float, NaN where missing)."""
        n = self.steps if n is None else n
        values = np.where(self.packed[:n] == FILL, np.nan, self.packed[:n] * SCALE)
        times = pd.Timestamp("2000-03-01 12:00") + pd.to_timedelta(self.hours[:n], unit="h")
        return xr.Dataset(
            {VAR: (("time", "lat", "lon"), values)},
            coords={"time": times, "lat": self.lat, "lon": self.lon},
        )


def truth(steps: int, nlat: int = 6, nlon: int = 8, seed: int = 0) -> Truth:
    rng = np.random.default_rng(seed)
    packed = rng.integers(0, 2000, size=(steps, nlat, nlon)).astype("i2")
    packed[rng.random(packed.shape) < 0.1] = FILL
    lat = np.linspace(-60, 60, nlat).astype("f4")
    lon = (np.arange(nlon) * 2.5).astype("f4")
    return Truth(packed, np.arange(steps) * 3, lat, lon)


def write_granule(
    path: Path,
    t: Truth,
    start: int,
    stop: int,
    *,
    units: str = UNITS,
    hours_offset: float = 0.0,
    lat: np.ndarray | None = None,
    fill: int = FILL,
    variables: tuple[str, ...] = (VAR,),
    time_dtype: str = "i4",
) -> Path:
    """Steps [start, stop) of ``t`` as a NetCDF4 granule. ``units``/``hours_offset``
    re-express the times (e.g. "minutes since ..."); the values do not change."""
    with netCDF4.Dataset(path, "w") as ds:
        ds.title = f"granule {start}-{stop}"
        ds.createDimension("time", None)
        ds.createDimension("lat", len(t.lat))
        ds.createDimension("lon", len(t.lon))
        ds.createDimension("nv", 2)
        time = ds.createVariable("time", time_dtype, ("time",))
        time.units, time.calendar, time.bounds = units, "standard", "time_bnds"
        bounds = ds.createVariable("time_bnds", time_dtype, ("time", "nv"))
        scale = {"hours": 1, "minutes": 60, "days": 1 / 24}[units.split()[0]]
        hours = t.hours[start:stop] + hours_offset
        time[:] = hours * scale
        bounds[:] = np.stack([hours, hours + 3], axis=1) * scale
        la = ds.createVariable("lat", "f4", ("lat",))
        la.units, la[:] = "degrees_north", t.lat if lat is None else lat
        lo = ds.createVariable("lon", "f4", ("lon",))
        lo.units, lo[:] = "degrees_east", t.lon
        for name in variables:
            var = ds.createVariable(
                name,
                "i2",
                ("time", "lat", "lon"),
                zlib=True,
                complevel=4,
                shuffle=True,
                chunksizes=(1, len(t.lat), len(t.lon)),
                fill_value=fill,
            )
            var.set_auto_maskandscale(False)
            var.scale_factor, var.add_offset, var.units = SCALE, 0.0, "mm/hr"
            packed = t.packed[start:stop].copy()
            packed[packed == FILL] = fill
            var[:] = packed
    return path


def write_granules(folder: Path, t: Truth, per_granule: int, **options) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [
        write_granule(
            folder / f"g{start:04d}.nc", t, start, min(start + per_granule, t.steps), **options
        )
        for start in range(0, t.steps, per_granule)
    ]


def snapshot(path: Path) -> dict[str, str]:
    """Every file under ``path`` with its SHA-256: equal snapshots mean an unchanged store.

    A held lock's heartbeat is left out: its holder rewrites it every 10 s, however long a
    refused writer took to give up (on a loaded machine, longer than that)."""
    return {
        str(p.relative_to(path)): hashlib.sha256(_without_heartbeat(p)).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def _without_heartbeat(file: Path) -> bytes:
    data = file.read_bytes()
    if file.name != "lock.json" or file.parent.name != ".accumulus":
        return data
    record = json.loads(data)
    record.pop("heartbeat", None)
    return json.dumps(record, sort_keys=True).encode()


def cli_env(**extra: str) -> dict[str, str]:
    """The environment of a subprocess that runs this checkout's accumulus."""
    environment = {**os.environ, **extra}
    environment["PYTHONPATH"] = os.pathsep.join(
        [str(REPO / "src"), environment.get("PYTHONPATH", "")]
    )
    return environment


def cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run ``python -m accumulus`` with this checkout's sources first on the path."""
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args],
        capture_output=True,
        text=True,
        env=cli_env(**(env or {})),
        timeout=300,
    )


def check_visible(store, t: Truth, boundaries: set[int]) -> int:
    """What a reader sees now (one consolidated snapshot) is the first ``n`` steps of the
    truth, ``n`` a granule boundary: same times, same values, and averages (accumulations
    used where final) equal to xarray's on those steps. Returns ``n``."""
    import accumulus
    from accumulus.raw_cube import RawCube
    from cubes import xarray_reference

    cube = RawCube.open(str(store))
    n = cube.variable(VAR).shape[0]
    assert n in boundaries, f"{n} steps visible: not the end of a granule"
    expected = t.decoded(n)
    seen = cube.decoded
    np.testing.assert_array_equal(seen["time"].values, expected["time"].values)
    np.testing.assert_allclose(seen[VAR].values, expected[VAR].values, rtol=1e-12)
    for over in (("lat", "lon"), ("time",)):
        got = accumulus.average(cube, VAR, over)
        want = xarray_reference(expected[VAR], over, "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
    return n
