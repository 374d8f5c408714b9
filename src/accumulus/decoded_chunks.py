"""A bounded cache of decoded chunks of local files, per process, by file version.

A service answers many questions over the same accumulation chunks (the prefix sums at a
box's corners, the entries at a period's ends), each time reading and decoding them again.
Kept decoded here, a chunk read again costs the open and ``fstat`` that tell its file's
version (``safe_reads.FileVersion``), not its read and decode. An entry is served only for
the same version of the same file (device, inode, size, modification and change times), of
a shape and type the reader takes: a chunk rewritten or replaced (an append, ``accumulate``
again) is another version, read afresh, so an answer holds what the file holds when it is
read, as without the cache. Only versions that last changed ``SETTLED_NS`` ago are kept (a write
within a tick of the file system's clock may leave the times as they were:
``FileVersion.settled``). The values are kept read-only and handed out as they are.

Entries are dropped least recently used first once their decoded bytes pass the limit, which
is 0 (nothing kept) until ``set_limit`` gives one: ``accumulus serve --chunk-cache-mb``.
The processes of ``serve --workers N`` share one store of them instead (``share``: files in
memory that every worker maps, ``shared_chunks``), under the same limit for all of them."""

from __future__ import annotations

import threading
from collections import OrderedDict

import numpy as np

from accumulus.shared_chunks import SharedChunks
from accumulus.stores import safe_reads
from accumulus.stores.safe_reads import FileVersion

# As ``chunk_reader``'s memo of verified files: a version is kept once its file last changed
# this long ago.
SETTLED_NS = safe_reads.SETTLED_NS


class DecodedChunks:
    """Decoded chunks by file version, least recently used dropped past ``limit`` bytes: in
    this process, or in the store ``share`` gives, shared with other processes."""

    def __init__(self, limit: int = 0) -> None:
        self.limit = limit
        self.hits = 0
        self.misses = 0
        self.shared: SharedChunks | None = None
        self._held = 0  # decoded bytes kept in this process
        self._entries: OrderedDict[tuple[int, int, str], tuple[FileVersion, np.ndarray]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        """Bytes kept (by all the processes sharing the store, when shared)."""
        return self._held if self.shared is None else self.shared.held

    def share(self, shared: SharedChunks | None) -> None:
        """Keep chunks in ``shared`` (under its limit) from now on, this process's own
        dropped; None: in this process again, under the same limit."""
        with self._lock:
            self.shared = shared
            self._entries.clear()
            self._held = 0
            if shared is not None:
                self.limit = shared.limit

    def get(
        self,
        version: FileVersion,
        shapes: tuple[tuple[int, ...], ...],
        dtype: np.dtype,
        form: str = "",
    ) -> np.ndarray | None:
        """The chunk decoded from this ``version`` of its file, if kept as one of ``shapes``
        and of ``dtype``; ``form``: a form derived from it (``chunk_reader.Derivation``)
        instead of the chunk itself."""
        if not self.limit:
            return None
        if self.shared is not None:
            values = self.shared.get(version, shapes, dtype, form)
            with self._lock:  # (counted as the private path counts: the threads share them)
                self._count(values is not None)
            return values
        key = (version.device, version.inode, form)
        with self._lock:
            entry = self._entries.get(key)
            values = None if entry is None or entry[0] != version else entry[1]
            if values is not None and (values.shape not in shapes or values.dtype != dtype):
                values = None
            self._count(values is not None)
            if values is not None:
                self._entries.move_to_end(key)
            return values

    def _count(self, hit: bool) -> None:
        """Count a read served (``hit``) or not (under the lock)."""
        if hit:
            self.hits += 1
        else:
            self.misses += 1

    def put(self, version: FileVersion, values: np.ndarray, now_ns: int, form: str = "") -> None:
        """Keep ``values``, decoded from ``version`` of its file (or the ``form`` derived
        from it), when that version has settled by ``now_ns`` and they fit."""
        if values.nbytes > self.limit or not version.settled(now_ns, SETTLED_NS):
            return
        values.flags.writeable = False  # shared by every reader from now on
        if self.shared is not None:
            self.shared.put(version, values, form)
            return
        key = (version.device, version.inode, form)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._held -= old[1].nbytes
            self._entries[key] = (version, values)
            self._held += values.nbytes
            self._drop_past_limit()

    def set_limit(self, limit: int) -> None:
        """Keep at most ``limit`` decoded bytes from now on (0: none)."""
        with self._lock:
            self.limit = limit
            if self.shared is not None:
                self.shared.set_limit(limit)
            self._drop_past_limit()

    def _drop_past_limit(self) -> None:
        """Drop the least recently used entries while more than ``limit`` is held (under
        the lock)."""
        while self._held > self.limit:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._held -= dropped.nbytes


# The process's cache (``chunk_reader`` reads through it).
DECODED = DecodedChunks()
