"""Cubes behind URLs: a real HTTP server with Range support on 127.0.0.1 (read-only), and
an S3 bucket read anonymously, with options passed through to fsspec."""

from __future__ import annotations

import subprocess
import sys
import uuid

import boto3
import numpy as np
import pytest
import xarray as xr

import accumulus
from accumulus import AccumulusError
from accumulus.stores.locations import parse_storage_options
from cubes import VAR, synthetic_dataset, write_cube
from servers import http_server, s3_server


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An accumulated cube in a folder served over HTTP; yields (local path, base URL, log)."""
    folder = tmp_path_factory.mktemp("served")
    ds = synthetic_dataset({"time": 60, "lat": 12, "lon": 16}, seed=3)
    write_cube(ds, folder / "cube.zarr", {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(str(folder / "cube.zarr"), VAR)
    with http_server(folder) as (url, log):
        yield folder / "cube.zarr", url, log


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, timeout=120
    )


def test_an_https_cube_answers_like_the_local_one(served):
    local, url, log = served
    ranges = {"time": ("2001-01-05", "2001-02-20"), "lat": ("-40", "60")}
    here = accumulus.query(str(local), VAR, "lat,lon", ranges)
    log.clear()
    there = accumulus.query(f"{url}/cube.zarr", VAR, "lat,lon", ranges)
    np.testing.assert_array_equal(there.data.values, here.data.values)
    assert there.stats.raw_chunks_read == here.stats.raw_chunks_read
    assert all(method in ("GET", "HEAD") for method, _, _ in log.requests)
    info = accumulus.inspect(f"{url}/cube.zarr")
    assert VAR in str(info)


def test_the_cli_reads_a_url_and_refuses_to_write_there(served):
    _, url, _ = served
    answer = cli("average", f"{url}/cube.zarr", VAR, "--over", "time", "--json")
    assert answer.returncode == 0, answer.stderr
    refused = cli("accumulate", f"{url}/cube.zarr", VAR, "--rebuild")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1 and "read-only" in refused.stderr
    assert "--into" in refused.stderr
    unreachable = cli("inspect", "http://127.0.0.1:9/cube.zarr")
    assert unreachable.returncode == 2 and unreachable.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("where", "message"),
    [
        ("/nothing.zarr", "no Zarr group metadata found"),
        ("http://127.0.0.1:9/cube.zarr", "cannot read http://127.0.0.1:9/cube.zarr"),
    ],
)
def test_missing_and_unreachable_urls_are_one_line_errors(served, where, message):
    _, url, _ = served
    target = url + where if where.startswith("/") else where
    with pytest.raises(AccumulusError, match=message):
        accumulus.average(target, VAR, "time")


def test_unknown_scheme_and_missing_filesystem_package():
    with pytest.raises(AccumulusError, match="not a scheme fsspec knows"):
        accumulus.average("nosuch://bucket/cube.zarr", VAR, "time")


def test_storage_options_are_parsed_as_json_values_with_dotted_keys():
    options = parse_storage_options(
        ["anon=true", "requester_pays=True", "client_kwargs.region_name=us-west-2", "n=3", "k=v"]
    )
    assert options == {
        "anon": True,
        "requester_pays": True,
        "client_kwargs": {"region_name": "us-west-2"},
        "n": 3,
        "k": "v",
    }
    with pytest.raises(AccumulusError, match="KEY=VALUE"):
        parse_storage_options(["novalue"])


def test_an_s3_bucket_read_anonymously(tmp_path, monkeypatch):
    ds = synthetic_dataset({"time": 30, "lat": 6, "lon": 8}, seed=5)
    write_cube(ds, tmp_path / "cube.zarr", {"time": 10, "lat": 6, "lon": 8})
    accumulus.accumulate(str(tmp_path / "cube.zarr"), VAR)
    expected = accumulus.average(str(tmp_path / "cube.zarr"), VAR, "time").values
    with s3_server() as endpoint:
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        bucket = f"public-{uuid.uuid4().hex[:8]}"
        s3.create_bucket(Bucket=bucket)
        s3.put_bucket_acl(Bucket=bucket, ACL="public-read")  # moto refuses anonymous reads
        for path in (tmp_path / "cube.zarr").rglob("*"):
            if path.is_file():
                key = f"cube.zarr/{path.relative_to(tmp_path / 'cube.zarr')}"
                s3.put_object(Bucket=bucket, Key=key, Body=path.read_bytes(), ACL="public-read")
        for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
            monkeypatch.delenv(name, raising=False)
        options = {"anon": True, "endpoint_url": endpoint}
        got = accumulus.average(f"s3://{bucket}/cube.zarr", VAR, "time", storage_options=options)
        np.testing.assert_array_equal(got.values, expected)
        result = cli(
            "average",
            f"s3://{bucket}/cube.zarr",
            VAR,
            "--over",
            "time",
            "--storage-option",
            "anon=true",
            "--endpoint-url",
            endpoint,
            "--json",
        )
        assert result.returncode == 0, result.stderr
        with xr.open_zarr(
            f"s3://{bucket}/cube.zarr",
            storage_options={"anon": True, "client_kwargs": {"endpoint_url": endpoint}},
        ) as opened:
            assert opened[VAR].shape == ds[VAR].shape
