"""Run the ZEP 5 reference generator (NASA GES DISC ``zarr-accumulation-generation``) as
published, in a throwaway Python 3.11 environment with the versions it runs under.

``python tests/interop/generator.py DEST`` writes the store the generator makes from
``tests/data/zep5_generator/make_input.py``'s input; the slow test calls ``generate``.
The generator's code is vendored unmodified under ``tests/data/zep5_generator/upstream``
(Apache-2.0, commit ``c15498d``); its README says how to run it, which is what this does:
``python helper.py --path STORE`` then ``python main.py --data_path STORE``, from its
``data_preparation`` folder.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

DATA = Path(__file__).resolve().parents[1] / "data" / "zep5_generator"
SOURCE = DATA / "upstream" / "zarr-accumulation" / "data_preparation"
# What the generator runs under (its requirements/core.txt, plus the numcodecs and NumPy
# its zarr needs: numcodecs 0.12 dropped what zarr 2.13 imports, NumPy 2 what it uses).
REQUIREMENTS = ["zarr==2.13.3", "dask[array]==2023.2.0", "numcodecs<0.12", "numpy<2"]
# Threads split the latitudes: 3 divides the fixture's 12 (the generator requires it).
GENERATOR_OPTIONS = ["--n_threads", "3"]


def python311() -> str:
    found = shutil.which("python3.11")
    if found is None:
        raise RuntimeError("the generator needs python3.11 (Debian: python3.11-venv)")
    return found


def generate(dest: Path) -> Path:
    """The generator's store at ``dest`` (which must not exist)."""
    with tempfile.TemporaryDirectory(prefix="zep5-generator-") as work:
        venv = Path(work) / "venv"
        subprocess.run([python311(), "-m", "venv", str(venv)], check=True)
        python = str(venv / "bin" / "python")
        pip = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
        subprocess.run([*pip, *REQUIREMENTS], check=True)
        subprocess.run([python, str(DATA / "make_input.py"), str(dest)], check=True)
        for script in (["helper.py", "--path"], ["main.py", *GENERATOR_OPTIONS, "--data_path"]):
            subprocess.run(
                [python, *script, str(dest.resolve())],
                cwd=SOURCE,
                check=True,
                capture_output=True,
            )
    return dest


if __name__ == "__main__":
    generate(Path(sys.argv[1]))
