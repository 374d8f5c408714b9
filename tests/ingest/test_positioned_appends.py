"""Appends keep positioned accumulations (``--at``) current: a new month adds an entry, the
open month's entry is provisional (queries and verify leave it out) until the next month
starts, entries every N elements grow with the data, a count that outgrows its integer
type has the group built again, and the first infinity adds tally arrays beside the others."""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest

import accumulus
from accumulus.accumulation.model.groups import accumulation_array, read_group
from accumulus.raw_cube import RawCube

from .helpers import VAR, Truth, truth, write_granule


def daily(steps: int, seed: int = 0) -> Truth:
    t = truth(steps, nlat=4, nlon=3, seed=seed)
    return Truth(t.packed, np.arange(steps) * 24, t.lat, t.lon)


def month_ends(t: Truth, n: int) -> tuple[int, ...]:
    """Where months change among the first ``n`` days, and the data's end."""
    months = t.decoded(n).time.dt.month.values
    return (*[i for i in range(1, n) if months[i] != months[i - 1]], n)


def placement(store, key: str):
    group = read_group(RawCube.open(str(store)), VAR)
    return next(a for a in group.accumulations if a.key == key).placement


def test_months_grow_with_appends_and_the_open_month_is_provisional(tmp_path):
    t = daily(100)  # 2000-03-01 12:00 onwards, daily
    store = tmp_path / "cube.zarr"
    cuts = [0, 20, 45, 61, 100]
    granules = [
        write_granule(tmp_path / f"g{i}.nc", t, a, b)
        for i, (a, b) in enumerate(itertools.pairwise(cuts))
    ]
    accumulus.append(str(store), granules[0], chunks={"time": 8})
    accumulus.accumulate(
        str(store), VAR, ["time", "lat,lon"], at={"time": "month", "lat": 1, "lon": 1}
    )
    for n, granule in zip(cuts[2:], granules[1:], strict=True):
        result = accumulus.append(str(store), granule)
        assert result.accumulations == (VAR,)
        months = placement(store, "time@month")
        assert months.positions["time"] == month_ends(t, n)
        # The last month is still open: the next append may add days to it.
        assert months.final["time"] == len(month_ends(t, n)) - 1
        reports = accumulus.verify(str(store))
        assert reports and all(r.ok for r in reports), [r.problems for r in reports]
    # The months before the last, whole, are two entries each.
    stored = accumulation_array(
        RawCube.open(str(store)), VAR, "accumulus_positions/acc_uw_time_at_month"
    )
    data = t.decoded(100)[VAR]
    ends = month_ends(t, 100)
    expected = data.fillna(0).cumsum("time").isel(time=np.array(ends) - 1)
    np.testing.assert_allclose(stored[:], expected.values, rtol=1e-12)


def test_counts_outgrow_their_type_and_the_group_is_built_again(tmp_path):
    t = daily(300)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 200), chunks={"time": 50})
    accumulus.accumulate(str(store), VAR, ["time"], at={"time": 1})
    counts = accumulation_array(
        RawCube.open(str(store)), VAR, "accumulus_positions/acc_n_time_at_1"
    )
    assert counts.dtype == np.uint8  # up to 200 values per cell, 255 marks a missing chunk
    accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 200, 300))
    counts = accumulation_array(
        RawCube.open(str(store)), VAR, "accumulus_positions/acc_n_time_at_1"
    )
    assert counts.dtype == np.uint16 and counts.shape[0] == 300
    assert placement(store, "time@1").final["time"] == 300  # every step is a whole step
    [report] = accumulus.verify(str(store))
    assert report.ok, report.problems
    valid = ~np.isnan(t.decoded(300)[VAR].values)
    np.testing.assert_array_equal(counts[:], np.cumsum(valid, axis=0))


def test_labels_past_the_data_wait_for_it(tmp_path):
    t = daily(60)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 30), chunks={"time": 7})
    labels = ["2000-03-10", "2000-04-15"]
    accumulus.accumulate(str(store), VAR, ["time"], at={"time": labels})
    times = pd.DatetimeIndex(t.decoded(60).time.values)
    first = int(times.searchsorted(pd.Timestamp(labels[0])))
    # The second label is past the data: the data's end stands in for it, provisionally.
    assert placement(store, "time@labels").positions["time"] == (first, 30)
    assert placement(store, "time@labels").final["time"] == 1
    accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 30, 60))
    second = int(times.searchsorted(pd.Timestamp(labels[1])))
    assert placement(store, "time@labels").positions["time"] == (first, second, 60)
    assert placement(store, "time@labels").final["time"] == 2
    [report] = accumulus.verify(str(store))
    assert report.ok, report.problems


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_the_first_infinity_adds_tallies_without_rewriting_what_readers_use(tmp_path):
    """An append whose data hold the group's first infinity adds the tally arrays (0 over
    what the group held before) and updates the group: the arrays the published group
    names are not rewritten, so its readers never meet a missing or changed chunk; the
    answers then equal xarray's, infinities included, and verify passes."""
    from core.test_infinities import check_answers, infinite_dataset

    ds = infinite_dataset(seed=8)  # +inf at step 8, -inf at step 12, of 20
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), ds.isel(time=slice(0, 8)), chunks={"time": 4, "lat": 3})
    at = {"time": 1, "lat": 1, "lon": 1}
    built = accumulus.accumulate(str(store), VAR, ["time", "lat,lon"], at=at)
    assert built.group.infinities is False
    before = {p: _written(p) for p in _chunk_files(store)}
    assert len(before) > 10

    result = accumulus.append(str(store), ds.isel(time=slice(8, 20)))
    assert result.accumulations == (VAR,)
    group = read_group(RawCube.open(str(store)), VAR)
    assert group is not None and group.infinities is True
    for acc in group.accumulations:
        assert {"posinf", "neginf"} <= set(acc.arrays)
    # Every chunk the group held before is the same file, never written again (building the
    # group again would delete and rewrite them all).
    assert {p: _written(p) for p in before if p.exists()} == before
    check_answers(str(store), ds)
    reports = accumulus.verify(str(store))
    assert reports and all(r.ok for r in reports), [r.problems for r in reports]


def _chunk_files(store):
    return [
        p
        for p in (store / f"{VAR}_accumulation_group").rglob("*")
        if p.is_file() and not p.name.startswith(".") and p.name != "zarr.json"
    ]


def _written(path) -> tuple[int, int, bytes]:
    """A file as written: its inode, its modification time and its bytes."""
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns, path.read_bytes()


def test_the_last_partial_chunk_is_answered_by_entries_at_every_element(tmp_path):
    """Entries at every element (the default layout's) keep their values as appends fill the
    last, partial chunk: the group covers it, so a question over its days reads no raw
    chunk, before and after the next append, and agrees with xarray."""
    t = daily(100)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 45), chunks={"time": 20})
    accumulus.accumulate(str(store), VAR)  # the default layout: time=1, lat+lon at every cell
    for n in (45, 100):
        if n == 100:
            accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 45, 100))
        # The last chunk (40-60, then 100 of 100) is partial only before the second append.
        assert read_group(RawCube.open(str(store)), VAR).coverage["time"] == n
        data = t.decoded(n)[VAR]
        day = [pd.Timestamp(v).strftime("%Y-%m-%d") for v in data.time.values]
        weights = np.cos(np.deg2rad(data.lat.astype("f8")))
        handle = accumulus.open(str(store))
        questions = [(("lat", "lon"), (day[n - 4], day[n - 1])), (("time",), (day[41], day[n - 2]))]
        for over, period in questions:
            # Asked to use the accumulations (on these tiny chunks a scan is estimated faster).
            got = handle.query(VAR, over, {"time": period}, plan="accumulation")
            assert got.stats.raw_chunks_read == 0, (n, over, got.plan)
            assert got.stats.accumulation_chunks_read > 0
            want = data.sel(time=slice(*period)).weighted(weights).mean(over)
            np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9)


def test_entries_every_4_days_of_each_month_cover_the_data_end(tmp_path):
    """``time=month+4`` on a cube that appends grow: the entry at the data's end is
    provisional where it ends a step still open, the others final, and the group covers the
    data's end:
    a map over the last days reads only the days after the last final entry raw, a series
    none, before and after the next append; answers agree with xarray."""
    t = daily(100)
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), write_granule(tmp_path / "a.nc", t, 0, 45), chunks={"time": 20})
    at = {"time": "month+4", "lat": 1, "lon": 1}
    accumulus.accumulate(str(store), VAR, ["time", "lat,lon"], at=at)
    for n in (45, 100):
        if n == 100:
            accumulus.append(str(store), write_granule(tmp_path / "b.nc", t, 45, 100))
        steps = placement(store, "time@month_4")
        positions = steps.positions["time"]
        assert positions[-1] == n
        whole = n - positions[-2] == 4
        assert steps.final["time"] == len(positions) - (0 if whole else 1)
        last_final = positions[steps.final["time"] - 1]
        assert n - last_final < 4
        assert read_group(RawCube.open(str(store)), VAR).coverage["time"] == n
        data = t.decoded(n)[VAR]
        day = [pd.Timestamp(v).strftime("%Y-%m-%d") for v in data.time.values]
        weights = np.cos(np.deg2rad(data.lat.astype("f8")))
        handle = accumulus.open(str(store))
        for over, period in [(("lat", "lon"), (day[n - 4], day[n - 1])),
                             (("time",), (day[4], day[n - 1]))]:  # fmt: skip
            got = handle.query(VAR, over, {"time": period}, plan="accumulation")
            raw = [r.box["time"] for r in got.plan.raw_reads]
            assert all(a >= last_final for a, _ in raw)
            assert bool(raw) == (over == ("time",) and last_final < n)
            want = data.sel(time=slice(*period)).weighted(weights).mean(over)
            np.testing.assert_allclose(got.data.values, want.values, rtol=1e-9)
    assert all(report.ok for report in accumulus.verify(str(store), VAR))
