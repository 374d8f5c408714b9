"""Appends keep ZEP 5 accumulations current: the update reads only raw chunks past the old
coverage (the same number whatever the archive's size), ``verify`` passes after any sequence
of appends, and averages equal xarray's on the raw data."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import accumulus
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from cubes import xarray_reference

from .helpers import VAR, truth, write_granule


def raw_chunks_read(counting: CountingStore) -> set[str]:
    return {k for k in counting.counts.reads if k.startswith(f"{VAR}/") and not is_metadata_key(k)}


@pytest.mark.parametrize("archive", [12, 48])
def test_update_reads_only_chunks_past_the_old_coverage(tmp_path, archive):
    t = truth(archive + 6)
    store = tmp_path / "cube.zarr"
    accumulus.append(
        str(store), write_granule(tmp_path / "a.nc", t, 0, archive), chunks={"time": 4}
    )
    accumulus.accumulate(str(store), VAR)
    counting = CountingStore(open_store(store, "r+"))

    result = accumulus.append(counting, write_granule(tmp_path / "b.nc", t, archive, archive + 6))

    assert result.accumulations == (VAR,)
    # New data fills chunk archive/4 and starts the next one; both are read, nothing older.
    first = archive // 4
    assert raw_chunks_read(counting) == {f"{VAR}/{first}.0.0", f"{VAR}/{first + 1}.0.0"}
    assert all(report.ok for report in accumulus.verify(str(store)))
    check_averages(store, t, archive + 6)
    assert accumulus.query(str(store), VAR, "lat,lon").stats.accumulation_chunks_read > 0


def check_averages(store, t, n: int) -> None:
    """Averages of the cube (with and without accumulations) equal xarray's on the truth."""
    data = t.decoded(n)[VAR]
    for over in (("lat", "lon"), ("time",)):
        expected = xarray_reference(data, over, "area", "mean")
        for use in (True, False):
            got = accumulus.average(str(store), VAR, over, use_accumulation=use)
            np.testing.assert_allclose(got.values, expected.values, rtol=1e-9, equal_nan=True)


@st.composite
def append_sequences(draw):
    steps = draw(st.integers(4, 20))
    cuts = sorted(draw(st.sets(st.integers(1, steps - 1), max_size=5)))
    granules = list(zip([0, *cuts], [*cuts, steps], strict=True))
    calls = []
    left = list(range(len(granules)))
    while left:
        take = draw(st.integers(1, len(left)))
        calls.append(left[:take])
        left = left[take:]
    return {
        "steps": steps,
        "granules": granules,
        "calls": calls,
        "chunk": draw(st.integers(1, 6)),
        "stride": draw(st.integers(1, 3)),
        "combos": draw(
            st.lists(
                st.sampled_from(
                    [("time",), ("lat", "lon"), ("time", "lat"), ("time", "lat", "lon")]
                ),
                min_size=1,
                max_size=3,
                unique=True,
            )
        ),
        "repeat": draw(st.booleans()),
        "seed": draw(st.integers(0, 1000)),
    }


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(case=append_sequences())
def test_verify_passes_after_any_sequence_of_appends(tmp_path_factory, case):
    folder = tmp_path_factory.mktemp("sequence")
    t = truth(case["steps"], nlat=4, nlon=3, seed=case["seed"])
    paths = [
        write_granule(folder / f"g{i}.nc", t, start, stop)
        for i, (start, stop) in enumerate(case["granules"])
    ]
    store = folder / "cube.zarr"
    first, *rest = case["calls"]
    accumulus.append(str(store), [paths[i] for i in first], chunks={"time": case["chunk"]})
    accumulus.accumulate(str(store), VAR, case["combos"], strides={"time": case["stride"]})
    done = first
    for call in rest:
        again = [paths[done[-1]]] if case["repeat"] else []  # already ingested: skipped
        accumulus.append(str(store), again + [paths[i] for i in call])
        done = done + call
        check_averages(store, t, case["granules"][done[-1]][1])
    reports = accumulus.verify(str(store))  # slow (seconds): once, after the last append
    assert reports and all(r.ok for r in reports), [r.problems for r in reports]
