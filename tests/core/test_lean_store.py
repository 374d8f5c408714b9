"""The local store every path opens (``stores.local.LeanLocalStore``): its lean synchronous
reads and writes answer as zarr's ``LocalStore`` does, refuse what is not a regular file
without blocking, and write atomically."""

from __future__ import annotations

import os
import threading

import pytest
from zarr.core.buffer import default_buffer_prototype
from zarr.core.sync import sync
from zarr.storage import LocalStore

from accumulus.stores.local import LeanLocalStore, write_file_atomically
from accumulus.stores.opening import open_store
from accumulus.stores.safe_reads import StoreReadError


def _buffer(data: bytes):
    return default_buffer_prototype().buffer.from_bytes(data)


def test_paths_open_lean_stores(tmp_path):
    # So every test of a local cube reads and writes through it.
    (tmp_path / "cube").mkdir()
    store = open_store(tmp_path / "cube", "r+")
    while hasattr(store, "_store"):
        store = store._store
    assert type(store) is LeanLocalStore


def test_reads_and_writes_as_local_store_does(tmp_path):
    lean, plain = LeanLocalStore(tmp_path), LocalStore(tmp_path)
    lean.set_sync("a/b/c.0", _buffer(b"x" * 100_000))  # parents made
    assert plain.get_sync("a/b/c.0").to_bytes() == b"x" * 100_000
    plain.set_sync("d", _buffer(b"plain"))
    assert lean.get_sync("d").to_bytes() == b"plain"
    assert lean.get_sync("missing") is None and lean.get_sync("d/under-a-file") is None
    assert lean.get_sync("a") is None  # a directory, as LocalStore answers
    assert lean.get_sync("a/b/c.0", byte_range=None).to_bytes()[:3] == b"xxx"
    assert sorted(os.listdir(tmp_path / "a" / "b")) == ["c.0"]  # no temporary file left


def test_a_files_version_is_that_of_the_file_under_the_root_now(tmp_path):
    """``version_sync`` (one ``stat``) names the file at the key under the store's root,
    also after the store was moved (``LocalStore.move``); None for a missing key or a
    directory."""
    lean = LeanLocalStore(tmp_path / "a")
    lean.set_sync("g/c.0", _buffer(b"x" * 10))
    before = lean.version_sync("g/c.0")
    assert before is not None and before.size == 10
    assert lean.version_sync("missing") is None and lean.version_sync("g") is None
    sync(lean.move(tmp_path / "b"))
    (tmp_path / "a").mkdir()  # the old root again, holding another file at the key
    LeanLocalStore(tmp_path / "a").set_sync("g/c.0", _buffer(b"y" * 20))
    moved = lean.version_sync("g/c.0")
    assert moved is not None and moved.size == 10
    assert moved.inode == os.stat(tmp_path / "b" / "g" / "c.0").st_ino


def test_a_fifo_is_refused_not_waited_on(tmp_path):
    lean = LeanLocalStore(tmp_path)
    lean.set_sync("zarr.json", _buffer(b"{}"))
    os.mkfifo(tmp_path / "0.0")
    done = []
    reader = threading.Thread(target=lambda: done.append(_refusal(lean, "0.0")), daemon=True)
    reader.start()
    reader.join(5)
    assert done == ["cannot read 0.0: it is not a regular file"]


def _refusal(store: LeanLocalStore, key: str) -> str:
    with pytest.raises(StoreReadError) as refused:
        store.get_sync(key)
    return str(refused.value)


def test_a_failed_write_leaves_the_old_object(tmp_path, monkeypatch):
    target = tmp_path / "0.0"
    write_file_atomically(str(target), b"old")

    def failing_write(fd, data):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "write", failing_write)
    with pytest.raises(OSError, match="No space"):
        write_file_atomically(str(target), b"new")
    monkeypatch.undo()
    assert target.read_bytes() == b"old" and os.listdir(tmp_path) == ["0.0"]


def test_a_group_nobody_reads_yet_is_written_in_place(tmp_path, monkeypatch):
    """``unpublished``: objects under the group's path (seen through wrappers that keep
    keys, or through one that prefixes them) are written in place, and only while in it;
    objects elsewhere, and writes through a wrapper that changes them, stay atomic."""
    from accumulus.stores import local
    from accumulus.stores.counting import CountingStore
    from accumulus.stores.group import GroupStore

    in_place: list[str] = []
    write_file = local.write_file
    monkeypatch.setattr(local, "write_file", lambda path, data: in_place.append(path))
    lean = LeanLocalStore(tmp_path)
    lean.set_sync("opened", _buffer(b""))  # the first write opens the store
    prefixed = GroupStore(lean, "cube")
    with local.unpublished(prefixed, "g_accumulation_group"):
        prefixed.set_sync("g_accumulation_group/a/0.0.0", _buffer(b"new"))
        prefixed.set_sync("g_accumulation_group_other/0", _buffer(b"published"))
        lean.set_sync("g_accumulation_group/0", _buffer(b"another group"))
    prefixed.set_sync("g_accumulation_group/a/1.0.0", _buffer(b"after"))
    assert in_place == [str(tmp_path / "cube/g_accumulation_group/a/0.0.0")]
    assert (tmp_path / "cube/g_accumulation_group_other/0").read_bytes() == b"published"
    assert (tmp_path / "g_accumulation_group/0").read_bytes() == b"another group"
    assert lean._unpublished == ()
    assert local.unpublished(CountingStore(lean), "g").__class__.__name__ == "nullcontext"

    monkeypatch.setattr(local, "write_file", write_file)
    with local.unpublished(lean, "g"):
        lean.set_sync("g/a/0", _buffer(b"x" * 100_000))  # parents made
        lean.set_sync("g/a/0", _buffer(b"shorter"))  # replaced whole
    assert (tmp_path / "g/a/0").read_bytes() == b"shorter"
    assert sorted(os.listdir(tmp_path / "g/a")) == ["0"]  # no temporary file
