"""A fast command line: ``import accumulus`` and ``accumulus --help`` load none of the heavy
libraries (xarray, zarr, Dask, NumPy, numba, FastAPI, matplotlib); each command imports what
it uses when it runs. Measured by the modules loaded, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import accumulus
from cubes import synthetic_dataset, write_cube

HEAVY = ("xarray", "zarr", "dask", "numpy", "numba", "distributed", "fastapi", "matplotlib")
# What a query does not use: builds and ingestion (distributed, h5py and hdf5plugin, netCDF4),
# the service (FastAPI, uvicorn), pictures (matplotlib) and shapes (shapely, geopandas,
# regionmask), Dask's arrays (xarray imports dask.array, and SciPy with it, when it is given a
# bare array while Dask is installed; answers are made from xarray variables), numba (the build's
# compiled loop: a query sums its few raw chunks with NumPy), rich (plain JSON needs no console)
# and pydantic (typer 0.29 and later build every option through it). xarray, zarr and NumPy
# it needs.
NOT_FOR_QUERIES = (
    "distributed", "h5py", "hdf5plugin", "netCDF4", "h5netcdf", "fastapi", "uvicorn",
    "starlette", "matplotlib", "shapely", "geopandas", "regionmask", "pyproj", "s3fs",
    "dask.array", "numba", "rich", "pydantic",
)  # fmt: skip


def _run_then_list_modules(code: str) -> tuple[list[str], list[str]]:
    """What ``code`` printed (lines), and the modules loaded after it ran."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    *printed, modules = proc.stdout.splitlines()
    return printed, json.loads(modules)


def _modules_after(code: str) -> list[str]:
    return _run_then_list_modules(code)[1]


def _command(*args: str) -> tuple[dict, list[str]]:
    """The JSON ``accumulus ARGS`` prints, and the modules loaded by then."""
    printed, loaded = _run_then_list_modules(
        f"import sys\nfrom accumulus.cli import app\nsys.argv = ['accumulus', *{list(args)!r}]\n"
        "try:\n    app()\nexcept SystemExit as stop:\n    assert not stop.code, stop.code"
    )
    return json.loads(printed[-1]), loaded


def test_the_command_line_starts_without_the_heavy_libraries():
    loaded = _modules_after(
        "import sys\nfrom accumulus.cli import app\nsys.argv = ['accumulus', '--help']\n"
        "try:\n    app()\nexcept SystemExit as stop:\n    assert stop.code == 0"
    )
    assert [m for m in HEAVY if m in loaded] == []


def test_public_names_load_when_first_used():
    loaded = _modules_after(
        "import accumulus\nassert 'xarray' not in __import__('sys').modules\n"
        "from accumulus.rechunk import rechunk as defined\n"
        "assert accumulus.rechunk is defined, accumulus.rechunk  # the function, not the module\n"
        "assert callable(accumulus.open) and accumulus.Datacube.__name__ == 'Datacube'\n"
        "from accumulus.ingest.append import append\n"
        "assert accumulus.append.__wrapped__ is append, accumulus.append"
    )
    assert "xarray" in loaded and "accumulus.api" in loaded


def test_average_json_loads_only_what_a_query_uses(tmp_path: Path):
    """``average --json``, answered from accumulations and from raw chunks: the answer is
    printed, and nothing of builds, ingestion, the service, pictures or shapes was loaded,
    nor numba (a query sums its raw chunks with NumPy)."""
    path = tmp_path / "cube.zarr"
    chunks = {"time": 10, "lat": 6, "lon": 8}
    write_cube(synthetic_dataset({"time": 40, "lat": 12, "lon": 16}), path, chunks)
    # ZEP 5 as written (chunk ends), so that the unaligned box reads raw chunks.
    accumulus.accumulate(str(path), "precip", minimal=True)
    aligned = ["--over", "time", "--range", "time=2001-01-01/2001-01-20", "--plan", "accumulation"]
    unaligned = ["--over", "lat,lon", "--range", "lat=-50/50", "--range", "lon=3/20"]
    for ranges, raw in ((aligned, False), (unaligned, True)):
        answer, loaded = _command("average", str(path), "precip", *ranges, "--json")
        assert (answer["plan"]["raw_chunks_read"] > 0) is raw, answer["plan"]
        assert answer["plan"]["accumulation_chunks_read"] > 0 or raw, answer["plan"]
        assert [m for m in NOT_FOR_QUERIES if m in loaded] == []
        assert raw or "scipy" not in loaded
        assert "accumulus.accumulation.build.accumulate" not in loaded


def test_commands_collect_garbage_after_their_imports():
    """The collector is paused only while a command imports ``accumulus.api``: a long
    command (a build, the service) still collects its own cycles."""
    lines, _ = _run_then_list_modules(
        "import gc\nfrom accumulus.cli.entry import load_api\n"
        "print(load_api().__name__, gc.isenabled(), gc.get_freeze_count() > 100_000)"
    )
    assert lines == ["accumulus.api True True"]


def _script(*args: str) -> subprocess.CompletedProcess:
    """``accumulus ARGS`` through the console script's function, with an atexit handler
    that prints "teardown" when the interpreter's teardown runs."""
    code = (
        "import atexit, sys\natexit.register(print, 'teardown')\n"
        f"from accumulus.cli import script\nsys.argv = ['accumulus', *{list(args)!r}]\nscript()"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_a_query_ends_without_the_teardown_other_commands_keep_it(tmp_path: Path):
    """After ``average`` (nothing left to finish) the console script ends the process at
    once: the whole answer is printed, the exit status is 0, and no atexit handler runs.
    Other commands, and a query that fails, end through the interpreter's teardown."""
    path = tmp_path / "cube.zarr"
    chunks = {"time": 10, "lat": 6, "lon": 8}
    write_cube(synthetic_dataset({"time": 40, "lat": 12, "lon": 16}), path, chunks)
    query = ["average", str(path), "precip", "--over", "lat,lon", "--json"]
    answered = _script(*query)
    assert answered.returncode == 0, answered.stderr
    assert len(json.loads(answered.stdout)["values"]) == 40
    assert "teardown" not in answered.stdout

    inspected = _script("inspect", str(path))
    assert inspected.returncode == 0, inspected.stderr
    assert inspected.stdout.rstrip().endswith("teardown")

    failed = _script("average", str(path), "nope", "--over", "lat,lon", "--json")
    assert failed.returncode == 2
    assert "nope" in failed.stderr and failed.stdout == "teardown\n"
