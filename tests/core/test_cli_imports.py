"""A fast command line: ``import accumulus`` and ``accumulus --help`` load none of the heavy
libraries (xarray, zarr, Dask, NumPy, numba, FastAPI, matplotlib); each command imports what
it uses when it runs. Measured by the modules loaded, in a fresh interpreter."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("xarray", "zarr", "dask", "numpy", "numba", "distributed", "fastapi", "matplotlib")


def _modules_after(code: str) -> list[str]:
    probe = f"{code}\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return json.loads(proc.stdout.splitlines()[-1])


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
        "assert callable(accumulus.open) and accumulus.Datacube.__name__ == 'Datacube'"
    )
    assert "xarray" in loaded and "accumulus.api" in loaded
