"""zarr-python's store contract (``zarr.testing.store.StoreTests``), run against each store
of ``accumulus.stores`` that can take it, as zarr-python tests its own ``WrapperStore``: a
``LocalStore`` below each wrapper, read and written directly by this module's ``get`` and
``set``, and the contract's every test through the wrapper.

Where a store's purpose contradicts one of the contract's tests, that test is replaced
here by one asserting what the store does instead, and says why:

- the metadata-rewriting views (``Zep3DraftStore``, ``NCZarrCompatStore``) and
  ``InferredConventionsStore`` check each metadata document to be JSON as it is read: the
  contract stores bytes such as ``b"\\x01\\x02\\x03\\x04"`` under ``zarr.json``, which they
  refuse by name;
- ``PinnedMetadataStore`` answers the root metadata documents from the snapshot it was made with,
  never from later writes: the contract writes a root ``zarr.json`` and reads it back;
- ``CountingStore`` and ``StableShardStore`` hold a lock and what they counted or hold for
  one process: they are not pickled.

Not run at all: kerchunk reference sets (``stores.reference_sets``) are read-only stores
over other files, and every test of the contract writes through the store; they are tested
against xarray and fsspec on real sets in ``tests/remote``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar

import pytest
from zarr.abc.store import RangeByteRequest, Store
from zarr.core.buffer import Buffer, default_buffer_prototype
from zarr.core.buffer.cpu import Buffer as CPUBuffer
from zarr.core.sync import sync
from zarr.storage import LocalStore
from zarr.testing.store import StoreTests

from accumulus.errors import AccumulusError
from accumulus.service.guard import RequestGuard, RequestStopped
from accumulus.stores import (
    CountingStore,
    GroupStore,
    GuardedStore,
    InferredConventionsStore,
    LeanLocalStore,
    MetadataSnapshot,
    NCZarrCompatStore,
    PinnedMetadataStore,
    StableShardStore,
    Zep3DraftStore,
    innermost,
)
from accumulus.stores.base import reads_synchronously

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class _Opened:
    """The contract's stores, opened by zarr's own event loop: its synchronous tests use them
    too, and only its asynchronous ones run on anyio's."""

    @pytest.fixture
    def store(self, open_kwargs: dict[str, Any]) -> Store:
        return sync(self.store_cls.open(**open_kwargs))  # type: ignore[attr-defined]

    @pytest.fixture
    def store_not_open(self, store_kwargs: dict[str, Any]) -> Store:
        return self.store_cls(**store_kwargs)  # type: ignore[attr-defined]


def _file(store: Store, key: str) -> Path:
    """Where ``key`` of ``store`` (a wrapper over a local directory) lies on disk."""
    prefix = store.prefix if isinstance(store, GroupStore) else ""
    root = innermost(store).root  # type: ignore[attr-defined]
    return Path(root, prefix, key)


class _OverLocalStore(_Opened):
    """The contract's fixtures for a wrapper over a ``LocalStore`` in a temporary directory,
    made with ``settings`` (its own constructor arguments)."""

    buffer_cls = CPUBuffer
    settings: ClassVar[dict[str, Any]] = {}

    async def get(self, store: Store, key: str) -> Buffer:
        return self.buffer_cls.from_bytes(_file(store, key).read_bytes())

    async def set(self, store: Store, key: str, value: Buffer) -> None:
        path = _file(store, key)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(value.to_bytes())

    def made_with(self) -> dict[str, Any]:
        """The constructor arguments of one test's store (``settings`` unless overridden)."""
        return dict(self.settings)

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        return {"store": LocalStore(str(tmp_path)), **self.made_with()}

    @pytest.fixture
    def open_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        return {"store_cls": LocalStore, "root": str(tmp_path), **self.made_with()}

    def test_store_repr(self, store: Store) -> None:
        assert repr(store) == f"{type(store).__name__}({store._store!r})"  # type: ignore[attr-defined]

    def test_store_supports_writes(self, store: Store) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: Store) -> None:
        assert store.supports_listing


def _cases_of(test: Any) -> Any:
    """The cases (``parametrize`` marks) of one of the contract's tests, for the test that
    replaces it."""

    def with_cases(replacement: Any) -> Any:
        replacement.pytestmark = list(test.pytestmark)
        return replacement

    return with_cases


async def _written_as_their_keys(contract: Any, store: Store, keys: list[str]) -> None:
    """What the contract's ``test_get_partial_values`` writes: each key's name as its bytes."""
    for key in keys:
        await contract.set(store, key, CPUBuffer.from_bytes(key.encode()))


class _NotPickled:
    async def test_serializable_store(self, store: Store) -> None:
        pytest.skip(f"{type(store).__name__} holds a lock and state for one process")


class _RefusesNonJSONMetadata:
    """For stores that check the metadata documents they serve (``checked``) as they read
    them: one that is not JSON is refused by name, in a batch as alone."""

    checked = "zarr.json"

    async def test_non_json_metadata_is_refused_by_name(self, store: Store) -> None:
        await self.set(store, self.checked, CPUBuffer.from_bytes(b"\x01\x02"))  # type: ignore[attr-defined]
        with pytest.raises(AccumulusError, match=f"document {self.checked} is not valid JSON"):
            await store.get(self.checked, default_buffer_prototype())

    @_cases_of(StoreTests.test_get_partial_values)
    async def test_get_partial_values(self, store: Store, key_ranges: list) -> None:
        if not any(key == self.checked and whole is None for key, whole in key_ranges):
            await super().test_get_partial_values(store, key_ranges)  # type: ignore[misc]
            return
        await _written_as_their_keys(self, store, [key for key, _ in key_ranges])
        with pytest.raises(AccumulusError, match="is not valid JSON"):
            await store.get_partial_values(default_buffer_prototype(), key_ranges)


class TestLeanLocalStore(_Opened, StoreTests[LeanLocalStore, CPUBuffer]):
    store_cls = LeanLocalStore
    buffer_cls = CPUBuffer

    async def get(self, store: LeanLocalStore, key: str) -> Buffer:
        return self.buffer_cls.from_bytes((store.root / key).read_bytes())

    async def set(self, store: LeanLocalStore, key: str, value: Buffer) -> None:
        (store.root / key).parent.mkdir(parents=True, exist_ok=True)
        (store.root / key).write_bytes(value.to_bytes())

    @pytest.fixture
    def store_kwargs(self, tmp_path: Path) -> dict[str, Any]:
        return {"root": str(tmp_path)}

    def test_store_repr(self, store: LeanLocalStore) -> None:
        assert str(store) == f"file://{store.root.as_posix()}"

    def test_store_supports_writes(self, store: LeanLocalStore) -> None:
        assert store.supports_writes

    def test_store_supports_listing(self, store: LeanLocalStore) -> None:
        assert store.supports_listing


class TestCountingStore(_NotPickled, _OverLocalStore, StoreTests[CountingStore, CPUBuffer]):
    store_cls = CountingStore

    async def test_reads_of_every_kind_are_counted(self, store: CountingStore) -> None:
        await self.set(store, "c/0", CPUBuffer.from_bytes(b"\x01\x02\x03\x04"))
        prototype = default_buffer_prototype()
        await store.get("c/0", prototype)
        await store.get_partial_values(prototype, [("c/0", RangeByteRequest(0, 2))])
        async for _ in store.get_ranges("c/0", [RangeByteRequest(2, 4)], prototype=prototype):
            pass
        assert store.counts.read_requests == 3
        assert store.counts.read_bytes == 4 + 2 + 2


class TestCachingCountingStore(TestCountingStore):
    settings: ClassVar[dict[str, Any]] = {"cache_bytes": 2**20}


class TestGroupStore(_OverLocalStore, StoreTests[GroupStore, CPUBuffer]):
    store_cls = GroupStore
    settings: ClassVar[dict[str, Any]] = {"prefix": "Grid/Intermediate"}

    def test_store_repr(self, store: GroupStore) -> None:
        assert repr(store) == f"GroupStore({store._store!r})"
        assert str(store).endswith("/Grid/Intermediate")


class _Stoppable:
    """A read gate that is open until stopped (``service.guard.RequestGuard`` without a
    deadline that could pass during a test)."""

    def __init__(self) -> None:
        self.stopped = False

    def check(self) -> None:
        if self.stopped:
            raise RequestStopped("computation stopped: the client went away")


class TestGuardedStore(_OverLocalStore, StoreTests[GuardedStore, CPUBuffer]):
    store_cls = GuardedStore

    def made_with(self) -> dict[str, Any]:
        # A guard per test: one made at import would run out of its time limit part-way
        # through a long (loaded) test session and stop the later tests' reads.
        return {"guard": RequestGuard(600.0), "read_seconds": 10.0}

    async def test_a_stopped_request_reads_nothing_in_any_way(self, tmp_path: Path) -> None:
        gate = _Stoppable()
        store = GuardedStore(LocalStore(str(tmp_path)), gate, 10.0)
        await store.set("c/0", CPUBuffer.from_bytes(b"\x01\x02\x03\x04"))
        prototype = default_buffer_prototype()
        assert await store.get("c/0", prototype) is not None
        # Read in the calling thread too (the chunk reader does, on a local store).
        assert reads_synchronously(store)
        assert store.get_sync("c/0").to_bytes() == b"\x01\x02\x03\x04"
        gate.stopped = True
        with pytest.raises(RequestStopped):
            await store.get("c/0", prototype)
        with pytest.raises(RequestStopped):
            store.get_sync("c/0")
        with pytest.raises(RequestStopped):
            await store.get_partial_values(prototype, [("c/0", RangeByteRequest(0, 2))])
        with pytest.raises(BaseExceptionGroup) as raised:  # a sharded array's inner chunks
            async for _ in store.get_ranges("c/0", [RangeByteRequest(0, 2)], prototype=prototype):
                pass
        assert raised.group_contains(RequestStopped)
        with pytest.raises(RequestStopped):
            await store.getsize("c/0")


class TestStableShardStore(_NotPickled, _OverLocalStore, StoreTests[StableShardStore, CPUBuffer]):
    store_cls = StableShardStore


class TestZep3DraftStore(
    _RefusesNonJSONMetadata, _OverLocalStore, StoreTests[Zep3DraftStore, CPUBuffer]
):
    store_cls = Zep3DraftStore


class TestNCZarrCompatStore(
    _RefusesNonJSONMetadata, _OverLocalStore, StoreTests[NCZarrCompatStore, CPUBuffer]
):
    store_cls = NCZarrCompatStore


class TestInferredConventionsStore(
    _RefusesNonJSONMetadata, _OverLocalStore, StoreTests[InferredConventionsStore, CPUBuffer]
):
    store_cls = InferredConventionsStore
    checked = ".zmetadata"  # the documents it presents inferred attributes in


class TestPinnedMetadataStore(_OverLocalStore, StoreTests[PinnedMetadataStore, CPUBuffer]):
    """A snapshot read before anything was written: its root documents are absent for its
    readers, whatever is written later."""

    store_cls = PinnedMetadataStore
    settings: ClassVar[dict[str, Any]] = {"snapshot": MetadataSnapshot({}, complete=False)}

    @_cases_of(StoreTests.test_get_partial_values)
    async def test_get_partial_values(self, store: PinnedMetadataStore, key_ranges: list) -> None:
        if not any(key == "zarr.json" for key, _ in key_ranges):
            await super().test_get_partial_values(store, key_ranges)
            return
        await _written_as_their_keys(self, store, [key for key, _ in key_ranges])
        found = await store.get_partial_values(default_buffer_prototype(), key_ranges)
        for (key, byte_range), value in zip(key_ranges, found, strict=True):
            if key == "zarr.json" and byte_range is None:
                assert value is None  # a metadata read: the snapshot's (absent)
            else:  # a chunk read, or a byte range: from the store
                assert value is not None
                assert value.to_bytes() == key.encode()[byte_range.start : byte_range.end]

    async def test_delete_dir(self, store: PinnedMetadataStore) -> None:
        for key in ("zarr.json", "foo-bar/zarr.json", "foo/zarr.json", "foo/c/0"):
            await store.set(key, CPUBuffer.from_bytes(b"x"))
        await store.delete_dir("foo")
        assert not await store.exists("zarr.json")  # the snapshot's root: absent
        assert _file(store, "zarr.json").exists()  # below it, written
        assert await store.exists("foo-bar/zarr.json")
        assert not await store.exists("foo/zarr.json")
        assert not await store.exists("foo/c/0")
