"""Where an append writes: the cube's store, checked before any granule is read, and the
directory an append made removed again when nothing was written into it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from zarr.abc.store import Store
from zarr.core.sync import sync
from zarr.storage import FsspecStore

from accumulus.destinations import check_store
from accumulus.errors import AccumulusError
from accumulus.stores.opening import open_store
from accumulus.stores.transactional import is_session_store


def open_target(
    store: str | os.PathLike[str] | Store,
    label: str,
    storage_options: dict | None,
    ref: str | None = None,
) -> tuple[Store, Path | None]:
    """The store to append to (of an icechunk repository: a session on the branch ``ref``),
    and the directory this call creates (removed again if the append fails before writing
    anything). Its parent directory or bucket must exist."""
    if isinstance(store, Store):
        if ref is not None:
            raise AccumulusError(f"ref={ref!r} names a branch of a repository given by its URL")
        if is_session_store(store):
            raise AccumulusError(
                "append into an icechunk repository by its URL (icechunk://PATH), not a "
                "session's store: accumulus commits what it writes, once"
            )
        return store, None
    text = os.fspath(store)
    if text.endswith(".zip"):
        raise AccumulusError(
            f"{text}: zip stores cannot be appended to (objects are never replaced in a zip); "
            "append to a directory or s3:// store, and zip a copy"
        )
    new_directory = check_store(text, "the cube")
    target = open_store(text, "w", storage_options=storage_options, ref=ref)
    inner = target
    while hasattr(inner, "_store"):
        inner = inner._store
    if isinstance(inner, FsspecStore):
        bucket = inner.path.split("/", 1)[0]
        try:
            exists = sync(inner.fs._exists(bucket))
        except Exception as exc:  # fsspec and s3fs raise many kinds (credentials, network)
            raise AccumulusError(f"cannot reach {label}: {exc}") from None
        if not exists:
            raise AccumulusError(f"cannot create the cube {label}: bucket {bucket!r} not found")
    return target, new_directory


def remove_if_empty(path: Path) -> None:
    """Remove a directory this append created when nothing was written into it."""
    if path.is_dir() and not any(p.is_file() for p in path.rglob("*")):
        shutil.rmtree(path)
