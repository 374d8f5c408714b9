"""The local directory store every path opens: zarr's ``LocalStore`` with lean synchronous
whole-object reads and writes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from zarr.abc.store import ByteRequest
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore

from accumulus.stores.base import ReadsSync
from accumulus.stores.safe_reads import FileVersion, read_regular_file, read_regular_file_parts


class LeanLocalStore(ReadsSync, LocalStore):
    """zarr's ``LocalStore`` whose synchronous whole-object reads and writes are a few os
    calls (open, fstat, read; open, write, rename) instead of pathlib, a buffered file and,
    per write, a ``mkdir`` of the parent: less time around the data for every read and write
    (docs/benchmarks.md). A warm query reads a few objects, a build at every element writes
    20,000. Only regular files are read (``safe_reads.read_regular_file``); a write
    is atomic as ``LocalStore``'s is (a temporary file renamed into place)."""

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

    def set_sync(self, key: str, value: Buffer) -> None:
        if not self._is_open or self.read_only or not isinstance(value, Buffer):
            super().set_sync(key, value)  # opens the root, or raises what LocalStore raises
            return
        write_file_atomically(os.path.join(self.root, key), value.as_buffer_like())


_WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)


def write_file_atomically(path: str, data: Any) -> None:
    """Write ``data`` (any buffer) to ``path`` by a temporary file beside it renamed into
    place, so that a reader sees the old object or the new one; the parent directories are
    made when missing."""
    temporary = f"{path}.{uuid.uuid4().hex}.partial"
    try:
        fd = os.open(temporary, _WRITE_FLAGS, 0o666)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(temporary, _WRITE_FLAGS, 0o666)
    try:
        try:
            view = memoryview(data).cast("B")
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        os.replace(temporary, path)
    except BaseException:  # cleanup, then re-raised: no temporary file is left
        with suppress(OSError):
            os.unlink(temporary)
        raise
