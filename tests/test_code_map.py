"""docs/development.md's code map names every module of src/accumulus, and only modules that
exist: a module added, moved or removed without its line in the map fails here."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "accumulus"


def mapped_paths(page: str) -> set[str]:
    """The paths the code map names (relative to src/accumulus), from its indentation: two
    spaces per folder level below ``src/accumulus/``."""
    section = page[page.index("## The code") :]
    block = section[section.index("```\n") + 4 :]
    block = block[: block.index("```")]
    lines = block.splitlines()
    assert lines[0] == "src/accumulus/"
    folders: list[str] = []
    found = set()
    for line in lines[1:]:
        depth, rest = divmod(len(line) - len(line.lstrip(" ")), 2)[0], line.strip()
        if depth == 0:  # tests/, benchmarks/, docs/: beside the package
            break
        name = rest.split()[0]
        folders = folders[: depth - 1]
        path = "/".join([*folders, name])
        if name.endswith("/"):
            folders.append(name.rstrip("/"))
        else:
            found.add(path)
    return found


def test_the_code_map_names_every_module_and_only_those():
    page = (ROOT / "docs" / "development.md").read_text()
    named = mapped_paths(page)
    modules = {
        p.relative_to(PACKAGE).as_posix()
        for p in PACKAGE.rglob("*.py")
        if "__pycache__" not in p.parts
    }
    assert sorted(modules - named) == [], "modules missing from the code map"
    assert sorted(named - modules) == [], "the code map names modules that do not exist"
    assert all(re.fullmatch(r"[\w/]+\.py", path) for path in named)
