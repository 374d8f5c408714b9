"""Virtual cubes as Parquet reference sets (``append virt.parq GRANULES --virtual``): the
layout fsspec's ``LazyReferenceMapper`` reads, opened by xarray through fsspec's reference
filesystem as the docs say, checked against ``xarray.open_mfdataset`` on the same granules;
appends that add rows only, that an interruption cannot break; and every command that opens
a ``.json`` set opening the Parquet one too."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr
from fastapi.testclient import TestClient
from fsspec.implementations.reference import LazyReferenceMapper
from typer.testing import CliRunner, Result

import accumulus
from accumulus import AccumulusError
from accumulus.cli import app
from accumulus.service import create_app
from servers import http_server

from .granules import (
    LAT,
    LON,
    NLAT,
    NLON,
    VAR,
    month_values,
    monthly_granules,
    netcdf4_granule,
    same_as_granules,
)


def open_parquet(path: Path) -> xr.Dataset:
    """The Parquet reference set as the documentation tells users to open it."""
    options = {"fo": str(path), "remote_protocol": "file"}
    with zarr.config.set({"array.rectilinear_chunks": True}):
        return xr.open_dataset(
            "reference://",
            engine="zarr",
            backend_kwargs={"consolidated": False, "storage_options": options},
        ).load()


def cli(*args: str) -> subprocess.CompletedProcess:
    """The command line as a user runs it (errors: exit 2, one line on stderr)."""
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, timeout=120
    )


def run(*args: str) -> Result:
    """A command that succeeds, run in this process (quicker)."""
    result = CliRunner().invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return result


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("writer", ["netcdf4", "h5py"])
def test_months_of_unequal_length_in_fsspecs_parquet_layout(tmp_path, writer):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4], writer=writer)  # 31 28 31 30
    out = tmp_path / "virt.parq"
    result = accumulus.append_virtual(out, granules)
    assert result.created and result.extent == (0, 120) and result.zarr_format == 3
    same_as_granules(open_parquet(out), granules)
    # fsspec's own reader: chunk keys "i.j.k", byte ranges of the granules, no data copied.
    refs = LazyReferenceMapper(str(out))
    chunks_along_lat = 1 if writer == "netcdf4" else 3
    for month, granule in enumerate(granules):
        for j in range(chunks_along_lat):
            url, offset, size = refs[f"{VAR}/{month}.{j}.0"]
            assert url == str(granule.resolve()) and offset > 0 and size > 0
            assert offset + size <= granule.stat().st_size
    metadata = json.loads(refs[f"{VAR}/zarr.json"])
    assert metadata["chunk_grid"]["configuration"]["chunk_shapes"][0] == [31, 28, 31, 30]
    assert metadata["chunk_key_encoding"]["name"] == "v2"
    assert sorted(p.name for p in (out / VAR).iterdir()) == ["refs.0.parq"]


def test_average_over_a_parquet_set_equals_xarray(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4, 5])
    out = tmp_path / "virt.parquet"
    accumulus.append_virtual(out, granules)
    rng = np.random.default_rng(16)
    days = np.sort(rng.choice(np.arange(1, 28), 2, replace=False))
    start, end = f"2010-02-{days[0]:02d}", f"2010-04-{days[1]:02d}"
    south, north = sorted(rng.uniform(-80, 80, 2).round(1))
    with xr.open_mfdataset(granules) as ds:
        weights = np.cos(np.deg2rad(ds.lat.astype("f8")))
        box = ds[VAR].sel(time=slice(start, end), lat=slice(south, north))
        expected = box.astype("f8").weighted(weights).mean(["lat", "lon"]).values
        mean_map = ds[VAR].astype("f8").sel(time=slice(start, end)).mean("time").values
    ranges = {"time": (start, end), "lat": (str(south), str(north))}
    series = accumulus.average(out, VAR, "lat,lon", ranges)
    np.testing.assert_allclose(series.values, expected, rtol=1e-9)
    mapped = accumulus.average(out, VAR, "time", {"time": (start, end)})
    np.testing.assert_allclose(mapped.values, mean_map, rtol=1e-9)
    cube = accumulus.open(str(out))
    np.testing.assert_allclose(cube.average(VAR, "time").values, _time_mean(granules), rtol=1e-9)


def _time_mean(granules: list[Path]) -> np.ndarray:
    with xr.open_mfdataset(granules) as ds:
        return ds[VAR].astype("f8").mean("time").values


def test_appending_adds_rows_only_and_is_idempotent(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4])
    out = tmp_path / "virt.parq"
    accumulus.append_virtual(out, granules[:2])
    before = _chunk_refs(out, 2)
    static = (out / "lat" / "refs.0.parq").stat().st_ino
    result = accumulus.append_virtual(out, granules[1:])  # one already referenced
    assert (out / "lat" / "refs.0.parq").stat().st_ino == static  # unchanged, not rewritten
    assert result.appended == tuple(str(g) for g in granules[2:])
    assert [why for _, why in result.skipped] == ["already referenced"]
    after = _chunk_refs(out, 4)
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) == {f"{VAR}/2.0.0", f"{VAR}/3.0.0"}
    same_as_granules(open_parquet(out), granules)
    files = snapshot(out)
    again = accumulus.append_virtual(out, granules)
    assert again.appended == () and again.extent == (120, 120)
    assert snapshot(out) == files  # nothing rewritten
    assert not list(tmp_path.glob(".virt.parq.*"))  # no staging left behind


def test_appends_across_reference_files(tmp_path, monkeypatch):
    """Daily chunks, 7 references a file: each append fills the last file of the set
    (fsspec merges the rows it keeps) and starts new ones; rows never move."""
    from accumulus.ingest import reference_parquet

    monkeypatch.setattr(reference_parquet, "RECORD_SIZE", 7)
    granules = monthly_granules(tmp_path / "in", [1, 2, 3], chunk_time=1)
    out = tmp_path / "virt.parq"
    for granule in granules:
        accumulus.append_virtual(out, [granule])
    files = {p.name for p in (out / VAR).iterdir()}
    assert files == {f"refs.{n}.parq" for n in range(13)}  # 90 days in files of 7
    refs = LazyReferenceMapper(str(out))
    for day, date in enumerate(xr.open_mfdataset(granules).time.values):
        url, _, _ = refs[f"{VAR}/{day}.0.0"]
        assert url == str(granules[int(str(date)[5:7]) - 1].resolve())
    same_as_granules(open_parquet(out), granules)


def _chunk_refs(out: Path, months: int) -> dict[str, list]:
    refs = LazyReferenceMapper(str(out))
    return {f"{VAR}/{m}.0.0": list(refs[f"{VAR}/{m}.0.0"]) for m in range(months)}


def test_an_interrupted_append_leaves_the_old_set_readable(tmp_path, monkeypatch):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4])
    out = tmp_path / "virt.parq"
    accumulus.append_virtual(out, granules[:2])
    from fsspec.implementations.local import LocalFileSystem

    move = LocalFileSystem.mv
    moved = []

    def cut_short(self, path1, path2, **kwargs):
        if moved:  # the first file moves in, then the process "dies"
            raise KeyboardInterrupt
        moved.append(path2)
        return move(self, path1, path2, **kwargs)

    monkeypatch.setattr(LocalFileSystem, "mv", cut_short)
    with pytest.raises(KeyboardInterrupt):
        accumulus.append_virtual(out, granules[2:])
    monkeypatch.undo()
    assert moved and not moved[0].endswith(".zmetadata")
    same_as_granules(open_parquet(out), granules[:2])  # the old set, whole
    np.testing.assert_allclose(
        accumulus.average(out, VAR, "time").values, _time_mean(granules[:2]), rtol=1e-9
    )
    accumulus.append_virtual(out, granules[2:])  # run again: completes
    same_as_granules(open_parquet(out), granules)


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_the_cli_serves_every_command_from_a_parquet_set(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4])
    virt, side = tmp_path / "virt.parq", tmp_path / "side.zarr"
    made = run("append", str(virt), *map(str, granules[:3]), "--virtual")
    assert "created" in made.stdout and "virtual" in made.stdout
    shown = run("inspect", str(virt), "--json")
    assert json.loads(shown.stdout)["dimensions"]["time"] == 90
    with pytest.raises(AccumulusError, match="--into"):
        accumulus.accumulate(str(virt), VAR)
    run("accumulate", str(virt), VAR, "--into", str(side))
    whole = {"time": ("2010-01-01", "2010-03-31"), "lat": ("-85", "85")}
    aligned = accumulus.query(str(side), VAR, "lat,lon", whole)
    with xr.open_mfdataset(granules[:3]) as ds:
        weights = np.cos(np.deg2rad(ds.lat.astype("f8")))
        expected = ds[VAR].astype("f8").weighted(weights).mean(["lat", "lon"]).values
    np.testing.assert_allclose(aligned.data.values, expected, rtol=1e-9)
    assert aligned.stats.raw_chunks_read == 0
    assert "OK" in run("verify", str(side)).stdout

    # The set grows: SIDE answers exactly (April read raw), then is extended.
    assert "extended" in run("append", str(virt), *map(str, granules), "--virtual").stdout
    grown = accumulus.query(str(side), VAR, "lat,lon", {"lat": ("-85", "85")})
    np.testing.assert_allclose(grown.data.values, _area_mean(granules), rtol=1e-9)
    assert grown.stats.raw_chunks_read == 1
    assert accumulus.accumulate(str(virt), VAR, into=str(side)).action == "updated"
    with TestClient(create_app([str(side), str(virt)])) as client:
        listed = client.get("/api/datasets").json()["datasets"]
        assert sorted(d["name"] for d in listed) == ["side", "virt.parq"]
        for name in ("side", "virt.parq"):  # the sidecar, and the Parquet set itself
            served = client.get(f"/api/datasets/{name}/{VAR}/average", params={"over": "lat,lon"})
            assert served.status_code == 200, served.text
            values = np.array(served.json()["values"], dtype="f8")
            np.testing.assert_allclose(values, _area_mean(granules), rtol=1e-9)

    # January now points at another file: SIDE is stale, said in one line.
    other = tmp_path / "other.nc"
    other.write_bytes(granules[0].read_bytes())
    refs = LazyReferenceMapper(str(virt))
    refs[f"{VAR}/0.0.0"] = [str(other), *refs[f"{VAR}/0.0.0"][1:]]
    refs.flush()
    stale = cli("average", str(side), VAR, "--over", "lat,lon")
    assert stale.returncode == 2 and "references other bytes" in stale.stderr
    assert len(stale.stderr.strip().splitlines()) == 1


def _area_mean(granules: list[Path]) -> np.ndarray:
    with xr.open_mfdataset(granules) as ds:
        weights = np.cos(np.deg2rad(ds.lat.astype("f8")))
        return ds[VAR].astype("f8").weighted(weights).mean(["lat", "lon"]).values


def test_granules_read_over_http(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    out = tmp_path / "virt.parq"
    with http_server(tmp_path / "in") as (url, _):
        urls = [f"{url}/{g.name}" for g in granules]
        accumulus.append_virtual(out, urls)
        assert LazyReferenceMapper(str(out))[f"{VAR}/0.0.0"][0] == urls[0]
        # A host is read only when the reader allows it (the set lives on the local disk).
        with pytest.raises(AccumulusError, match=f"reference {VAR}/0.0.0 points outside") as no:
            accumulus.average(out, VAR, "time")
        assert "127.0.0.1" not in str(no.value)
        mapped = accumulus.average(out, VAR, "time", allow_references=[url])
    np.testing.assert_allclose(mapped.values, _time_mean(granules), rtol=1e-9)


def test_equal_months_give_a_zarr_v2_set_kerchunk_reads(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3], chunk_time=1)
    out = tmp_path / "virt.parq"
    assert accumulus.append_virtual(out, granules, zarr_format=2).zarr_format == 2
    metadata = json.loads((out / ".zmetadata").read_text())["metadata"]
    assert metadata[f"{VAR}/.zarray"]["chunks"] == [1, NLAT, NLON]
    # Plain xarray, no rectilinear setting: an ordinary kerchunk Parquet set.
    virtual = xr.open_dataset(
        "reference://",
        engine="zarr",
        backend_kwargs={
            "consolidated": False,
            "storage_options": {"fo": str(out), "remote_protocol": "file"},
        },
    ).load()
    same_as_granules(virtual, granules)


# --------------------------------------------------------------------------------------------
# Bad input: one line naming the file, nothing written


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2])
    out = tmp_path / "virt.parq"
    missing = cli("append", str(out), str(tmp_path / "nope.nc"), "--virtual")
    assert missing.returncode == 2 and "nope.nc" in missing.stderr
    assert len(missing.stderr.strip().splitlines()) == 1 and not out.exists()
    with pytest.raises(AccumulusError, match=r"virt\.zarr: .*\.parq"):
        accumulus.append_virtual(tmp_path / "virt.zarr", granules)
    accumulus.append_virtual(out, granules)
    files = snapshot(out)
    odd = netcdf4_granule(tmp_path / "odd.nc", 2010, 3, chunk_lat=6)
    with pytest.raises(AccumulusError, match=r"odd\.nc.*has chunks"):
        accumulus.append_virtual(out, [odd])
    assert snapshot(out) == files
    broken = tmp_path / "broken.parq"
    broken.mkdir()
    (broken / ".zmetadata").write_text("{not json")
    answer = cli("average", str(broken), VAR, "--over", "time")
    assert answer.returncode == 2 and "broken.parq" in answer.stderr
    assert len(answer.stderr.strip().splitlines()) == 1
    with pytest.raises(AccumulusError, match=r"store not found: .*absent\.parq"):
        accumulus.average(tmp_path / "absent.parq", VAR, "time")


def test_a_granule_with_unwritten_chunks_needs_a_json_set(tmp_path):
    """An HDF5 chunk never written has no bytes to reference. A JSON set leaves its key out
    (zarr reads fill values); fsspec cannot read a Parquet row as absent, so that is refused."""
    days, values = month_values(2010, 1, 1)
    granule = tmp_path / "partial.nc"
    with netCDF4.Dataset(granule, "w") as ds:
        for dim, size in (("time", None), ("lat", NLAT), ("lon", NLON)):
            ds.createDimension(dim, size)
        time = ds.createVariable("time", "f8", ("time",))
        time.units, time[:] = "days since 2010-01-01", days
        ds.createVariable("lat", "f4", ("lat",))[:] = LAT
        ds.createVariable("lon", "f4", ("lon",))[:] = LON
        var = ds.createVariable(
            VAR, "f4", ("time", "lat", "lon"), chunksizes=(len(days), 6, NLON), fill_value=-1.0
        )
        var[:, :6, :] = values[:, :6, :]  # the other two lat chunks are never written
    with pytest.raises(AccumulusError, match=r"'precip' has 1 of its 3 chunks .* \.json"):
        accumulus.append_virtual(tmp_path / "virt.parq", [granule])
    assert not (tmp_path / "virt.parq").exists()
    accumulus.append_virtual(tmp_path / "virt.json", [granule])
    with xr.open_dataset(granule) as expected:
        read = accumulus.average(tmp_path / "virt.json", VAR, "time")
        np.testing.assert_allclose(read.values, expected[VAR].astype("f8").mean("time").values)


def test_a_large_json_set_suggests_parquet(tmp_path, monkeypatch):
    from accumulus.ingest import virtual

    monkeypatch.setattr(virtual, "LARGE_JSON_SET", 1)  # instead of 100,000 references
    granules = monthly_granules(tmp_path / "in", [1, 2])
    said = " ".join(
        run("append", str(tmp_path / "virt.json"), *map(str, granules), "--virtual").stdout.split()
    )
    assert "holds 2 chunk references" in said and "Parquet reference set" in said
    quiet = run("append", str(tmp_path / "virt.parq"), *map(str, granules), "--virtual")
    assert "Parquet reference set opens" not in quiet.stdout


@pytest.mark.slow  # a moto server: minutes on a loaded machine
def test_a_parquet_set_in_an_s3_bucket(tmp_path):
    """Granules and the set both in a bucket (moto): written, extended and read by URL."""
    import boto3

    from servers import s3_server

    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    with s3_server() as endpoint:
        credentials = {"key": "testing", "secret": "testing", "endpoint_url": endpoint}
        s3 = boto3.client(
            "s3",
            endpoint_url=endpoint,
            aws_access_key_id="testing",
            aws_secret_access_key="testing",
            region_name="us-east-1",
        )
        s3.create_bucket(Bucket="archive")
        for granule in granules:
            s3.put_object(Bucket="archive", Key=granule.name, Body=granule.read_bytes())
        urls = [f"s3://archive/{g.name}" for g in granules]
        out = "s3://archive/virt.parq"
        accumulus.append_virtual(out, urls[:2], storage_options=credentials)
        accumulus.append_virtual(out, urls, storage_options=credentials)
        keys = {o["Key"] for o in s3.list_objects_v2(Bucket="archive")["Contents"]}
        assert f"virt.parq/{VAR}/refs.0.parq" in keys and "virt.parq/.zmetadata" in keys
        assert not [k for k in keys if "staging" in k]
        mapped = accumulus.average(out, VAR, "time", storage_options=credentials)
    np.testing.assert_allclose(mapped.values, _time_mean(granules), rtol=1e-9)
