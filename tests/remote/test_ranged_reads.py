"""A raw day at a map's end read from an object store by byte ranges: the chunk's Blosc
header, then only the blocks holding that day (``chunk_reader._ranged_through_the_loop``),
over a real HTTP server with Range support. The answers equal the local ones and xarray's;
a partial last chunk (which an append replaces) is read whole."""

from __future__ import annotations

import numcodecs
import numpy as np
import pytest

import accumulus
from accumulus import chunk_reader
from accumulus.ingest.layout import step_blocksize
from cubes import VAR, area_weights, synthetic_dataset
from servers import http_server

SIZES = {"time": 90, "lat": 64, "lon": 256}
# One step of a float32 chunk: 64 KiB, the least Blosc block ``append`` writes
# (``ingest.layout.step_blocksize``), so that each day is a block of its own.
DAY_BYTES = SIZES["lat"] * SIZES["lon"] * 4


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A cube whose 40-day chunks hold each day in a Blosc block of its own (as ``append``
    writes them), the last chunk 10 days of 40, with the default accumulations, served over
    HTTP; yields (dataset, local path, URL, log)."""
    folder = tmp_path_factory.mktemp("ranged")
    ds = synthetic_dataset(SIZES, seed=5)
    chunks = (40, SIZES["lat"], SIZES["lon"])
    blocksize = step_blocksize(chunks, 4)  # what ``append`` writes
    blosc = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, blocksize=blocksize)
    encoding = {VAR: {"chunks": chunks, "compressors": [blosc], "_FillValue": -9999.0}}
    ds.to_zarr(folder / "cube.zarr", zarr_format=2, consolidated=True, encoding=encoding)
    built = accumulus.accumulate(str(folder / "cube.zarr"), VAR)
    assert {a.key for a in built.group.accumulations} == {"time@month_2", "lat,lon@1,1"}
    with http_server(folder) as (url, log):
        yield ds, folder / "cube.zarr", f"{url}/cube.zarr", log


def _raw_reads(log) -> dict[str, list[str | None]]:
    """The raw chunks the server was asked for -> the Range header of each request."""
    reads: dict[str, list[str | None]] = {}
    for method, path, ranged in log.requests:
        if method == "GET" and f"/{VAR}/" in path and not path.endswith((".zarray", ".zattrs")):
            reads.setdefault(path.rsplit("/", 1)[-1], []).append(ranged)
    return reads


@pytest.mark.parametrize(
    ("period", "whole"),
    [
        # Off an entry at each end: days 5 and 38 of chunk 0 and 41 of chunk 1 (full chunks).
        (("2001-01-06", "2001-02-10"), set()),
        # Its end in the last chunk, 10 days of 40: read whole.
        (("2001-02-04", "2001-03-27"), {"2.0.0"}),
    ],
)
def test_a_raw_day_is_read_by_byte_ranges(served, monkeypatch, period, whole):
    ds, local, url, log = served
    monkeypatch.setattr(chunk_reader, "REMOTE_RANGED_SAVES", 0)  # chunks this small too
    ranges = {"time": period}
    here = accumulus.query(str(local), VAR, ["time"], ranges, plan="accumulation")
    log.clear()
    there = accumulus.query(url, VAR, ["time"], ranges, plan="accumulation")
    assert there.stats.raw_chunks_read == here.stats.raw_chunks_read > 0
    np.testing.assert_array_equal(there.data.values, here.data.values)
    data = ds[VAR].sel(time=slice(*period)).astype("f8")
    expected = data.weighted(area_weights(data)).mean("time")
    np.testing.assert_allclose(there.data.values, expected.values, rtol=1e-9)
    reads = _raw_reads(log)
    assert reads and {k for k, r in reads.items() if r == [None]} == whole
    for key, asked in reads.items():
        if key in whole:
            continue
        # The header, then the block of the day needed: one of the chunk's 40.
        assert len(asked) == 2 and all(r and r.startswith("bytes=") for r in asked), asked
        start, last = map(int, asked[1].removeprefix("bytes=").split("-"))
        assert last + 1 - start <= DAY_BYTES + 64


def test_a_chunk_needed_mostly_is_read_whole(served):
    """Left at its threshold, the few KB a day leaves unread here are not worth the header's
    round trip: one request per raw chunk, as before."""
    _, _, url, log = served
    log.clear()
    there = accumulus.query(url, VAR, ["time"], {"time": ("2001-01-06", "2001-02-10")})
    assert there.stats.raw_chunks_read > 0
    assert all(asked == [None] for asked in _raw_reads(log).values())
