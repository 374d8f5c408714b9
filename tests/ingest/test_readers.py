"""Readers during appends: every snapshot a reader opens is consistent. Its shape,
coordinates, data and accumulations agree: the averages it computes (through accumulations
where they are final, raw chunks elsewhere) equal xarray's on the same prefix of the data,
never a NaN-padded tail, never accumulations ahead of or behind the data."""

from __future__ import annotations

import threading

import pytest

import accumulus

from .helpers import VAR, check_visible, truth, write_granule


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_readers_see_consistent_snapshots_while_appends_run(tmp_path):
    t = truth(27, nlat=6, nlon=8)
    per = 3  # granules of 3 steps into chunks of 4: most appends rewrite a partial chunk
    granules = [write_granule(tmp_path / f"g{s:02d}.nc", t, s, s + per) for s in range(0, 27, per)]
    store = tmp_path / "cube.zarr"
    accumulus.append(str(store), granules[0], chunks={"time": 4})
    accumulus.accumulate(str(store), VAR)
    boundaries = set(range(per, 28, per))
    errors: list[BaseException] = []

    def appender() -> None:
        try:
            for granule in granules[1:]:
                accumulus.append(str(store), granule)
        except BaseException as exc:
            errors.append(exc)

    thread = threading.Thread(target=appender)
    thread.start()
    seen = []
    while thread.is_alive():
        seen.append(check_visible(store, t, boundaries))
    thread.join()
    assert not errors, errors
    seen.append(check_visible(store, t, boundaries))

    assert seen[-1] == 27
    assert seen == sorted(seen)  # snapshots only move forward
    assert len(set(seen)) >= 3, f"the reader saw only {sorted(set(seen))}: no overlap with appends"
    assert all(report.ok for report in accumulus.verify(str(store)))
