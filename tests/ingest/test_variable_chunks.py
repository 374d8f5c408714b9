"""Appends with variable chunks along time (ZEP 3, a rectilinear grid of Zarr v3):
``--chunking per-granule`` keeps each granule a chunk, ``--chunking month`` starts a chunk
with each month and declares the month being filled whole. Accumulations stay current,
whole months are answered from them alone, answers equal xarray's on the raw data, no
chunk a reader relies on changes size, and Zarr v2 is refused."""

from __future__ import annotations

import itertools
import json

import numpy as np
import pytest
import xarray as xr
import zarr

import accumulus
from accumulus.accumulation.model.groups import read_group
from accumulus.grid import array_bounds, declared_chunk_sizes, last_chunk_is_partial
from accumulus.ingest.append import unpublished_writer as writer_module
from accumulus.raw_cube import RawCube
from accumulus.stores.counting import CountingStore
from accumulus.stores.opening import open_store
from cubes import xarray_reference
from varchunk.conftest import daily_dataset, daily_times, period_counts

from .helpers import VAR, check_visible, cli, snapshot, truth, write_granule
from .test_recovery import Crash, crash_on_call

WEIGHTS = ["time", "lat,lon"]


@pytest.fixture(autouse=True)
def rectilinear_chunks():
    """These tests also read variable chunk grids with zarr itself, which needs zarr's
    setting on (accumulus turns it on for its own calls only)."""
    with zarr.config.set({"array.rectilinear_chunks": True}):
        yield


def daily(calendar: str, start: str, days: int, seed: int = 5) -> xr.Dataset:
    """Daily granules' source: the cube stores -9999 for missing values."""
    ds = daily_dataset(calendar, start, days, seed=seed)
    ds[VAR].encoding["_FillValue"] = -9999.0
    return ds


def time_chunks(store) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The data's chunks along time: sizes of the data in each, and as declared."""
    array = zarr.open_array(store / VAR, mode="r")
    return array_bounds(array)[0].sizes, declared_chunk_sizes(array, 0)


def written_time_chunks(counting: CountingStore) -> set[int]:
    """Indices along time of the data chunks an append wrote (keys ``precip/c/<t>/0/0``)."""
    prefix = f"{VAR}/c/"
    return {
        int(k[len(prefix) :].split("/")[0]) for k in counting.counts.writes if k.startswith(prefix)
    }


def month_query(store, times, lo: int, hi: int) -> accumulus.QueryResult:
    """The accumulations' plan, even where a scan of this tiny cube reads less."""
    ranges = {"time": (times[lo], times[hi - 1])}
    return accumulus.query(str(store), VAR, "time", ranges, plan="accumulation")


def xarray_time_mean(ds: xr.Dataset, lo: int, hi: int) -> np.ndarray:
    return xarray_reference(ds[VAR].isel(time=slice(lo, hi)), ["time"], "area", "mean").values


# --------------------------------------------------------------------------------------------
# per-granule


GRANULE_STEPS = [5, 1, 7, 3, 9, 2, 4]


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_per_granule_keeps_each_granule_a_chunk(tmp_path):
    t = truth(sum(GRANULE_STEPS))
    edges = np.cumsum([0, *GRANULE_STEPS]).tolist()
    files = [
        str(write_granule(tmp_path / f"g{k}.nc", t, a, b))
        for k, (a, b) in enumerate(itertools.pairwise(edges))
    ]
    store = tmp_path / "sensor.zarr"

    created = cli("append", str(store), *files[:3], "--dim", "time", "--chunking", "per-granule")

    assert created.returncode == 0, created.stderr
    assert "chunks time=per-granule, lat=6, lon=8 (one chunk per granule" in created.stdout
    root = zarr.open_group(store, mode="r")
    assert root.metadata.zarr_format == 3  # chosen for the variable chunks
    assert root.attrs["accumulus"] == {"append_dim": "time", "chunking": "per-granule"}
    assert time_chunks(store) == (tuple(GRANULE_STEPS[:3]),) * 2
    accumulus.accumulate(str(store), VAR, WEIGHTS)

    for k in range(3, len(files)):
        result = accumulus.append(str(store), files[k])  # the cube remembers its rule
        assert result.accumulations == (VAR,)  # every granule is a complete chunk: final
        assert check_visible(store, t, {edges[k + 1]}) == edges[k + 1]
        assert all(report.ok for report in accumulus.verify(str(store), VAR))

    assert time_chunks(store) == (tuple(GRANULE_STEPS),) * 2
    inspected = cli("inspect", str(store), "--json")
    arrays = {a["path"]: a for a in json.loads(inspected.stdout)["arrays"]}
    assert arrays[VAR]["chunk_grid"] == {
        "type": "rectilinear",
        "chunk_sizes": [GRANULE_STEPS, [6], [8]],
    }
    assert arrays["time"]["chunk_grid"]["type"] == "regular"  # 1-D coordinates: ~1 MiB chunks
    # Whole granules come from the accumulations alone.
    decoded = t.decoded()
    for lo, hi in [(0, 5), (5, 16), (13, 31)]:
        times = decoded["time"].values
        result = month_query(store, times, lo, hi)
        assert result.stats.raw_chunks_read == 0
        np.testing.assert_allclose(result.data.values, xarray_time_mean(decoded, lo, hi), rtol=1e-9)


# --------------------------------------------------------------------------------------------
# month


MONTH_GRANULES = [4, 1, 6, 9, 13, 2, 31, 20, 14]  # days from 2003-11-25: through 2004-03-03


@pytest.mark.parametrize("calendar", ["standard", "noleap", "360_day"])
def test_daily_appends_by_month(tmp_path, calendar):
    ds = daily(calendar, "2003-11-25", sum(MONTH_GRANULES))
    times = ds["time"].values
    whole_months = period_counts(daily_times(calendar, "2003-11-25", 200), "MS")
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), ds.isel(time=slice(0, MONTH_GRANULES[0])), chunking="month")
    accumulus.accumulate(str(store), VAR, WEIGHTS, weights="area")
    done = MONTH_GRANULES[0]

    for added in MONTH_GRANULES[1:]:
        old_sizes = time_chunks(store)[1]
        counting = CountingStore(open_store(store, "r+"))
        accumulus.append(counting, ds.isel(time=slice(done, done + added)))
        done += added

        sizes, declared = time_chunks(store)
        assert list(sizes) == period_counts(times[:done], "MS")  # one chunk per month
        assert declared == tuple(whole_months[: len(declared)])  # the open month, whole
        assert declared[: len(old_sizes)] == old_sizes  # no stored chunk changed size
        bounds = array_bounds(zarr.open_array(store / VAR, mode="r"))[0]
        # Only the chunks that received values were written: new ones, and the old partial.
        assert written_time_chunks(counting) == set(bounds.chunks_overlapping(done - added, done))

        xr.testing.assert_identical(
            xr.open_zarr(store)[VAR].load(), ds[VAR].isel(time=slice(0, done))
        )
        open_month = last_chunk_is_partial(zarr.open_array(store / VAR, mode="r"), 0)
        coverage = accumulus.open(str(store)).accumulation_group(VAR).coverage["time"]
        assert coverage == (bounds.edges[-2] if open_month else done)
        assert all(report.ok for report in accumulus.verify(str(store), VAR))
        for k in range(bounds.n_chunks):
            lo, hi = bounds.edges[k], bounds.edges[k + 1]
            result = month_query(store, times, lo, hi)
            np.testing.assert_allclose(result.data.values, xarray_time_mean(ds, lo, hi), rtol=1e-9)
            # Complete months from the prefix sums alone; the month being filled is read raw.
            assert result.stats.raw_chunks_read == (1 if hi > coverage else 0)


def test_older_snapshots_stay_right_when_months_are_split_or_cut_short(tmp_path):
    """Appends that would change a stored chunk's size under the month rule keep it instead:
    one-day granules at the start (too few values to show the frequency) leave January 30 and
    31 in chunks of their own; February, cut short by missing days, lends the rest of its
    chunk to March. A reader holding each older snapshot reads the same values and averages
    after every later append."""
    ds = daily("standard", "2004-01-30", 64)  # to April 2
    steps = [(0, 1), (1, 2), (2, 12), (31, 41), (41, 47), (47, 64)]  # Feb 11-29 never come
    kept = ds.isel(time=[i for a, b in steps for i in range(a, b)])
    store = tmp_path / "cube.zarr"
    readers: list[tuple[RawCube, int]] = []
    done = 0
    for k, (a, b) in enumerate(steps):
        accumulus.append(str(store), ds.isel(time=slice(a, b)), chunking="month")
        done += b - a
        if k == 1:
            accumulus.accumulate(str(store), VAR, WEIGHTS)
        readers.append((RawCube.open(str(store)), done))
        for reader, seen in readers:  # every snapshot opened so far, older ones included
            np.testing.assert_array_equal(
                reader.decoded[VAR].values, kept[VAR].values[:seen].astype("f8")
            )
            if read_group(reader, VAR) is not None:
                got = accumulus.average(reader, VAR, "time")
                np.testing.assert_allclose(got.values, xarray_time_mean(kept, 0, seen), rtol=1e-9)
        assert all(report.ok for report in accumulus.verify(str(store), VAR))

    sizes, declared = time_chunks(store)
    # Jan 30 | Jan 31 | Feb 1-10 + Mar 1-19 (February's 29 days) | Mar 20-31 | Apr 1-2 (of 30)
    assert declared == (1, 1, 29, 12, 30) and sizes == (1, 1, 29, 12, 2)


# --------------------------------------------------------------------------------------------
# Interruptions


def test_a_rerun_with_other_granules_overwrites_what_an_interrupted_run_left(tmp_path, monkeypatch):
    """A run dies after writing February's chunk (28 days) but before its commit. The next run
    is given other granules: February now starts on the 5th, and its chunk, declared 24 days,
    replaces the dead run's 28-day object (zarr writes it whole: nothing is read back under
    the new size)."""
    ds = daily("noleap", "2003-01-01", 70)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), ds.isel(time=slice(0, 31)), chunking="month")
    with monkeypatch.context() as patch:
        # Dies once its chunks are written, before it grows any array's metadata.
        resize = writer_module.UnpublishedWriter.resize
        patch.setattr(writer_module.UnpublishedWriter, "resize", crash_on_call(resize, 1))
        with pytest.raises(Crash):
            accumulus.append(str(store), ds.isel(time=slice(31, 62)))
    assert (store / VAR / "c" / "1" / "0" / "0").exists()  # left behind, never committed

    later = ds.isel(time=list(range(35, 45)))  # February 5-14
    result = accumulus.append(str(store), later)

    assert result.recovered == ""  # nothing was committed or grown: nothing to recover
    assert time_chunks(store) == ((31, 10), (31, 24))
    expected = xr.concat([ds.isel(time=slice(0, 31)), later], dim="time")
    xr.testing.assert_identical(xr.open_zarr(store)[VAR].load(), expected[VAR])


# --------------------------------------------------------------------------------------------
# Refused


def test_variable_chunks_need_zarr_v3(tmp_path):
    ds = daily("standard", "2003-01-01", 10)
    granule = tmp_path / "g.nc"
    ds.to_netcdf(granule)
    store = tmp_path / "cube.zarr"

    run = cli("append", str(store), str(granule), "--chunking", "month", "--zarr-format", "2")

    assert run.returncode == 2 and len(run.stderr.strip().splitlines()) == 1
    assert "--chunking month needs Zarr v3" in run.stderr and "--zarr-format 3" in run.stderr
    assert not store.exists()

    accumulus.append(str(store), ds.isel(time=slice(0, 5)), chunks={"time": 4})  # Zarr v2
    before = snapshot(store)
    with pytest.raises(accumulus.AccumulusError, match=r"is Zarr v2, .*--zarr-format 3"):
        accumulus.append(str(store), ds.isel(time=slice(5, 10)), chunking="per-granule")
    assert snapshot(store) == before


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"chunking": "per-granule"}, "is chunked time=month; --chunks and --chunking apply"),
        ({"chunks": {"time": 10}}, "is chunked time=month; --chunks and --chunking apply"),
        ({"chunking": "weekly"}, "--chunking weekly: expected month, year, per-granule, grow or a"),
    ],
)
def test_an_existing_cube_keeps_its_chunking(tmp_path, options, message):
    ds = daily("360_day", "2003-01-01", 10)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), ds.isel(time=slice(0, 5)), chunking="month")
    before = snapshot(store)
    with pytest.raises(accumulus.AccumulusError, match=message):
        accumulus.append(str(store), ds.isel(time=slice(5, 10)), **options)
    assert snapshot(store) == before


def test_calendar_chunks_need_times(tmp_path):
    values = xr.Dataset(
        {VAR: (("x", "y"), np.ones((4, 3), "f4"))}, coords={"x": np.arange(4.0), "y": [1, 2, 3]}
    )
    store = tmp_path / "cube.zarr"
    with pytest.raises(accumulus.AccumulusError, match="--chunking year needs a CF time coord"):
        accumulus.append(str(store), values, dim="x", chunking="year")
    assert not store.exists()
