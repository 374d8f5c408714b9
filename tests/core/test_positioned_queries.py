"""Queries answered from positioned accumulations (``--at``): their entries, read from the
group's ``accumulus`` attribute, let a range that starts and ends on positions read no raw
chunk, whatever the chunk grid; answers equal xarray's on the raw data.

Property test: random shapes and chunkings, position rules (every N, month, month+4, year, labels,
chunk), weights, statistics, ranges and boxes. Plan tests: 0 raw chunks for whole months
with ``--at time=month`` on 73-day chunks, for any range with ``--at time=1``, and for any
box with ``--at lat=1,lon=1``.
"""

from __future__ import annotations

import itertools
from math import prod

import numpy as np
import pandas as pd
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st

import accumulus
from accumulus.accumulation.build import placement, stream
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.raw_cube import RawCube
from cubes import VAR, labels, synthetic_dataset, write_cube, xarray_reference
from properties import case_dataset, cube_property, drawn_ranges

RULES = {
    "time": ["month", "year", "month+4", 1, 2, 5, "labels", "chunk"],
    "lat": [1, 2, 3, "labels", "chunk"],
    "lon": [1, 2, 4, "labels", "chunk"],
}


@st.composite
def cubes(draw):
    dims = draw(
        st.sampled_from([["time"], ["time", "lat"], ["time", "lat", "lon"], ["lat", "lon"]])
    )
    sizes = {
        d: draw(st.integers(30, 120)) if d == "time" else draw(st.integers(2, 9)) for d in dims
    }
    chunks = {d: draw(st.integers(1, sizes[d])) for d in dims}
    combos = [c for r in range(1, len(dims) + 1) for c in itertools.combinations(dims, r)]
    chosen = draw(st.lists(st.sampled_from(combos), min_size=1, max_size=3, unique=True))
    accumulated = {d for c in chosen for d in c}
    at = {}
    for dim in sorted(accumulated):
        rule = draw(st.sampled_from(RULES[dim]))
        if rule == "labels":
            picks = draw(st.lists(st.integers(1, sizes[dim] - 1), min_size=1, max_size=3))
            rule = sorted(set(picks))
        at[dim] = rule
    if all(r == "chunk" for r in at.values()):
        at[sorted(accumulated)[0]] = 1
    return {
        "sizes": sizes,
        "chunks": chunks,
        "zarr_format": draw(st.sampled_from([2, 3])),
        "nan_fraction": draw(st.sampled_from([0.0, 0.2])),
        "inf_fraction": draw(st.sampled_from([0.0, 0.0, 0.02, 0.1])),
        "combos": chosen,
        "at": at,
        "weights": draw(st.sampled_from(["area", "none"] if "lat" in dims else ["none"])),
        "seed": draw(st.integers(0, 2**16)),
    }


def _rule_labels(ds, dim, rule):
    """A labels rule as labels of the coordinate (indices where entries end, exclusive)."""
    if not isinstance(rule, list):
        return rule
    values = ds[dim].values
    if dim == "time":
        return [str(pd.Timestamp(values[i]).date()) for i in rule]
    return [str(values[i]) for i in rule]


@cube_property(40)
@given(case=cubes(), data=st.data())
def test_positioned_answers_equal_xarray(tmp_path_factory, case, data):
    path = tmp_path_factory.mktemp("cube") / "cube.zarr"
    ds = case_dataset(case)
    write_cube(ds, path, case["chunks"], zarr_format=case["zarr_format"])
    at = {d: _rule_labels(ds, d, r) for d, r in case["at"].items()}
    accumulus.accumulate(str(path), VAR, case["combos"], weights=case["weights"], at=at)
    cube = RawCube.open(str(path))
    dims = list(case["sizes"])
    for _ in range(3):
        over = data.draw(
            st.lists(st.sampled_from(dims), min_size=1, max_size=len(dims), unique=True)
        )
        stat = data.draw(st.sampled_from(["mean", "sum", "count"]))
        weights = data.draw(st.sampled_from(sorted({case["weights"], "none"})))
        ranges, isel = drawn_ranges(data, ds, dims, case["sizes"])
        query = Query(VAR, tuple(over), ranges, stat=stat, weights=weights)
        result = run_query(cube, query)
        expected = xarray_reference(ds[VAR].isel(isel), over, weights, stat)
        got = result.data.transpose(*expected.dims)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-12)


# --------------------------------------------------------------------------------------------
# Plans: what is read


def _daily(tmp_path, days, chunks, dims=("time",), **sizes):
    shape = {"time": days, **sizes}
    ds = synthetic_dataset({d: shape[d] for d in dims}, seed=5, nan_fraction=0.1)
    path = tmp_path / "cube.zarr"
    write_cube(ds, path, {d: chunks.get(d, shape[d]) for d in dims})
    return ds, path


def _check(path, ds, over, isel, weights="none"):
    """The accumulations' plan (on cubes this small a plain scan often reads less, and the
    default would run it: ``test_cost``), checked against xarray."""
    ranges = {d: labels(ds, d, s.start, s.stop) for d, s in isel.items()}
    query = Query(VAR, tuple(over), ranges, weights=weights, plan="accumulation")
    result = run_query(RawCube.open(str(path)), query)
    expected = xarray_reference(ds[VAR].isel(isel), over, weights, "mean")
    got = result.data.transpose(*expected.dims)
    np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-12)
    return result


def test_whole_months_read_no_raw_chunk_on_73_day_chunks(tmp_path):
    ds, path = _daily(tmp_path, 730, {"time": 73}, dims=("time", "lat"), lat=3)
    accumulus.accumulate(str(path), VAR, ["time"], weights="none", at={"time": "month"})
    starts = [0, *np.flatnonzero(np.diff(ds.time.dt.month.values) != 0) + 1, 730]
    assert len(starts) == 25  # 24 months
    for a, b in itertools.combinations(starts, 2):
        result = _check(path, ds, ["time"], {"time": slice(a, b), "lat": slice(0, 3)})
        assert result.stats.raw_chunks_read == 0, (a, b)
        # Two entries (one when the range starts at the data's start) of one chunk each.
        assert len(result.plan.reads) == (1 if a == 0 else 2)
        assert result.stats.accumulation_chunks_read == len(result.plan.reads) * 2
    # A range ending inside a month reads the raw chunks it must (one here, or two).
    result = _check(path, ds, ["time"], {"time": slice(31, 100), "lat": slice(0, 3)})
    assert 1 <= result.stats.raw_chunks_read <= 2


def test_every_element_answers_any_range_without_raw_reads(tmp_path):
    ds, path = _daily(tmp_path, 200, {"time": 73, "lat": 4}, dims=("time", "lat"), lat=7)
    accumulus.accumulate(str(path), VAR, ["time"], weights="area", at={"time": 1})
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = int(rng.integers(0, 199))
        b = int(rng.integers(a + 1, 201))
        lat = sorted(rng.choice(8, 2, replace=False))
        isel = {"time": slice(a, b), "lat": slice(int(lat[0]), int(lat[1]))}
        result = _check(path, ds, ["time"], isel, weights="area")
        assert result.stats.raw_chunks_read == 0
        assert all(r.key == "time@1" for r in result.plan.reads)


def test_any_box_reads_no_raw_chunk_with_entries_at_every_cell(tmp_path):
    ds, path = _daily(
        tmp_path, 40, {"time": 10, "lat": 4, "lon": 4}, dims=("time", "lat", "lon"), lat=9, lon=10
    )
    accumulus.accumulate(str(path), VAR, ["lat,lon"], weights="area", at={"lat": 1, "lon": 1})
    group = accumulus.open(str(path)).accumulation_group(VAR)
    [acc] = group.accumulations
    # Area weights vary along latitude: rows of prefix sums along longitude, weights factored.
    assert acc.placement.accumulated == ("lon",) and acc.factored
    rng = np.random.default_rng(1)
    for _ in range(15):
        isel = {"time": slice(0, 40)}
        for dim, n in (("lat", 9), ("lon", 10)):
            a, b = sorted(rng.choice(n + 1, 2, replace=False))
            isel[dim] = slice(int(a), int(b))
        for weights in ("area", "none"):
            result = _check(path, ds, ["lat", "lon"], isel, weights=weights)
            assert result.stats.raw_chunks_read == 0
            assert len(result.plan.reads) <= 2


def test_provisional_entries_are_not_read(tmp_path):
    """An open month (the cube is appended along time) is provisional: a range ending in it
    reads raw chunks, never its entry."""
    ds, path = _daily(tmp_path, 75, {"time": 10}, dims=("time",))
    root = zarr.open_group(path, mode="r+")
    root.attrs["accumulus"] = {"append_dim": "time"}
    zarr.consolidate_metadata(path)
    accumulus.accumulate(str(path), VAR, ["time"], weights="none", at={"time": "month"})
    placement = accumulus.open(str(path)).accumulation_group(VAR).accumulations[0].placement
    assert placement.positions["time"] == (31, 59, 75)
    assert placement.final["time"] == 2
    result = _check(path, ds, ["time"], {"time": slice(59, 75)})
    assert result.stats.accumulation_chunks_read == 0
    assert result.stats.raw_chunks_read == 3  # [50, 60), [60, 70), [70, 75)
    result = _check(path, ds, ["time"], {"time": slice(31, 75)})
    assert [r.entries for r in result.plan.accumulation_reads] == [{"time": 1}, {"time": 0}]


def test_chunk_end_and_positioned_accumulations_in_one_group(tmp_path):
    """Time at chunk ends (ZEP 5) beside latitude+longitude at every cell: maps and series
    each come from the accumulation that answers them, naming it in the plan."""
    ds, path = _daily(
        tmp_path, 60, {"time": 20, "lat": 3, "lon": 3}, dims=("time", "lat", "lon"), lat=6, lon=7
    )
    accumulus.accumulate(
        str(path), VAR, ["time", "lat,lon"], weights="area", at={"lat": 1, "lon": 1}
    )
    series = _check(
        path, ds, ["lat", "lon"], {"time": slice(0, 60), "lat": slice(1, 5), "lon": slice(2, 6)},
        weights="area",
    )  # fmt: skip
    assert series.stats.raw_chunks_read == 0
    assert {r.key for r in series.plan.accumulation_reads} == {"lat,lon@1,1"}
    isel = {"time": slice(20, 60), "lat": slice(0, 6), "lon": slice(0, 7)}
    mean_map = _check(path, ds, ["time"], isel, weights="area")
    assert mean_map.stats.raw_chunks_read == 0
    assert {r.key for r in mean_map.plan.accumulation_reads} == {"time"}
    # inspect: each accumulation's positions and its stored bytes beside the raw array's.
    [info] = accumulus.inspect(str(path))["accumulation_groups"]
    by_at = {a["at"]: a for a in info["accumulations"]}
    assert by_at["chunk ends"]["entries"] == {"time": 3}
    assert by_at["lat=1,lon=1"]["entries"] == {"lon": 7}
    raw = info["accumulations"][0]["raw_bytes_stored"]
    assert raw > 0 and all(a["bytes_stored"] > 0 for a in info["accumulations"])


def test_arrays_are_chunked_for_how_they_are_read(tmp_path, monkeypatch):
    """A map reads one entry of the whole space: one chunk per entry. A series reads a few
    entries along longitude over the box's rows, for all time: chunks as long in time as
    the build holds back, of as many rows as ``SERIES_CHUNK`` allows, so a box reads the
    chunks of its rows only."""
    monkeypatch.setattr(placement, "SERIES_CHUNK", 8 * 40 * 3)  # 3 rows of a whole series
    ds, path = _daily(
        tmp_path, 40, {"time": 10, "lat": 4, "lon": 4}, dims=("time", "lat", "lon"), lat=9, lon=10
    )
    at = {"time": 1, "lat": 1, "lon": 1}
    accumulus.accumulate(str(path), VAR, ["time", "lat,lon"], weights="area", at=at)
    group = accumulus.open(str(path)).accumulation_group(VAR)
    root = zarr.open_group(path, mode="r")[f"{VAR}_accumulation_group"]
    chunks = {
        acc.key: {root[name].chunks for name in acc.arrays.values()} for acc in group.accumulations
    }
    assert chunks == {"time@1": {(1, 9, 10)}, "lat,lon@1,1": {(40, 3, 1)}}
    result = _check(
        path, ds, ["lat", "lon"], {"time": slice(0, 40), "lat": slice(3, 6), "lon": slice(1, 8)},
        weights="area",
    )  # fmt: skip
    # Two entries along longitude, one chunk of rows, Σx and the count: 4 chunks.
    assert (result.stats.raw_chunks_read, result.stats.accumulation_chunks_read) == (0, 4)
    for lat in (slice(0, 9), slice(2, 7), slice(5, 6)):
        isel = {"time": slice(0, 40), "lat": lat, "lon": slice(0, 10)}
        assert _check(path, ds, ["lat", "lon"], isel, weights="area").stats.raw_chunks_read == 0
    result = _check(path, ds, ["time"], {"time": slice(7, 33)}, weights="area")
    assert (result.stats.raw_chunks_read, result.stats.accumulation_chunks_read) == (0, 4)


def test_series_counts_take_as_many_bytes_per_chunk_as_the_sums(tmp_path, monkeypatch):
    """Counts are small integers (here one byte each): a series' counts take more rows per
    chunk than its sums, as long as they divide the raw chunk's rows (a build's tiles stay
    whole raw chunks, and hold whole chunks of every array). A box reads the chunks of its
    rows in each array, and answers as xarray does."""
    monkeypatch.setattr(placement, "SERIES_CHUNK", 8 * 40 * 3)  # 3 rows of a whole series
    ds, path = _daily(
        tmp_path, 40, {"time": 10, "lat": 6, "lon": 4}, dims=("time", "lat", "lon"), lat=12, lon=10
    )
    accumulus.accumulate(str(path), VAR, ["lat,lon"], weights="area", at={"lat": 1, "lon": 1})
    (acc,) = accumulus.open(str(path)).accumulation_group(VAR).accumulations
    root = zarr.open_group(path, mode="r")[f"{VAR}_accumulation_group"]
    by_type = {root[name].dtype.kind: root[name].chunks for name in acc.arrays.values()}
    assert by_type == {"f": (40, 3, 1), "u": (40, 6, 1)}
    targets = {name: root[name] for name in acc.arrays.values()}
    cube = RawCube.open(str(path))
    group = accumulus.open(str(path)).accumulation_group(VAR)
    assert stream.tiled_walk(cube.variable(VAR), group, targets) is not None
    for lat, chunks in [
        (slice(3, 6), 2 * (1 + 1)),
        (slice(2, 9), 2 * (3 + 2)),
        (slice(0, 12), 2 * (4 + 2)),
    ]:
        isel = {"time": slice(0, 40), "lat": lat, "lon": slice(1, 8)}
        result = _check(path, ds, ["lat", "lon"], isel, weights="area")
        assert (result.stats.raw_chunks_read, result.stats.accumulation_chunks_read) == (
            0,
            chunks,
        ), lat


@pytest.mark.parametrize("shape", [(60, 6, 40), (60, 3, 5)])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_blosc_shuffles_the_stored_values(tmp_path, zarr_format, shape):
    """Each chunk is Blosc-compressed as values of its type, then checksummed: in Zarr v2
    Blosc is the first filter, so its shuffle sees 8-byte sums (a compressor after a
    checksum filter sees bytes, and shuffling bytes does nothing). The float64 prefix sums
    of float32 values keep zero low bytes, which the shuffle makes runs of. Every array is
    bit-shuffled (fewer bytes) but those whose chunks hold a number of values not a multiple
    of 8, which Blosc would leave unshuffled, and a map's sums (read whole by every map
    question; bit-unshuffling is half their decoding: ``placement.bit_shuffled``): those are
    byte-shuffled. In v2, series (read a
    few days at a time) are compressed in blocks of 16 KiB, as 32-byte elements, which keep
    that block size (``placement.blosc_elements``), where a chunk holds two blocks or more
    and its bytes are a multiple of 32."""
    ds = synthetic_dataset(dict(zip(("time", "lat", "lon"), shape, strict=True)), seed=3)
    path = tmp_path / "cube.zarr"
    # Time has the most chunks: it is walked, so the time accumulation is read as maps and
    # the latitude-longitude one as series. On 3 x 5 cells a map's chunk holds 15 values.
    write_cube(ds, path, {"time": 10, "lat": 3, "lon": min(10, shape[2])}, zarr_format=zarr_format)
    at = {"time": 1, "lat": 1, "lon": 1}
    accumulus.accumulate(str(path), VAR, ["time", "lat,lon"], weights="area", at=at)
    root = zarr.open_group(path, mode="r")[f"{VAR}_accumulation_group/accumulus_positions"]
    names = [n for n in root.array_keys() if "_at_" in n]
    assert len(names) == 4  # Σx and counts of both
    for name in names:
        array = root[name]
        map_sums = "_time_" in name and array.dtype == np.float64
        bits = prod(array.chunks) % 8 == 0 and not map_sums
        element = array.dtype.itemsize
        nbytes = prod(array.chunks) * element
        if zarr_format == 2 and "_lat_lon_" in name and nbytes >= 2**15 and nbytes % 32 == 0:
            element = 32
        if shape == (60, 3, 5) and "_time_" in name:
            assert not bits, array.chunks  # a map's chunk: 15 values
        directory = path / f"{VAR}_accumulation_group" / "accumulus_positions" / name
        stored = sorted(
            p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "zarr"))
        )
        assert stored, name
        for chunk in stored[:3]:
            frame = chunk.read_bytes()[:-4]  # the checksum follows the compressed bytes
            # A Blosc frame's header: version, format version, flags, type size (bytes 0-3);
            # flags: 0x1 byte shuffle, 0x4 bit shuffle.
            assert frame[3] == element, (name, chunk.name)
            assert frame[2] & 0x5 == (0x4 if bits else 0x1), (name, chunk.name, frame[2])
        if array.dtype == np.float64 and shape == (60, 6, 40):  # 120-byte chunks do not shrink
            raw = sum(prod(array.chunks) * 8 for _ in stored)
            assert sum(p.stat().st_size for p in stored) < 0.75 * raw, name
