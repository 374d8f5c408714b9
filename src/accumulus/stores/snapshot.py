"""One metadata snapshot of a store, and the token that names it.

Every answer must come from one snapshot: shapes, coordinates, data and accumulations that
agree with each other while a writer appends. Writers put chunks first and the consolidated
metadata document last, so that document *is* the snapshot. An open datacube (the
``Datacube`` handle, and so the service) reads it once per query (the root documents, read
at once: one round trip), hashes it into a token, and opens the ``RawCube`` on a store wrapper
that answers metadata reads from exactly the bytes that were hashed: the token and the cube
cannot disagree even when a writer replaces the document between two reads.

While a datacube's snapshot is current, checking that it still is costs little: its root
documents are read as stored (``root_documents``: below accumulus's own metadata-rewriting
wrappers, in the calling thread from a local directory, where a document whose file is
still the version read before is not read again: a ``stat`` each) and compared byte for
byte with those the snapshot was read from; only a store whose documents changed is parsed
again.

A store without consolidated metadata has no single document; its snapshot is then every
metadata document of the store, found by listing it (slower on stores with many chunks).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any, ClassVar, cast

import zarr
from zarr.abc.store import ByteRequest, Store, SupportsGetSync
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.core.sync import collect_aiterator, sync

from accumulus.scope import accumulus_scope
from accumulus.stores.arrays import dimension_names
from accumulus.stores.base import DelegatingStore, below_wrappers, reads_synchronously
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.local import LeanLocalStore
from accumulus.stores.rewriting import parse_metadata
from accumulus.stores.safe_reads import (
    VersionMemo,
    check_regular_file,
    local_root,
    read_versioned_file,
    read_with_limits,
    regular_file_version,
)

READ_SECONDS = 10.0  # the longest one metadata document may take to read

# The documents at the root of a store that hold consolidated metadata (v3 in zarr.json,
# v2 in .zmetadata) and, for v2, the root group's own metadata.
ROOT_DOCUMENTS = ("zarr.json", ".zmetadata", ".zgroup", ".zattrs")


@dataclass(frozen=True)
class MetadataSnapshot:
    """Metadata documents of a store as read at one moment.

    ``complete``: every metadata document of the store is in ``documents`` (a store without
    consolidated metadata); otherwise only the root documents are, and they hold the rest.
    """

    documents: Mapping[str, bytes]
    complete: bool
    # Chunks read with the snapshot: those of the coordinate arrays (``with_coordinates``).
    chunks: Mapping[str, bytes] = field(default_factory=dict)

    @cached_property
    def token(self) -> str:
        """Changes whenever any of the documents changes (e.g. an append rewrote them)."""
        digest = hashlib.sha256()
        for key in sorted(self.documents):
            content = self.documents[key]
            digest.update(f"{key}\0{len(content)}\0".encode())
            digest.update(content)
        return digest.hexdigest()[:16]

    def pinned(self, key: str) -> bool:
        """Whether reads of ``key`` are answered from this snapshot."""
        # The root documents were all read: one that was absent is absent in the snapshot.
        return is_metadata_key(key) and (
            self.complete or key in self.documents or key in ROOT_DOCUMENTS
        )


def read_snapshot(store: Store) -> MetadataSnapshot:
    """Read the metadata snapshot of ``store`` now. A document that is not JSON, not a file,
    or too slow to read is an ``AccumulusError`` naming it."""
    (found,) = read_snapshots(store)
    if isinstance(found, Exception):
        raise found
    return found


def read_snapshots(*stores: Store) -> list[MetadataSnapshot | Exception]:
    """Read the snapshots of several stores now, their root documents in one batch of
    requests (a cube and its sidecar: one round trip). For each store, its snapshot or the
    exception reading it raised, so that the caller can say which store failed."""

    async def roots() -> list[Any]:
        reads = (_documents(store, ROOT_DOCUMENTS) for store in stores)
        return await asyncio.gather(*reads, return_exceptions=True)

    found: list[MetadataSnapshot | Exception] = []
    for store, root in zip(stores, sync(roots()), strict=True):
        if isinstance(root, BaseException) and not isinstance(root, Exception):
            raise root
        try:
            if isinstance(root, Exception):
                raise root
            if _is_consolidated(_checked(root)):
                found.append(MetadataSnapshot(root, complete=False))
                continue
            keys = [k for k in collect_aiterator(store.list()) if is_metadata_key(k)]
            found.append(MetadataSnapshot(_read_documents(store, keys), complete=True))
        except Exception as exc:  # kept, raised by the caller (whose remote_errors translate
            found.append(exc)  # the store's errors only), as the root's reading was
    return found


def with_coordinates(store: Store, snapshot: MetadataSnapshot) -> MetadataSnapshot:
    """``snapshot`` with every chunk of its coordinate arrays (1-D arrays named as their
    dimension), read in one batch: what opening the snapshot as a dataset reads next, and
    would otherwise read one coordinate after another."""
    with accumulus_scope():
        root = zarr.open_group(PinnedMetadataStore(store, snapshot), mode="r")
        keys = []
        for name, array in root.arrays():
            if array.ndim == 1 and dimension_names(array) == (name,):
                prefix = f"{array.path}/" if array.path else ""
                keys += [
                    prefix + array.metadata.encode_chunk_key((c,))
                    for c in range(array.cdata_shape[0])
                ]
    return replace(snapshot, chunks=_read_documents(store, keys))


def _read_documents(store: Store, keys: list[str] | tuple[str, ...]) -> dict[str, bytes]:
    return _checked(sync(_documents(store, keys)))


async def _documents(store: Store, keys: list[str] | tuple[str, ...]) -> dict[str, bytes]:
    """The objects at ``keys`` that exist, read concurrently."""
    root = local_root(store)
    prototype = default_buffer_prototype()
    values = await asyncio.gather(
        *(read_with_limits(store, root, k, prototype, None, READ_SECONDS) for k in keys)
    )
    return {k: v.to_bytes() for k, v in zip(keys, values, strict=True) if v is not None}


# Documents already parsed once (an open datacube reads the same root documents for every
# query): the same bytes are valid again.
_VALID: dict[tuple[str, bytes], None] = {}


def _checked(documents: dict[str, bytes]) -> dict[str, bytes]:
    """``documents``, each metadata document among them parsed (coordinate chunks are read
    with them too): one that is not valid is an ``AccumulusError`` naming it."""
    for key, content in documents.items():
        if is_metadata_key(key) and (key, content) not in _VALID:
            parse_metadata(key, content)
            if len(_VALID) >= 64:
                _VALID.clear()
            _VALID[key, content] = None
    return documents


def _is_consolidated(root: Mapping[str, bytes]) -> bool:
    if ".zmetadata" in root:
        return True
    if "zarr.json" in root:
        try:
            return json.loads(root["zarr.json"]).get("consolidated_metadata") is not None
        except ValueError:
            return False  # not JSON: the RawCube will say what is wrong with the store
    return False


class PinnedMetadataStore(DelegatingStore):
    """Reads chunks from the wrapped store and metadata documents from a snapshot.

    A document absent from a complete snapshot does not exist for its readers, and listings
    show only what the snapshot holds, so a cube opened on it never sees a later writer's
    arrays or shapes.
    """

    sync_reads_pass_through: ClassVar[bool] = True
    sync_writes_pass_through: ClassVar[bool] = True
    passes_other_reads: ClassVar[bool] = True

    def __init__(self, store: Store, snapshot: MetadataSnapshot) -> None:
        super().__init__(store)
        self.snapshot = snapshot

    def serves_own_bytes(self, key: str) -> bool:
        return self.snapshot.pinned(key) or key in self.snapshot.chunks

    def _document(self, key: str, prototype: BufferPrototype) -> Buffer | None:
        content = self.snapshot.documents.get(key)
        return None if content is None else prototype.buffer.from_bytes(content)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        # Zarr reads metadata documents whole; a ranged read is a chunk read.
        if byte_range is None and self.snapshot.pinned(key):
            return self._document(key, prototype)
        if byte_range is None and key in self.snapshot.chunks:
            return prototype.buffer.from_bytes(self.snapshot.chunks[key])
        return await self._store.get(key, prototype, byte_range)

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        if byte_range is None and self.snapshot.pinned(key):
            return self._document(key, prototype)
        if byte_range is None and key in self.snapshot.chunks:
            return prototype.buffer.from_bytes(self.snapshot.chunks[key])
        return super().read_sync(key, prototype, byte_range)

    async def exists(self, key: str) -> bool:
        if self.snapshot.pinned(key):
            return key in self.snapshot.documents
        return await self._store.exists(key)

    def list_dir(self, prefix: str) -> AsyncIterator[str]:
        if not self.snapshot.complete:
            return self._store.list_dir(prefix)
        return _names_under(self.snapshot.documents, prefix)


async def _names_under(documents: Mapping[str, bytes], prefix: str) -> AsyncIterator[str]:
    """The immediate children of ``prefix`` among the snapshot's documents."""
    prefix = prefix.rstrip("/")
    start = f"{prefix}/" if prefix else ""
    names = {k.removeprefix(start).split("/")[0] for k in documents if k.startswith(start)}
    for name in sorted(names):
        yield name


def root_documents(*stores: Store) -> list[dict[str, bytes]]:
    """The root documents of each store as stored, to tell whether a snapshot read from
    them is still current: read below the wrappers that only rewrite what they serve
    (``rewrites_metadata_only``), in the calling thread where the store allows it
    (``stores.base.reads_synchronously``: no hand-over to zarr's event loop), else all in one
    batch. Documents are not parsed; errors propagate."""
    bases = _bases(stores)
    if all(reads_synchronously(base) for base in bases):
        return [_documents_now(base, ROOT_DOCUMENTS) for base in bases]

    async def every() -> list[dict[str, bytes]]:
        return list(await asyncio.gather(*(_documents(b, ROOT_DOCUMENTS) for b in bases)))

    return sync(every())


def roots_read_here(*stores: Store) -> bool:
    """Whether ``root_documents`` reads the stores' root documents in the calling thread
    (else through zarr's event loop, as object storage is read)."""
    return all(reads_synchronously(base) for base in _bases(stores))


def _bases(stores: tuple[Store, ...]) -> list[Store]:
    """The stores below the wrappers that only rewrite what they serve."""
    return [below_wrappers(store, "rewrites_metadata_only") for store in stores]


def stored_roots(store: Store, snapshot: MetadataSnapshot) -> dict[str, bytes] | None:
    """The root documents ``root_documents`` would read from ``store``, when ``snapshot``
    (read from it) holds them as stored: no wrapper rewrote them, and they hold the whole
    snapshot (consolidated metadata). None otherwise."""
    if snapshot.complete or below_wrappers(store, "rewrites_metadata_only") is not store:
        return None
    return dict(snapshot.documents)


# The root documents last read from local directories, by path, with the version of the
# file they were read from: while a document's file stays that version (one ``stat``), its
# bytes are those (``FileVersion``: a write or a replacement gives another version, once
# the file has settled), so the check every query of an open datacube makes reads nothing.
ROOTS_REMEMBERED = 1024  # documents at most; then forgotten, all at once
_ROOTS: VersionMemo[str, bytes] = VersionMemo(ROOTS_REMEMBERED)


def _root_document(directory: str, key: str) -> bytes | None:
    """The regular file ``key`` of a local ``directory`` as ``read_regular_file`` reads it:
    from ``_ROOTS`` when its file is the settled version read before."""
    path = os.path.join(directory, key)
    version = regular_file_version(path, key)
    if version is None:
        return None
    known = _ROOTS.get(path, version)
    if known is not None:
        return known
    read = read_versioned_file(directory, key)
    if read is None:
        return None
    version, content = read
    _ROOTS.put(path, version, content)
    return content


def _documents_now(store: Store, keys: tuple[str, ...]) -> dict[str, bytes]:
    """The objects at ``keys`` that exist, read in this thread (only regular files)."""
    if type(store) is LeanLocalStore and store._is_open:
        # Its files read as bytes, without a buffer made and copied again for each: the
        # check every query of an open datacube makes (docs/benchmarks.md, "Per-question
        # cost"), each by a stat while its file stays the version read (``_root_document``).
        # Anything but a regular file is refused, as the lean local store refuses it.
        directory = str(store.root)
        return {
            key: content for key in keys if (content := _root_document(directory, key)) is not None
        }
    root = None if isinstance(store, LeanLocalStore) else local_root(store)
    found = {}
    for key in keys:
        if root is not None:
            check_regular_file(root, key)
        # Called where roots_read_here: a local or memory store, which reads synchronously.
        value = cast(SupportsGetSync, store).get_sync(key)
        if value is not None:
            found[key] = value.to_bytes()
    return found
