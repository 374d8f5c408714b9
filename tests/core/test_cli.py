"""The command line, run as a user runs it: accumulate, average (--json/--csv/--png),
inspect, verify, and one-line errors with nothing written."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import command_line
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference

SRC = str(Path(__file__).resolve().parents[2] / "src")


def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": SRC}
    proc = subprocess.run(
        [sys.executable, "-m", "accumulus", *args], capture_output=True, text=True, env=env
    )
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def snapshot(path: Path) -> dict[str, str]:
    """Every file of a store with its checksum: to prove nothing was written."""
    return {
        str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def cube(tmp_path_factory):
    path = tmp_path_factory.mktemp("cli") / "cube.zarr"
    ds = synthetic_dataset({"time": 40, "lat": 12, "lon": 16}, seed=5)
    write_cube(ds, path, {"time": 10, "lat": 4, "lon": 8})
    proc = run("accumulate", str(path), VAR, "--dims", "time", "--dims", "lat,lon",
               "--stride", "time=2", "--weights", "area")  # fmt: skip
    assert "built" in proc.stdout
    return path, ds


def test_accumulate_again_is_a_no_op_and_other_config_is_refused(cube):
    path, _ = cube
    before = snapshot(path)
    proc = run("accumulate", str(path), VAR, "--dims", "time", "--dims", "lat,lon",
               "--stride", "time=2", "--weights", "area")  # fmt: skip
    assert "up to date" in proc.stdout
    proc = run("accumulate", str(path), VAR, "--dims", "time", check=False)
    assert proc.returncode == 2
    assert "--rebuild" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert snapshot(path) == before


def test_average_json_matches_xarray(cube):
    path, ds = cube
    proc = run("average", str(path), VAR, "--over", "lat,lon",
               "--range", "time=2001-01-05/2001-02-03", "--range", f"lat={ds.lat.values[2]}/60",
               "--json")  # fmt: skip
    out = json.loads(proc.stdout)
    assert set(out) >= {"variable", "stat", "over", "dims", "coords", "values", "plan"}
    assert set(out["plan"]) >= {"accumulation_chunks_read", "raw_chunks_read", "bytes_read",
                                "seconds"}  # fmt: skip
    assert out["dims"] == ["time"] and out["coords"]["time"][0] == "2001-01-05T00:00:00"
    selected = ds[VAR].sel(time=slice("2001-01-05", "2001-02-03"), lat=slice(ds.lat.values[2], 60))
    expected = xarray_reference(selected, ["lat", "lon"], "area", "mean")
    np.testing.assert_allclose(out["values"], expected.values, rtol=1e-9)


def test_average_csv_png_and_null_for_missing(cube, tmp_path):
    path, _ = cube
    png = tmp_path / "map.png"
    proc = run("average", str(path), VAR, "--over", "time", "--csv", "--png", str(png))
    lines = proc.stdout.strip().splitlines()
    assert lines[0] == f"lat,lon,{VAR}" and len(lines) == 1 + 12 * 16
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    proc = run("average", str(path), VAR, "--over", "lat,lon", "--stat", "count", "--json",
               "--weights", "none", "--no-accumulation")  # fmt: skip
    out = json.loads(proc.stdout)
    assert out["plan"]["accumulation_chunks_read"] == 0
    assert all(isinstance(v, float) for v in out["values"])


def test_inspect_and_verify(cube):
    path, _ = cube
    proc = run("inspect", str(path), "--json")
    info = json.loads(proc.stdout)
    [group] = info["accumulation_groups"]
    assert group["complete"] and group["weights"] == "area"
    assert group["coverage"]["time"] == {"covered": 40, "size": 40}
    assert "precip_accumulation_group" in run("inspect", str(path)).stdout
    proc = run("verify", str(path), VAR)
    assert "OK" in proc.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["average", "{path}x", VAR, "--over", "time"], "store not found"),
        (["average", "{path}", "nope", "--over", "time"], "no variable 'nope'"),
        (["average", "{path}", VAR, "--over", "depth"], "its dimensions are"),
        (
            ["average", "{path}", VAR, "--over", "time", "--range", "time=2001-13-45/2001-02-01"],
            "not a date",
        ),
        (
            ["average", "{path}", VAR, "--over", "time", "--range", "time=2001-02-01/2001-01-01"],
            "reversed",
        ),
        (["average", "{path}", VAR, "--over", "time", "--range", "lat=95/99"], "selects nothing"),
        (["average", "{path}", VAR, "--over", "time", "--range", "lat=abc/2"], "not a number"),
        (["average", "{path}", VAR, "--over", "time", "--range", "lat=1"], "start/end"),
        (["average", "{path}", VAR, "--over", "time", "--stat", "median"], "unknown stat"),
        (["average", "{path}", VAR, "--over", "lat,lon", "--region", "ar6:Atlantis"], "no region"),
        (["average", "{path}", VAR, "--over", "lat,lon", "--region", "ar6:NZ"], "no cell centre"),
        (["average", "{path}", VAR, "--over", "lat,lon", "--shape", "{path}.json"], "no such file"),
        (
            ["average", "{path}", VAR, "--over", "lat,lon", "--shape", "a.json", "--region", "x:y"],
            "not both",
        ),
        (["accumulate", "{path}", VAR, "--dims", "depth", "--rebuild"], "not among"),
        (["accumulate", "{path}", VAR, "--stride", "time=0", "--rebuild"], "positive integer"),
        (["accumulate", "{path}", VAR, "--weights", "nothing", "--rebuild"], "no array"),
        (
            ["accumulate", "{path}", VAR, "--scheduler", "carrier-pigeon", "--rebuild"],
            "unknown scheduler",
        ),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cube, args, message):
    path, _ = cube
    before = snapshot(path)
    proc = run(*[a.format(path=path) for a in args], check=False)
    assert proc.returncode == 2, proc.stderr
    assert message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert snapshot(path) == before


@pytest.mark.parametrize("port", ["99999", "-1"])
def test_serve_refuses_a_port_out_of_range_before_starting(capsys, monkeypatch, tmp_path, port):
    code, out, err = command_line.run(capsys, monkeypatch, "serve", str(tmp_path), "--port", port)
    assert code == 2 and "Traceback" not in err + out
    assert "--port" in err and "0<=x<=65535" in err
