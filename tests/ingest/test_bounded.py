"""Granules that declare more than they hold (issue 35 item 4): a few KB declaring 10^9 x
10^9 cells made xarray allocate 7.45 GiB per coordinate before any check; a highly
compressed granule was decoded whole. Declared sizes are checked before a granule is opened,
and values are read, converted and written a block at a time, so what an append holds
stays bounded whatever a granule declares (benchmarks/bench_ingest_bounds.py measures the
peak RSS on a deflate bomb)."""

from __future__ import annotations

import resource
import subprocess
import sys
import tracemalloc
from pathlib import Path

import netCDF4
import numpy as np
import xarray as xr
import zarr

from accumulus.ingest import conform
from accumulus.ingest.append import unpublished_writer as writer
from command_line import files, refused, run
from ingest.helpers import cli_env
from ingest.inflating import declares_a_billion_squared


def test_a_granule_declaring_a_billion_squared_is_refused(tmp_path, capsys, monkeypatch):
    granule = declares_a_billion_squared(tmp_path / "huge.nc")
    assert granule.stat().st_size < 20_000
    before = files(tmp_path)
    for destination in ("cube.zarr", "refs.json"):
        virtual = ["--virtual"] if destination.endswith(".json") else []
        message = refused(
            capsys, monkeypatch, "append", str(tmp_path / destination), str(granule), *virtual
        )
        assert message == (
            f"error: granule {granule}: coordinate 'lat' declares 7.45 GiB (lat is "
            "1,000,000,000), read whole to index it: more than one read may hold (2.00 GiB); "
            "refused before reading it"
        )
    assert files(tmp_path) == before


def test_refused_before_any_allocation(tmp_path):
    """The console script with 3 GB of address space (xarray's index alone would take
    7.45 GB) refuses the granule in one line."""
    granule = declares_a_billion_squared(tmp_path / "huge.nc")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    result = subprocess.run(
        [sys.executable, "-m", "accumulus", "append", str(tmp_path / "cube.zarr"), str(granule)],
        capture_output=True,
        text=True,
        env=cli_env(),
        preexec_fn=limit,
        timeout=120,
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"error: granule {granule}: coordinate 'lat' declares")
    assert result.stderr.count("\n") == 1
    assert not (tmp_path / "cube.zarr").exists()


def test_a_zarr_granule_declaring_a_huge_chunk(tmp_path, capsys, monkeypatch):
    granule = tmp_path / "huge.zarr"
    root = zarr.open_group(granule, mode="w", zarr_format=2)
    time = root.create_array(
        "time",
        shape=(1,),
        dtype="f8",
        attributes={"_ARRAY_DIMENSIONS": ["time"], "units": "days since 2000-01-01"},
    )
    time[:] = [0.0]
    root.create_array(
        "x", shape=(1, 100_000, 100_000), chunks=(1, 100_000, 100_000), dtype="f4",
        attributes={"_ARRAY_DIMENSIONS": ["time", "y", "x"]},
    )  # fmt: skip
    message = refused(capsys, monkeypatch, "append", str(tmp_path / "cube.zarr"), str(granule))
    assert "one time step of 'x' declares 37.25 GiB" in message
    assert not (tmp_path / "cube.zarr").exists()


def test_convert_refuses_a_chunk_too_large_to_read(tmp_path, capsys, monkeypatch):
    source = tmp_path / "big-chunk.nc"
    with netCDF4.Dataset(source, "w") as file:
        file.createDimension("y", 40_000)
        file.createDimension("x", 20_000)
        file.createVariable("v", "f4", ("y", "x"), zlib=True, chunksizes=(40_000, 20_000))
    message = refused(capsys, monkeypatch, "convert", str(source), str(tmp_path / "out.zarr"))
    assert message.startswith(f"error: {source}: a chunk of 'v' declares 2.98 GiB")
    assert not (tmp_path / "out.zarr").exists()


def compressed_granule(path: Path, steps: int, ny: int, nx: int) -> Path:
    """A zlib granule whose values compress 100-fold: a smooth pattern, chunked by 64 steps."""
    pattern = np.add.outer(np.arange(ny), np.arange(nx)).astype("f4") % 7
    with netCDF4.Dataset(path, "w") as file:
        file.createDimension("time", steps)
        file.createDimension("lat", ny)
        file.createDimension("lon", nx)
        time = file.createVariable("time", "f8", ("time",))
        time.units = "hours since 2000-01-01"
        time[:] = np.arange(steps)
        file.createVariable("lat", "f4", ("lat",))[:] = np.linspace(-89.5, 89.5, ny)
        file.createVariable("lon", "f4", ("lon",))[:] = np.linspace(-179, 179, nx)
        var = file.createVariable(
            "v", "f4", ("time", "lat", "lon"), zlib=True, chunksizes=(64, ny, nx)
        )
        for start in range(0, steps, 64):
            var[start : start + 64] = pattern + np.arange(start, start + 64)[:, None, None] % 5
    return path


def test_values_are_read_and_written_a_block_at_a_time(tmp_path, capsys, monkeypatch):
    """With blocks of 1 MiB (rows of the granule's chunks only when they hold at most 2
    MiB), writes of 1 MiB and 2 MiB waiting at most, appending 127 MiB of values holds about
    10 MiB of them at once (numpy's allocations, as tracemalloc counts them; with blocks and
    writes of 1 GiB it is 275 MiB, more than the granule)."""
    granule = compressed_granule(tmp_path / "g.nc", 2048, 90, 180)
    decoded = 2048 * 90 * 180 * 4
    monkeypatch.setattr(conform, "BLOCK_BYTES", 2**20)
    monkeypatch.setattr(conform, "CHUNK_ROW_BYTES", 2 * 2**20)
    monkeypatch.setattr(writer, "WRITE_BYTES", 2**20)
    monkeypatch.setattr(writer, "PENDING_BYTES", 2 * 2**20)
    args = (str(granule), "--chunks", "time=16")
    code, _, err = run(capsys, monkeypatch, "append", str(tmp_path / "warm.zarr"), *args)
    assert code == 0, err  # what the first run imports is not counted below
    cube = tmp_path / "cube.zarr"
    tracemalloc.start()
    try:
        code, _, err = run(capsys, monkeypatch, "append", str(cube), *args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 0, err
    assert peak < decoded / 8, f"{peak / 2**20:.1f} MiB held of {decoded / 2**20:.1f} MiB"
    ours = xr.open_zarr(cube)["v"].values
    theirs = xr.open_dataset(granule)["v"].values
    np.testing.assert_array_equal(ours, theirs)
