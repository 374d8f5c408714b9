"""``verify`` recomputes every entry slab by slab along the batch dimension (memory set by
the slab, not the cube): it passes on a good build whatever the slabs, strides and chunk
grids, and names a wrong entry, a missing chunk and edited attributes."""

from __future__ import annotations

import json
import tracemalloc

import numpy as np
import pytest
import zarr

import accumulus
from accumulus.accumulation.build import stream, verify
from accumulus.accumulation.model.groups import read_group
from accumulus.accumulation.model.spec import SUM
from accumulus.raw_cube import RawCube
from cubes import VAR, synthetic_dataset, write_cube

SIZES = {"time": 45, "lat": 8, "lon": 10}
GRIDS = {
    "regular": (2, {"time": 5, "lat": 4, "lon": 5}),
    "rectilinear": (3, {"time": [7, 3, 5, 9, 4, 6, 5, 6], "lat": [3, 5], "lon": [4, 6]}),
}


@pytest.fixture
def one_chunk_slabs(monkeypatch):
    """Slabs of one time chunk for verify: every carry across slabs is exercised."""
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)


def _cube(tmp_path, grid: str, stride: int = 1):
    zarr_format, chunks = GRIDS[grid]
    path = tmp_path / "cube.zarr"
    write_cube(synthetic_dataset(SIZES, seed=4), path, chunks, zarr_format=zarr_format)
    combos = [("time",), ("lat",), ("lat", "lon"), ("time", "lon")]
    accumulus.accumulate(str(path), VAR, combos, strides={"time": stride})
    return path


def _problems(path) -> list[str]:
    [report] = accumulus.verify(str(path), VAR)
    return report.problems


@pytest.mark.parametrize("grid", sorted(GRIDS))
@pytest.mark.parametrize("stride", [1, 3])
def test_a_good_build_passes_over_many_slabs(tmp_path, grid, stride, one_chunk_slabs):
    path = _cube(tmp_path, grid, stride)
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    assert "acc_time" in report.checked and "acc_n_time_lon" in report.checked


@pytest.mark.parametrize("grid", sorted(GRIDS))
def test_a_wrong_entry_is_named(tmp_path, grid, one_chunk_slabs):
    path = _cube(tmp_path, grid, stride=2)
    array = zarr.open_array(path / f"{VAR}_accumulation_group" / "acc_time", mode="r+")
    entry = array.shape[0] - 1  # the last entry: ended by the last slab
    good = float(array[entry, 1, 2])
    array[entry, 1, 2] = good + 1.0
    lat_lon = zarr.open_array(path / f"{VAR}_accumulation_group" / "acc_lat_lon", mode="r+")
    lat_lon[40, 1, 0] += 1e-6 * abs(lat_lon[40, 1, 0])  # past the rounding of any sum

    problems = _problems(path)
    assert len(problems) == 2, problems
    edge = GRIDS[grid][1]["time"]
    edges = np.cumsum(edge) if isinstance(edge, list) else np.arange(edge, 46, edge)
    end = int(edges[2 * entry + 1])
    [time_problem] = [p for p in problems if "/acc_time:" in p]
    assert f"1 entries differ; first at time entry {entry} (raw [0, {end})), lat=1, lon=2" in (
        time_problem
    )
    assert f"stored {good + 1.0}" in time_problem
    recomputed = float(time_problem.rsplit("recomputed ", 1)[1])
    np.testing.assert_allclose(recomputed, good, rtol=1e-9)
    [lat_lon_problem] = [p for p in problems if "/acc_lat_lon:" in p]
    assert "1 entries differ; first at time=40, lat entry 1" in lat_lon_problem


def test_the_first_of_many_differences_is_reported(tmp_path, one_chunk_slabs):
    path = _cube(tmp_path, "regular")
    array = zarr.open_array(path / f"{VAR}_accumulation_group" / "acc_uw_lat", mode="r+")
    array[44, 0, 9] = -1.0  # found in the last slab
    array[3, 1, 0] = -2.0  # found in the first: it comes first in the array
    [problem] = _problems(path)
    assert "acc_uw_lat: 2 entries differ; first at time=3, lat entry 1" in problem


def test_a_missing_chunk_is_found_in_a_later_slab(tmp_path, one_chunk_slabs):
    path = _cube(tmp_path, "regular")
    group = path / f"{VAR}_accumulation_group"
    array = zarr.open_array(group / "acc_n_time_lon", mode="r")
    last = array.cdata_shape[0] - 1
    (group / "acc_n_time_lon" / f"{last}.0.0").unlink()  # a count: fill -1, never a count
    [problem] = _problems(path)
    # Named as missing (not as sums that differ, which its fill value would look like).
    assert problem.startswith(f"{VAR}_accumulation_group/acc_n_time_lon: 1 chunk objects missing")
    assert f"(first {VAR}_accumulation_group/acc_n_time_lon/{last}.0.0)" in problem


def _edit_group_attrs(path, edit) -> None:
    attrs_file = path / f"{VAR}_accumulation_group" / ".zattrs"
    attrs = json.loads(attrs_file.read_text())
    edit(attrs)
    attrs_file.write_text(json.dumps(attrs))
    zarr.consolidate_metadata(path)


def test_edited_attributes_are_found(tmp_path, one_chunk_slabs):
    path = _cube(tmp_path, "regular")

    def no_weights(attrs):  # still valid: but the sums were taken with area weights
        attrs["accumulus"]["weights"] = "none"

    _edit_group_attrs(path, no_weights)
    problems = _problems(path)
    assert any("/acc_time: " in p and "entries differ" in p for p in problems), problems

    def swapped(attrs):  # valid too: the weighted and unweighted sums trade names
        attrs["accumulus"]["weights"] = "area"
        leaf = attrs["_ACCUMULATION_GROUP"]["time"]
        leaf["_DATA_WEIGHTED"], leaf["_DATA_UNWEIGHTED"] = "acc_uw_time", "acc_time"

    _edit_group_attrs(path, swapped)
    problems = _problems(path)
    assert {p.split(":")[0].rsplit("/", 1)[1] for p in problems} == {"acc_time", "acc_uw_time"}


def _peak_verify_bytes(tmp_path, days: int) -> int:
    path = tmp_path / f"c{days}.zarr"
    ds = synthetic_dataset({"time": days, "lat": 30, "lon": 40}, seed=2)
    write_cube(ds, path, {"time": 10, "lat": 15, "lon": 20})
    accumulus.accumulate(str(path), VAR)
    tracemalloc.start()
    try:
        [report] = accumulus.verify(str(path), VAR)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert report.ok, report.problems
    return peak


def test_each_computation_holds_one_slab(tmp_path, monkeypatch):
    """Every Dask computation verify runs covers one slab of time chunks: nothing is held at
    full resolution along the whole cube (the memory bound the build keeps)."""
    path = tmp_path / "cube.zarr"
    write_cube(
        synthetic_dataset({"time": 80, "lat": 6, "lon": 8}), path, {"time": 5, "lat": 3, "lon": 4}
    )
    accumulus.accumulate(str(path), VAR)
    monkeypatch.setattr(stream, "SLAB_BYTES", 4 * 5 * 6 * 8 * 4)  # four time chunks
    extents = []

    def recording_run(collections, *args, **kwargs):
        extents.append(max(c.shape[0] for c in collections))
        return run(collections, *args, **kwargs)

    run = verify.compute.run
    monkeypatch.setattr(verify.compute, "run", recording_run)
    [report] = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    assert len(extents) == 80 // 5 // 4 and max(extents) == 4 * 5


@pytest.mark.slow
def test_memory_does_not_grow_with_the_cube(tmp_path, monkeypatch):
    """Four times the days, about the same peak (traced allocations)."""
    monkeypatch.setattr(stream, "SLAB_BYTES", 40 * 30 * 40 * 4)  # 4 time chunks per slab
    small = _peak_verify_bytes(tmp_path, 200)
    large = _peak_verify_bytes(tmp_path, 800)
    raw_large = 800 * 30 * 40 * 8  # the larger cube in float64
    print(small, large, raw_large)
    assert large < 1.5 * small and large < raw_large, (small, large, raw_large)


def test_positioned_entries_off_the_chunk_edges(tmp_path, one_chunk_slabs):
    """Month ends (day 31 of 5-day chunks) and every element: pieces are cut at both."""
    path = tmp_path / "cube.zarr"
    write_cube(synthetic_dataset({"time": 75, "lat": 6, "lon": 4}, seed=5), path,
               {"time": 5, "lat": 3, "lon": 2})  # fmt: skip
    accumulus.accumulate(
        str(path), VAR, ["time", "lat,lon"], at={"time": "month", "lat": 1, "lon": 1}
    )
    assert _problems(path) == []
    group = read_group(RawCube.open(str(path)), VAR)
    [monthly] = [a for a in group.accumulations if a.dims == ("time",)]
    name = monthly.arrays[SUM]
    array = zarr.open_array(path / f"{VAR}_accumulation_group" / name, mode="r+")
    array[1, 2, 3] += 1.0  # the second month's entry: raw [0, 59)
    [problem] = _problems(path)
    assert f"/{name}: 1 entries differ; first at time entry 1 (raw [0, 59)), lat=2, lon=3" in (
        problem
    )
