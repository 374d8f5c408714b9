"""Decoded chunks shared by the worker processes of one service on one machine, as files in
memory.

``serve --workers N`` answers in N processes. Each kept its own decoded chunks
(``decoded_chunks``), so a chunk was read and decoded once in every process and held as many
times. Here each decoded chunk is a file of one directory on a file system in memory
(``/dev/shm``), read back by any worker as a read-only mapping of it (``mmap``): a chunk
decoded by one worker serves them all, and the directory's bytes bound what they all keep.

An entry is named by the version of the local file its chunk was decoded from
(``FileVersion``: device, inode, size, modification and change times): a chunk rewritten or
replaced is another version, so another name, and the old entry is never served for it. It
holds a header (its dtype and shape) and then the values. It is written under a temporary
name and renamed into place, so that a reader never sees half of one; an entry removed while
a reader has it mapped stays whole for that reader. The entries' bytes are counted in a file
of the directory, changed only under a lock (``flock``) which a worker holds while it adds
or drops entries; an entry that takes them past the limit makes its writer drop the least
recently used entries (by modification time, set again when an entry is read, at most once a
``TOUCH_NS``) down to ``EVICT_TO`` of the limit. Any error of the shared store (a vanished or
corrupt entry, a full file system) is a miss, counted in ``errors``: the chunk is then read
and decoded as without the cache. A limit raised later (the default follows the archive) is
held to the room the file system has, so the entries never fill it for its other users.

A process keeps the entries it has mapped (up to ``MAPPED_ENTRIES``), so that reading one
again costs a ``stat`` (still the file mapped?) and a ``pread`` of a counter of the entries
dropped or replaced by any process, not a mapping and its page faults; when that counter has
moved, the process lists the directory and unmaps what is no longer in it. So the memory of
entries dropped lasts until the next read of each process that mapped them: the store holds
its limit plus what was dropped since.

The directory is made by the process that starts the workers (``shared_directory``) and
removed when it stops; one left by a service that was killed is removed by the next one."""

from __future__ import annotations

import fcntl
import logging
import mmap
import os
import shutil
import struct
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from itertools import count
from math import prod
from pathlib import Path

import numpy as np

from accumulus.stores.safe_reads import FileVersion

# Where the directories are made: a file system in memory.
MEMORY_FILES = Path("/dev/shm")
DIRECTORY_PREFIX = "accumulus-chunks-"
MAGIC = b"ACCDCHK1"
# An entry's header: MAGIC, its dtype (``dtype.str``), its number of dimensions and its shape,
# padded to HEADER_BYTES (which keeps the values aligned for any dtype).
HEADER = struct.Struct("<8s8sQ")
MAX_DIMS = 13
HEADER_BYTES = 128
# An entry read is marked used (its modification time set to now) when it was last marked
# longer ago than this: a system call per entry and second at most.
TOUCH_NS = 10**9
# Entries a process keeps mapped (far under the kernel's 65,530 mappings a process).
MAPPED_ENTRIES = 16384
# Past the limit, entries are dropped until their bytes are this share of it (a directory's
# listing per eighth of the limit written, rather than one per entry).
EVICT_TO = 7 / 8
_HELD = ".held"
_LOCK = ".lock"
_NEW = ".new-"

log = logging.getLogger(__name__)


class SharedChunks:
    """Decoded chunks by file version, as files of ``directory`` that every process given
    the same directory reads, the least recently used dropped past ``limit`` bytes."""

    def __init__(self, directory: Path, limit: int) -> None:
        self.directory = directory
        self.limit = limit
        self.errors = 0  # errors of the shared store, each a miss
        self._prefix = f"{directory}/"
        self._lock_fd = os.open(directory / _LOCK, os.O_RDWR | os.O_CREAT, 0o600)
        # The entries' bytes, then how many times entries were dropped or replaced.
        self._held_fd = os.open(directory / _HELD, os.O_RDWR | os.O_CREAT, 0o600)
        # ``flock`` excludes other processes; this, the other threads of this one.
        self._threads = threading.Lock()
        self._written = count()
        # The entries this process has mapped, by name: their values, mapping and file
        # (inode, size); all there when the counter of drops was last ``_drops``.
        self._mapped: OrderedDict[str, tuple[np.ndarray, mmap.mmap, tuple[int, int]]] = (
            OrderedDict()
        )
        self._mapped_lock = threading.Lock()
        self._drops = 0

    @classmethod
    def opened(cls, directory: Path, limit: int) -> SharedChunks | None:
        """The store in ``directory``; None (logged) if it cannot be opened: each process
        then keeps its own chunks."""
        try:
            return cls(directory, limit)
        except OSError as error:
            log.warning(
                "decoded chunks are kept per process: %s cannot be shared (%s)",
                directory,
                error.strerror,
            )
            return None

    @property
    def held(self) -> int:
        """Bytes of the entries (headers included), as counted by every process."""
        try:
            return self._read_held()
        except OSError:
            return 0

    def get(
        self,
        version: FileVersion,
        shapes: tuple[tuple[int, ...], ...],
        dtype: np.dtype,
        form: str = "",
    ) -> np.ndarray | None:
        """The chunk decoded from this ``version`` of its file (or the ``form`` derived from
        it), read-only, if an entry holds it as one of ``shapes`` and of ``dtype``."""
        name = _entry_name(version, form)
        try:
            self._follow_drops()
            values = self._mapped_values(name)
            if values is None:
                values = self._map(name)
        except OSError:
            self.errors += 1
            return None
        if values is None or values.shape not in shapes or values.dtype != dtype:
            return None
        return values

    def _mapped_values(self, name: str) -> np.ndarray | None:
        """The values of the entry ``name`` if this process has it mapped and it is still
        the file mapped (marked used); None otherwise."""
        with self._mapped_lock:
            known = self._mapped.get(name)
            if known is None:
                return None
            self._mapped.move_to_end(name)
        values, mapped, file = known
        path = self._prefix + name
        try:
            stat = os.stat(path)
        except FileNotFoundError:  # dropped since: its mapping still holds its values
            self._forget(name)
            return values
        if (stat.st_ino, stat.st_size) != file or mapped[: len(MAGIC)] != MAGIC:
            self._forget(name)  # replaced, cut (not to be read) or overwritten
            return None
        now = time.time_ns()
        if stat.st_mtime_ns < now - TOUCH_NS:
            os.utime(path, ns=(now, now))
        return values

    def _forget(self, name: str) -> None:
        with self._mapped_lock:
            self._mapped.pop(name, None)

    def _map(self, name: str) -> np.ndarray | None:
        """The values of the entry ``name``, mapped and kept mapped; None if there is none
        (or it is corrupt: then dropped)."""
        try:
            fd = os.open(self._prefix + name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            stat = os.fstat(fd)
            mapped = None
            values = None
            if stat.st_size >= HEADER_BYTES:
                mapped = mmap.mmap(fd, stat.st_size, prot=mmap.PROT_READ)
                values = _values(mapped)
            if values is not None:
                now = time.time_ns()
                os.utime(fd, ns=(now, now))
        finally:
            os.close(fd)
        if values is None or mapped is None:  # not an entry as ``put`` writes them
            self.errors += 1
            self._drop_corrupt(name, stat)
            return None
        with self._mapped_lock:
            self._mapped[name] = (values, mapped, (stat.st_ino, stat.st_size))
            while len(self._mapped) > MAPPED_ENTRIES:
                self._mapped.popitem(last=False)
        return values

    def _follow_drops(self) -> None:
        """Unmap the entries no longer in the store when any were dropped or replaced since
        this process last looked."""
        drops = self._read_counter(8)
        if drops == self._drops:
            return
        present = set(os.listdir(self.directory))
        with self._mapped_lock:
            for name in [name for name in self._mapped if name not in present]:
                del self._mapped[name]
            self._drops = drops

    def put(self, version: FileVersion, values: np.ndarray, form: str = "") -> None:
        """Keep ``values``, decoded from ``version`` of its file (or the ``form`` derived from
        it), when they fit."""
        nbytes = HEADER_BYTES + values.nbytes
        if nbytes > self.limit or values.ndim > MAX_DIMS:
            return
        new = self.directory / f"{_NEW}{os.getpid()}-{next(self._written)}"
        try:
            with open(new, "xb") as file:
                file.write(_header(values))
                file.write(np.ascontiguousarray(values).data.cast("B"))
            with self._locked():
                name = _entry_name(version, form)
                entry = self.directory / name
                held = self._read_held() + nbytes
                with suppress(FileNotFoundError):
                    held -= entry.stat().st_size  # an entry replaced
                    self._count_drop()
                os.replace(new, entry)
                if held > self.limit:
                    held = self._drop_oldest(int(self.limit * EVICT_TO))
                self._write_held(held)
            self._forget(name)  # (another shape of it)
        except OSError:
            self.errors += 1
        finally:
            new.unlink(missing_ok=True)

    def set_limit(self, limit: int) -> None:
        """Keep at most ``limit`` bytes from now on (0: none), and no more than the file
        system has room for beside what is kept already: a limit raised as the archive
        grows (``serve``'s default) never fills it, which would fail every other user of
        it too (logged when the room is what bounds it)."""
        try:
            with self._locked():
                held = self._read_held()
                room = held + shutil.disk_usage(self.directory).free
                if limit > room:
                    log.warning(
                        "%s has room for %d MiB of decoded chunks, not the %d MiB asked: "
                        "that room is what is shared",
                        self.directory.parent,
                        room // 2**20,
                        limit // 2**20,
                    )
                    limit = room
                self.limit = limit
                if held > limit:
                    self._write_held(self._drop_oldest(limit))
        except OSError:
            self.limit = min(self.limit, limit)
            self.errors += 1

    def close(self) -> None:
        """Stop using the directory (its entries stay for the other processes)."""
        with self._mapped_lock:
            self._mapped.clear()
        os.close(self._lock_fd)
        os.close(self._held_fd)

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """Held while entries are added or dropped, by one thread of one process at a time."""
        with self._threads:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    def _read_held(self) -> int:
        return self._read_counter(0)

    def _write_held(self, held: int) -> None:
        os.pwrite(self._held_fd, held.to_bytes(8, "little"), 0)

    def _count_drop(self) -> None:
        """Count entries dropped or replaced (under the lock): mappings to check."""
        os.pwrite(self._held_fd, (self._read_counter(8) + 1).to_bytes(8, "little"), 8)

    def _read_counter(self, offset: int) -> int:
        data = os.pread(self._held_fd, 8, offset)
        return int.from_bytes(data, "little") if len(data) == 8 else 0

    def _drop_oldest(self, target: int) -> int:
        """Drop the least recently used entries until they hold at most ``target`` bytes;
        the bytes they hold then, counted afresh (under the lock)."""
        entries = []
        for entry in os.scandir(self.directory):
            if not entry.name.startswith("."):
                stat = entry.stat()
                entries.append((stat.st_mtime_ns, entry.name, stat.st_size))
        held = sum(size for _, _, size in entries)
        if held > target:
            self._count_drop()
        for _, name, size in sorted(entries):
            if held <= target:
                break
            (self.directory / name).unlink(missing_ok=True)
            held -= size
        return held

    def _drop_corrupt(self, name: str, seen: os.stat_result) -> None:
        """Drop the entry ``name`` found corrupt, if it is still the file seen (``seen``),
        and count the entries' bytes afresh (what was counted for it is not known)."""
        try:
            with self._locked():
                path = self.directory / name
                if path.stat().st_ino == seen.st_ino:
                    path.unlink()
                    self._count_drop()
                    self._write_held(self._drop_oldest(self.limit))
        except OSError:
            pass


def _entry_name(version: FileVersion, form: str = "") -> str:
    """The name of the entry of the chunk decoded from ``version`` of its file, or of the
    ``form`` derived from it (letters, digits and dashes)."""
    device, inode, size, modified, changed = version  # (one format: named per chunk read)
    name = f"{device:x}-{inode:x}-{size:x}-{modified:x}-{changed:x}"
    return f"{name}-{form}" if form else name


def _header(values: np.ndarray) -> bytes:
    head = HEADER.pack(MAGIC, values.dtype.str.encode(), values.ndim)
    head += struct.pack(f"<{values.ndim}Q", *values.shape)
    return head.ljust(HEADER_BYTES, b"\0")


def _values(mapped: mmap.mmap) -> np.ndarray | None:
    """The values an entry (``mapped``) holds, read-only; None if it is not one."""
    magic, dtype_name, ndim = HEADER.unpack_from(mapped)
    if magic != MAGIC or ndim > MAX_DIMS:
        return None
    shape = struct.unpack_from(f"<{ndim}Q", mapped, HEADER.size)
    try:
        dtype = np.dtype(dtype_name.rstrip(b"\0").decode("ascii"))
    except (TypeError, UnicodeDecodeError):
        return None
    if dtype.hasobject or len(mapped) != HEADER_BYTES + prod(shape) * dtype.itemsize:
        return None
    return np.frombuffer(mapped, dtype, offset=HEADER_BYTES).reshape(shape)


@contextmanager
def shared_directory(limit: int) -> Iterator[Path | None]:
    """A new directory for the entries of workers sharing ``limit`` bytes of decoded chunks,
    removed on exit; None where there is no file system in memory with room for them (then
    each worker keeps its own). Directories left by services that no longer run are removed
    first."""
    remove_abandoned()
    try:
        room = shutil.disk_usage(MEMORY_FILES).free
    except OSError:
        room = 0
    if room < limit:
        log.warning(
            "%s has %d MiB free, less than the %d MiB of decoded chunks to share: each worker "
            "keeps its own",
            MEMORY_FILES,
            room // 2**20,
            limit // 2**20,
        )
        yield None
        return
    directory = Path(tempfile.mkdtemp(prefix=f"{DIRECTORY_PREFIX}{os.getpid()}-", dir=MEMORY_FILES))
    try:
        yield directory
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def remove_abandoned() -> None:
    """Remove the directories of shared chunks whose service (the process named in their
    name) no longer runs."""
    for directory in MEMORY_FILES.glob(f"{DIRECTORY_PREFIX}*"):
        pid = directory.name.removeprefix(DIRECTORY_PREFIX).split("-")[0]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(directory, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True
