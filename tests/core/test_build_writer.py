"""The build's writer (``stream._Writer``): chunk rows held back along time, filled in place
and written in pieces across space. Pieces are cut small here so that every build writes
rows in several of them, into plain and sharded arrays: answers equal xarray's and verify
passes whatever the cut."""

from __future__ import annotations

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.build import stream
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference


@pytest.mark.parametrize(
    "shards", [None, {"time": 8, "lat": 6, "lon": 10}], ids=["plain", "sharded"]
)
def test_rows_written_in_small_pieces(tmp_path, monkeypatch, shards):
    monkeypatch.setattr(stream._Writer, "PIECE_BYTES", 512)
    ds = synthetic_dataset({"time": 30, "lat": 12, "lon": 20}, seed=8)
    path = tmp_path / "c.zarr"
    write_cube(ds, path, {"time": 4, "lat": 3, "lon": 5}, zarr_format=3, shards=shards)
    accumulus.accumulate(str(path), VAR, [("time",), ("lat", "lon")], at={"lat": 1, "lon": 1})
    (report,) = accumulus.verify(str(path), VAR)
    assert report.ok, report.problems
    box = {"lat": (-40.0, 50.0), "lon": (30.0, 200.0)}
    got = accumulus.query(str(path), VAR, ["lat", "lon"], box)
    assert got.stats.raw_chunks_read == 0
    lat, lon = ds["lat"].values, ds["lon"].values
    inside = ds[VAR].isel(
        lat=np.flatnonzero((lat >= box["lat"][0]) & (lat <= box["lat"][1])),
        lon=np.flatnonzero((lon >= box["lon"][0]) & (lon <= box["lon"][1])),
    )
    want = xarray_reference(inside, ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(got.data, want, rtol=1e-9)
