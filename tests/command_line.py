"""The command line run in-process through its real entry point (``accumulus.cli.main``, what
the console script calls), for tests of one-line errors that write nothing."""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import pytest

from accumulus.cli import main


def run(capsys, monkeypatch, *args: str) -> tuple[int, str, str]:
    """Exit status, stdout and stderr of ``accumulus ARGS``, its output piped (pytest-xdist's
    workers set ``COLUMNS=80``, which a pipe does not have)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "argv", ["accumulus", *args])
    with pytest.raises(SystemExit) as stopped:
        main()
    out, err = capsys.readouterr()
    return stopped.value.code or 0, out, err


def refused(capsys, monkeypatch, *args: str) -> str:
    """Run a command that must fail in one line with exit status 2; its message."""
    code, _, err = run(capsys, monkeypatch, *args)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def files(path: Path) -> dict[str, str]:
    """Every file under ``path`` with its checksum: to prove nothing was written."""
    return {
        str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }
