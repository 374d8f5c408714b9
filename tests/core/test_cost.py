"""Never slower than a scan: the query estimates the time of the plan its accumulations
allow and of the plain scan of the box (chunks, bytes, measured codec and summing rates, the
store's latency), runs the faster, and the chunks of the plan it runs are what the store is
then asked for."""

from __future__ import annotations

import itertools
import json
import struct
import subprocess
import sys

import numpy as np
import pytest
import shapely

import accumulus
from accumulus import chunk_reader
from accumulus.accumulation.model.sums import reduce_terms
from accumulus.accumulation.query import cost
from accumulus.accumulation.query.answer import run_query
from accumulus.accumulation.query.cost import (
    OBJECT_STORE_LATENCY,
    RAW_SAMPLE_VALUES,
    PlanCost,
    Storage,
    plan_cost,
    scan_bound,
    scan_cost,
    storage_of,
)
from accumulus.accumulation.query.request import Query
from accumulus.chunk_reader import ChunkRequest
from accumulus.demo import DemoConfig, write_demo_cube
from accumulus.raw_cube import RawCube
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SIZES = {"time": 60, "lat": 8, "lon": 10}
CHUNKS = {"time": 10, "lat": 4, "lon": 5}
RAW_CHUNK = 10 * 4 * 5 * 4  # bytes, float32


@pytest.fixture(scope="module")
def cube_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("cost") / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=3)
    write_cube(ds, path, CHUNKS)
    accumulus.accumulate(str(path), VAR, [("time",)])
    return path, ds


@pytest.fixture(scope="module")
def cube(cube_path):
    path, ds = cube_path
    return RawCube.open(str(path)), ds


BOX = {"lat": (-80, -11), "lon": (0, 10)}  # one raw chunk: indices [0, 4) x [0, 5)
ACC_CHUNK = 6 * 8 * 10 * 8  # the time accumulation's chunks: 6 entries of the whole map


def _map(cube, days: tuple[str, str]):
    return run_query(cube, Query(VAR, ("time",), {"time": days, **BOX}))


def _expected(ds, start: int, stop: int):
    selected = ds[VAR].isel(time=slice(start, stop), lat=slice(0, 4), lon=slice(0, 5))
    return xarray_reference(selected, ["time"], "area", "mean")


def _bytes_and_requests(cost) -> tuple[int, int]:
    return cost.requests, cost.bytes


def test_scan_cost_counts_every_chunk_the_box_touches(cube):
    cube, _ = cube
    var = cube.variable(VAR)
    box = {"time": (5, 25), "lat": (0, 8), "lon": (3, 7)}
    local = scan_cost(var, [box], storage_of(cube.store), ("sum", "count"), ("time",), 2**29)
    assert _bytes_and_requests(local) == (3 * 2 * 2, 3 * 2 * 2 * RAW_CHUNK)
    # Twelve requests of small chunks: their fixed cost and little else.
    assert 12 * cost.LOCAL_REQUEST_SECONDS < local.seconds < 12 * cost.LOCAL_REQUEST_SECONDS + 0.01


@pytest.mark.parametrize("seed", range(40))
def test_scan_cost_of_several_boxes_counts_each_chunk_once(cube, seed):
    """Boxes alike but along one dimension (a season's runs of days) or along several: each
    chunk any of them touches counted once, as listing them all says."""
    cube, _ = cube
    var = cube.variable(VAR)
    rng = np.random.default_rng(seed)

    def span(size: int) -> tuple[int, int]:
        lo = int(rng.integers(size))
        return lo, int(rng.integers(lo, size)) + 1

    base = {d: span(n) for d, n in SIZES.items()}
    varying = list(rng.choice(list(SIZES), size=int(rng.integers(0, 3)), replace=False))
    boxes = [{**base, **{d: span(SIZES[d]) for d in varying}} for _ in range(rng.integers(1, 5))]
    listed = {
        coords
        for box in boxes
        for coords in itertools.product(
            *(b.chunks_overlapping(*box[d]) for d, b in zip(var.dims, var.bounds, strict=True))
        )
    }
    got = scan_cost(var, boxes, storage_of(cube.store), ("sum", "count"), ("time",), 2**29)
    assert _bytes_and_requests(got) == (len(listed), len(listed) * RAW_CHUNK)


def test_a_short_unaligned_map_is_a_scan(cube):
    """Days 5-24 of one chunk's box: the accumulations would read the entries at days 10
    and 20 (one chunk for each of the two sums) and the raw chunks at both ends: more than
    the scan's three raw chunks."""
    cube, ds = cube
    result = _map(cube, ("2001-01-06", "2001-01-25"))
    assert result.plan.accumulation_reads == []
    assert len(result.plan.raw_reads) == 1
    assert _bytes_and_requests(result.costs["scan"]) == (3, 3 * RAW_CHUNK)
    assert _bytes_and_requests(result.costs["accumulation"]) == (4, 2 * RAW_CHUNK + 2 * ACC_CHUNK)
    assert result.costs["scan"].seconds < result.costs["accumulation"].seconds
    assert "a full scan is estimated faster (3 chunks" in result.note
    assert not result.costs["scan"].at_least  # (its bound is below the accumulations')
    assert result.estimate == result.costs["scan"]
    assert result.stats.requests == 3 and result.stats.accumulation_chunks_read == 0
    np.testing.assert_allclose(result.data, _expected(ds, 5, 25), rtol=1e-9)


@pytest.mark.parametrize(
    ("days", "raw"),
    [((10, 50), 0), ((5, 55), 2)],
    ids=["aligned", "unaligned"],
)
def test_a_long_map_uses_the_accumulations(cube, days, raw):
    cube, ds = cube
    start, stop = days
    labels = tuple(str(t)[:10] for t in ds.time.values[[start, stop - 1]])
    result = _map(cube, labels)
    assert result.plan.accumulation_reads and result.note == ""
    assert result.costs["accumulation"].seconds < result.costs["scan"].seconds
    # The estimate is what the store is asked for.
    assert result.costs["accumulation"].requests == result.stats.requests
    assert result.stats.raw_chunks_read == raw
    np.testing.assert_allclose(result.data, _expected(ds, start, stop), rtol=1e-9)


def test_a_scan_that_cannot_win_is_bounded_not_estimated(cube, monkeypatch):
    """Where a lower bound of the scan (``scan_bound``) already exceeds the accumulations'
    estimate, that bound is reported (``at_least``) instead of the scan's estimate, which
    is at least as high: the same plan runs as with the estimate, reading the same."""
    cube, ds = cube
    labels = tuple(str(t)[:10] for t in ds.time.values[[10, 49]])
    bounded = _map(cube, labels)
    scan = bounded.costs["scan"]
    assert scan.at_least and scan.seconds >= bounded.costs["accumulation"].seconds
    assert str(scan).startswith("at least ")
    monkeypatch.setattr(
        "accumulus.accumulation.query.answer.scan_bound", lambda *_: PlanCost(0, 0, 0.0, True)
    )
    estimated = _map(cube, labels)
    assert not estimated.costs["scan"].at_least
    assert estimated.costs["scan"].seconds >= scan.seconds
    assert estimated.costs["scan"].requests == scan.requests  # (one box: its chunks, all)
    assert estimated.costs["scan"].bytes >= scan.bytes
    assert estimated.plan == bounded.plan and estimated.costs["accumulation"] == bounded.costs[
        "accumulation"
    ]  # fmt: skip
    np.testing.assert_array_equal(estimated.values, bounded.values)


def _disjoint_boxes(rng, sizes: dict[str, int]) -> list[dict[str, tuple[int, int]]]:
    """One to three boxes, apart along time (a season's runs), or one box."""

    def span(size: int) -> tuple[int, int]:
        lo = int(rng.integers(size))
        return lo, int(rng.integers(lo, size)) + 1

    base = {d: span(n) for d, n in sizes.items()}
    cuts = sorted(rng.choice(sizes["time"] + 1, size=2 * int(rng.integers(1, 4)), replace=False))
    return [{**base, "time": (int(a), int(b))} for a, b in itertools.pairwise(cuts)][::2]


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("blosc", [False, True], ids=["whole", "blocks"])
def test_the_scan_bound_is_at_most_its_estimate(cube, day_blocks, seed, blosc):
    """``scan_bound`` is a lower bound of ``scan_cost`` in requests, decoded bytes and
    seconds, for boxes apart (a box, a season's runs), chunks read whole or by their
    blocks, on local disk and with latency, whatever the sums and the memory allowed: the
    planner may skip the estimate wherever the bound exceeds the other plan's."""
    var = (RawCube.open(str(day_blocks)) if blosc else cube[0]).variable(VAR)
    rng = np.random.default_rng(seed)
    boxes = _disjoint_boxes(rng, DAYS if blosc else SIZES)
    terms = [("sum", "count"), ("wsum", "wcount", "posinf", "neginf"), ("sumsq", "sum", "count")]
    for storage in (Storage(0.0, True), Storage(0.0, False), Storage(0.05, False)):
        for sums, over, memory in itertools.product(
            terms, [("time",), ("lat", "lon")], [2**29, 2**22]
        ):
            bound = scan_bound(var, boxes, storage, sums, over, memory)
            estimate = scan_cost(var, boxes, storage, sums, over, memory)
            assert bound.at_least and not estimate.at_least
            assert bound.requests <= estimate.requests and bound.bytes <= estimate.bytes
            assert bound.seconds <= estimate.seconds
            if len(boxes) == 1:
                assert bound.requests == estimate.requests


def test_a_scan_asked_for_is_not_costed(cube):
    cube, _ = cube
    query = Query(VAR, ("time",), {"time": ("2001-01-06", "2001-02-24")}, use_accumulation=False)
    result = run_query(cube, query)
    assert result.costs == {} and result.plan.accumulation_reads == []


# --------------------------------------------------------------------------------------------
# The estimate against the store, every route through the same choice


def _chosen(result) -> str:
    return "accumulation" if result.plan.accumulation_reads else "scan"


@pytest.fixture(scope="module")
def uncompressed(tmp_path_factory):
    """Raw chunks stored as they decode (no compressor): a scan's bytes at the store are its
    estimated bytes. Accumulations over time and over lat+lon."""
    path = tmp_path_factory.mktemp("cost") / "plain.zarr"
    ds = synthetic_dataset({"time": 90, "lat": 16, "lon": 20}, seed=11)
    encoding = {VAR: {"chunks": (15, 4, 5), "compressors": None, "_FillValue": -9999.0}}
    ds.to_zarr(path, mode="w", zarr_format=2, consolidated=True, encoding=encoding)
    accumulus.accumulate(str(path), VAR, [("time",), ("lat", "lon")])
    return path, ds


def test_the_plan_that_runs_reads_what_its_estimate_said(uncompressed):
    """Random maps and series: the cheaper estimate runs, and the store is asked for exactly
    its chunks (the scan's bytes too, the raw chunks being stored uncompressed)."""
    path, ds = uncompressed
    cube = accumulus.open(str(path))
    rng = np.random.default_rng(5)
    chosen = set()
    for _ in range(30):
        isel = {}
        short = rng.random() < 0.5  # a few cells of each dimension, or any range
        for dim, n in ds[VAR].sizes.items():
            lo = int(rng.integers(0, n))
            hi = min(n, lo + int(rng.integers(1, 4))) if short else int(rng.integers(lo + 1, n + 1))
            isel[dim] = slice(lo, hi)
        over = ["time"] if rng.random() < 0.5 else ["lat", "lon"]
        ranges = {d: (ds[d].values[s.start], ds[d].values[s.stop - 1]) for d, s in isel.items()}
        result = cube.query(VAR, over, ranges)
        expected = xarray_reference(ds[VAR].isel(isel), over, "area", "mean")
        np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9, atol=1e-12)
        if not result.costs:  # nothing an accumulation could answer
            assert not result.plan.accumulation_reads
            continue
        kind = _chosen(result)
        chosen.add(kind)
        other = "scan" if kind == "accumulation" else "accumulation"
        assert result.costs[kind].seconds <= result.costs[other].seconds, isel
        assert result.estimate == result.costs[kind]
        assert result.stats.requests == result.costs[kind].requests, isel
        if kind == "scan":
            assert result.stats.bytes_read == result.costs["scan"].bytes
            assert result.stats.accumulation_chunks_read == 0
    assert chosen == {"accumulation", "scan"}  # both were the cheaper somewhere


def test_positioned_accumulations_go_through_the_same_choice(tmp_path):
    """Entries at every day (``--at time=1``) on raw chunks of 10 days by the whole map:
    8 days inside one chunk are cheaper read raw (one request) than from two entries of two
    arrays (four); 53 days are cheaper from the entries (four) than raw (six). Asked for,
    the accumulations' plan runs either way."""
    path = tmp_path / "cube.zarr"
    ds = synthetic_dataset(SIZES, seed=4)
    write_cube(ds, path, {"time": 10, "lat": 8, "lon": 10})
    accumulus.accumulate(str(path), VAR, ["time"], at={"time": 1})
    for (start, stop), kind in [((11, 19), "scan"), ((2, 55), "accumulation")]:
        ranges = {"time": (str(ds.time.values[start])[:10], str(ds.time.values[stop - 1])[:10])}
        cheaper = accumulus.query(str(path), VAR, "time", ranges)
        assert _chosen(cheaper) == kind, cheaper.costs
        assert cheaper.stats.requests == cheaper.costs[kind].requests
        forced = accumulus.query(str(path), VAR, "time", ranges, plan="accumulation")
        assert forced.stats.raw_chunks_read == 0 and forced.stats.accumulation_chunks_read == 4
        assert {r.key for r in forced.plan.accumulation_reads} == {"time@1"}
        expected = xarray_reference(ds[VAR].isel(time=slice(start, stop)), ["time"], "area", "mean")
        for result in (cheaper, forced):
            np.testing.assert_allclose(result.data.values, expected.values, rtol=1e-9)
    assert cheaper.costs["scan"].requests == 6 and "a full scan" not in cheaper.note


def test_shapes_go_through_the_same_choice(uncompressed):
    """A shape's plan (whole blocks from accumulations, cut blocks raw) against the scan of
    its cells: the cheaper runs, the estimates say so, and every route gives one answer."""
    path, _ = uncompressed
    # The grid is 0..47.5 E by -80..80 N: whole chunks inside, cut ones along the top.
    shape = shapely.Polygon([(-1, -85), (49, -85), (49, 60), (24, 85), (-1, 60)])
    cube = accumulus.open(str(path))
    cheaper = cube.query(VAR, "lat,lon", shape=shape)
    forced = cube.query(VAR, "lat,lon", shape=shape, plan="accumulation")
    scan = cube.query(VAR, "lat,lon", shape=shape, use_accumulation=False)
    assert forced.plan.accumulation_reads and not scan.plan.accumulation_reads
    assert cheaper.costs == forced.costs and set(cheaper.costs) == {"accumulation", "scan"}
    kind = _chosen(cheaper)
    assert cheaper.costs[kind].seconds <= min(c.seconds for c in cheaper.costs.values())
    assert cheaper.stats.requests == cheaper.costs[kind].requests
    assert forced.stats.requests == forced.costs["accumulation"].requests
    assert scan.stats.requests == cheaper.costs["scan"].requests
    for result in (cheaper, forced):
        np.testing.assert_allclose(result.data.values, scan.data.values, rtol=1e-9)


def test_json_reports_the_estimates_and_the_measured_counts_of_the_plan_that_ran(cube_path):
    path, _ = cube_path
    args = ["average", str(path), VAR, "--over", "time", "--json"]
    args += [
        "--range",
        "time=2001-01-06/2001-01-25",
        "--range",
        "lat=-80/-11",
        "--range",
        "lon=0/10",
    ]
    cheaper = json.loads(_cli(*args).stdout)
    assert set(cheaper["estimates"]) == {"accumulation", "scan"}
    assert cheaper["plan"]["accumulation_chunks_read"] == 0
    assert cheaper["plan"]["requests"] == cheaper["estimates"]["scan"]["requests"] == 3
    assert cheaper["estimates"]["scan"]["at_least"] is False
    assert "a full scan is estimated faster" in cheaper["note"]
    # The estimate of the plan that ran beside its measured time.
    assert cheaper["plan"]["estimated_seconds"] == cheaper["estimates"]["scan"]["seconds"] > 0
    assert cheaper["plan"]["seconds"] > 0
    forced = json.loads(_cli(*args, "--plan", "accumulation").stdout)
    assert forced["plan"]["accumulation_chunks_read"] > 0
    assert forced["plan"]["requests"] == forced["estimates"]["accumulation"]["requests"]
    np.testing.assert_allclose(forced["values"], cheaper["values"], rtol=1e-9)
    refused = _cli(*args, "--plan", "fastest", check=False)
    assert refused.returncode == 2 and "unknown plan 'fastest'" in refused.stderr


# --------------------------------------------------------------------------------------------
# Seconds, not request counts


@pytest.fixture(scope="module")
def monthly(tmp_path_factory):
    """The case of issue 37: 730 days x 30 x 60, raw chunks of 73 days (525 KB), time
    entries at month ends."""
    path = tmp_path_factory.mktemp("cost") / "monthly.zarr"
    write_demo_cube(path, DemoConfig(days=730, resolution=6.0, chunks=(73, 30, 60)))
    accumulus.accumulate(str(path), "precip", at="time=month")
    return path


def test_a_month_map_reads_the_small_entries_not_the_large_raw_chunks(monthly):
    """Four chunks of entries against two raw chunks: fewer requests, but 1 MB to decode
    and sum instead of 60 KB. The estimate in seconds picks the entries."""
    month = {"time": ("2000-03-01", "2000-03-31")}
    result = accumulus.query(str(monthly), "precip", "time", month)
    assert result.costs["scan"].requests < result.costs["accumulation"].requests
    assert result.costs["accumulation"].seconds < result.costs["scan"].seconds
    assert result.stats.raw_chunks_read == 0 and result.stats.accumulation_chunks_read == 4
    scan = accumulus.query(str(monthly), "precip", "time", month, use_accumulation=False)
    np.testing.assert_allclose(result.data.values, scan.data.values, rtol=1e-9)


def test_latency_is_a_round_trip_per_wave_of_chunks(monthly):
    """Through a store adding 50 ms per request the estimate includes one round trip for a
    plan whose chunks fit in memory at once, as many as waves for one that does not; on
    local disk none."""
    month = {"time": ("2000-03-01", "2000-03-31")}
    slow = CountingStore(open_store(str(monthly)), latency=0.05)
    assert storage_of(slow).latency == 0.05 and not storage_of(slow).in_thread
    remote = accumulus.query(slow, "precip", "time", month)
    local = accumulus.query(str(monthly), "precip", "time", month)
    for name in ("accumulation", "scan"):
        assert 0.05 < remote.costs[name].seconds < 0.05 + 0.5
        assert local.costs[name].seconds < 0.05
    # Memory for one raw chunk of 525 KB at a time: the year's 6 chunks are 6 waves.
    year = {"time": ("2000-01-01", "2000-12-31")}
    tight = accumulus.query(slow, "precip", "time", year, use_accumulation=False,
                            memory_bytes=800_000)  # fmt: skip
    assert tight.stats.raw_chunks_read == 6
    assert tight.estimate.seconds >= 6 * 0.05


def test_object_storage_without_a_known_latency_is_given_a_round_trip():
    """A store that is not a local directory, memory or zip file is object storage."""
    from zarr.storage import FsspecStore, LocalStore

    remote = FsspecStore.from_url("memory://cost-remote", read_only=True)
    assert storage_of(remote).latency == OBJECT_STORE_LATENCY
    assert storage_of(LocalStore(".")).latency == 0.0


def test_codec_rates_are_measured_once_per_process(monthly):
    cube = RawCube.open(str(monthly))
    array = cube.variable("precip").array
    first = cost.decode_rate(array)
    assert 0 < first.per_unit < 1e-6  # seconds per byte: any codec decodes faster than 1 MB/s
    assert 0 < first.per_chunk < 0.01  # a call
    assert cost.decode_rate(array) == first


@pytest.mark.parametrize("over", [("time",), ("lat", "lon")])
def test_the_raw_summing_rate_is_measured_on_a_block_that_sums_something(
    tmp_path, monkeypatch, over
):
    """The raw summing rate is measured on a block of a chunk's shape as large as
    ``RAW_SAMPLE_VALUES`` allows, whose summed axes are longer than one value: a block of
    one day summed along time sums nothing, and a scan costed at that rate looked 3x cheaper
    than it ran (a 11-day map read by a scan in 4.5 ms, estimated 1.6; the accumulations 2.5)."""
    sizes = {"time": 41, "lat": 180, "lon": 360}
    path = tmp_path / "c.zarr"
    write_cube(synthetic_dataset(sizes, seed=3), path, chunks=sizes)
    var = RawCube.open(str(path)).variable(VAR)
    shapes = []

    def recording(values, weights, terms, axes, times):
        shapes.append((values.shape, axes))
        return reduce_terms(values, weights, terms, axes, times=times)

    monkeypatch.setattr(cost, "reduce_terms", recording)
    monkeypatch.setattr(cost, "_RATES", {})
    monkeypatch.setattr(cost, "_RAW", cost.IdentityMemo())
    rate = cost.raw_sum_rate(var, ("sum", "count"), over)
    assert 0 < rate.per_unit < 1e-6
    block, axes = max(shapes, key=lambda s: np.prod(s[0]))
    assert RAW_SAMPLE_VALUES // 2 <= np.prod(block) <= RAW_SAMPLE_VALUES
    assert block[1:] == (180, 360)  # a chunk's trailing axes, whole
    assert all(block[a] > 1 for a in axes)


def _cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, timeout=120
    )
    assert not check or result.returncode == 0, result.stderr
    return result


# A chunk read in part: a raw day at a map's end, of a cube whose Blosc blocks hold one day
# each (``ingest.layout.step_blocksize``, as ``append`` writes), is read by byte ranges of
# only its block (``chunk_reader.part_reads``), and costed so.
DAYS = {"time": 40, "lat": 64, "lon": 256}
DAY = DAYS["lat"] * DAYS["lon"] * 4  # bytes of one float32 step: 64 KiB, one Blosc block
STEPS = 20  # per raw chunk


@pytest.fixture(scope="module")
def day_blocks(tmp_path_factory):
    import numcodecs

    from accumulus.ingest.layout import step_blocksize

    path = tmp_path_factory.mktemp("blocks") / "cube.zarr"
    chunks = (STEPS, DAYS["lat"], DAYS["lon"])
    blocksize = step_blocksize(chunks, 4)
    assert blocksize == DAY // 4  # (in values)
    blosc = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, blocksize=blocksize)
    encoding = {VAR: {"chunks": chunks, "compressors": [blosc], "_FillValue": -9999.0}}
    synthetic_dataset(DAYS, seed=8).to_zarr(
        path, zarr_format=2, consolidated=True, encoding=encoding
    )
    # c-blosc's blocks are the requested size times the type size: one day each.
    header = (path / VAR / "0.0.0").read_bytes()[:16]
    assert struct.unpack("<BBBBiii", header)[5] == DAY
    return path


def _raw_cost(store, needed=None, regions=None):
    cube = RawCube.open(store)
    var = cube.variable(VAR)
    request = ChunkRequest(var.array, (0, 0, 0), needed=needed, regions=regions)
    storage = storage_of(cube.store)
    return plan_cost([request], var, storage, ("sum", "count"), ("time",), 2**29)


def _days(first: int, stop: int) -> tuple[slice, ...]:
    return (slice(first, stop), slice(0, DAYS["lat"]), slice(0, DAYS["lon"]))


def test_a_day_of_a_local_chunk_is_costed_as_its_block(day_blocks):
    """On local disk one day of a 20-day chunk decodes one block (64 KiB), not the chunk
    (1.25 MiB); a range's two ends in one chunk, the two blocks; all of it, the chunk."""
    whole = _raw_cost(str(day_blocks))
    assert whole.bytes == STEPS * DAY
    day = _raw_cost(str(day_blocks), _days(7, 8))
    assert (day.requests, day.bytes) == (1, DAY)
    assert day.seconds < whole.seconds
    ends = _raw_cost(str(day_blocks), _days(2, 18), (_days(2, 3), _days(17, 18)))
    assert ends.bytes == 2 * DAY
    # Part of a day's map: the span from its first value to its last, rounded out to blocks.
    corner = (slice(7, 8), slice(0, 4), slice(0, 8))
    assert _raw_cost(str(day_blocks), corner).bytes == DAY
    assert _raw_cost(str(day_blocks), _days(0, STEPS)).bytes == STEPS * DAY


def test_a_day_of_an_object_stores_chunk_costs_a_round_trip_more(day_blocks, monkeypatch):
    """Through a store adding 50 ms per request a chunk read in part is read by byte ranges
    (the header first: one round trip more) where enough is left unread
    (``REMOTE_RANGED_SAVES``), else whole, in one round trip."""
    slow = CountingStore(open_store(str(day_blocks)), latency=0.05)
    whole = _raw_cost(slow)
    assert whole.bytes == STEPS * DAY and 0.05 <= whole.seconds < 0.1
    # 1.2 MiB left unread: below the threshold, read whole.
    assert _raw_cost(slow, _days(7, 8)) == whole
    monkeypatch.setattr(chunk_reader, "REMOTE_RANGED_SAVES", 2**20)
    day = _raw_cost(slow, _days(7, 8))
    assert day.bytes == DAY and 0.1 <= day.seconds < 0.15


def _listed(var, box):
    """The scan's chunks of ``box`` as requests, each needing its part of the box."""
    per_dim = [b.chunks_overlapping(*box[d]) for d, b in zip(var.dims, var.bounds, strict=True)]
    for coords in itertools.product(*per_dim):
        needed = []
        for d, b, c in zip(var.dims, var.bounds, coords, strict=True):
            lo, hi = box[d]
            edge = b.edges[c]
            needed.append(slice(max(lo, edge) - edge, min(hi, b.edges[c + 1]) - edge))
        yield ChunkRequest(var.array, coords, needed=tuple(needed))


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("remote", [False, True], ids=["local", "latency"])
def test_a_scan_is_costed_as_its_chunks_are_read(day_blocks, monkeypatch, seed, remote):
    """A scan reads each raw chunk's part of the box as a plan's request does: its estimate
    (counted for all chunks at once) is the one of its chunks listed as requests."""
    monkeypatch.setattr(chunk_reader, "REMOTE_RANGED_SAVES", 2**20)
    store = CountingStore(open_store(str(day_blocks)), latency=0.05) if remote else str(day_blocks)
    cube = RawCube.open(store)
    var = cube.variable(VAR)
    storage = storage_of(cube.store)
    rng = np.random.default_rng(seed)
    box = {}
    for d, n in DAYS.items():
        lo = int(rng.integers(n)) if rng.random() < 0.7 or d == "time" else 0
        box[d] = (lo, int(rng.integers(lo, n)) + 1 if lo or rng.random() < 0.5 else n)
    scanned = scan_cost(var, [box], storage, ("sum", "count"), ("time",), 2**29)
    listed = plan_cost(list(_listed(var, box)), var, storage, ("sum", "count"), ("time",), 2**29)
    assert (scanned.requests, scanned.bytes) == (listed.requests, listed.bytes)
    assert scanned.seconds == pytest.approx(listed.seconds, rel=1e-9)


def test_a_few_days_scanned_are_costed_as_their_blocks(day_blocks):
    cube = RawCube.open(str(day_blocks))
    var = cube.variable(VAR)

    def scanned(first: int, stop: int) -> int:
        box = {"time": (first, stop), "lat": (0, DAYS["lat"]), "lon": (0, DAYS["lon"])}
        return scan_cost(var, [box], storage_of(cube.store), ("sum",), ("time",), 2**29).bytes

    assert scanned(7, 8) == DAY
    assert scanned(15, 25) == 10 * DAY  # days 15-19 of the first chunk, 0-4 of the second
    assert scanned(0, 40) == 40 * DAY


@pytest.mark.parametrize("seed", range(6))
def test_chunks_needing_the_same_parts_are_costed_as_each_alone(day_blocks, seed):
    """What a chunk decodes of the parts it needs is worked out once per array and parts
    (``plan_cost``): chunks needing the same days, other days, two ends or all of it are
    costed as each would be alone."""
    cube = RawCube.open(str(day_blocks))
    var = cube.variable(VAR)
    rng = np.random.default_rng(seed)
    requests = []
    for _ in range(12):
        first = int(rng.integers(STEPS))
        stop = int(rng.integers(first, STEPS)) + 1
        needed, regions = _days(first, stop), None
        if rng.random() < 0.3 and stop - first > 2:  # the range's two ends
            regions = (_days(first, first + 1), _days(stop - 1, stop))
        elif rng.random() < 0.2:  # all of the chunk
            needed = None
        coords = (int(rng.integers(2)), 0, 0)
        requests += [ChunkRequest(var.array, coords, needed=needed, regions=regions)] * int(
            rng.integers(1, 3)
        )
    storage = storage_of(cube.store)
    together = plan_cost(requests, var, storage, ("sum", "count"), ("time",), 2**29)
    alone = [plan_cost([r], var, storage, ("sum", "count"), ("time",), 2**29) for r in requests]
    assert together.requests == len(requests)
    assert together.bytes == sum(cost.bytes for cost in alone)
