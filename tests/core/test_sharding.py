"""Sharded Zarr v3 cubes (issue 19): the inner chunk is the unit of accumulation and of
reading. Cubes are written by xarray (``encoding={"v": {"chunks": ..., "shards": ...}}``);
answers are compared with xarray on the in-memory data, and what a query reads with the same
cube written without shards (same chunks)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import zarr
from hypothesis import given
from hypothesis import strategies as st
from zarr.codecs import ShardingCodec

import accumulus
from accumulus.accumulation.model import spec
from accumulus.accumulation.model.groups import AccumulationGroups, read_group
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.request import Query
from accumulus.errors import AccumulusError
from accumulus.raw_cube import RawCube
from core.test_cli import run
from cubes import VAR, labels, synthetic_dataset, write_cube, xarray_reference
from properties import case_dataset, cube_property, drawn_ranges

SIZES = {"time": 60, "lat": 18, "lon": 24}
CHUNKS = {"time": 5, "lat": 6, "lon": 8}
# 5 inner chunks per shard in time, every lat and lon chunk in one; 60 = 25 + 25 + 10: the
# last shard is partial.
SHARDS = {"time": 25, "lat": 18, "lon": 24}


@pytest.fixture(scope="module")
def cubes(tmp_path_factory):
    """The same data written plain and sharded (same inner chunks), accumulated alike."""
    root = tmp_path_factory.mktemp("sharding")
    ds = synthetic_dataset(SIZES, seed=11, nan_fraction=0.15)
    paths = {}
    for name, shards in (("plain", None), ("sharded", SHARDS)):
        path = root / f"{name}.zarr"
        write_cube(ds, path, CHUNKS, zarr_format=3, shards=shards)
        accumulus.accumulate(str(path), VAR, minimal=True)  # ZEP 5: strides
        paths[name] = path
    return paths, ds


def _query(path, over, ranges, **kw):
    return run_query(RawCube.open(str(path)), Query(VAR, tuple(over), ranges, **kw))


def test_sharded_raw_array_is_read_by_inner_chunks(cubes):
    paths, _ = cubes
    var = RawCube.open(str(paths["sharded"])).variable(VAR)
    assert var.array.shards == (25, 18, 24)
    assert [b.sizes[0] for b in var.bounds] == [5, 6, 8]
    assert var.bounds[0].n_chunks == 12  # inner chunks, not the 3 shards


def test_group_says_its_strides_count_inner_chunks(cubes):
    paths, _ = cubes
    root = zarr.open_group(str(paths["sharded"]), mode="r")
    attrs = root[spec.group_name(VAR)].attrs[spec.EXTENSION_KEY]
    assert attrs["stride_unit"] == spec.INNER_CHUNK
    plain = zarr.open_group(str(paths["plain"]), mode="r")
    assert "stride_unit" not in plain[spec.group_name(VAR)].attrs[spec.EXTENSION_KEY]
    # Entries at every inner chunk end: 12 along time, as on the plain cube.
    cube = RawCube.open(str(paths["sharded"]))
    group = read_group(cube, VAR)
    assert group.stride_unit == spec.INNER_CHUNK
    time_array = AccumulationGroups(cube).array(VAR, group.find(["time"]).arrays["wsum"])
    assert time_array.shape[0] == 12


@pytest.mark.parametrize(
    ("over", "isel"),
    [
        # Inner-chunk aligned (10 and 40 are inner chunk edges, not shard edges).
        (("time",), {"time": (10, 40)}),
        # Unaligned in time: raw reads of two boundary inner chunks' rows.
        (("time",), {"time": (7, 52)}),
        # Up to the array's end, in the partial last shard.
        (("time",), {"time": (13, 60)}),
        # Unaligned box in lat/lon.
        (("lat", "lon"), {"lat": (2, 15), "lon": (3, 21)}),
        # Aligned box in lat/lon (inner chunk edges).
        (("lat", "lon"), {"lat": (6, 18), "lon": (8, 24)}),
    ],
)
def test_sharded_answers_and_reads_match_the_plain_layout(cubes, over, isel):
    paths, ds = cubes
    ranges = {d: labels(ds, d, lo, hi) for d, (lo, hi) in isel.items()}
    plain = _query(paths["plain"], over, ranges)
    sharded = _query(paths["sharded"], over, ranges)
    expected = xarray_reference(
        ds[VAR].isel({d: slice(*r) for d, r in isel.items()}), list(over), "area", "mean"
    )
    np.testing.assert_allclose(sharded.data.values, expected.values, rtol=1e-9)
    # One plan for both layouts: the same entries and raw boxes, the same chunks.
    assert sharded.plan.describe() == plain.plan.describe()
    assert sharded.stats.raw_chunks_read == plain.stats.raw_chunks_read
    assert sharded.stats.accumulation_chunks_read == plain.stats.accumulation_chunks_read
    aligned = all(
        lo % CHUNKS[d] == 0 and hi % CHUNKS[d] in (0, SIZES[d]) for d, (lo, hi) in isel.items()
    )
    if aligned:
        assert sharded.stats.raw_chunks_read == 0
    # Bytes: inner chunks as byte ranges plus each shard's index, within 1.5x.
    assert sharded.stats.bytes_read <= 1.5 * plain.stats.bytes_read


def test_raw_reads_are_byte_ranges_of_shards_with_one_index_each(cubes):
    paths, ds = cubes
    ranges = {"time": labels(ds, "time", 7, 52)}
    plain = _query(paths["plain"], ["time"], ranges)
    sharded = _query(paths["sharded"], ["time"], ranges)
    raw = sharded.stats.raw_chunks_read
    assert raw == plain.stats.raw_chunks_read == 2 * 3 * 3  # two time rows of 3 x 3 chunks
    # Time rows 7..10 and 50..52 lie in shards 0 and 2: one index request per shard, one
    # range per inner chunk. Shard 2 is the partial last one, which an append rewrites: its
    # index is read again after each of its 9 inner chunks (chunk_reader's read race check).
    # The accumulation chunks (Σw·x and Σw) are whole arrays of one chunk each, left
    # unsharded: one request each.
    acc = sharded.stats.accumulation_chunks_read
    cube = RawCube.open(str(paths["sharded"]))
    time_sums = read_group(cube, VAR).find(["time"]).arrays.values()
    assert all(AccumulationGroups(cube).array(VAR, n).nchunks == 1 for n in time_sums)
    assert plain.stats.requests == raw + acc
    assert sharded.stats.requests == (raw + 2 + 9) + acc


def test_full_scan_of_a_sharded_cube_equals_xarray(cubes):
    paths, ds = cubes
    result = _query(paths["sharded"], ["lat", "lon"], {}, use_accumulation=False)
    assert result.stats.accumulation_chunks_read == 0
    assert result.stats.raw_chunks_read == 12 * 3 * 3
    expected = xarray_reference(ds[VAR], ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


def test_missing_shard_reads_as_fill(tmp_path):
    """A shard never written (all fill) reads as missing values, like a missing chunk."""
    ds = synthetic_dataset({"time": 12, "lat": 4}, seed=3, nan_fraction=0.0)
    ds[VAR][4:8] = np.nan  # all of shard 1: zarr does not store it
    ds[VAR][8:10] = np.nan  # an all-missing inner chunk in a stored shard
    path = tmp_path / "holes.zarr"
    shards = {"time": 4, "lat": 4}
    write_cube(ds, path, {"time": 2, "lat": 4}, zarr_format=3, fill_value=None, shards=shards)
    assert not (path / VAR / "c" / "1" / "0").exists()
    accumulus.accumulate(str(path), VAR, weights="none")
    for lo, hi in ((3, 9), (1, 12), (4, 8)):
        result = _query(path, ["time"], {"time": labels(ds, "time", lo, hi)}, weights="none")
        expected = xarray_reference(ds[VAR].isel(time=slice(lo, hi)), ["time"], "none", "mean")
        np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)


@pytest.mark.parametrize("index_location", ["start", "end"])
def test_shard_index_at_either_end(tmp_path, index_location):
    """Shards whose index comes first (``index_location="start"``) read as well: one index
    request per shard, one range per inner chunk."""
    ds = synthetic_dataset({"time": 12, "lat": 6}, seed=4)
    path = tmp_path / "cube.zarr"
    ds.drop_vars(VAR).to_zarr(path, mode="w", zarr_format=3, consolidated=False)
    array = zarr.open_group(path, mode="r+").create_array(
        VAR,
        shape=ds[VAR].shape,
        dtype=ds[VAR].dtype,
        fill_value=np.nan,
        dimension_names=ds[VAR].dims,
        serializer=ShardingCodec(chunk_shape=(2, 3), index_location=index_location),
        chunks=(6, 6),  # the shards
        compressors=None,
    )
    array[...] = ds[VAR].values
    zarr.consolidate_metadata(path)
    accumulus.accumulate(str(path), VAR, weights="none")
    result = _query(path, ["time"], {"time": labels(ds, "time", 1, 11)}, weights="none")
    expected = xarray_reference(ds[VAR].isel(time=slice(1, 11)), ["time"], "none", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    # Rows 1 and 10: inner chunks (0, 0..1) of shard 0 and (5, 0..1) of shard 1.
    assert result.stats.raw_chunks_read == 4
    assert result.stats.requests == 4 + 2 + result.stats.accumulation_chunks_read


def test_accumulations_of_shards_are_refused_until_rebuilt(cubes, tmp_path):
    """A group whose strides counted shards (built before inner chunks were the unit) is
    not used: the query reads raw data and says why; verify and accumulate say to rebuild."""
    _paths, ds = cubes
    path = tmp_path / "old.zarr"
    write_cube(ds, path, CHUNKS, zarr_format=3, shards=SHARDS)
    accumulus.accumulate(str(path), VAR)
    group = zarr.open_group(str(path), mode="r+")[spec.group_name(VAR)]
    extension = dict(group.attrs[spec.EXTENSION_KEY])
    del extension["stride_unit"]
    group.attrs[spec.EXTENSION_KEY] = extension
    zarr.consolidate_metadata(str(path))
    ranges = {"time": labels(ds, "time", 10, 40)}
    result = _query(path, ["time"], ranges)
    assert "rebuild" in result.note and result.plan.accumulation_reads == []
    expected = xarray_reference(ds[VAR].isel(time=slice(10, 40)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    (report,) = accumulus.verify(str(path), VAR)
    assert not report.ok and "counts chunks in its strides" in report.problems[0]
    with pytest.raises(AccumulusError, match="--rebuild"):
        accumulus.accumulate(str(path), VAR)
    accumulus.accumulate(str(path), VAR, rebuild=True)
    assert _query(path, ["time"], ranges).stats.raw_chunks_read == 0


def test_accumulations_of_a_sharded_cube_are_sharded(tmp_path, monkeypatch):
    """Fine accumulations (every inner chunk) stay few objects: their arrays are sharded
    like the raw array, and inspect counts the objects."""
    ds = synthetic_dataset({"time": 64, "lat": 16, "lon": 32}, seed=5)
    path = tmp_path / "fine.zarr"
    chunks = {"time": 1, "lat": 4, "lon": 4}
    write_cube(ds, path, chunks, zarr_format=3, shards={"time": 32, "lat": 16, "lon": 32})
    accumulus.accumulate(str(path), VAR, minimal=True)  # every inner chunk
    cube = RawCube.open(str(path))
    group = read_group(cube, VAR)
    groups = AccumulationGroups(cube)
    for acc in group.accumulations:
        for name in set(acc.arrays.values()):
            array = groups.array(VAR, name)
            if array.nchunks == 1:  # one chunk: an index would be all sharding added
                assert array.shards is None
                continue
            assert array.shards is not None, name
            assert all(s % c == 0 for s, c in zip(array.shards, array.chunks, strict=True))
    report = accumulus.inspect(str(path))
    raw = next(a for a in report["arrays"] if a["path"] == VAR)
    assert raw["chunk_grid"]["shards"] == [32, 16, 32] and raw["objects"] == 2
    (described,) = report["accumulation_groups"]
    arrays = [a for acc in described["accumulations"] for a in acc["arrays"].values()]
    chunks_total = 0
    for a in arrays:
        grid = a["chunk_grid"]
        per_object = grid.get("shards", grid["chunks"])
        shards = np.prod([-(-n // s) for n, s in zip(a["shape"], per_object, strict=True)])
        assert a["objects"] == shards  # one object per shard
        chunks_total += np.prod(
            [-(-n // c) for n, c in zip(a["shape"], grid["chunks"], strict=True)]
        )
    assert sum(a["objects"] for a in arrays) < chunks_total / 2
    for over, isel in (
        (["lat", "lon"], {"lat": (1, 13), "lon": (4, 30)}),
        (["time"], {"time": (3, 50)}),
    ):
        ranges = {d: labels(ds, d, *r) for d, r in isel.items()}
        result = _query(path, over, ranges)
        expected = xarray_reference(
            ds[VAR].isel({d: slice(*r) for d, r in isel.items()}), over, "area", "mean"
        )
        np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    (report,) = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    # The command line shows the shards, the objects and what the strides count.
    monkeypatch.setenv("COLUMNS", "300")  # rich wraps table cells to the terminal's width
    text = run("inspect", str(path)).stdout
    assert "in shards 32x16x32" in text
    assert f"strides count inner chunks; {sum(a['objects'] for a in arrays)} objects" in text


def test_accumulate_shards_when_asked(tmp_path):
    """``--shards`` shards the accumulation arrays of an unsharded Zarr v3 cube (its strides
    still count chunks); a Zarr v2 cube is refused in one line, nothing written."""
    ds = synthetic_dataset({"time": 48, "lat": 8, "lon": 12}, seed=9)
    path = tmp_path / "v3.zarr"
    write_cube(ds, path, {"time": 2, "lat": 4, "lon": 4}, zarr_format=3)
    accumulus.accumulate(str(path), VAR, shards=True, minimal=True)
    cube = RawCube.open(str(path))
    group = read_group(cube, VAR)
    assert group.stride_unit == spec.CHUNK
    arrays = [AccumulationGroups(cube).array(VAR, n) for a in group.accumulations
              for n in set(a.arrays.values())]  # fmt: skip
    assert all(a.shards is not None for a in arrays if a.nchunks > 1)
    assert any(a.shards is not None for a in arrays)
    ranges = {"time": labels(ds, "time", 3, 41)}
    result = _query(path, ["time"], ranges)
    expected = xarray_reference(ds[VAR].isel(time=slice(3, 41)), ["time"], "area", "mean")
    np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)

    v2 = tmp_path / "v2.zarr"
    write_cube(ds, v2, {"time": 2, "lat": 4, "lon": 4}, zarr_format=2)
    proc = run("accumulate", str(v2), VAR, "--shards", check=False)
    assert proc.returncode == 2 and "Zarr v3 only" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert not (v2 / spec.group_name(VAR)).exists()


@st.composite
def sharded_cubes(draw):
    ndim = draw(st.integers(1, 3))
    dims = ["time", "lat", "lon"][:ndim]
    sizes = {d: draw(st.integers(1, 12)) for d in dims}
    chunks = {d: draw(st.integers(1, sizes[d])) for d in dims}
    shards = {d: chunks[d] * draw(st.integers(1, 4)) for d in dims}
    combos = [c for r in range(1, ndim + 1) for c in itertools.combinations(dims, r)]
    return {
        "sizes": sizes,
        "chunks": chunks,
        "shards": shards,
        "fill_value": draw(st.sampled_from([None, -9999.0])),
        "nan_fraction": draw(st.sampled_from([0.0, 0.3, 0.9])),
        "inf_fraction": draw(st.sampled_from([0.0, 0.0, 0.02, 0.1])),
        "combos": draw(st.lists(st.sampled_from(combos), min_size=1, max_size=3, unique=True)),
        "strides": {d: draw(st.integers(1, 3)) for d in dims},
        "weights": draw(st.sampled_from(["area", "none"] if "lat" in dims else ["none"])),
        "seed": draw(st.integers(0, 2**16)),
    }


@cube_property(25)
@given(case=sharded_cubes(), data=st.data())
def test_sharded_average_equals_xarray(tmp_path_factory, case, data):
    path = tmp_path_factory.mktemp("sharded") / "cube.zarr"
    ds = case_dataset(case)
    write_cube(
        ds,
        path,
        case["chunks"],
        zarr_format=3,
        fill_value=case["fill_value"],
        shards=case["shards"],
    )
    accumulus.accumulate(
        str(path), VAR, case["combos"], weights=case["weights"], strides=case["strides"]
    )
    cube = RawCube.open(str(path))
    dims = list(case["sizes"])
    for _ in range(3):
        over = data.draw(
            st.lists(st.sampled_from(dims), min_size=1, max_size=len(dims), unique=True)
        )
        ranges, isel = drawn_ranges(data, ds, dims, case["sizes"])
        result = run_query(cube, Query(VAR, tuple(over), ranges))
        expected = xarray_reference(ds[VAR].isel(isel), over, case["weights"], "mean")
        got = result.data.transpose(*expected.dims)
        np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, atol=1e-12)
