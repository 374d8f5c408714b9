"""A build's reading, summing and writing overlap (``stream``): a series' chunk row made from
the raw values is written in parts, side by side, by threads of its own, and the slabs read
meanwhile have their entries written without waiting for it; slabs read as one task each are
read two at a time, their progress reported as raw chunks done, never going back."""

from __future__ import annotations

import itertools
import threading

import numpy as np
import zarr
from numcodecs import Blosc, Fletcher32

import accumulus
from accumulus.accumulation.build import raw_series, stream
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

WAIT = 10.0  # seconds a gate waits at most: a writer that serializes fails, not hangs


def _arrays() -> dict[str, zarr.Array]:
    root = zarr.open_group(zarr.storage.MemoryStore(), mode="w", zarr_format=2)
    codecs = {"filters": [Blosc("lz4", 1, Blosc.SHUFFLE), Fletcher32()], "compressors": None}
    shape = (16, 6, 5)
    return {
        "sums": root.create_array("sums", shape=shape, dtype="f8", chunks=(8, 3, 1), **codecs),
        "n": root.create_array("n", shape=shape, dtype="u2", chunks=(8, 6, 1), **codecs),
        "map": root.create_array("map", shape=shape, dtype="f8", chunks=(1, 6, 5), **codecs),
    }


def test_a_series_row_is_written_in_parts_side_by_side_without_holding_back_later_writes(
    monkeypatch,
) -> None:
    targets = _arrays()
    both_parts = threading.Barrier(2, timeout=WAIT)  # the row's first two parts at once
    calls = itertools.count()
    released = threading.Event()
    timed_out: list[bool] = []
    write_part = raw_series.write_part

    def gated(part, *args, **kwargs):
        if next(calls) < 2:
            both_parts.wait()
        timed_out.append(not released.wait(WAIT))
        write_part(part, *args, **kwargs)

    monkeypatch.setattr(raw_series, "write_part", gated)
    rng = np.random.default_rng(3)
    values = rng.normal(280, 30, (16, 6, 5)).astype("f4")
    values[rng.random(values.shape) < 0.2] = np.nan
    with stream._Writer(targets, threads=1) as writer:
        writer.write_raw("sums", "n", 0, values[:8].copy())  # a whole row: written at once
        # Maps of the slabs read meanwhile: more writes than are ever queued at once, which
        # the row held back must not hold back.
        maps = rng.normal(size=(2 * writer.IN_FLIGHT, 6, 5))
        for day, entry in enumerate(maps):
            writer.write("map", 0, day, entry[None])
        stored_meanwhile = np.asarray(targets["map"][: writer.IN_FLIGHT])
        released.set()
        writer.write_raw("sums", "n", 8, values[8:].copy())
        writer.flush()
    assert timed_out and not any(timed_out)
    np.testing.assert_array_equal(stored_meanwhile, maps[: writer.IN_FLIGHT])
    valid = ~np.isnan(values)
    np.testing.assert_array_equal(
        targets["sums"][:], np.cumsum(np.where(valid, values, 0).astype("f8"), axis=-1)
    )
    np.testing.assert_array_equal(targets["n"][:], np.cumsum(valid, axis=-1))
    np.testing.assert_array_equal(targets["map"][: len(maps)], maps)


def test_slabs_read_two_at_a_time_report_progress_in_order(tmp_path, monkeypatch) -> None:
    ds = synthetic_dataset({"time": 60, "lat": 6, "lon": 8}, seed=5)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 5, "lat": 6, "lon": 8})
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)  # slabs of one raw chunk, one task each
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    reports: list[tuple[int, int]] = []
    accumulus.accumulate(
        str(path),
        VAR,
        [("time",), ("lat", "lon")],
        at={"time": 1, "lat": 1, "lon": 1},
        progress=lambda done, total: reports.append((done, total)),
    )
    assert reports[-1] == (12, 12)  # every raw chunk
    assert [done for done, _ in reports] == sorted(done for done, _ in reports)
    period = (str(ds.time.values[7])[:10], str(ds.time.values[51])[:10])
    got = accumulus.query(str(path), VAR, ["lat", "lon"], {"time": period})
    assert got.stats.raw_chunks_read == 0
    want = xarray_reference(ds[VAR].isel(time=slice(7, 52)), ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(np.asarray(got.data), want.values, rtol=1e-9)
