"""Rewriting a stored file as writers do: in place (the same inode, new bytes) or replaced
(another file renamed over it), for tests of what readers remember about a file's version."""

from __future__ import annotations

import os
from pathlib import Path

WAYS = ("in place", "replaced")


def rewrite(path: Path, data: bytes, how: str) -> None:
    """Give ``path`` the content ``data``, ``how``: "in place" or "replaced"."""
    if how == "in place":
        with open(path, "r+b") as file:
            file.write(data)
            file.truncate()
    elif how == "replaced":
        path.with_suffix(".new").write_bytes(data)
        os.replace(path.with_suffix(".new"), path)
    else:
        raise ValueError(f"how: 'in place' or 'replaced', not {how!r}")
