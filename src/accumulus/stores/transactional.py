"""icechunk repositories as stores: ``icechunk://PATH`` (a local repository) and
``icechunk+s3://BUCKET/PREFIX`` (one on object storage), read at a ref and written in one
commit per command.

An icechunk session is a transaction: whatever a command writes through ``session.store``
stays invisible until ``session.commit``, which moves the branch to the new snapshot in one
step. So a command killed at any moment leaves the branch at the old commit or the new one,
and every reader of a snapshot sees data and accumulations that match.

icechunk holds Zarr v3 nodes only, so accumulus's own objects (``.accumulus/``: the append
journal, the writers' lock) cannot be keys of the repository. ``TransactionalStore`` keeps
them beside the session: the journal travels in the commit's metadata (each snapshot carries
the journal of the data it holds, so time travel reads the right one), and the lock stays in
memory: writers are kept apart by icechunk's commit, which refuses a commit whose branch moved
since its session began (``TransactionConflict``), not by a lock object.

Consolidated metadata is written as for any store: icechunk keeps it in the root group's
``zarr.json``, inside the same snapshot as the arrays, so it never disagrees with them.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype
from zarr.storage import WrapperStore

from accumulus.errors import AccumulusError
from accumulus.stores.base import DelegatingStore
from accumulus.stores.locations import StoreNotFoundError, url_scheme

SCHEMES = frozenset({"icechunk", "icechunk+s3"})
DEFAULT_BRANCH = "main"
# The commit metadata key holding accumulus's objects (by key) as of that snapshot.
METADATA_KEY = "accumulus"
# Objects that live only as long as the session: the writers' lock and its guards.
_SESSION_ONLY = "lock"


class TransactionConflict(AccumulusError):
    """The branch moved while a command wrote: its commit was refused, nothing landed."""


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
    ) -> None:
        super().__init__(store)
        self.session = session
        self.repository = repository
        self.label = label
        self.follows = follows  # the branch a read-only session was opened at
        self._objects: dict[str, bytes] = dict(_committed_objects(repository, session))
        self._changed = False

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
        if not _is_own_object(key):
            return await self._store.get(key, prototype, byte_range)
        data = self._objects.get(key)
        if data is None:
            return None
        return prototype.buffer.from_bytes(_ranged(data, byte_range))

    async def exists(self, key: str) -> bool:
        if _is_own_object(key):
            return key in self._objects
        return await self._store.exists(key)

    async def set(self, key: str, value: Buffer) -> None:
        if not _is_own_object(key):
            await self._store.set(key, value)
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

    def commit(self, message: str) -> str | None:
        """Commit what was written as one snapshot of the branch; returns its id (None when
        nothing changed). Raises ``TransactionConflict`` when the branch moved meanwhile."""
        import icechunk

        if not self.has_changes():
            return None
        kept = {k: v.decode() for k, v in self._objects.items() if not _session_only(k)}
        try:
            snapshot = self.session.commit(message, metadata={METADATA_KEY: kept}, allow_empty=True)
        except icechunk.ConflictError:
            raise TransactionConflict(
                f"{self.label}: branch {self.session.branch!r} moved while this command "
                "wrote; nothing of it was committed"
            ) from None
        self._changed = False
        return str(snapshot)


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


def _quiet_icechunk() -> None:
    """icechunk logs warnings a user cannot act on (lost-response recovery settings) to
    stderr; only its errors are shown, unless ``ICECHUNK_LOG`` says otherwise."""
    import icechunk

    if "ICECHUNK_LOG" not in os.environ:
        icechunk.set_logs_filter("error")


def open_repository(
    url: str, mode: str, storage_options: dict[str, Any] | None, ref: str | None
) -> TransactionalStore:
    """The store of a session of the repository ``url`` names: read-only at ``ref`` (a
    branch, a tag or a snapshot id; branch ``main`` by default) for ``mode`` "r", writable on
    the branch ``ref`` names otherwise ("w" creates the repository when missing)."""
    import icechunk

    _quiet_icechunk()
    storage = _storage(url, storage_options, create=mode == "w")
    try:
        if mode == "w":
            repository = icechunk.Repository.open_or_create(storage)
        elif icechunk.Repository.exists(storage):
            repository = icechunk.Repository.open(storage)
        else:
            raise StoreNotFoundError(f"store not found: {url} (no icechunk repository there)")
        session = _session(repository, url, mode, ref)
        branch = ref or DEFAULT_BRANCH
        read_branch = mode == "r" and branch in set(repository.list_branches())
        follows = branch if read_branch else None
    except icechunk.IcechunkError as exc:
        raise AccumulusError(f"cannot open {url}: {_reason(exc)}") from None
    return TransactionalStore(
        session.store, session=session, repository=repository, label=url, follows=follows
    )


def branch_moved(store: Store) -> tuple[str, str] | None:
    """When ``store`` reads a branch of a repository that has a newer commit than the one it
    was opened at: the repository's URL and the branch, to open again (one request).
    None otherwise (another kind of store, a tag, a snapshot, or no new commit)."""
    transaction = transaction_of(store)
    if transaction is None or transaction.follows is None:
        return None
    head = transaction.repository.lookup_branch(transaction.follows)
    if head == transaction.session.snapshot_id:
        return None
    return transaction.label, transaction.follows


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
        path = Path(rest).expanduser().absolute()
        if create and not path.parent.is_dir():
            raise AccumulusError(f"cannot create {url}: directory {path.parent} does not exist")
        return icechunk.local_filesystem_storage(str(path))
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise AccumulusError(f"{url}: expected icechunk+s3://BUCKET/PREFIX")
    return icechunk.s3_storage(
        bucket=bucket, prefix=prefix.strip("/") or None, **_s3(storage_options)
    )


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
    commits = []
    for info in transaction.repository.ancestry(snapshot_id=transaction.session.snapshot_id):
        journal = _journal_document(info.metadata)
        commits.append(
            Commit(
                snapshot=str(info.id),
                written=info.written_at,
                message=str(info.message),
                granules=len(journal.get("granules", ())),
                extent=int(journal.get("extent", 0)),
            )
        )
    return commits


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
    """The ``.accumulus/`` objects the session's base snapshot carries."""
    if repository is None or session is None:
        return
    metadata = repository.lookup_snapshot(session.snapshot_id).metadata or {}
    for key, text in (metadata.get(METADATA_KEY) or {}).items():
        yield key, str(text).encode()


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


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
