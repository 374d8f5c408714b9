"""The append side of variable chunking, played through with zarr: daily granules appended
one by one under the ``month`` rule (``append_chunk_sizes`` decides the chunks,
``with_chunk_sizes`` makes the grid, written through ``array_with`` and published by
``store_metadata``: data first, metadata last), with the
accumulations updated after each append. A new month starts a new chunk, no stored chunk is
rewritten, the month being filled stays provisional, and answers match xarray throughout."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
import zarr
from zarr.storage import LocalStore

import accumulus
from accumulus.accumulation.model.groups import read_group
from accumulus.grid import AppendChunks, append_chunk_sizes, declared_chunk_sizes, with_chunk_sizes
from accumulus.raw_cube import RawCube
from accumulus.stores.arrays import array_with, consolidate, store_metadata

from .conftest import VAR, daily_dataset, period_counts

ENCODING = {VAR: {"_FillValue": -9999.0}}


def _append(path, raw: dict[str, np.ndarray], done: int, added: int, times) -> AppendChunks:
    """Append ``added`` time steps after ``done`` to every array with a time dimension."""
    sizes = declared_chunk_sizes(zarr.open_array(path / VAR, mode="r"), 0)
    plan = append_chunk_sizes(sizes, times[:done], times[done : done + added], "month")
    grown = {}
    for name in raw:
        array = zarr.open_array(path / name, mode="r+")
        grid = with_chunk_sizes(array.metadata, 0, done + added, plan.sizes)
        new = array_with(array, metadata=grid)
        if plan.rewrite is not None:  # a chunk whose size changes: its values go again
            start = sum(plan.sizes[: plan.rewrite])
            new[start:done] = array[start:done]
        new[done : done + added] = raw[name][done : done + added]
        grown[name] = new
    for new in grown.values():
        store_metadata(new)
    consolidate(LocalStore(path))
    return plan


@pytest.mark.parametrize("calendar", ["standard", "360_day"])
def test_daily_granules_appended_by_month(tmp_path, calendar):
    ds = daily_dataset(calendar, "2003-12-20", 75, seed=3)
    times = ds["time"].values
    full = tmp_path / "full.zarr"  # the encoded values the granules would bring
    ds.to_zarr(full, zarr_format=3, consolidated=True, encoding=ENCODING)
    raw = {name: zarr.open_array(full / name, mode="r")[:] for name in (VAR, "time")}

    path = tmp_path / "cube.zarr"
    granules = [12, 1, 20, 9, 33]
    first = granules[0]
    ds.isel(time=slice(0, first)).to_zarr(path, zarr_format=3, consolidated=True, encoding=ENCODING)
    root = zarr.open_group(path, mode="r+")
    root.attrs["accumulus"] = {"append_dim": "time"}
    # The first granule was written in one regular chunk; give it the month rule's grid.
    sizes = append_chunk_sizes((), times[:0], times[:first], "month").sizes
    for name in raw:
        array = zarr.open_array(path / name, mode="r+")
        regridded = array_with(array, metadata=with_chunk_sizes(array.metadata, 0, first, sizes))
        regridded[:] = array[:]  # chunk 0 changes size: read under the old grid, write again
        store_metadata(regridded)
    consolidate(LocalStore(path))
    accumulus.accumulate(str(path), VAR, [("time",), ("lat", "lon")], weights="area")
    coverage = read_group(RawCube.open(str(path)), VAR).coverage["time"]

    done = first
    for added in granules[1:]:
        plan = _append(path, raw, done, added, times)
        assert plan.rewrite is None  # a steady daily cadence never rewrites a stored chunk
        done += added
        assert declared_chunk_sizes(zarr.open_array(path / VAR, mode="r"), 0) == plan.sizes
        update = accumulus.accumulate(str(path), VAR, [("time",), ("lat", "lon")])

        expected = ds.isel(time=slice(0, done))
        xr.testing.assert_identical(xr.open_zarr(path)[VAR].load(), expected[VAR])
        cube = RawCube.open(str(path))
        bounds = cube.variable(VAR).bounds[0]
        assert list(bounds.sizes) == period_counts(times[:done], "MS")  # one chunk a month
        open_month = sum(plan.sizes) > done
        covered_before, coverage = coverage, read_group(cube, VAR).coverage["time"]
        assert coverage == (bounds.edges[-2] if open_month else done)
        # Only months that became final are added to the accumulations.
        assert update.action == ("updated" if coverage > covered_before else "up to date")

        for k in range(bounds.n_chunks):
            lo, hi = bounds.edges[k], bounds.edges[k + 1]
            ranges = {"time": (times[lo], times[hi - 1])}
            # The accumulations' plan: on a cube this small a scan reads less (``test_cost``).
            result = accumulus.query(str(path), VAR, "time", ranges, plan="accumulation")
            weights = np.cos(np.deg2rad(ds["lat"]))
            reference = expected[VAR].isel(time=slice(lo, hi)).astype("f8")
            reference = reference.weighted(weights).mean("time")
            np.testing.assert_allclose(result.data.values, reference.values, rtol=1e-9)
            # Whole final months come from prefix sums; the provisional one is read raw.
            assert result.stats.raw_chunks_read == (1 if hi > coverage else 0)
        assert all(report.ok for report in accumulus.verify(str(path), VAR))
