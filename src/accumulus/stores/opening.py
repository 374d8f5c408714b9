"""Open a Zarr store from a path or URL.

Every byte of Zarr I/O goes through zarr-python; this module only turns what a user types
(a directory, ``file://``, a ``.zip`` file, ``memory://name``, ``s3://bucket/prefix``, a
reference set) into a zarr ``Store``, seen through the wrappers that read other tools'
stores right (``stores.nczarr_compat``, ``stores.zep3``, ``stores.inferred_conventions``).
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from zarr.abc.store import Store
from zarr.storage import FsspecStore, LocalStore, ZipStore

from accumulus.errors import AccumulusError
from accumulus.stores.base import innermost
from accumulus.stores.inferred_conventions import InferredConventionsStore
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.locations import (
    StoreNotFoundError,
    file_options,
    local_path,
    reason,
    url_scheme,
)
from accumulus.stores.nczarr_compat import NCZarrCompatStore
from accumulus.stores.reference_sets import is_parquet_references, open_reference_file
from accumulus.stores.transactional import (
    is_repository_url,
    is_session_store,
    open_repository,
    reading_session,
    transaction_of,
)
from accumulus.stores.zep3 import Zep3DraftStore

Mode = Literal["r", "r+", "w"]


def open_store(
    url: str | os.PathLike[str] | Store,
    mode: Mode = "r",
    *,
    storage_options: dict[str, Any] | None = None,
    allow_references: Sequence[str] | None = None,
    ref: str | None = None,
) -> Store:
    """Return a zarr Store for ``url``.

    ``mode``: "r" read-only (the store must exist), "r+" read-write (must exist),
    "w" read-write, created if missing. ``storage_options`` go to fsspec for ``s3://``;
    the endpoint comes from ``endpoint_url`` there or ``AWS_ENDPOINT_URL``.
    A reference set (``.json``, ``.parq``) reads its chunks only where it may: its own
    location and the prefixes ``allow_references`` names (see ``stores.reference_targets``).
    Stores written by netcdf-c (see ``stores.nczarr_compat``), ZEP 3 draft chunk grids (see
    ``stores.zep3``) and, read-only, stores without xarray's conventions written by the ZEP 5
    reference generator (see ``stores.inferred_conventions``) are read right.
    ``icechunk://PATH`` and ``icechunk+s3://BUCKET/PREFIX`` name icechunk repositories
    (``stores.transactional``): read at ``ref`` (a branch, tag or snapshot id), written on
    the branch ``ref`` names; ``main`` by default. Other stores have no refs.
    """
    if isinstance(url, Store):
        if is_session_store(url):
            if mode != "r":
                raise AccumulusError(
                    "an icechunk session's store is read here; to write, give the "
                    "repository's URL (icechunk://PATH): accumulus commits what it writes"
                )
            return reading_session(url)
        return url
    text = os.fspath(url)
    if is_repository_url(text):
        store: Store = open_repository(text, mode, storage_options, ref, allow_references or ())
    elif ref is not None:
        raise AccumulusError(f"--ref {ref}: {text} is not an icechunk repository (no refs)")
    else:
        store = _open(text, mode, storage_options, allow_references or ())
    if mode == "r":  # stores without xarray's conventions are read, never written
        store = InferredConventionsStore(store)
    return Zep3DraftStore(NCZarrCompatStore(store))


def _open(
    text: str, mode: Mode, storage_options: dict[str, Any] | None, allow_references: Sequence[str]
) -> Store:
    read_only = mode == "r"
    must_exist = mode in ("r", "r+")
    scheme = url_scheme(text)
    if scheme == "memory":
        return _open_memory(text, must_exist, read_only)
    if text.endswith(".json") or is_parquet_references(text):
        if mode != "r":
            raise AccumulusError(
                f"{text} is a virtual cube (a reference set): it is extended with "
                "`append … --virtual`, and accelerated with `accumulate … --into SIDE.zarr`"
            )
        return open_reference_file(text, storage_options, allow_references)
    path = local_path(text)
    if path is None:
        return _open_url(text, scheme, mode, storage_options)
    if path.suffix == ".zip":
        return _open_zip(path, mode)
    if must_exist and not path.is_dir():
        raise StoreNotFoundError(f"store not found: {text} (no such directory)")
    if not must_exist:
        path.mkdir(parents=True, exist_ok=True)
    return LeanLocalStore(path, read_only=read_only)


# Schemes whose stores are read-only whatever the mode asked for.
_READ_ONLY_SCHEMES = frozenset({"http", "https"})


def _open_url(
    url: str, scheme: str, mode: Mode, storage_options: dict[str, Any] | None
) -> FsspecStore:
    """Any URL fsspec opens (s3://, gs://, az://, https://, …), with ``storage_options``
    passed through to the filesystem."""
    if scheme in _READ_ONLY_SCHEMES and mode != "r":
        raise AccumulusError(
            f"{url}: {scheme}:// stores are read-only; to accelerate one, write its "
            "accumulations beside it with `accumulate … --into SIDE.zarr`"
        )
    options = file_options(url, storage_options)
    try:
        return FsspecStore.from_url(url, storage_options=options, read_only=mode == "r")
    except ImportError as exc:
        raise AccumulusError(f"cannot open {url}: {exc}") from None
    # fsspec and its filesystems (s3fs, gcsfs, adlfs, HTTP) raise ValueError, OSError and
    # their own kinds: the user needs the URL and the reason.
    except Exception as exc:
        raise AccumulusError(f"cannot open {url}: {reason(exc)}") from None


def _open_memory(url: str, must_exist: bool, read_only: bool) -> FsspecStore:
    """fsspec's in-process memory filesystem, the one ``xarray.to_zarr("memory://...")``
    writes to, so both see the same store."""
    import fsspec

    if must_exist and not fsspec.filesystem("memory").exists(url.removeprefix("memory://")):
        raise StoreNotFoundError(f"store not found: {url} (no memory store of that name)")
    return FsspecStore.from_url(url, read_only=read_only)


def _open_zip(path: Path, mode: Mode) -> ZipStore:
    if mode != "w" and not path.is_file():
        raise StoreNotFoundError(f"store not found: {path} (no such zip file)")
    if mode == "r+":
        # Zip archives cannot replace an entry in place: metadata and partial chunks would be
        # written twice. Archives are for distribution; build in a directory, then zip it.
        raise AccumulusError(
            f"{path}: zip stores are read-only here; work on a directory store and zip it after"
        )
    if mode == "r" and not zipfile.is_zipfile(path):
        raise AccumulusError(f"{path}: not a readable zip archive (damaged or truncated?)")
    return ZipStore(path, mode="r" if mode == "r" else "w", read_only=mode == "r")


def store_label(store: Store) -> str:
    """A short human-readable name for a store, for messages."""
    transaction = transaction_of(store)
    if transaction is not None:
        return transaction.label
    inner = innermost(store)
    if isinstance(inner, LocalStore):
        return str(inner.root)
    if isinstance(inner, ZipStore):
        return str(inner.path)
    if isinstance(inner, FsspecStore):
        protocol = inner.fs.protocol
        return f"{protocol[0] if isinstance(protocol, tuple) else protocol}://{inner.path}"
    return str(inner)
