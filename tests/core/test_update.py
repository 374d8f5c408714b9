"""Accumulations brought up to date after the data grew: only the new part is read."""

from __future__ import annotations

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

CHUNKS = {"time": 8, "lat": 5, "lon": 6}


def grow(path, full, start, stop):
    """Append time steps [start, stop) of ``full`` with xarray, as a user's pipeline might."""
    full.isel(time=slice(start, stop)).to_zarr(path, append_dim="time", consolidated=True)


@pytest.mark.parametrize("append_dim_attr", [False, True])
def test_update_reads_only_new_chunks_and_matches_xarray(tmp_path, append_dim_attr):
    path = tmp_path / "c.zarr"
    full = synthetic_dataset({"time": 60, "lat": 10, "lon": 12}, seed=11)
    write_cube(full.isel(time=slice(0, 36)), path, CHUNKS)
    if append_dim_attr:
        group = zarr.open_group(path, mode="r+")
        group.attrs["accumulus"] = {"append_dim": "time"}
        zarr.consolidate_metadata(path)
    dims = [("time",), ("lat", "lon"), ("lat",), ("time", "lat")]
    first = accumulus.accumulate(str(path), VAR, dims, strides={"time": 2})
    assert first.action == "built"

    grow(path, full, 36, 60)
    counting = CountingStore(open_store(str(path), "r+"))
    update = accumulus.accumulate(counting, VAR, dims, strides={"time": 2})
    assert update.action == "updated"
    raw_keys = [
        k for k in counting.counts.reads if k.startswith(f"{VAR}/") and not is_metadata_key(k)
    ]
    # The old final coverage is 36 (or 32 with the attribute: chunk 4 was partial). Entries
    # along time restart at the last stride-2 edge within it, 32 = chunk 4; the others at
    # the coverage itself, inside chunk 4. So raw time chunks 4..7 are read, nothing before.
    time_chunks = {int(k.split("/")[1].split(".")[0]) for k in raw_keys}
    assert time_chunks == {4, 5, 6, 7}
    assert len(raw_keys) == 4 * 2 * 2  # x 2 lat chunks x 2 lon chunks, each once

    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    for over, isel in [
        (["lat", "lon"], {"time": slice(5, 58)}),
        (["time"], {"time": slice(16, 60)}),
        (["time", "lat"], {"lat": slice(2, 9)}),
    ]:
        ranges = {d: _labels(full, d, s) for d, s in isel.items()}
        got = accumulus.average(str(path), VAR, over, ranges)
        expected = xarray_reference(full[VAR].isel(isel), over, "area", "mean")
        np.testing.assert_allclose(got.transpose(*expected.dims), expected, rtol=1e-9)


def _labels(ds, dim, sl):
    values = ds[dim].values[sl]
    if dim == "time":
        return str(values[0])[:10], str(values[-1])[:10]
    return float(min(values[0], values[-1])), float(max(values[0], values[-1]))


def test_rerun_without_growth_writes_nothing(tmp_path):
    path = tmp_path / "c.zarr"
    write_cube(synthetic_dataset({"time": 20, "lat": 4}, seed=1), path, {"time": 5, "lat": 4})
    accumulus.accumulate(str(path), VAR)
    counting = CountingStore(open_store(str(path), "r+"))
    result = accumulus.accumulate(counting, VAR)
    assert result.action == "up to date"
    assert counting.counts.write_requests == 0


def test_partial_last_chunk_along_append_dim_is_provisional(tmp_path):
    """With the append dimension recorded, entries ending inside a partial last chunk are
    not final: the group's coverage stops at the last full chunk and queries read the rest
    raw, so readers of an older snapshot never use an entry an append rewrites."""
    path = tmp_path / "c.zarr"
    ds = synthetic_dataset({"time": 21, "lat": 4}, seed=2)
    write_cube(ds, path, {"time": 8, "lat": 4})
    group = zarr.open_group(path, mode="r+")
    group.attrs["accumulus"] = {"append_dim": "time"}
    zarr.consolidate_metadata(path)
    accumulus.accumulate(str(path), VAR, [("time",)])
    group = accumulus.open(str(path)).accumulation_group(VAR)
    assert group.coverage["time"] == 16
    # The accumulations' plan asked for: on chunks this small the planner may scan instead.
    result = accumulus.query(str(path), VAR, ["time"], plan="accumulation")
    assert result.stats.raw_chunks_read == 1
    np.testing.assert_allclose(
        result.data, xarray_reference(ds[VAR], ["time"], "area", "mean"), rtol=1e-9
    )


def test_default_layout_grown_into_a_partial_chunk_is_updated_to_the_data_end(tmp_path):
    # Entries at every element are final up to the data's end, so the group covers the
    # partial last chunk; grown by xarray, the next accumulate must extend it there (it said
    # "up to date" when its old coverage equalled the new chunk-end coverage).
    path = tmp_path / "c.zarr"
    full = synthetic_dataset({"time": 20, "lat": 10, "lon": 12}, seed=5)
    write_cube(full.isel(time=slice(0, 16)), path, CHUNKS)
    group = zarr.open_group(path, mode="r+")
    group.attrs["accumulus"] = {"append_dim": "time"}
    zarr.consolidate_metadata(path)
    assert accumulus.accumulate(str(path), VAR).group.coverage["time"] == 16

    grow(path, full, 16, 20)  # days 16-19: a partial chunk
    update = accumulus.accumulate(str(path), VAR)
    assert update.action == "updated"
    assert update.group.coverage["time"] == 20
    assert accumulus.accumulate(str(path), VAR).action == "up to date"
    last = {"time": _labels(full, "time", slice(17, 20))}
    result = accumulus.api.query(str(path), VAR, ["lat", "lon"], last)
    assert result.stats.raw_chunks_read == 0
    expected = xarray_reference(full[VAR].isel(time=slice(17, 20)), ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)


def test_a_group_recorded_to_the_last_chunk_end_is_extended_to_the_data_end(tmp_path):
    # Releases before the default layout covered a partial last chunk recorded coverage up to
    # its start, with every entry written: accumulate must extend such a group (it said "up
    # to date", and every question over the last days read raw chunks).
    path = tmp_path / "c.zarr"
    full = synthetic_dataset({"time": 20, "lat": 10, "lon": 12}, seed=6)
    write_cube(full, path, CHUNKS)
    root = zarr.open_group(path, mode="r+")
    root.attrs["accumulus"] = {"append_dim": "time"}
    accumulus.accumulate(str(path), VAR)
    group = zarr.open_group(path, mode="r+", use_consolidated=False)[f"{VAR}_accumulation_group"]
    settings = dict(group.attrs["accumulus"])
    settings["coverage"] = {**settings["coverage"], "time": 16}  # as such a release wrote it
    group.attrs["accumulus"] = settings
    zarr.consolidate_metadata(path)
    last = {"time": _labels(full, "time", slice(17, 20))}
    assert accumulus.api.query(str(path), VAR, ["lat", "lon"], last).stats.raw_chunks_read > 0

    update = accumulus.accumulate(str(path), VAR)
    assert update.action == "updated"
    assert update.group.coverage["time"] == 20
    result = accumulus.api.query(str(path), VAR, ["lat", "lon"], last)
    assert result.stats.raw_chunks_read == 0
    expected = xarray_reference(full[VAR].isel(time=slice(17, 20)), ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(result.data, expected, rtol=1e-9)
