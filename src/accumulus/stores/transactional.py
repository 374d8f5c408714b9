"""icechunk repositories as stores: ``icechunk://PATH`` (a local repository) and
``icechunk+s3://BUCKET/PREFIX`` (one on object storage), read at a ref and written in one
commit per command.

An icechunk session is a transaction: whatever a command writes through ``session.store``
stays invisible until ``session.commit``, which moves the branch to the new snapshot in one
step. So a command killed at any moment leaves the branch at the old commit or the new one,
and every reader of a snapshot sees data and accumulations that match.

icechunk holds Zarr v3 nodes only, so accumulus's own objects (``.accumulus/``: the append
journal, the writers' lock) cannot be keys of the repository. ``TransactionalStore`` keeps
them beside the session: the journal is written at the commit into an attribute of the root
group (``OBJECTS_ATTRIBUTE``, which the store's readers do not see), so each snapshot
carries the journal of the data it holds and time travel reads the right one; the commit's
metadata says only how many granules and steps it holds (``SUMMARY_KEY``). Not the journal
itself: icechunk copies every commit's metadata into the repository's ``repo`` object,
rewritten at each commit, where a journal that grows by a granule a day made each commit
write more the longer the archive (docs/benchmarks.md). The lock stays in memory: writers
are kept apart by icechunk's commit, which refuses a commit whose branch moved since its
session began (``TransactionConflict``), not by a lock object.

Consolidated metadata is written as for any store: icechunk keeps it in the root group's
``zarr.json``, inside the same snapshot as the arrays, so it never disagrees with them.

A read-only session of a local repository is read in the calling thread (``read_sync``,
``stores.base.reads_synchronously``), as a local Zarr directory is: icechunk's store has
only asynchronous reads, and each one handed to zarr's event loop and on to icechunk's own
threads cost many times the read (docs/benchmarks.md). A snapshot
never changes, so ``SnapshotFiles`` reads each metadata document once, and each array's
chunk map once (``array_chunk_iterator``: a chunk's file, offset and length under
``chunks/``, or its inline bytes); a chunk is then one read of a local file, and so is a
virtual chunk in a local granule of an authorized container (a regular file only). Other
virtual chunks are read by icechunk.

Virtual chunks (``append … --virtual``) are read from *virtual chunk containers*, which
the repository's configuration lists (``add_containers``: one per granule directory) and a
reader must authorize. As a reference set reads only beside itself, a repository reads the
containers beside it and those under ``allow_references`` (``authorized``); a chunk in
another is refused in one line naming the option to give (``_refused``).
"""

from __future__ import annotations

import functools
import json
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.core.chunk_key_encodings import parse_chunk_key_encoding
from zarr.core.sync import sync
from zarr.storage import WrapperStore

from accumulus.errors import AccumulusError
from accumulus.stores.base import DelegatingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.locations import StoreNotFoundError, url_scheme
from accumulus.stores.safe_reads import read_file_range

SCHEMES = frozenset({"icechunk", "icechunk+s3"})
DEFAULT_BRANCH = "main"
# The commit metadata key that held accumulus's objects (by key) as of that snapshot, in
# repositories written before they moved to ``OBJECTS_ATTRIBUTE``.
METADATA_KEY = "accumulus"
# The root group's attribute holding accumulus's objects (by key) as of the snapshot.
OBJECTS_ATTRIBUTE = "accumulus_objects"
_ROOT = "zarr.json"
# The commit metadata key of the granules and extent a commit holds.
SUMMARY_KEY = "accumulus_summary"
# Objects that live only as long as the session: the writers' lock and its guards.
_SESSION_ONLY = "lock"
# icechunk's kind of a chunk stored in the repository itself (``icechunk.ChunkType``).
_NATIVE = 1


class TransactionConflict(AccumulusError):
    """The branch moved while a command wrote: its commit was refused, nothing landed."""


# A command whose commit was refused (its branch moved) is run again on the new head this
# many times in all.
ATTEMPTS = 5


def retried_on_conflict[**P, R](command: Callable[P, R]) -> Callable[P, R]:
    """``command`` (whose first argument is its store) run again when its commit is refused
    because the branch moved meanwhile (``TransactionConflict``): on the new head, what the
    other writer committed is there to build on. A store given as a session is not opened
    again, so its conflict is raised."""

    @functools.wraps(command)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        store = args[0] if args else kwargs.get("store")
        for attempt in range(ATTEMPTS):
            try:
                return command(*args, **kwargs)
            except TransactionConflict:
                if not isinstance(store, str | os.PathLike) or attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    return run


def is_repository_url(text: str) -> bool:
    return url_scheme(text) in SCHEMES


class TransactionalStore(DelegatingStore):
    """An icechunk session's store, with accumulus's ``.accumulus/`` objects kept in the
    commit's metadata (see the module's docstring). ``commit`` ends the transaction."""

    def __init__(
        self,
        store: Store,
        *,
        session: Any = None,
        repository: Any = None,
        label: str = "",
        follows: str | None = None,
        files: SnapshotFiles | None = None,
    ) -> None:
        super().__init__(store)
        self.session = session
        self.repository = repository
        self.label = label
        self.follows = follows  # the branch a read-only session was opened at
        self.files = files  # a read-only session of a local repository, read in this thread
        self._objects: dict[str, bytes] = dict(_committed_objects(repository, session))
        self._changed = False
        self._root: bytes | None = None  # the root document readers see, read from ``files``

    # icechunk's own ``str``/``repr`` wait for the session, which writes in flight hold:
    # zarr formats a store's name when it makes an array view, in the middle of an append.
    def __str__(self) -> str:
        return f"icechunk session of {self.label}"

    def __repr__(self) -> str:
        return f"TransactionalStore({self.label!r})"

    @property
    def supports_consolidated_metadata(self) -> bool:
        return True  # kept in the snapshot's root zarr.json (see the module's docstring)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        if _is_own_object(key):
            data = self._objects.get(key)
        else:
            # The root document is read whole: readers see less of it than is stored.
            whole = key == _ROOT
            try:
                value = await self._store.get(key, prototype, None if whole else byte_range)
            except Exception as exc:  # icechunk's errors are of several classes
                raise _refused(exc) from None
            if not whole or value is None:
                return value
            data = _without_objects(value.to_bytes())
        if data is None:
            return None
        return prototype.buffer.from_bytes(_ranged(data, byte_range))

    def read_sync(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None
    ) -> Buffer | None:
        if self.files is None or _is_own_object(key):
            return sync(self.get(key, prototype, byte_range))
        if key == _ROOT:  # the snapshot's: it never changes, nor what readers see of it
            if self._root is None:
                root = self.files.read(key, None)
                self._root = b"" if root is None else _without_objects(root)
            data = _ranged(self._root, byte_range) if self._root else None
        else:
            data = self.files.read(key, byte_range)
        return None if data is None else prototype.buffer.from_bytes(data)

    def reads_in_thread(self) -> bool:
        return self.files is not None

    async def exists(self, key: str) -> bool:
        if _is_own_object(key):
            return key in self._objects
        return await self._store.exists(key)

    async def set(self, key: str, value: Buffer) -> None:
        if not _is_own_object(key):
            await self._store.set(key, _icechunk_grids(key, value))
            return
        self._objects[key] = value.to_bytes()
        self._changed = self._changed or not _session_only(key)

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        if _is_own_object(key):
            if key not in self._objects:
                await self.set(key, value)
            return
        await self._store.set_if_not_exists(key, value)

    async def delete(self, key: str) -> None:
        if _is_own_object(key):
            if self._objects.pop(key, None) is not None and not _session_only(key):
                self._changed = True
            return
        await self._store.delete(key)

    def serves_own_bytes(self, key: str) -> bool:
        return _is_own_object(key)

    def has_changes(self) -> bool:
        return self._changed or bool(self.session.has_uncommitted_changes)

    def commit(self, message: str, summary: dict[str, int] | None = None) -> str | None:
        """Commit what was written as one snapshot of the branch; returns its id (None when
        nothing changed). ``summary``: the granules and extent the commit holds, where no
        journal says them (a virtual cube's). Raises ``TransactionConflict`` when the branch
        moved meanwhile."""
        import icechunk

        if not self.has_changes():
            return None
        kept = {k: v.decode() for k, v in self._objects.items() if not _session_only(k)}
        metadata: dict[str, Any] = {}
        if kept and not sync(self._keep_objects(kept)):  # no root group to hold them
            metadata[METADATA_KEY] = kept
        summary = summary if summary is not None else _summary_of(kept)
        if summary is not None:
            metadata[SUMMARY_KEY] = summary
        try:
            snapshot = self.session.commit(message, metadata=metadata, allow_empty=True)
        except icechunk.ConflictError:
            raise TransactionConflict(
                f"{self.label}: branch {self.session.branch!r} moved while this command "
                "wrote; nothing of it was committed"
            ) from None
        self._changed = False
        return str(snapshot)

    async def _keep_objects(self, objects: dict[str, str]) -> bool:
        """Write ``objects`` into the root group's attributes (whatever the session wrote
        there: its readers do not see them); False when there is no root group."""
        from zarr.core.buffer import default_buffer_prototype

        prototype = default_buffer_prototype()
        root = await self._store.get(_ROOT, prototype)
        if root is None:
            return False
        document = json.loads(root.to_bytes())
        attributes = document.setdefault("attributes", {})
        if attributes.get(OBJECTS_ATTRIBUTE) != objects:
            attributes[OBJECTS_ATTRIBUTE] = objects
            data = json.dumps(document, indent=2).encode()
            await self._store.set(_ROOT, prototype.buffer.from_bytes(data))
        return True


def _without_objects(root: bytes) -> bytes:
    """The root group's document as readers see it: without accumulus's objects."""
    if OBJECTS_ATTRIBUTE.encode() not in root:
        return root
    document = json.loads(root)
    document.get("attributes", {}).pop(OBJECTS_ATTRIBUTE, None)
    return json.dumps(document, indent=2).encode()


def _summary_of(objects: dict[str, str]) -> dict[str, int] | None:
    """The granules and extent the journal among ``objects`` says the cube holds."""
    journal = _journal_document({METADATA_KEY: objects})
    if not journal:
        return None
    return {"granules": len(journal.get("granules", ())), "extent": int(journal.get("extent", 0))}


def is_session_store(store: Store) -> bool:
    """Whether ``store`` is icechunk's own store of a session (not opened by accumulus)."""
    return type(store).__module__.split(".")[0] == "icechunk"


def reading_session(store: Store) -> TransactionalStore:
    """icechunk's store of a session given by a caller, read through the same view as a
    repository accumulus opened (its ``.accumulus/`` objects are not read)."""
    return TransactionalStore(store, label="an icechunk session")


def transaction_of(store: Store) -> TransactionalStore | None:
    """The icechunk session below ``store``'s wrappers, or None for any other store."""
    while not isinstance(store, TransactionalStore):
        if not isinstance(store, WrapperStore):
            return None
        store = store._store
    return store


# Chunks per manifest along each dimension (``new_repository_config``): a query over a whole
# archive of daily one-step chunks reads one manifest per this many days, an append rewrites
# at most this many chunk references.
MANIFEST_SPLIT = 256


def _open_or_create(storage: Any, exists: bool, **options: Any) -> Any:
    """The repository at ``storage`` (``exists``: whether it does), created with
    ``new_repository_config`` when it does not."""
    import icechunk

    config = None if exists else new_repository_config()
    return icechunk.Repository.open_or_create(storage, config=config, **options)


def new_repository_config() -> Any:
    """The configuration of a repository accumulus creates: icechunk's default, with every
    array's chunk references split into manifests of ``MANIFEST_SPLIT`` chunks along each
    dimension. Without it a commit writes every chunk reference of each array it changed
    (the manifest of a daily cube's data grows with every day); split, it writes the
    manifests of the splits it touched: an append, the last ones along time."""
    import icechunk

    splitting = icechunk.ManifestSplittingConfig.from_dict(
        {
            icechunk.ManifestSplitCondition.AnyArray(): {
                icechunk.ManifestSplitDimCondition.Any(): MANIFEST_SPLIT
            }
        }
    )
    config = icechunk.RepositoryConfig.default()
    config.manifest = icechunk.ManifestConfig(splitting=splitting)
    return config


def _quiet_icechunk() -> None:
    """icechunk logs warnings a user cannot act on (lost-response recovery settings) to
    stderr; only its errors are shown, unless ``ICECHUNK_LOG`` says otherwise."""
    import icechunk

    if "ICECHUNK_LOG" not in os.environ:
        icechunk.set_logs_filter("error")


def open_repository(
    url: str,
    mode: str,
    storage_options: dict[str, Any] | None,
    ref: str | None,
    allow_references: Sequence[str] = (),
) -> TransactionalStore:
    """The store of a session of the repository ``url`` names: read-only at ``ref`` (a
    branch, a tag or a snapshot id; branch ``main`` by default) for ``mode`` "r", writable on
    the branch ``ref`` names otherwise ("w" creates the repository when missing). Virtual
    chunks are read from the containers the repository configures that lie beside it or
    under ``allow_references`` (``authorized``)."""
    import icechunk

    _quiet_icechunk()
    storage = _storage(url, storage_options, create=mode == "w")
    try:
        # Before the repository is read: a commit after this changes the stamp.
        stamp = _stamp(_local_path(url)) if url_scheme(url) == "icechunk" else None
        exists = icechunk.Repository.exists(storage)
        if not exists and mode != "w":
            raise StoreNotFoundError(f"store not found: {url} (no icechunk repository there)")
        config = icechunk.Repository.fetch_config(storage) if exists else None
        access = authorized(url, config, storage_options, allow_references)
        repository = _open_or_create(storage, exists, authorize_virtual_chunk_access=access)
        session = _session(repository, url, mode, ref)
        branch = ref or DEFAULT_BRANCH
        read_branch = mode == "r" and branch in set(repository.list_branches())
        follows = branch if read_branch else None
    except icechunk.IcechunkError as exc:
        raise AccumulusError(f"cannot open {url}: {_reason(exc)}") from None
    files = None
    if mode == "r" and url_scheme(url) == "icechunk":
        local = tuple(prefix for prefix in access if prefix.startswith("file://"))
        files = SnapshotFiles(session.store, _local_path(url), local, stamp)
    return TransactionalStore(
        session.store,
        session=session,
        repository=repository,
        label=url,
        follows=follows,
        files=files,
    )


class SnapshotFiles:
    """A read-only session of a local repository, read without icechunk's event loop: its
    metadata documents and chunk maps read once (a snapshot never changes), its chunks
    from the repository's files (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        root: Path,
        granules: tuple[str, ...] = (),
        stamp: tuple[int, ...] | None = None,
    ) -> None:
        self.store = store
        self.root = root
        self.chunks = root / "chunks"  # icechunk's layout: chunks/<chunk id>
        # The repository's ``repo`` object (its branches' tips) as it was when the session
        # was opened: unchanged, no branch moved (``branch_moved``).
        self.stamp = stamp
        self.granules = granules  # the authorized containers of local files (file://…/)
        self._documents: dict[str, bytes | None] = {}
        # Per array path: its chunks' keys -> inline bytes, or (kind, path, offset, length).
        self._maps: dict[str, dict[str, bytes | tuple[int, str, int, int]]] = {}
        self._lock = threading.Lock()

    def read(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        if is_metadata_key(key):
            data = self._document(key)
            return None if data is None else _ranged(data, byte_range)
        array = self._array_of(key)
        if array is None:  # not a chunk of an array: asked of icechunk
            return self._fetched(key, byte_range)
        where = self._map(array).get(key)
        if where is None:
            return None  # a chunk never written: the fill value
        if isinstance(where, bytes):
            return _ranged(where, byte_range)
        kind, path, offset, length = where
        file: str | None
        if kind == _NATIVE:
            file = str(self.chunks / path)
        else:
            file = self._granule(path)
            if file is None:  # not a plain local file icechunk may read: icechunk says why
                return self._fetched(key, byte_range)
        start, stop = _span(length, byte_range)
        return read_file_range(file, offset + start, offset + stop)

    def _granule(self, url: str) -> str | None:
        """The local file a virtual chunk's URL names, when it lies in an authorized
        container (as written: no ``..``, no percent-encoding); None otherwise."""
        if not url.startswith("file://") or "%" in url:
            return None
        path = url.removeprefix("file://")
        if os.path.normpath(path) != path:
            return None
        return path if any(url.startswith(prefix) for prefix in self.granules) else None

    def _fetched(self, key: str, byte_range: ByteRequest | None) -> bytes | None:
        from zarr.core.buffer import default_buffer_prototype

        try:
            found = sync(self.store.get(key, default_buffer_prototype(), byte_range))
        except Exception as exc:  # icechunk's errors are of several classes
            raise _refused(exc) from None
        return None if found is None else found.to_bytes()

    def _document(self, key: str) -> bytes | None:
        if key not in self._documents:
            data = self._fetched(key, None)
            with self._lock:
                self._documents[key] = data
        return self._documents[key]

    def _array_of(self, key: str) -> str | None:
        """The path of the array ``key`` is a chunk of (the longest prefix naming one)."""
        parts = key.split("/")
        for end in range(len(parts) - 1, -1, -1):
            path = "/".join(parts[:end])
            document = self._document(f"{path}/zarr.json" if path else "zarr.json")
            if document is not None:
                return path if json.loads(document).get("node_type") == "array" else None
        return None

    def _map(self, array: str) -> dict[str, bytes | tuple[int, str, int, int]]:
        found = self._maps.get(array)
        if found is None:
            found = sync(self._chunk_map(array))
            with self._lock:
                self._maps[array] = found
        return found

    async def _chunk_map(self, array: str) -> dict[str, bytes | tuple[int, str, int, int]]:
        document = self._document(f"{array}/zarr.json" if array else "zarr.json")
        assert document is not None  # _array_of found it
        encoding = parse_chunk_key_encoding(json.loads(document)["chunk_key_encoding"])
        prefix = f"{array}/" if array else ""
        found: dict[str, bytes | tuple[int, str, int, int]] = {}
        batches = self.store.array_chunk_iterator(f"/{array}")  # type: ignore[attr-defined]
        async for coords, kinds, paths, offsets, lengths, inlined in batches:
            for row, kind in enumerate(kinds.tolist()):
                key = prefix + encoding.encode_chunk_key(tuple(coords[row].tolist()))
                if row in inlined:
                    found[key] = bytes(inlined[row])
                else:
                    found[key] = (kind, paths[row], int(offsets[row]), int(lengths[row]))
        return found


def authorized(
    url: str,
    config: Any,
    storage_options: dict[str, Any] | None,
    allow_references: Sequence[str] = (),
) -> dict[str, Any]:
    """The credentials of the virtual chunk containers ``config`` (a repository's) names
    that the repository ``url`` may read: those beside it (under its parent directory or
    prefix, as a reference set reads beside itself) or under an ``allow_references`` prefix.
    Others are not authorized, so their chunks are never read."""
    from icechunk.credentials import HttpAccess, LocalFileSystemAccess, containers_credentials

    containers = (config.virtual_chunk_containers or {}) if config is not None else {}
    allowed = [_container_prefix(a) for a in (_beside(url), *allow_references)]
    access: dict[str, Any] = {}
    for prefix in containers:
        if not any(prefix.startswith(a) for a in allowed):
            continue
        if prefix.startswith("file://"):
            access[prefix] = LocalFileSystemAccess
        elif prefix.startswith("s3://"):
            access[prefix] = _s3_credentials(storage_options)
        else:
            access[prefix] = HttpAccess
    return containers_credentials(access)


def add_containers(
    url: str,
    storage_options: dict[str, Any] | None,
    locations: Iterable[str],
) -> list[str]:
    """Configure the repository ``url`` (created when missing) to read virtual chunks
    from the directories (or buckets' prefixes) of the granules at ``locations``: a
    container for each directory not yet covered, saved in the repository's configuration
    (a write of its own, before the commit: an unused container is harmless). Returns the
    prefixes added."""
    import icechunk

    _quiet_icechunk()
    storage = _storage(url, storage_options, create=True)
    try:
        repository = _open_or_create(storage, icechunk.Repository.exists(storage))
        config = repository.config
        known = list(config.virtual_chunk_containers or {})
        added: list[str] = []
        for location in locations:
            prefix = _container_prefix(location.rsplit("/", 1)[0] + "/")
            if any(prefix.startswith(k) for k in [*known, *added]):
                continue
            config.set_virtual_chunk_container(
                icechunk.VirtualChunkContainer(prefix, _container_store(prefix, storage_options))
            )
            added.append(prefix)
        if added:
            repository = repository.reopen(config=config)
            repository.save_config()
    except icechunk.IcechunkError as exc:
        raise AccumulusError(f"cannot configure {url}: {_reason(exc)}") from None
    return added


def chunk_location(location: str) -> str:
    """A granule's location as a virtual chunk reference names it: a URL (local paths as
    ``file://``)."""
    return _container_prefix(location)


def directories_to_allow(url: str, locations: Iterable[str]) -> list[str]:
    """The directories of the granules at ``locations`` that the repository ``url`` does
    not read by itself (``authorized``: beside it): what its readers must allow."""
    beside = _container_prefix(_beside(url))
    outside = {_container_prefix(loc.rsplit("/", 1)[0] + "/") for loc in locations}
    return sorted(d.removeprefix("file://") for d in outside if not d.startswith(beside))


def _container_prefix(location: str) -> str:
    """A local path or a URL as a container's URL prefix (local paths as ``file://``)."""
    if url_scheme(location) not in ("", "file"):
        return location
    path = location.removeprefix("file://")
    text = str(Path(path).expanduser().absolute())
    return f"file://{text}/" if location.endswith("/") else f"file://{text}"


def _beside(url: str) -> str:
    """Where the repository ``url`` lies: its parent directory or prefix, with a slash."""
    if url_scheme(url) == "icechunk":
        return f"{_local_path(url).parent}/"
    bucket, _, prefix = url.split("://", 1)[1].partition("/")
    parent = prefix.strip("/").rpartition("/")[0]
    return f"s3://{bucket}/{parent}/" if parent else f"s3://{bucket}/"


def _container_store(prefix: str, storage_options: dict[str, Any] | None) -> Any:
    import icechunk

    if prefix.startswith("file://"):
        return icechunk.local_filesystem_store(prefix.removeprefix("file://"))
    if prefix.startswith("s3://"):
        settings = _s3(storage_options)
        return icechunk.s3_store(
            region=settings.get("region"),
            endpoint_url=settings.get("endpoint_url"),
            allow_http=settings.get("allow_http", False),
            force_path_style=settings.get("force_path_style", False),
            s3_compatible="endpoint_url" in settings,
        )
    if prefix.startswith(("http://", "https://")):
        return icechunk.http_store()
    raise AccumulusError(f"{prefix}: virtual chunks are read from local files, s3:// or http(s)")


def _s3_credentials(storage_options: dict[str, Any] | None) -> Any:
    import icechunk

    settings = _s3(storage_options)
    if settings.get("anonymous"):
        return icechunk.s3_credentials(anonymous=True)
    if "access_key_id" in settings:
        return icechunk.s3_credentials(
            access_key_id=settings["access_key_id"],
            secret_access_key=settings["secret_access_key"],
            session_token=settings["session_token"],
        )
    return icechunk.s3_credentials(from_env=True)


def branch_moved(store: Store) -> tuple[str, str] | None:
    """When ``store`` reads a branch of a repository that has a newer commit than the one it
    was opened at: the repository's URL and the branch, to open again (one request).
    None otherwise (another kind of store, a tag, a snapshot, or no new commit)."""
    transaction = transaction_of(store)
    if transaction is None or transaction.follows is None:
        return None
    # A local repository rewrites its ``repo`` object at every commit: while it stays as it
    # was, no branch moved: a stat is much cheaper than icechunk's look-up of the branch.
    files = transaction.files
    now = _stamp(files.root) if files is not None else None
    if files is not None and now is not None and now == files.stamp:
        return None
    head = transaction.repository.lookup_branch(transaction.follows)
    if head == transaction.session.snapshot_id:
        if files is not None:
            files.stamp = now  # changed by another branch's commit, a tag: still ours
        return None
    return transaction.label, transaction.follows


def _stamp(root: Path) -> tuple[int, ...] | None:
    """The identity of a local repository's ``repo`` object (None where there is none)."""
    try:
        info = os.stat(root / "repo")
    except OSError:
        return None
    return info.st_ino, info.st_mtime_ns, info.st_size


def _session(repository: Any, url: str, mode: str, ref: str | None) -> Any:
    ref = ref or DEFAULT_BRANCH
    branches = set(repository.list_branches())
    if mode != "r":
        if ref not in branches:
            raise AccumulusError(
                f"--ref {ref}: not a branch of {url} (branches: {', '.join(sorted(branches))}); "
                "commands that write commit to a branch"
            )
        return repository.writable_session(ref)
    if ref in branches:
        return repository.readonly_session(branch=ref)
    if ref in set(repository.list_tags()):
        return repository.readonly_session(tag=ref)
    try:
        return repository.readonly_session(snapshot_id=ref)
    except Exception:  # icechunk's errors for an id that is malformed or not there
        raise AccumulusError(
            f"--ref {ref}: not a branch, tag or snapshot of {url} (branches: "
            f"{', '.join(sorted(branches))})"
        ) from None


def _storage(url: str, storage_options: dict[str, Any] | None, create: bool) -> Any:
    import icechunk

    scheme = url_scheme(url)
    rest = url.split("://", 1)[1]
    if scheme == "icechunk":
        path = _local_path(url)
        if create and not path.parent.is_dir():
            raise AccumulusError(f"cannot create {url}: directory {path.parent} does not exist")
        return icechunk.local_filesystem_storage(str(path))
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise AccumulusError(f"{url}: expected icechunk+s3://BUCKET/PREFIX")
    return icechunk.s3_storage(
        bucket=bucket, prefix=prefix.strip("/") or None, **_s3(storage_options)
    )


def _local_path(url: str) -> Path:
    """The directory of the local repository ``icechunk://PATH`` names."""
    return Path(url.split("://", 1)[1]).expanduser().absolute()


def _s3(storage_options: dict[str, Any] | None) -> dict[str, Any]:
    """fsspec's S3 options (as ``--storage-option`` and ``--endpoint-url`` give them) as
    icechunk's ``s3_storage`` takes them."""
    options = dict(storage_options or {})
    client = options.pop("client_kwargs", {}) or {}
    endpoint = (
        options.pop("endpoint_url", None)
        or client.get("endpoint_url")
        or os.environ.get("AWS_ENDPOINT_URL")
    )
    settings: dict[str, Any] = {}
    if endpoint:
        settings.update(endpoint_url=endpoint, allow_http=endpoint.startswith("http://"))
        settings["force_path_style"] = True
    region = client.get("region_name") or os.environ.get("AWS_DEFAULT_REGION")
    settings["region"] = region or "us-east-1"
    if options.pop("anon", False):
        settings["anonymous"] = True
    elif "key" in options:
        settings["access_key_id"] = options.pop("key")
        settings["secret_access_key"] = options.pop("secret", None)
        settings["session_token"] = options.pop("token", None)
    else:
        settings["from_env"] = True
    return settings


@dataclass(frozen=True)
class Expired:
    """What ``expire`` did to a repository."""

    snapshots: int  # expired: no longer in any branch's history
    objects: int  # deleted: chunks, manifests, snapshots and transaction logs
    bytes: int  # of the objects deleted


def expire(url: str, older_than: datetime, storage_options: dict[str, Any] | None) -> Expired:
    """Expire the snapshots of the repository ``url`` written before ``older_than`` and
    delete the objects no kept snapshot reads (icechunk's ``expire_snapshots`` then
    ``garbage_collect``, both with that bound). Branch tips and tags are kept, whatever
    their age, and so is what they read."""
    import icechunk

    if url_scheme(url) not in SCHEMES:
        raise AccumulusError(
            f"{url}: not an icechunk repository (icechunk://PATH, icechunk+s3://BUCKET/PREFIX); "
            "only a repository keeps snapshots to expire"
        )
    if older_than.tzinfo is None:
        raise AccumulusError(f"older_than={older_than}: give a time zone (e.g. datetime.UTC)")
    _quiet_icechunk()
    storage = _storage(url, storage_options, create=False)
    try:
        if not icechunk.Repository.exists(storage):
            raise StoreNotFoundError(f"store not found: {url} (no icechunk repository there)")
        repository = icechunk.Repository.open(storage)
        expired = repository.expire_snapshots(older_than=older_than)
        collected = repository.garbage_collect(delete_object_older_than=older_than)
    except icechunk.IcechunkError as exc:
        raise AccumulusError(f"cannot expire snapshots of {url}: {_reason(exc)}") from None
    objects = (
        collected.chunks_deleted
        + collected.manifests_deleted
        + collected.snapshots_deleted
        + collected.transaction_logs_deleted
    )
    return Expired(len(expired), objects, collected.bytes_deleted)


@dataclass(frozen=True)
class Commit:
    """One commit of a branch, as ``inspect`` lists it."""

    snapshot: str
    written: datetime
    message: str
    granules: int  # granules the cube holds as of this commit
    extent: int  # its size along the append dimension


def history(store: Store) -> list[Commit]:
    """The commits of the session's ref, newest first, down to the repository's creation."""
    transaction = transaction_of(store)
    if transaction is None or transaction.repository is None:
        return []
    infos = list(transaction.repository.ancestry(snapshot_id=transaction.session.snapshot_id))
    commits = []
    held = (0, 0)  # a commit that records neither (a virtual cube's accumulate) holds its parent's
    for info in reversed(infos):
        journal = _journal_document(info.metadata)
        summary = (info.metadata or {}).get(SUMMARY_KEY)
        if journal:
            held = (len(journal.get("granules", ())), int(journal.get("extent", 0)))
        elif isinstance(summary, dict):
            held = (int(summary.get("granules", 0)), int(summary.get("extent", 0)))
        commits.append(
            Commit(
                snapshot=str(info.id),
                written=info.written_at,
                message=str(info.message),
                granules=held[0],
                extent=held[1],
            )
        )
    return commits[::-1]


def _journal_document(metadata: dict[str, Any] | None) -> dict[str, Any]:
    objects = (metadata or {}).get(METADATA_KEY) or {}
    for key, text in objects.items():
        if key.endswith("journal.json"):
            try:
                document = json.loads(text)
            except ValueError:
                return {}
            return document if isinstance(document, dict) else {}
    return {}


def _committed_objects(repository: Any, session: Any) -> Iterator[tuple[str, bytes]]:
    """The ``.accumulus/`` objects the session's base snapshot carries: in its root group's
    attributes, or (written before those) in its commit's metadata."""
    from zarr.core.buffer import default_buffer_prototype

    if repository is None or session is None:
        return
    root = sync(session.store.get(_ROOT, default_buffer_prototype()))
    attributes = json.loads(root.to_bytes()).get("attributes", {}) if root is not None else {}
    objects = attributes.get(OBJECTS_ATTRIBUTE)
    if not isinstance(objects, dict):
        metadata = repository.lookup_snapshot(session.snapshot_id).metadata or {}
        objects = metadata.get(METADATA_KEY) or {}
    for key, text in objects.items():
        yield key, str(text).encode()


def _icechunk_grids(key: str, value: Buffer) -> Buffer:
    """A metadata document with rectilinear chunk grids as icechunk parses them: a list of
    sizes for every dimension (zarr writes one size for a regular dimension, which icechunk
    refuses). The same grid to zarr."""
    if not key.endswith("zarr.json"):
        return value
    data = value.to_bytes()
    if b'"rectilinear"' not in data:
        return value
    document = json.loads(data)
    _spell_out_grids(document)
    return value.from_bytes(json.dumps(document).encode())


def _spell_out_grids(node: Any) -> None:
    """Every rectilinear grid under ``node`` (an array's document, or consolidated metadata
    holding several) with its regular dimensions spelled out as lists of sizes."""
    if isinstance(node, list):
        for item in node:
            _spell_out_grids(item)
        return
    if not isinstance(node, dict):
        return
    grid = node.get("chunk_grid")
    if isinstance(grid, dict) and grid.get("name") == "rectilinear" and "shape" in node:
        shapes = grid.get("configuration", {}).get("chunk_shapes")
        if isinstance(shapes, list):
            grid["configuration"]["chunk_shapes"] = [
                _sizes(size, shape) if isinstance(shape, int) else shape
                for size, shape in zip(node["shape"], shapes, strict=True)
            ]
    for item in node.values():
        _spell_out_grids(item)


def _sizes(size: int, chunk: int) -> list[int]:
    """A regular dimension's chunk sizes, the last one cut by its end."""
    full, rest = divmod(size, chunk)
    return [chunk] * full + ([rest] if rest or not full else [])


def _is_own_object(key: str) -> bool:
    return key.startswith(".accumulus/") or "/.accumulus/" in key


def _session_only(key: str) -> bool:
    return key.rsplit("/", 1)[-1].startswith(_SESSION_ONLY)


def _ranged(data: bytes, byte_range: ByteRequest | None) -> bytes:
    if byte_range is None:
        return data
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        return data[byte_range.start : byte_range.end]
    if isinstance(byte_range, OffsetByteRequest):
        return data[byte_range.offset :]
    if isinstance(byte_range, SuffixByteRequest):
        return data[-byte_range.suffix :]
    return data


def _span(length: int, byte_range: ByteRequest | None) -> tuple[int, int]:
    """The start and stop, within an object of ``length`` bytes, that ``byte_range`` asks."""
    from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest

    if isinstance(byte_range, RangeByteRequest):
        return min(byte_range.start, length), min(byte_range.end, length)
    if isinstance(byte_range, OffsetByteRequest):
        return min(byte_range.offset, length), length
    if isinstance(byte_range, SuffixByteRequest):
        return max(0, length - byte_range.suffix), length
    return 0, length


def _refused(exc: Exception) -> Exception:
    """A read icechunk refused because the chunk's virtual chunk container is not authorized
    (``authorized``) said as the allowance a reader gives; other errors as they are."""
    found = re.search(r"url prefix (\S+?),", str(exc))
    if found is None or "authorize" not in str(exc):
        return exc
    where = found.group(1).removeprefix("file://")
    return AccumulusError(
        f"a virtual chunk lies in {where}, outside the repository's own location: read it "
        f"only if you trust the repository, with --allow-references {where} "
        "(allow_references= in Python)"
    )


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
