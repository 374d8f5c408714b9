"""The root documents an open datacube checks before every query, read from a local
directory: remembered by file version (``stores.snapshot._ROOTS``), so that a document
rewritten in place or replaced is read afresh, and one that did not change is not read."""

from __future__ import annotations

import time

import pytest
import zarr

from accumulus.stores import snapshot
from accumulus.stores.opening import open_store
from rewrites import WAYS, rewrite

SETTLED_NS = 50_000_000  # files settled 50 ms after they were written (2 s in use)


@pytest.fixture
def settled(monkeypatch):
    monkeypatch.setattr(snapshot._ROOTS, "settled_ns", SETTLED_NS)
    snapshot._ROOTS.clear()


def _cube(path):
    group = zarr.open_group(path, mode="w", zarr_format=2)
    group.create_array("a", shape=(4,), chunks=(2,), dtype="f4")
    group.attrs["title"] = "first"
    zarr.consolidate_metadata(path)
    time.sleep(2 * SETTLED_NS / 1e9)


def _rewritten(path, how: str, old: bytes, new: bytes) -> None:
    document = path / ".zmetadata"
    rewrite(document, document.read_bytes().replace(old, new), how)


@pytest.mark.parametrize("how", WAYS)
def test_a_rewritten_root_document_is_read_again(tmp_path, settled, how):
    """Read twice unchanged (the second from memory: no read of the file), then rewritten
    with other bytes of the same length, in place or by a new file renamed over it: the
    next check gives the new bytes, at once and after the file settled."""
    path = tmp_path / "c.zarr"
    _cube(path)
    store = open_store(str(path))
    zarr.open_group(store, mode="r")  # opened, as a datacube's store is
    first = snapshot.root_documents(store)[0]
    assert b'"first"' in first[".zmetadata"] and ".zgroup" in first
    reads = []
    real = snapshot.read_versioned_file
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(snapshot, "read_versioned_file", lambda *a: reads.append(a) or real(*a))
        assert snapshot.root_documents(store)[0] == first
        assert not reads  # every document as it was: none read
        _rewritten(path, how, b'"first"', b'"again"')
        for _ in range(2):
            now = snapshot.root_documents(store)[0]
            assert b'"again"' in now[".zmetadata"] and b'"first"' not in now[".zmetadata"]
            assert now[".zgroup"] == first[".zgroup"]
            time.sleep(2 * SETTLED_NS / 1e9)
        assert [key for _, key in reads] == [".zmetadata", ".zmetadata"]  # settled: once more


def test_a_root_document_deleted_is_gone(tmp_path, settled):
    """A document remembered, then deleted: the check no longer finds it."""
    path = tmp_path / "c.zarr"
    _cube(path)
    store = open_store(str(path))
    zarr.open_group(store, mode="r")
    assert ".zattrs" in snapshot.root_documents(store)[0]
    (path / ".zattrs").unlink()
    assert ".zattrs" not in snapshot.root_documents(store)[0]
