"""GDAL (Debian's gdal-bin, installed by ``.ci/run``) reads the Zarr v2 stores accumulus
writes: every raw variable and coordinate, copied out by ``gdalmdimtranslate`` through GDAL's
Zarr driver, equals what zarr-python reads. GDAL 3.6 knows no ``fletcher32`` filter, which
v2 accumulation arrays carry as their checksum (netcdf-c reads them; see docs/filters.md):
it refuses those arrays by name rather than misreading them, and that limit is tested here
so that a GDAL that learns the filter is noticed."""

from __future__ import annotations

import subprocess
from pathlib import Path

import netCDF4
import numpy as np
import zarr

import accumulus
from accumulus.accumulation.model import spec
from accumulus.demo import DemoConfig, write_demo_cube
from tools import tool

# Skips where GDAL is not installed, fails there under CI (tests/tools.py).
GDALMDIMTRANSLATE = tool("gdalmdimtranslate", "apt-get install gdal-bin", module=True)


def _gdal_copy(store: Path, array: str, out: Path) -> subprocess.CompletedProcess:
    """Copy one array of ``store`` to a netCDF file through GDAL's Zarr driver."""
    return subprocess.run(
        [GDALMDIMTRANSLATE, str(store), str(out), "-array", array],
        capture_output=True,
        text=True,
        check=False,
    )


def _stored_values(path: Path, name: str) -> np.ndarray:
    with netCDF4.Dataset(path) as ds:
        ds.set_auto_maskandscale(False)  # the stored numbers, as zarr-python returns them
        return np.asarray(ds[name.rsplit("/", 1)[-1]][...])


def test_gdal_reads_every_raw_array_of_an_accumulated_cube(tmp_path):
    path = tmp_path / "demo.zarr"
    write_demo_cube(path, DemoConfig(days=60, resolution=30, chunks=(30, 3, 6)))
    accumulus.accumulate(str(path), "precip")
    root = zarr.open_group(path, mode="r", use_consolidated=False)
    raw = [name for name, node in root.arrays() if node.ndim > 0]
    assert {"precip", "time", "lat", "lon"} <= set(raw)
    for name in raw:
        out = tmp_path / f"{name}.nc"
        copied = _gdal_copy(path, name, out)
        assert copied.returncode == 0, copied.stderr
        np.testing.assert_array_equal(_stored_values(out, name), root[name][...])


def test_gdal_refuses_checksummed_accumulation_arrays_by_name(tmp_path):
    path = tmp_path / "demo.zarr"
    write_demo_cube(path, DemoConfig(days=60, resolution=30, chunks=(30, 3, 6)))
    accumulus.accumulate(str(path), "precip")
    array = f"/{spec.group_name('precip')}/acc_time"
    copied = _gdal_copy(path, array, tmp_path / "acc.nc")
    assert copied.returncode != 0
    assert "fletcher32 not handled" in copied.stderr
