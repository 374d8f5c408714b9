"""The manual builds: `mkdocs build --strict` (what `make docs` runs) fails on a broken link,
a missing anchor or a page left out of the navigation. The README stays a front door."""

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_docs_build_strict(tmp_path):
    site = tmp_path / "site"
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for page in ["index", "getting-started", "appending", "service", "development"]:
        path = site / "index.html" if page == "index" else site / page / "index.html"
        assert path.is_file(), f"{page} was not built"
    assert (site / "service.png").is_file()


def test_readme_is_a_front_door():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    # The README's set-up commands are the ones CI runs.
    ci = (ROOT / ".ci" / "run").read_text()
    for command in ["make test", "make lint", "make test-slow"]:
        assert command in readme and command in ci
    # Every page it links to exists.
    links = re.findall(r"\]\((docs/[^)#]+)", readme)
    assert links
    for link in links:
        assert (ROOT / link).exists(), link
