"""Reading one key of a store so that it cannot hang or leak a path: a time limit, only
regular files on a local disk (a FIFO would block a reader forever, a directory or a
symlink loop gives OS errors naming server paths), and errors naming the key within the
store. Used for every metadata snapshot (``snapshot``) and, in the service, every chunk
(``guarded``); and for every local file a reference set names (``reference_sets``).
"""

from __future__ import annotations

import asyncio
import errno
import os
import stat
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import NamedTuple

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import LocalStore

from accumulus.errors import AccumulusError
from accumulus.stores.base import innermost


class StoreReadError(AccumulusError):
    """A chunk could not be read (not a regular file, an OS error, too slow). The message
    names the key within the store, never a server path."""


async def read_with_limits(
    store: Store,
    root: Path | None,
    key: str,
    prototype: BufferPrototype,
    byte_range: ByteRequest | None,
    seconds: float,
) -> Buffer | None:
    """``store.get`` that cannot hang or leak a path: at most ``seconds``; on a local store,
    only regular files are read."""
    if root is not None:
        check_regular_file(root, key)
    try:
        return await asyncio.wait_for(store.get(key, prototype, byte_range), seconds)
    except TimeoutError:
        raise StoreReadError(f"reading {key} took more than {seconds:g} s") from None
    except OSError as exc:
        if root is None:  # a network error: the caller names the store (remote_errors)
            raise
        raise StoreReadError(f"cannot read {key}: {_os_reason(exc)}") from None


def check_regular_file(root: Path, key: str) -> None:
    """Refuse a key that exists on disk as anything but a regular file."""
    try:
        mode = os.stat(root / key).st_mode
    except FileNotFoundError:
        return  # a missing key: the store says None
    except OSError as exc:
        raise StoreReadError(f"cannot read {key}: {_os_reason(exc)}") from None
    if not stat.S_ISREG(mode):
        raise _not_regular(key, mode)


def _not_regular(key: str, mode: int) -> StoreReadError:
    kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
    return StoreReadError(f"cannot read {key}: it is {kind}")


# Opened without blocking: a FIFO opened to read would wait for a writer (regular files
# ignore the flag).
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


def read_regular_file(root: str, key: str) -> bytes | None:
    """The whole file at ``key`` under the directory ``root``, by one open, one fstat and
    one read; None where there is none or it is a directory (as zarr's ``LocalStore``
    answers). What is neither is refused before anything is read from it."""
    return read_regular_file_parts(root, key, _whole)


def _whole(read: Callable[[int, int], bytes], version: FileVersion) -> bytes:
    return read(0, version.size)


# A file's version is remembered (its checksum passed, its bytes decoded, its content read)
# only once the file last changed this long ago (``FileVersion.settled``).
SETTLED_NS = 2 * 10**9


class FileVersion(NamedTuple):
    """What identifies the bytes of one regular file as it was opened: the same file
    (device, inode) of the same size whose content and inode last changed at the same
    moments (``st_mtime_ns``, ``st_ctime_ns``). Any write to a file, in place or not,
    sets its change time (``ctime``, which no call sets back), and a file renamed into a
    key's place is another inode: bytes written since a version was seen give another
    version, except within one tick of the file system's clock (``settled``)."""

    device: int
    inode: int
    size: int
    modified_ns: int
    changed_ns: int

    def settled(self, now_ns: int, margin_ns: int) -> bool:
        """Whether the file last changed at least ``margin_ns`` before ``now_ns``: a write
        after now gets another change time, even on a file system whose clock ticks
        coarsely (kernels stamp files from a clock of a few ms; some file systems keep
        seconds), whereas a write within the tick of the last change may not."""
        return self.changed_ns <= now_ns - margin_ns and self.modified_ns <= now_ns - margin_ns


class VersionMemo[K, V]:
    """What was learnt from one version of a file, by a key naming the file: given back
    while the file is that version, kept only once the version has settled (``settled_ns``:
    a write within the tick of its last change might leave its times as they were). At most
    ``files`` entries holding ``max_bytes`` (as ``put`` is told); then all forgotten at
    once (simpler than an order of use, and these hold a few bytes an entry)."""

    def __init__(self, files: int, max_bytes: int | None = None) -> None:
        self.files = files
        self.max_bytes = max_bytes
        self.settled_ns = SETTLED_NS
        self._entries: dict[K, tuple[FileVersion, V]] = {}
        self._held = 0

    def get(self, key: K, version: FileVersion) -> V | None:
        """What ``put`` kept of this version of the file ``key``; None otherwise."""
        known = self._entries.get(key)
        return known[1] if known is not None and known[0] == version else None

    def put(self, key: K, version: FileVersion, value: V, nbytes: int = 0) -> None:
        """Keep ``value`` (``nbytes`` of it) for this version of ``key`` if it has settled."""
        if not version.settled(time.time_ns(), self.settled_ns):
            return
        full = self.max_bytes is not None and self._held + nbytes > self.max_bytes
        if full or len(self._entries) >= self.files:
            self.clear()
        self._entries[key] = version, value
        self._held += nbytes

    def clear(self) -> None:
        self._entries.clear()
        self._held = 0

    def __len__(self) -> int:
        return len(self._entries)


def regular_file_version(path: str, key: str) -> FileVersion | None:
    """The version of the regular file at ``path`` (of ``key``) now, by one ``stat``; None
    where there is none or it is a directory; anything else refused (as
    ``read_regular_file``)."""
    try:
        info = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    return _version_of(info, key)


def _version_of(info: os.stat_result, key: str) -> FileVersion | None:
    """The version of the file of ``key`` that ``info`` describes; None for a directory;
    anything else but a regular file refused."""
    mode = info.st_mode
    if not stat.S_ISREG(mode):  # (the usual case asked first: one test per kept chunk)
        if stat.S_ISDIR(mode):
            return None
        raise _not_regular(key, mode)
    return FileVersion(info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns)


def read_versioned_file(root: str, key: str) -> tuple[FileVersion, bytes] | None:
    """The whole regular file at ``key`` under ``root`` with the version its bytes are of
    (one open); None as ``read_regular_file``."""
    return read_regular_file_parts(root, key, _whole_versioned)


def _whole_versioned(
    read: Callable[[int, int], bytes], version: FileVersion
) -> tuple[FileVersion, bytes]:
    return version, read(0, version.size)


def read_regular_file_parts[T](
    root: str, key: str, parts: Callable[[Callable[[int, int], bytes], FileVersion], T]
) -> T | None:
    """``parts(read, version)`` on the regular file at ``key`` under ``root``, opened once:
    ``read(start, stop)`` gives its bytes ``[start, stop)`` (fewer at its end) by a
    positioned read, ``version`` says which file it is and its size (``FileVersion``, from
    the open file). Every read is of that one file, even when the key is replaced meanwhile
    (an append's rewrite renames a new file into place), so parts read apart belong
    together. None where there is no file or it is a directory; what is neither is refused
    before anything is read from it (as ``read_regular_file``)."""
    try:
        fd = os.open(os.path.join(root, key), _READ_FLAGS)
    except (FileNotFoundError, NotADirectoryError):
        return None
    try:
        version = _version_of(os.fstat(fd), key)
        if version is None:
            return None
        return parts(partial(_pread_all, fd), version)
    finally:
        os.close(fd)


def _pread_all(fd: int, start: int, stop: int) -> bytes:
    data = os.pread(fd, stop - start, start)
    if len(data) < stop - start and data:  # a short read (over 2 GiB): read on to the end
        rest = [data]
        start += len(data)
        while start < stop and (block := os.pread(fd, stop - start, start)):
            rest.append(block)
            start += len(block)
        data = b"".join(rest)
    return data


def local_root(store: Store) -> Path | None:
    """The directory of a local store under any wrappers, else None."""
    inner = innermost(store)
    return Path(inner.root) if isinstance(inner, LocalStore) else None


def _os_reason(exc: OSError) -> str:
    return exc.strerror or type(exc).__name__


class NotRegularFile(OSError):
    """A path names something other than a regular file (a FIFO, socket, device or
    directory), which is never read as data."""


# A reference's path is resolved and checked before it is read (``reference_targets``):
# it is opened without following a last symbolic link, so that a link put in its place
# meanwhile is refused rather than followed.
_TARGET_FLAGS = _READ_FLAGS | getattr(os, "O_NOFOLLOW", 0)


def read_file_range(path: str, start: int | None, stop: int | None) -> bytes:
    """Bytes ``[start, stop)`` of the regular file at ``path``, as a slice of its bytes
    would be (negative positions count from its end; None: its start or its end), by one
    open that cannot block, one fstat and positioned reads. Anything but a regular file
    raises ``NotRegularFile`` before a byte is read."""
    fd = _open_target(path)
    try:
        size = _regular_size(fd)
        first, last, _ = slice(start, stop).indices(size)
        blocks = []
        while first < last:
            block = os.pread(fd, last - first, first)
            if not block:
                break
            blocks.append(block)
            first += len(block)
        return b"".join(blocks)
    finally:
        os.close(fd)


def regular_file_size(path: str) -> int:
    """The size of the regular file at ``path`` (``NotRegularFile`` for anything else)."""
    fd = _open_target(path)
    try:
        return _regular_size(fd)
    finally:
        os.close(fd)


def _open_target(path: str) -> int:
    try:
        return os.open(path, _TARGET_FLAGS)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a socket (or a FIFO without a writer, opened to write)
            raise NotRegularFile(exc.errno, "not a regular file") from None
        raise


def _regular_size(fd: int) -> int:
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        raise NotRegularFile(0, "not a regular file")
    return info.st_size
