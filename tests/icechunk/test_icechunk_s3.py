"""An icechunk repository on object storage, ``icechunk+s3://BUCKET/PREFIX``, through a local
S3 endpoint (moto on 127.0.0.1): created by the first append from the command line with
``--endpoint-url``, one commit per append, read at an old snapshot, and read by xarray through
icechunk's own store; two writers whose commits race on a bucket (conditional writes) both
land."""

from __future__ import annotations

import numpy as np
import xarray as xr

import accumulus
import icechunk
from cubes import xarray_reference
from ingest.helpers import VAR, cli, truth, write_granules


def test_append_read_and_travel_on_s3(endpoint, bucket, tmp_path):
    t = truth(12)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, 3)]
    url = f"icechunk+s3://{bucket}/archive"
    first = cli("append", url, *granules[:2], "--chunks", "time=3", "--endpoint-url", endpoint)
    assert first.returncode == 0, first.stderr
    second = cli("append", url, *granules[2:], "--endpoint-url", endpoint)
    assert second.returncode == 0, second.stderr

    storage = icechunk.s3_storage(
        bucket=bucket,
        prefix="archive",
        endpoint_url=endpoint,
        allow_http=True,
        force_path_style=True,
        region="us-east-1",
        from_env=True,
    )
    repo = icechunk.Repository.open(storage)
    log = list(repo.ancestry(branch="main"))
    assert len(log) == 3 and granules[3] in log[0].message and granules[0] in log[1].message
    ds = xr.open_zarr(repo.readonly_session(branch="main").store, consolidated=False)
    xr.testing.assert_allclose(ds[VAR].load(), t.decoded()[VAR], rtol=1e-12)

    options = {"endpoint_url": endpoint}
    for ref, steps in ((log[1].id, 6), ("main", 12)):
        got = accumulus.average(url, VAR, "time", storage_options=options, ref=ref)
        want = xarray_reference(t.decoded(steps)[VAR], ["time"], "area", "mean")
        np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)


def test_racing_writers_on_s3_both_land(endpoint, bucket, tmp_path):
    t = truth(12)
    granules = [str(p) for p in write_granules(tmp_path / "in", t, 3)]
    url = f"icechunk+s3://{bucket}/archive"
    options = {"endpoint_url": endpoint}
    accumulus.append(url, granules[:1], chunks={"time": 3}, storage_options=options)
    other = []

    def meanwhile(done: int, total: int) -> None:
        if not other:
            other.append(accumulus.append(url, granules[1:2], storage_options=options))

    accumulus.append(url, granules[2:], storage_options=options, progress=meanwhile)
    got = accumulus.average(url, VAR, "time", storage_options=options)
    want = xarray_reference(t.decoded()[VAR], ["time"], "area", "mean")
    np.testing.assert_allclose(got.values, want.values, rtol=1e-9, equal_nan=True)
