"""Object storage: ``s3://bucket/prefix`` through a local S3 endpoint (moto in server mode on
127.0.0.1, spoken to over HTTP), the same code path a user has with AWS: the endpoint from
``--endpoint-url`` or ``AWS_ENDPOINT_URL``, credentials from the environment."""

from __future__ import annotations

import boto3
import numpy as np
import pytest

import accumulus
from accumulus.accumulation.model.groups import read_group
from accumulus.raw_cube import RawCube
from accumulus.stores import keys
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.lock import StoreBusyError, StoreLock
from accumulus.stores.opening import open_store

from .helpers import VAR, check_visible, cli, truth, write_granule, write_granules
from .test_variable_chunks import daily


def objects(endpoint: str, bucket: str) -> set[str]:
    listing = boto3.client("s3", endpoint_url=endpoint).list_objects_v2(Bucket=bucket)
    return {item["Key"] for item in listing.get("Contents", [])}


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_create_append_and_read_through_the_cli(endpoint, bucket, tmp_path):
    t = truth(9)
    granules = write_granules(tmp_path / "in", t, 3)
    url = f"s3://{bucket}/trmm.zarr"
    first = cli("append", url, str(granules[0]), "--chunks", "time=4", "--endpoint-url", endpoint)
    assert first.returncode == 0, first.stderr
    assert "created s3://" in first.stdout
    options = {"endpoint_url": endpoint}
    accumulus.accumulate(url, VAR, ["time", "lat,lon"], storage_options=options)

    # Every day, from cron: the endpoint from the environment this time.
    daily = cli("append", url, *map(str, granules), env={"AWS_ENDPOINT_URL": endpoint})

    assert daily.returncode == 0, daily.stderr
    assert "appended 2 granule(s)" in daily.stdout and "skipped" in daily.stdout
    cube = RawCube.open(url, storage_options=options)
    assert cube.variable(VAR).shape[0] == 9
    reports = accumulus.verify(url, storage_options=options)
    assert reports and all(r.ok for r in reports)
    stored = objects(endpoint, bucket)
    assert "trmm.zarr/.accumulus/journal.json" in stored
    assert "trmm.zarr/.accumulus/lock.json" not in stored  # released


def test_values_and_write_counts_on_s3(endpoint, bucket, tmp_path):
    t = truth(13)
    url = f"s3://{bucket}/cube.zarr"
    options = {"endpoint_url": endpoint}
    accumulus.append(
        url, write_granule(tmp_path / "a.nc", t, 0, 10), chunks={"time": 4}, storage_options=options
    )
    counting = CountingStore(open_store(url, "r+", storage_options=options))

    accumulus.append(counting, write_granule(tmp_path / "b.nc", t, 10, 13))

    chunks = {k for k in counting.counts.writes if not is_metadata_key(k) and "/" in k}
    assert {k for k in chunks if k.startswith(f"{VAR}/")} == {f"{VAR}/2.0.0", f"{VAR}/3.0.0"}


def test_month_chunks_on_s3(endpoint, bucket):
    ds = daily("360_day", "2003-01-20", 45)
    url = f"s3://{bucket}/monthly.zarr"
    options = {"endpoint_url": endpoint}
    accumulus.append(url, ds.isel(time=slice(0, 15)), chunking="month", storage_options=options)
    accumulus.accumulate(url, VAR, ["time"], storage_options=options)

    accumulus.append(url, ds.isel(time=slice(15, 45)), storage_options=options)

    cube = RawCube.open(url, storage_options=options)
    assert cube.variable(VAR).bounds[0].sizes == (11, 30, 4)  # 30-day months, from the 20th
    np.testing.assert_array_equal(cube.decoded[VAR].values, ds[VAR].values.astype("f8"))
    assert read_group(cube, VAR).coverage["time"] == 41  # the open month: provisional
    reports = accumulus.verify(url, storage_options=options)
    assert reports and all(r.ok for r in reports)


def test_the_lock_is_a_conditional_write_on_s3(endpoint, bucket):
    store = open_store(
        f"s3://{bucket}/locked.zarr", "w", storage_options={"endpoint_url": endpoint}
    )
    assert keys.create_exclusive(store, "probe", b"first")
    assert not keys.create_exclusive(store, "probe", b"second")  # If-None-Match: *
    assert keys.read(store, "probe") == b"first"
    with (
        StoreLock(store, "locked.zarr"),
        pytest.raises(StoreBusyError, match="being appended to"),
    ):
        StoreLock(store, "locked.zarr").acquire()
    assert keys.list_keys(store) == ["probe"]  # the lock is gone once released


def test_missing_bucket(endpoint, bucket, tmp_path):
    t = truth(3)
    run = cli(
        "append",
        f"s3://no-such-{bucket}/cube.zarr",
        str(write_granule(tmp_path / "a.nc", t, 0, 3)),
        "--endpoint-url",
        endpoint,
    )
    assert run.returncode == 2
    assert "bucket 'no-such-" in run.stderr and "not found" in run.stderr


def test_values_read_back_from_s3(endpoint, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", endpoint)
    t = truth(9)
    url = f"s3://{bucket}/cube.zarr"
    accumulus.append(url, write_granules(tmp_path / "in", t, 3), chunks={"time": 4})
    assert check_visible(url, t, {9}) == 9
