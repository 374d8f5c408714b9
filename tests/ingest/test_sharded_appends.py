"""Appends into sharded Zarr v3 cubes (issue 19, part 3): ``append --shards`` creates the
data variables in shards; an append writes only the shards it touches (a shard the previous
append left partial is rewritten with its old inner chunks and the new ones, once per
commit), keeps accumulations current by reading only the inner chunks past their old
coverage, and answers equal xarray's on the data appended (NaN, ``_FillValue``, a partial
shard at the array's end). Bad ``--shards`` values are one-line errors, nothing written."""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import zarr
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from zarr.abc.store import RangeByteRequest

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from cubes import labels, synthetic_dataset, xarray_reference

from .helpers import VAR, cli, snapshot, truth, write_granule, write_granules

CHUNKS = {"time": 2, "lat": 3}
SHARDS = {"time": 6, "lat": 6}  # 3 x 2 inner chunks per shard (lat 6: one shard across)


class LoggingStore(CountingStore):
    """Counts requests, and logs every request for a chunk object of ``VAR``: ("get", key,
    byte range or None for the whole object, whether it was found) and ("set", key)."""

    def __init__(self, store, **options) -> None:
        super().__init__(store, **options)
        self.log: list[tuple] = []

    def _with_store(self, store):
        view = super()._with_store(store)
        view.log = self.log
        return view

    async def get(self, key, prototype, byte_range=None):
        value = await super().get(key, prototype, byte_range)
        if key.startswith(f"{VAR}/c/"):
            self.log.append(("get", key, byte_range, value is not None))
        return value

    async def set(self, key, value):
        if key.startswith(f"{VAR}/c/"):
            self.log.append(("set", key))
        return await super().set(key, value)

    def written(self) -> Counter:
        return Counter(entry[1] for entry in self.log if entry[0] == "set")

    def whole_reads(self) -> set[str]:
        """Objects read whole (that existed)."""
        return {e[1] for e in self.log if e[0] == "get" and e[2] is None and e[3]}

    def inner_chunk_reads(self) -> int:
        return sum(1 for e in self.log if e[0] == "get" and isinstance(e[2], RangeByteRequest))


def shard_keys(lo: int, hi: int, shard: int = SHARDS["time"]) -> set[str]:
    """Keys of the shards holding time steps [lo, hi) (one shard across lat and lon)."""
    return {f"{VAR}/c/{s}/0/0" for s in range(lo // shard, (hi - 1) // shard + 1)}


def sharded_cube(tmp_path, t, steps: int, **options):
    store = tmp_path / "cube.zarr"
    first = write_granule(tmp_path / "first.nc", t, 0, steps)
    result = accumulus.append(str(store), first, chunks=CHUNKS, shards=SHARDS, **options)
    return store, result


def test_append_creates_the_data_in_shards(tmp_path):
    t = truth(10)
    store, result = sharded_cube(tmp_path, t, 10)
    assert "data in shards time=6, lat=6, lon=8 (6 chunks of precip per shard" in (
        result.chunking.reason
    )
    array = zarr.open_array(store / VAR, mode="r")
    assert array.metadata.zarr_format == 3
    assert array.chunks == (2, 3, 8) and array.shards == (6, 6, 8)
    # Coordinates along time are small 1-D arrays: not sharded.
    assert zarr.open_array(store / "time", mode="r").shards is None
    assert sorted(p.name for p in (store / VAR / "c").iterdir()) == ["0", "1"]
    xr.testing.assert_allclose(xr.open_zarr(store)[VAR].load(), t.decoded(10)[VAR])


@pytest.mark.parametrize(
    ("old", "new"),
    [(7, 10), (6, 13), (7, 25), (8, 12), (3, 30)],
    ids=["inside-partial-shard", "from-shard-edge", "several-shards", "fills-exactly", "many"],
)
def test_append_rewrites_only_the_shards_it_touches(tmp_path, old, new):
    t = truth(new)
    store, _ = sharded_cube(tmp_path, t, old)
    before = snapshot(store)
    counting = LoggingStore(open_store(store, "r+"))
    # Granules of 1 to 3 steps: shards fill over several granules, and several commits.
    cuts = [old, *range(old + 1 + old % 3, new, 3), new]
    granules = [write_granule(tmp_path / f"g{a}.nc", t, a, b) for a, b in itertools.pairwise(cuts)]

    result = accumulus.append(counting, granules)

    written = counting.written()
    assert set(written) == shard_keys(old, new)
    # Each shard is written at most once per commit: whole once full, partial at a commit.
    assert max(written.values()) <= result.commits
    assert sum(written.values()) <= len(shard_keys(old, new)) + result.commits
    # Read back whole (zarr keeps its old inner chunks): only the shard the cube's old end
    # left partial, if any; every other write covers its shard from its start.
    partial = shard_keys(old, old + 1) if old % SHARDS["time"] else set()
    assert counting.whole_reads() == partial
    # Shards before the old partial one are untouched, byte for byte.
    after = snapshot(store)
    for key in before:
        if key.startswith(f"{VAR}/c/") and key not in shard_keys(old, new):
            assert after[key] == before[key], key
    ds = xr.open_zarr(store)
    xr.testing.assert_allclose(ds[VAR].load(), t.decoded(new)[VAR])
    assert zarr.open_array(store / VAR, mode="r").shards == (6, 6, 8)


@pytest.mark.parametrize("archive", [13, 49])
def test_update_reads_only_inner_chunks_past_the_old_coverage(tmp_path, archive):
    """Accumulations are brought up to date from the inner chunks past their old coverage,
    read as byte ranges of their shards: the same number whatever the archive's size."""
    t = truth(archive + 8)
    store, _ = sharded_cube(tmp_path, t, archive)
    accumulus.accumulate(str(store), VAR)
    counting = LoggingStore(open_store(store, "r+"))

    result = accumulus.append(counting, write_granule(tmp_path / "b.nc", t, archive, archive + 8))

    assert result.accumulations == (VAR,) and result.commits == 1
    # Coverage ends at the last complete inner chunk (12 or 48); the append ends at 21 or 57.
    covered = archive // CHUNKS["time"] * CHUNKS["time"]
    rows = -(-(archive + 8 - covered) // CHUNKS["time"])  # inner chunk rows past it
    assert counting.inner_chunk_reads() == rows * 2  # two lat chunks per row
    assert counting.whole_reads() <= shard_keys(archive, archive + 8)
    assert all(report.ok for report in accumulus.verify(str(store)))
    check_answers(store, t.decoded(archive + 8))
    stats = accumulus.query(str(store), VAR, "lat,lon").stats
    assert stats.accumulation_chunks_read > 0


def check_answers(store, expected: xr.Dataset, ranges: dict | None = None) -> None:
    """Averages of the cube, with and without accumulations, equal xarray's on ``expected``:
    over the whole cube, and over time steps reaching the end (the partial last shard)."""
    data = expected[VAR]
    n = data.sizes["time"]
    cases = [(("lat", "lon"), {}), (("time",), {})]
    cases.append((("time",), {"time": (n // 3, n)}))
    cases.append((("lat", "lon"), {"time": (max(0, n - 5), n), "lat": (1, data.sizes["lat"])}))
    for over, isel in cases:
        ranges = {d: _labels(expected, d, lo, hi) for d, (lo, hi) in isel.items()}
        subset = data.isel({d: slice(*r) for d, r in isel.items()})
        want = xarray_reference(subset, over, "area", "mean")
        for use in (True, False):
            got = accumulus.average(str(store), VAR, over, ranges, use_accumulation=use)
            np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


def _labels(ds: xr.Dataset, dim: str, lo: int, hi: int) -> tuple:
    """Inclusive labels of indices [lo, hi) (times to the second: steps are 3-hourly)."""
    if dim != "time":
        return labels(ds, dim, lo, hi)
    values = pd.DatetimeIndex(ds["time"].values)
    return (values[lo].isoformat(), values[hi - 1].isoformat())


@st.composite
def sharded_sequences(draw):
    steps = draw(st.integers(3, 26))
    cuts = sorted(draw(st.sets(st.integers(1, steps - 1), max_size=6)))
    granules = list(zip([0, *cuts], [*cuts, steps], strict=True))
    calls, left = [], list(range(len(granules)))
    while left:
        take = draw(st.integers(1, len(left)))
        calls.append(left[:take])
        left = left[take:]
    chunk = draw(st.integers(1, 4))
    lat_chunk = draw(st.integers(1, 5))
    return {
        "steps": steps,
        "granules": granules,
        "calls": calls,
        "chunks": {"time": chunk, "lat": lat_chunk},
        "shards": {"time": chunk * draw(st.integers(1, 4)), "lat": lat_chunk * 2},
        "nan": draw(st.booleans()),  # float data with NaN, or packed int16 with _FillValue
        "stride": draw(st.integers(1, 3)),
        "seed": draw(st.integers(0, 1000)),
    }


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=sharded_sequences())
def test_answers_after_any_sequence_of_sharded_appends(tmp_path_factory, case):
    folder = tmp_path_factory.mktemp("sharded")
    if case["nan"]:
        ds = synthetic_dataset(
            {"time": case["steps"], "lat": 5, "lon": 4}, seed=case["seed"], nan_fraction=0.3
        )
        ds[VAR].values[1] = np.nan  # a step with no valid value at all
        items = [ds.isel(time=slice(a, b)) for a, b in case["granules"]]
        expected = ds
    else:
        t = truth(case["steps"], nlat=5, nlon=4, seed=case["seed"])
        items = [
            write_granule(folder / f"g{i}.nc", t, a, b) for i, (a, b) in enumerate(case["granules"])
        ]
        expected = t.decoded()
    store = folder / "cube.zarr"
    first, *rest = case["calls"]
    accumulus.append(
        str(store), [items[i] for i in first], chunks=case["chunks"], shards=case["shards"]
    )
    accumulus.accumulate(str(store), VAR, ["time", "lat,lon"], strides={"time": case["stride"]})
    done = first
    check_answers(store, expected.isel(time=slice(0, case["granules"][done[-1]][1])))
    for call in rest:
        accumulus.append(str(store), [items[i] for i in call])
        done = done + call
        check_answers(store, expected.isel(time=slice(0, case["granules"][done[-1]][1])))
    array = zarr.open_array(store / VAR, mode="r")
    assert array.shards == (case["shards"]["time"], case["shards"]["lat"], 4)
    reports = accumulus.verify(str(store))
    assert reports and all(r.ok for r in reports), [r.problems for r in reports]


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_cli_appends_in_shards(tmp_path):
    t = truth(20)
    granules = list(map(str, write_granules(tmp_path / "in", t, 4)))
    store = str(tmp_path / "cube.zarr")
    created = cli(
        "append", store, *granules[:2], "--zarr-format", "3", "--chunks", "time=2,lat=3",
        "--shards", "time=6,lat=6",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert "data in shards time=6, lat=6, lon=8" in " ".join(created.stdout.split())
    assert cli("accumulate", store, VAR).returncode == 0
    # Later appends need no option; the same --shards is accepted.
    again = cli("append", store, *granules, "--shards", "time=6")
    assert again.returncode == 0, again.stderr
    assert f"accumulations updated for {VAR}" in " ".join(again.stdout.split())
    assert zarr.open_array(tmp_path / "cube.zarr" / VAR, mode="r").shards == (6, 6, 8)
    check_answers(store, t.decoded())


def assert_one_line_error(run, message: str) -> None:
    """Exit 2 and one error line (after the progress bar, if the granules were checked)."""
    assert run.returncode == 2, run.stdout
    errors = [line for line in run.stderr.splitlines() if "error" in line]
    assert errors == [run.stderr.strip().splitlines()[-1]], run.stderr
    assert message in errors[0]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--shards", "time=5"], "--shards time=5: a shard holds whole chunks, and precip's "
         "chunks are 2 along time; give a multiple of 2"),
        (["--shards", "depth=4"], "--shards names dimension(s) ['depth'] that the granule "
         "does not have"),
        (["--shards", "time=0"], "--shards time must be a positive integer, got 0"),
        (["--shards", "time=six"], "--shards time must be a positive integer, got 'six'"),
        (["--shards", "6"], "--shards must look like dim=value, got '6'"),
        (["--zarr-format", "2", "--shards", "time=4"], "--shards needs Zarr v3"),
        (["--chunking", "month", "--shards", "time=4"], "--shards with --chunking month"),
    ],
)  # fmt: skip
def test_bad_shards_on_creation(tmp_path, options, message):
    t = truth(8)
    granule = str(write_granule(tmp_path / "a.nc", t, 0, 8))
    store = tmp_path / "cube.zarr"
    chunks = [] if "--chunking" in options else ["--chunks", "time=2"]
    run = cli("append", str(store), granule, *chunks, *options)
    assert_one_line_error(run, message)
    assert not store.exists()


@pytest.mark.parametrize(
    ("sharded", "options", "message"),
    [
        (True, ["--shards", "time=12"], "precip is in shards time=6; --shards applies when a "
         "cube is created"),
        (False, ["--shards", "time=6"], "precip is not sharded; --shards applies when a cube "
         "is created"),
        (True, ["--chunks", "time=6"], "precip is chunked time=2; --chunks and --chunking "
         "apply when a cube is created"),
    ],
)  # fmt: skip
def test_shards_cannot_change_an_existing_cube(tmp_path, sharded, options, message):
    t = truth(12)
    store = tmp_path / "cube.zarr"
    first = write_granule(tmp_path / "a.nc", t, 0, 8)
    shards = SHARDS if sharded else None
    accumulus.append(str(store), first, chunks=CHUNKS, shards=shards, zarr_format=3)
    before = snapshot(store)
    run = cli("append", str(store), str(write_granule(tmp_path / "b.nc", t, 8, 12)), *options)
    assert_one_line_error(run, message)
    assert snapshot(store) == before
