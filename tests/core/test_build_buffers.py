"""A build's memory: it fills arrays the slab before filled (``buffers.Buffers``): entries
stay exact when every slab reuses them, and what is kept is bounded; Python's cycle
collector skips the objects made before the build while it runs."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.build import placement, stream
from accumulus.accumulation.build.buffers import Buffers
from accumulus.accumulation.model.spec import COUNT, SUM
from accumulus.raw_cube import VariableInfo
from cubes import VAR, synthetic_dataset, write_cube


def test_arrays_given_back_are_handed_out_again_within_bounds():
    buffers = Buffers(most_bytes=3 * 800)
    a, b = np.empty(100), np.empty((10, 10))
    buffers.give([a, b, np.empty(100)[::2], np.empty((10, 10)).T])  # views are not kept
    assert buffers.empty(100) is a
    assert buffers.empty((10, 10)) is b
    assert buffers.empty(100) is not a  # handed out once
    buffers.give([np.empty(100) for _ in range(5)])
    kept = [buffers.empty(100) for _ in range(5)]
    assert sum(k.base is None for k in kept) == 5
    assert len({id(k) for k in kept}) == 5
    # Only three fitted: the other two are new.
    buffers.give(kept[:3])
    assert [buffers.empty(100) is k for k in kept[:3]] == [True, True, True]


@pytest.mark.parametrize(
    ("dims", "at", "scheduler"),
    [
        (["time"], {"time": 1}, "threads"),
        (["lat,lon"], {"lat": 1, "lon": 1}, "threads"),
        (["time", "lat,lon"], None, "threads"),
        # Blocks' sums come back from worker processes (not kept: only the slabs' are).
        (["time"], {"time": 1}, "processes"),
    ],
)
def test_entries_are_exact_when_every_slab_reuses_arrays(
    tmp_path, monkeypatch, dims, at, scheduler
):
    # Slabs of one time chunk, of several blocks (whose sums are copied into the slab's):
    # each slab fills the arrays the slab before filled.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    monkeypatch.setattr(stream, "TILE_SUMS_BYTES", 1)
    monkeypatch.setattr(stream, "KEPT_LEAST_BYTES", 0)  # arrays of any size are kept
    grouped = VariableInfo.grouped_blocks
    monkeypatch.setattr(
        VariableInfo, "grouped_blocks", lambda self, keep=None: grouped(self, 7 * 3 * 4, keep)
    )
    reused = []
    handed_out = Buffers.empty

    def spy(self, shape, dtype="f8"):
        before = len(self._kept)
        array = handed_out(self, shape, dtype)
        reused.append(len(self._kept) < before)
        return array

    monkeypatch.setattr(Buffers, "empty", spy)
    ds = synthetic_dataset({"time": 60, "lat": 6, "lon": 8}, seed=3)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 7, "lat": 3, "lon": 4})
    accumulus.accumulate(str(path), VAR, dims, weights="none", at=at, scheduler=scheduler)
    assert any(reused)

    x = ds[VAR].transpose("time", "lat", "lon").values.astype("f8")
    summands = {SUM: np.where(np.isnan(x), 0.0, x), COUNT: (~np.isnan(x)).astype("f8")}
    group = accumulus.open(str(path)).accumulation_group(VAR)
    root = zarr.open_group(path, mode="r")
    axes = {"time": 0, "lat": 1, "lon": 2}
    for acc in group.accumulations:
        for term in (SUM, COUNT):
            expected = summands[term]
            for dim in acc.prefix_dims:
                expected = np.cumsum(expected, axis=axes[dim])
            if acc.is_zep5:  # entries at chunk ends
                ends = {"time": [*range(6, 60, 7), 59], "lat": [2, 5], "lon": [3, 7]}
                for dim in acc.prefix_dims:
                    expected = expected.take(list(ends[dim]), axis=axes[dim])
            stored = root[f"{group.path}/{acc.arrays[term]}"][...]
            order = [axes[d] for d in acc.array_dims]
            np.testing.assert_allclose(stored, expected.transpose(order), rtol=1e-12)


def test_the_collector_skips_objects_made_before_the_build(tmp_path, monkeypatch):
    ds = synthetic_dataset({"time": 20, "lat": 4, "lon": 5}, seed=1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 5, "lat": 2, "lon": 5})
    before = ["made before the build"]  # a container: tracked by the collector
    seen = []
    write_entries = stream._write_entries

    def spy(*args, **kwargs):
        seen.append(any(o is before for o in gc.get_objects()))
        return write_entries(*args, **kwargs)

    monkeypatch.setattr(stream, "_write_entries", spy)
    accumulus.accumulate(str(path), VAR, ["time"])
    assert seen and not any(seen)  # frozen while the slabs were written
    assert any(o is before for o in gc.get_objects())  # collected as usual afterwards


def test_series_rows_reuse_the_space_of_the_rows_written_before(tmp_path, monkeypatch):
    # Slabs of one time chunk (7), series chunks of 14 along time: every row is filled by two
    # slabs, and five rows take turns in the space of the array's row written before.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    monkeypatch.setattr(stream, "TILE_SUMS_BYTES", 1)
    monkeypatch.setattr(placement, "BUFFER_BYTES", 14 * 6 * 8 * 9)  # 14 entries
    # Each new row waits for the writes before it: a row's space is free for the next only
    # once it is written, which on a loaded machine may not be soon.
    monkeypatch.setattr(stream._Writer, "QUEUED_BYTES", 1)
    rows: dict[str, list[int]] = {}
    new_row = stream._Writer._new_row

    def spy(self, name, axis, start, *more):
        row = new_row(self, name, axis, start, *more)
        rows.setdefault(name, []).append(id(row.values))
        return row

    monkeypatch.setattr(stream._Writer, "_new_row", spy)
    ds = synthetic_dataset({"time": 66, "lat": 6, "lon": 8}, seed=5)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 7, "lat": 3, "lon": 4})
    accumulus.accumulate(str(path), VAR, ["lat,lon"], weights="none", at={"lat": 1, "lon": 1})

    group = accumulus.open(str(path)).accumulation_group(VAR)
    (acc,) = group.accumulations
    root = zarr.open_group(path, mode="r")
    assert root[f"{group.path}/{acc.arrays[SUM]}"].chunks[0] == 14
    assert all(len(made) == 5 and len(set(made)) < 5 for made in rows.values()), rows
    x = ds[VAR].transpose("time", "lat", "lon").values.astype("f8")
    summands = {SUM: np.where(np.isnan(x), 0.0, x), COUNT: (~np.isnan(x)).astype("f8")}
    axes = {"time": 0, "lat": 1, "lon": 2}
    for term in (SUM, COUNT):
        expected = summands[term]
        for dim in acc.prefix_dims:
            expected = np.cumsum(expected, axis=axes[dim])
        stored = root[f"{group.path}/{acc.arrays[term]}"][...]
        np.testing.assert_allclose(stored, expected, rtol=1e-12)


@pytest.mark.parametrize("scheduler", ["threads", "synchronous"])
def test_a_build_along_one_dimension_at_every_element_walks_tiles(tmp_path, monkeypatch, scheduler):
    # Area weights at every cell: sums along longitude only. Walked along longitude, one raw
    # chunk at a time, in tiles of 14 days (a series chunk) x 6 rows of latitude: every
    # slab's entries are whole chunks, carried along longitude from slab to slab.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)  # series chunks grow from one raw chunk
    monkeypatch.setattr(placement, "BUFFER_BYTES", 14 * 12 * 20 * 9)  # to 14 entries
    monkeypatch.setattr(placement, "SERIES_CHUNK", 14 * 6 * 8)  # of 6 rows
    walks = []
    tiled = stream.tiled_walk

    def spy(*args):
        walks.append(tiled(*args))
        return walks[-1]

    monkeypatch.setattr(stream, "tiled_walk", spy)
    ds = synthetic_dataset({"time": 66, "lat": 12, "lon": 20}, seed=11)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {"time": 7, "lat": 3, "lon": 5})
    accumulus.accumulate(str(path), VAR, ["lat,lon"], at={"lat": 1, "lon": 1}, scheduler=scheduler)

    ((dim, tiles),) = walks
    assert dim == "lon" and len(tiles) == 5 * 2
    group = accumulus.open(str(path)).accumulation_group(VAR)
    (acc,) = group.accumulations
    assert acc.prefix_dims == ("lon",)
    root = zarr.open_group(path, mode="r")
    assert root[f"{group.path}/{acc.arrays[SUM]}"].chunks == (14, 6, 1)
    x = ds[VAR].transpose("time", "lat", "lon").values.astype("f8")
    summands = {SUM: np.where(np.isnan(x), 0.0, x), COUNT: (~np.isnan(x)).astype("f8")}
    for term in (SUM, COUNT):
        stored = root[f"{group.path}/{acc.arrays[term]}"][...]
        np.testing.assert_allclose(stored, np.cumsum(summands[term], axis=2), rtol=1e-12)
    (report,) = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
