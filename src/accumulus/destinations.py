"""Where a command writes, checked before it does any work: a picture (``average --png``),
a store to create or write into (``append``, ``accumulate --into``, ``convert``).

A destination that cannot be written (its directory missing, a file where a directory
should be, a read-only directory or file system) is refused in one line naming it, before a
query runs or a granule is read, so that nothing is computed for nothing and nothing is left
behind. Writability is tried, not inferred from permission bits (which say nothing of
read-only mounts, nor of what the superuser may do): a probe file is made in the directory
and removed at once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from accumulus.errors import AccumulusError
from accumulus.stores.local import write_file_atomically
from accumulus.stores.locations import local_path


def check_file(path: str | os.PathLike[str], what: str) -> Path:
    """A file to write (replacing it if it exists): its directory must exist and take new
    files, and the path must not be a directory. Returns it."""
    target = Path(path).expanduser()
    if target.is_dir():
        raise AccumulusError(f"cannot write {what} {path}: it is a directory")
    check_directory(target.parent, f"{what} {path}")
    return target


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (checked with ``check_file``) whole or not at all."""
    write_file_atomically(str(path), data)


def check_store(url: str | os.PathLike[str], what: str) -> Path | None:
    """A store to create or write into. For a local one: an existing store must be a
    directory that takes new files; a new one needs an existing directory that does.
    Returns the local directory a write would create (None: it exists, or is not local)."""
    path = local_path(url)
    if path is None:
        return None  # object stores and other URLs answer for themselves
    label = f"{what} {os.fspath(url)}"
    if path.is_dir():
        check_directory(path, label)
        return None
    if path.exists():
        raise AccumulusError(f"cannot write {label}: it exists and is not a directory")
    if not path.parent.is_dir():
        raise AccumulusError(f"cannot create {label}: {_not_a_directory(path.parent)}")
    check_directory(path.parent, label)
    return path


@contextmanager
def removed_on_failure(created: Path | None) -> Iterator[None]:
    """Remove ``created`` (a directory ``check_store`` said a write would create) when the
    block fails or is interrupted: a failed run leaves no store behind."""
    try:
        yield
    except BaseException:  # cleanup, then re-raised
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise


def check_directory(directory: Path, label: str) -> None:
    """``directory`` exists and takes new files, or an error saying why ``label`` cannot
    be written."""
    if not directory.is_dir():
        raise AccumulusError(f"cannot write {label}: {_not_a_directory(directory)}")
    try:
        handle, probe = tempfile.mkstemp(prefix=".accumulus-probe-", dir=directory)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise AccumulusError(
            f"cannot write {label}: directory {directory} does not take new files ({reason})"
        ) from None
    os.close(handle)
    os.unlink(probe)


def _not_a_directory(path: Path) -> str:
    return f"{path} is not a directory" if path.exists() else f"directory {path} does not exist"
