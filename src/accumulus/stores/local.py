"""The local directory store every path opens: zarr's ``LocalStore`` with lean synchronous
whole-object reads and writes; written in place under a group nobody reads yet."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext, suppress
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore, WrapperStore

from accumulus.stores.base import DelegatingStore, ReadsSync
from accumulus.stores.group import GroupStore
from accumulus.stores.safe_reads import (
    FileVersion,
    read_regular_file,
    read_regular_file_parts,
    regular_file_version,
)


class LeanLocalStore(ReadsSync, LocalStore):
    """zarr's ``LocalStore`` whose synchronous whole-object reads and writes are a few os
    calls (open, fstat, read; open, write, rename) instead of pathlib, a buffered file and,
    per write, a ``mkdir`` of the parent: less time around the data for every read and write
    (docs/benchmarks.md). A warm query reads a few objects, a build at every element writes
    20,000. Only regular files are read (``safe_reads.read_regular_file``); a write
    is atomic as ``LocalStore``'s is (a temporary file renamed into place), except under a
    group being written that no reader reads yet (``unpublished``)."""

    _unpublished: tuple[str, ...] = ()  # key prefixes written in place (``unpublished``)
    # ``root`` as text ending in a separator, and the ``root`` it was made of (``move``
    # changes it): a key's path is one concatenation, not a ``Path`` joined per chunk.
    _root_text: str = ""
    _root_of: object = None

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        if byte_range is not None or not self._is_open:
            return LocalStore.get_sync(self, key, prototype=prototype, byte_range=byte_range)
        data = read_regular_file(str(self.root), key)
        return None if data is None else prototype.buffer.from_bytes(data)

    def read_parts_sync[T](
        self, key: str, parts: Callable[[Callable[[int, int], bytes], FileVersion], T]
    ) -> T | None:
        """``parts(read, version)`` on the object at ``key`` opened once, reading only the
        byte ranges it asks for (``safe_reads.read_regular_file_parts``); None where there is
        no object."""
        if not self._is_open:
            self._ensure_open_sync()
        return read_regular_file_parts(str(self.root), key, parts)

    def version_sync(self, key: str) -> FileVersion | None:
        """The version of the object at ``key`` now (``safe_reads.regular_file_version``:
        one ``stat``); None where there is none."""
        if not self._is_open:
            self._ensure_open_sync()
        return regular_file_version(self._path(key), key)

    def _path(self, key: str) -> str:
        """The file of ``key``."""
        root = self.root
        if root is not self._root_of:
            self._root_text = os.path.join(root, "")
            self._root_of = root
        return self._root_text + key

    def set_sync(self, key: str, value: Buffer) -> None:
        if not self._is_open or self.read_only or not isinstance(value, Buffer):
            super().set_sync(key, value)  # opens the root, or raises what LocalStore raises
            return
        path = os.path.join(self.root, key)
        if key.startswith(self._unpublished):
            write_file(path, value.as_buffer_like())
        else:
            write_file_atomically(path, value.as_buffer_like())

    @contextmanager
    def writing_in_place(self, path: str) -> Iterator[None]:
        """While in it, objects under the group at ``path`` written by ``set_sync`` are
        written in place (``unpublished``)."""
        prefix = f"{path.strip('/')}/"
        self._unpublished = (*self._unpublished, prefix)
        try:
            yield
        finally:
            kept = list(self._unpublished)
            kept.remove(prefix)
            self._unpublished = tuple(kept)


def unpublished(store: Store, path: str) -> AbstractContextManager[None]:
    """While in it, the objects of the group at ``path`` of ``store`` that are written
    through ``set_sync`` into a local directory (a build's chunks: ``encoded_chunks``) are
    written in place, not as a temporary file renamed (one ``rename`` less per object: a
    build writes thousands). Only for a group no reader reads yet: a group created marked
    incomplete, which readers ignore until it is published, and which a build interrupted
    leaves incomplete, to be deleted and written again by the next (a file cut short by the
    interruption is never read as data). Elsewhere (other stores, wrappers that change what
    is written) writes stay as they are."""
    key = path.strip("/")
    while isinstance(store, WrapperStore):
        if isinstance(store, GroupStore):
            key = store._key(key)
        elif not (
            isinstance(store, DelegatingStore)
            and store.sync_writes_pass_through
            and store.rewrites_metadata_only
        ):
            return nullcontext()
        store = store._store
    if isinstance(store, LeanLocalStore):
        return store.writing_in_place(key)
    return nullcontext()


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
_IN_PLACE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)


def write_file(path: str, data: Any) -> None:
    """Write ``data`` (any buffer) to ``path`` in place (a reader may see it cut short: only
    where none reads, ``unpublished``); the parent directories are made when missing."""
    fd = _opened_for_writing(path, path, _IN_PLACE_FLAGS)
    try:
        _write_all(fd, data)
    finally:
        os.close(fd)


def write_file_atomically(path: str, data: Any) -> None:
    """Write ``data`` (any buffer) to ``path`` by a temporary file beside it renamed into
    place, so that a reader sees the old object or the new one; the parent directories are
    made when missing."""
    temporary = f"{path}.{uuid.uuid4().hex}.partial"
    fd = _opened_for_writing(temporary, path, _WRITE_FLAGS)
    try:
        try:
            _write_all(fd, data)
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:  # cleanup, then re-raised: no temporary file is left
        with suppress(OSError):
            os.unlink(temporary)
        raise


def _opened_for_writing(file: str, path: str, flags: int) -> int:
    """``file`` (``path`` or a temporary file beside it) opened with ``flags``, ``path``'s
    parent directories made when missing."""
    try:
        return os.open(file, flags, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return os.open(file, flags, 0o666)


def _write_all(fd: int, data: Any) -> None:
    view = memoryview(data).cast("B")
    while view:
        view = view[os.write(fd, view) :]
