"""Accumulations beside the data (sidecars): ZEP 5 groups written into a store of their own
for a cube that is only read (a directory, an HTTP URL, a reference file over granules),
answering like xarray on the source, refusing in one line to answer from sums of data that
changed, and extended when the source grew."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr
import zarr
from typer.testing import CliRunner

import accumulus
from accumulus import AccumulusError
from accumulus.cli import app
from accumulus.stores.snapshot import ROOT_DOCUMENTS
from cubes import VAR, area_weights, synthetic_dataset, write_cube
from servers import http_server

from .granules import monthly_granules

SIZES = {"time": 60, "lat": 12, "lon": 16}
CHUNKS = {"time": 10, "lat": 6, "lon": 8}
SERIES = {"time": ("2001-01-15", "2001-02-24"), "lat": ("-80", "-8")}
# A map over days 14 to 54: time chunks 1 and 5 are read raw (2 x 2 spatial chunks each).
MAP = {"time": ("2001-01-15", "2001-02-24")}


def cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "accumulus", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def expected_series(ds: xr.Dataset, ranges=SERIES) -> np.ndarray:
    box = ds[VAR].sel(time=slice(*ranges["time"]), lat=slice(*map(float, ranges["lat"])))
    return box.astype("f8").weighted(area_weights(box)).mean(["lat", "lon"]).values


def expected_map(ds: xr.Dataset) -> np.ndarray:
    return ds[VAR].astype("f8").sel(time=slice(*MAP["time"])).mean("time").values


def make_cube(folder: Path, seed: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_cube(synthetic_dataset(SIZES, seed=seed), folder / "cube.zarr", CHUNKS)
    return folder / "cube.zarr"


def point_january_at_a_copy(virt: Path, january: Path) -> None:
    """Rewrite the reference set ``virt`` so that its first chunk is read from a copy of
    the January granule: the same values, other bytes behind a summed chunk."""
    other = january.with_name("other.nc")
    shutil.copy(january, other)
    document = json.loads(virt.read_text())
    key = next(k for k in (f"{VAR}/c/0/0/0", f"{VAR}/0.0.0") if k in document["refs"])
    document["refs"][key][0] = str(other)
    virt.write_text(json.dumps(document))


def test_a_local_cube_with_accumulations_beside_it(tmp_path):
    source = make_cube(tmp_path / "data")
    before = sorted(p.relative_to(source) for p in source.rglob("*"))
    side = tmp_path / "side.zarr"
    built = accumulus.accumulate(str(source), VAR, into=str(side), minimal=True)
    assert built.action == "built"
    assert sorted(p.relative_to(source) for p in source.rglob("*")) == before  # only read
    settings = json.loads((side / ".zattrs").read_text())["accumulus_sidecar"]
    assert settings["source"] == str(source.resolve())

    with xr.open_zarr(source) as ds:
        expected = expected_series(ds)
        time_map = ds[VAR].astype("f8").sel(time=slice("2001-01-11", "2001-02-19")).mean("time")
        mapped = expected_map(ds)
    via_side = accumulus.query(str(side), VAR, "lat,lon", SERIES)
    np.testing.assert_allclose(via_side.data.values, expected, rtol=1e-9)
    via_side = accumulus.query(str(side), VAR, "time", MAP)
    np.testing.assert_allclose(via_side.data.values, mapped, rtol=1e-9)
    # Accumulation entries from SIDE, only the two partial time chunks raw from the source.
    assert via_side.stats.raw_chunks_read == 8
    assert via_side.stats.accumulation_chunks_read > 0
    named = accumulus.query(str(source), VAR, "time", MAP, accumulations=str(side))
    np.testing.assert_array_equal(named.data.values, via_side.data.values)
    assert named.stats.raw_chunks_read == via_side.stats.raw_chunks_read
    assert named.stats.accumulation_chunks_read == via_side.stats.accumulation_chunks_read

    handle = accumulus.open(str(side))
    assert handle.accumulation_group(VAR) is not None
    mapped = handle.query(VAR, "time", {"time": ("2001-01-11", "2001-02-19")})
    np.testing.assert_allclose(mapped.data.values, time_map.values, rtol=1e-9)
    assert mapped.stats.raw_chunks_read == 0 and mapped.stats.accumulation_chunks_read > 0

    again = accumulus.accumulate(str(source), VAR, into=str(side), minimal=True)
    assert again.action == "up to date"


def test_a_cube_behind_an_http_url(tmp_path):
    """Raw boundary chunks come from the server, accumulations from SIDE: the server sees
    the metadata documents and exactly the raw chunks of the plan."""
    make_cube(tmp_path / "served")
    side = tmp_path / "side.zarr"
    with http_server(tmp_path / "served") as (url, log):
        cube_url = f"{url}/cube.zarr"
        accumulus.accumulate(cube_url, VAR, into=str(side), minimal=True)
        with xr.open_zarr(cube_url) as ds:
            expected = expected_map(ds)
        handle = accumulus.open(str(side))
        log.clear()
        result = handle.query(VAR, "time", MAP)
        np.testing.assert_allclose(result.data.values, expected, rtol=1e-9)
        chunk_gets = [p for m, p, _ in log.requests if m == "GET" and f"/{VAR}/" in p]
        assert len(chunk_gets) == result.stats.raw_chunks_read == 8
        assert not [p for _, p, _ in log.requests if "accumulation" in p]
        # A second query of the same snapshot: its raw chunks, and the root documents only.
        log.clear()
        aligned = handle.query(VAR, "lat,lon", {"time": ("2001-01-11", "2001-02-19")})
        assert aligned.stats.raw_chunks_read == 0
        assert sorted(Path(p).name for _, p, _ in log.requests) == sorted(ROOT_DOCUMENTS)

        shown = cli("inspect", str(side), "--json")
        info = json.loads(shown.stdout)
        assert info["sidecar"]["source"] == cube_url
        assert info["sidecar"]["variables"] == {VAR: {"stale": None}}
        assert info["accumulation_groups"][0]["variable"] == VAR
    # The server is gone: one line naming SIDE and its source.
    with pytest.raises(AccumulusError, match="cannot be read") as gone:
        accumulus.average(str(side), VAR, "time")
    assert "\n" not in str(gone.value)
    assert str(side) in str(gone.value) and cube_url in str(gone.value)


def test_a_virtual_cube_grows_and_its_sidecar_follows(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3, 4])
    virt, side = tmp_path / "virt.json", tmp_path / "side.zarr"
    accumulus.append_virtual(virt, granules[:3])
    with pytest.raises(AccumulusError, match="--into") as refused:
        accumulus.accumulate(str(virt), VAR)
    assert "\n" not in str(refused.value)

    made = cli("accumulate", str(virt), VAR, "--into", str(side))
    assert made.returncode == 0, made.stderr
    ranges = {"time": ("2010-01-01", "2010-02-28"), "lat": ("-85", "85")}  # two whole months
    with xr.open_mfdataset(granules[:3]) as ds:
        expected = expected_series(ds, ranges)
    aligned = accumulus.query(str(side), VAR, "lat,lon", ranges)
    np.testing.assert_allclose(aligned.data.values, expected, rtol=1e-9)
    assert aligned.stats.raw_chunks_read == 0

    # The source grows by a month: SIDE still answers exactly, reading the new month raw.
    accumulus.append_virtual(virt, granules[3:])
    whole = {"time": ("2010-01-01", "2010-04-30"), "lat": ("-85", "85")}
    with xr.open_mfdataset(granules) as ds:
        expected = expected_series(ds, whole)
    grown = accumulus.query(str(side), VAR, "lat,lon", whole)
    np.testing.assert_allclose(grown.data.values, expected, rtol=1e-9)
    assert grown.stats.raw_chunks_read == 1  # April, past what SIDE covers
    covered = accumulus.inspect(str(side))["accumulation_groups"][0]["coverage"]["time"]
    assert covered["covered"] < covered["size"] == 120

    updated = accumulus.accumulate(str(virt), VAR, into=str(side))
    assert updated.action == "updated"
    refreshed = accumulus.query(str(side), VAR, "lat,lon", whole)
    np.testing.assert_allclose(refreshed.data.values, expected, rtol=1e-9)
    assert refreshed.stats.raw_chunks_read == 0

    # January now points at another file (a copy, so the rebuild below reads the same
    # values): its sums may no longer hold, SIDE is stale.
    point_january_at_a_copy(virt, granules[0])
    with pytest.raises(AccumulusError, match=r"stale .*references other bytes") as stale:
        accumulus.average(str(side), VAR, "lat,lon", whole)
    assert "\n" not in str(stale.value) and f"--into {side}" in str(stale.value)
    assert accumulus.inspect(str(side))["sidecar"]["variables"][VAR]["stale"]
    assert accumulus.accumulate(str(virt), VAR, into=str(side)).action == "rebuilt"
    accumulus.average(str(side), VAR, "lat,lon", whole)  # answers again


def test_a_source_that_changed_or_is_gone(tmp_path):
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    # Rewritten with other chunks (and other values): the sums no longer hold.
    ds = synthetic_dataset(SIZES, seed=9)
    write_cube(ds, source, {"time": 15, "lat": 6, "lon": 8})
    stale = cli("average", str(side), VAR, "--over", "lat,lon")
    assert stale.returncode == 2 and stale.stderr.count("\n") == 1
    assert "stale" in stale.stderr and "chunk edges along time" in stale.stderr
    assert f"accumulate {source.resolve()} {VAR} --into {side}" in stale.stderr
    assert accumulus.accumulate(str(source), VAR, into=str(side)).action == "rebuilt"
    np.testing.assert_allclose(
        accumulus.average(str(side), VAR, "lat,lon", SERIES).values,
        expected_series(ds),
        rtol=1e-9,
    )
    # Another dtype, same grid: stale too.
    write_cube(synthetic_dataset(SIZES, seed=9, dtype="f8"), source, CHUNKS)
    with pytest.raises(AccumulusError, match=r"stale .*encoding"):
        accumulus.average(str(side), VAR, "lat,lon")
    # Gone.
    shutil.rmtree(source)
    with pytest.raises(AccumulusError, match=r"holds accumulations of .*cannot be read") as gone:
        accumulus.open(str(side))
    assert "\n" not in str(gone.value)


def test_a_grown_store_is_answered_then_extended(tmp_path):
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    more = synthetic_dataset({**SIZES, "time": 70}, seed=3).isel(time=slice(60, 70))
    more.to_zarr(source, append_dim="time")
    with xr.open_zarr(source) as ds:
        full = {"time": ("2001-01-01", "2001-03-11"), "lat": ("-80", "80")}
        expected = expected_series(ds, full)
    answer = accumulus.query(str(side), VAR, "lat,lon", full)
    np.testing.assert_allclose(answer.data.values, expected, rtol=1e-9)
    assert answer.stats.raw_chunks_read == 4  # the new time chunk, past the coverage
    assert accumulus.accumulate(str(source), VAR, into=str(side)).action == "updated"
    answer = accumulus.query(str(side), VAR, "lat,lon", full)
    np.testing.assert_allclose(answer.data.values, expected, rtol=1e-9)
    assert answer.stats.raw_chunks_read == 0


def test_what_cannot_be_a_sidecar(tmp_path):
    source = make_cube(tmp_path / "data")
    other = make_cube(tmp_path / "other")
    with pytest.raises(AccumulusError, match="not a sidecar"):
        accumulus.accumulate(str(source), VAR, into=str(other))
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side))
    with pytest.raises(AccumulusError, match=r"holds accumulations of .*data/cube.zarr, not of"):
        accumulus.accumulate(str(other), VAR, into=str(side))
    with pytest.raises(AccumulusError, match="no accumulus_sidecar attribute"):
        accumulus.average(str(source), VAR, "time", accumulations=str(other))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("mine")
    with pytest.raises(AccumulusError, match="not a Zarr group"):
        accumulus.accumulate(str(source), VAR, into=str(tmp_path / "notes"))
    assert (tmp_path / "notes" / "a.txt").read_text() == "mine"
    with pytest.raises(AccumulusError, match="not among its dimensions"):
        accumulus.accumulate(str(source), VAR, ["depth"], into=str(tmp_path / "new.zarr"))
    assert not (tmp_path / "new.zarr").exists()


def test_verify_a_sidecar_against_its_source(tmp_path):
    """`verify SIDE` recomputes SIDE's sums from the source's raw data: OK, a wrong entry
    found, a grown source still OK over what SIDE covers, a changed source stale (exit 1,
    one line), a gone source a one-line error."""
    source = make_cube(tmp_path / "data")
    side = tmp_path / "side.zarr"
    accumulus.accumulate(str(source), VAR, into=str(side), minimal=True)
    runner = CliRunner()
    fine = runner.invoke(app, ["verify", str(side)])
    assert fine.exit_code == 0, fine.output
    assert f"{VAR}: OK (" in fine.stdout and "accumulation arrays match" in fine.stdout
    named = runner.invoke(app, ["verify", str(source), "--accumulations", str(side)])
    assert named.exit_code == 0 and named.stdout == fine.stdout

    more = synthetic_dataset({**SIZES, "time": 70}, seed=3).isel(time=slice(60, 70))
    more.to_zarr(source, append_dim="time")
    assert accumulus.verify(str(side), VAR)[0].ok  # over what SIDE covers

    group = zarr.open_group(side / f"{VAR}_accumulation_group", mode="r+")
    name = sorted(group.array_keys())[0]
    group[name][(0,) * group[name].ndim] = 1e6
    wrong = runner.invoke(app, ["verify", str(side), VAR])
    assert wrong.exit_code == 1 and wrong.stderr.count("\n") == 1, wrong.output
    assert f"{name}: 1 entries differ" in wrong.stderr

    write_cube(synthetic_dataset(SIZES, seed=9), source, {"time": 15, "lat": 6, "lon": 8})
    stale = runner.invoke(app, ["verify", str(side)])
    assert stale.exit_code == 1 and stale.stderr.count("\n") == 1, stale.output
    assert "stale" in stale.stderr and "chunk edges along time" in stale.stderr
    assert f"--into {side}" in stale.stderr

    shutil.rmtree(source)
    with pytest.raises(AccumulusError, match=r"holds accumulations of .*cannot be read") as gone:
        accumulus.verify(str(side))
    assert "\n" not in str(gone.value)


def test_verify_a_sidecar_of_a_virtual_cube(tmp_path):
    granules = monthly_granules(tmp_path / "in", [1, 2, 3])
    virt, side = tmp_path / "virt.json", tmp_path / "side.zarr"
    accumulus.append_virtual(virt, granules)
    accumulus.accumulate(str(virt), VAR, into=str(side))
    (report,) = accumulus.verify(str(side))
    assert report.ok and report.checked
    # January's references now point at another file: the fingerprint no longer holds.
    point_january_at_a_copy(virt, granules[0])
    (report,) = accumulus.verify(str(side))
    assert not report.ok and "references other bytes" in report.problems[0]
