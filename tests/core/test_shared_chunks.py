"""Decoded chunks shared by processes as files in memory (``shared_chunks``): what one
process keeps another reads; served only for the same version, shape and dtype; the byte
limit held by all of them; a corrupt or vanished entry a miss; the directory removed when
its service stops."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from accumulus import shared_chunks
from accumulus.shared_chunks import HEADER_BYTES, SharedChunks, shared_directory
from accumulus.stores.safe_reads import FileVersion

F8 = np.dtype("<f8")


def _version(inode: int, changed: int = 1) -> FileVersion:
    return FileVersion(1, inode, 100, 1, changed)


def _entries(directory: Path) -> list[Path]:
    return [p for p in directory.iterdir() if not p.name.startswith(".")]


def _in_another_process(directory: Path, code: str) -> str:
    """What ``code`` prints, run in a new Python process with ``store``, a ``SharedChunks``
    of ``directory``, and ``version`` (as ``_version``) defined."""
    prelude = f"""
        import numpy as np
        from pathlib import Path
        from accumulus.shared_chunks import SharedChunks
        from accumulus.stores.safe_reads import FileVersion
        store = SharedChunks(Path({str(directory)!r}), 10**6)
        def version(inode, changed=1):
            return FileVersion(1, inode, 100, 1, changed)
    """
    script = textwrap.dedent(prelude) + textwrap.dedent(code)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_what_one_process_keeps_another_reads(tmp_path):
    store = SharedChunks(tmp_path, 10**6)
    store.put(_version(1), np.arange(12.0).reshape(3, 4))
    printed = _in_another_process(
        tmp_path,
        """
        values = store.get(version(1), ((3, 4),), np.dtype("<f8"))
        print(values.sum(), values.flags.writeable)
        store.put(version(2), np.arange(5, dtype="<u2"))
        """,
    )
    assert printed == "66.0 False"
    values = store.get(_version(2), ((5,),), np.dtype("<u2"))
    assert values is not None
    np.testing.assert_array_equal(values, np.arange(5))
    assert store.held == 2 * HEADER_BYTES + 12 * 8 + 5 * 2


def test_served_only_for_the_same_version_shape_and_type(tmp_path):
    store = SharedChunks(tmp_path, 10**6)
    values = np.arange(100, dtype=F8)
    store.put(_version(1), values)
    got = store.get(_version(1), ((50,), (100,)), F8)
    assert got is not None and not got.flags.writeable
    np.testing.assert_array_equal(got, values)
    assert store.get(_version(1, changed=2), ((100,),), F8) is None  # rewritten
    assert store.get(_version(2), ((100,),), F8) is None  # another file
    assert store.get(_version(1), ((10, 10),), F8) is None
    assert store.get(_version(1), ((100,),), np.dtype("<f4")) is None
    # Kept again (another shape of the same version), it replaces the entry.
    store.put(_version(1), values[:50])
    assert store.held == HEADER_BYTES + 400
    assert store.get(_version(1), ((50,),), F8) is not None
    assert store.errors == 0


def test_the_byte_limit_holds_for_all_processes(tmp_path):
    """Two processes keep chunks at once; the entries never hold more than the limit, the
    least recently used dropped first, and their count is the entries' bytes."""
    entry = HEADER_BYTES + 8 * 1000
    limit = 20 * entry
    store = SharedChunks(tmp_path, limit)
    other = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import numpy as np
                from pathlib import Path
                from accumulus.shared_chunks import SharedChunks
                from accumulus.stores.safe_reads import FileVersion
                store = SharedChunks(Path({str(tmp_path)!r}), {limit})
                for inode in range(1000, 1200):
                    store.put(FileVersion(1, inode, 100, 1, 1), np.zeros(1000))
                assert store.errors == 0
            """),
        ]
    )
    for inode in range(200):
        store.put(_version(inode), np.zeros(1000))
        assert sum(p.stat().st_size for p in _entries(tmp_path)) <= limit
    assert other.wait(60) == 0
    sizes = [p.stat().st_size for p in _entries(tmp_path)]
    assert sum(sizes) == store.held <= limit and set(sizes) == {entry}
    # The one read last is the last dropped.
    kept = _entries(tmp_path)[0].name
    inode = int(kept.split("-")[1], 16)
    os.utime(tmp_path / kept, ns=(0, 0))
    assert store.get(FileVersion(1, inode, 100, 1, 1), ((1000,),), F8) is not None
    for inode in range(300, 310):  # fewer than the entries kept: an eviction or two
        store.put(_version(inode), np.zeros(1000))
    assert (tmp_path / kept).exists()
    store.set_limit(3 * entry)
    assert store.held == sum(p.stat().st_size for p in _entries(tmp_path)) <= 3 * entry
    # The entries this process mapped and another dropped are unmapped at its next read.
    other = SharedChunks(tmp_path, 3 * entry)
    other.put(_version(500), np.zeros(1000))
    store.get(_version(500), ((1000,),), F8)
    assert set(store._mapped) <= {p.name for p in _entries(tmp_path)}
    store.put(_version(400), np.zeros(4000))  # larger than the limit: not kept
    assert store.held <= 3 * entry and store.errors == 0


@pytest.mark.parametrize(
    "damage",
    [
        lambda path: path.write_bytes(path.read_bytes()[:-8]),  # cut
        lambda path: path.write_bytes(b"x" * path.stat().st_size),  # not an entry
        lambda path: path.write_bytes(b""),
    ],
)
@pytest.mark.parametrize("mapped", [False, True])
def test_a_corrupt_entry_is_a_miss_and_dropped(tmp_path, damage, mapped):
    """Damaged in place, before or after this process mapped it: not read (a mapping's
    pages past a cut file's end cannot be read), dropped, kept again."""
    store = SharedChunks(tmp_path, 10**6)
    store.put(_version(1), np.arange(100, dtype=F8))
    if mapped:
        assert store.get(_version(1), ((100,),), F8) is not None
    (path,) = _entries(tmp_path)
    damage(path)
    assert store.get(_version(1), ((100,),), F8) is None
    assert store.errors == 1 and not path.exists() and store.held == 0
    store.put(_version(1), np.arange(100, dtype=F8))  # kept again
    assert store.get(_version(1), ((100,),), F8) is not None


def test_a_vanished_store_is_a_miss(tmp_path):
    directory = tmp_path / "shared"
    directory.mkdir()
    store = SharedChunks(directory, 10**6)
    store.put(_version(1), np.arange(100, dtype=F8))
    for path in _entries(directory):
        path.unlink()
    assert store.get(_version(1), ((100,),), F8) is None
    for path in directory.iterdir():
        path.unlink()
    directory.rmdir()
    store.put(_version(2), np.arange(100, dtype=F8))  # cannot be written: not kept
    assert store.get(_version(2), ((100,),), F8) is None
    assert store.errors == 1
    assert SharedChunks.opened(directory, 10**6) is None


def test_the_directory_is_removed_when_the_service_stops(tmp_path, monkeypatch):
    """Made for the workers, removed on exit; one left by a process that no longer runs is
    removed by the next service; without room for the limit, none (each worker keeps its
    own)."""
    monkeypatch.setattr(shared_chunks, "MEMORY_FILES", tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    abandoned = tmp_path / f"{shared_chunks.DIRECTORY_PREFIX}{gone}-x"
    abandoned.mkdir()
    (abandoned / "entry").write_bytes(b"1")
    with shared_directory(10**6) as directory:
        assert directory is not None and directory.parent == tmp_path
        assert not abandoned.exists()
        SharedChunks(directory, 10**6).put(_version(1), np.zeros(10))
    assert not directory.exists()
    with shared_directory(2**62) as directory:
        assert directory is None


def test_a_limit_raised_past_the_room_of_the_file_system_is_held_to_that_room(
    tmp_path, monkeypatch, caplog
):
    """The default limit follows the archive as it grows (``serve``): raised past what the
    file system in memory can still hold, it is held to that room (what is kept counts as
    room), so the entries never fill it; said in the log."""
    entry = HEADER_BYTES + 8 * 1000
    store = SharedChunks(tmp_path, 10 * entry)
    for inode in range(4):
        store.put(_version(inode), np.zeros(1000))
    free = 3 * entry
    usage = shared_chunks.shutil.disk_usage(tmp_path)
    monkeypatch.setattr(shared_chunks.shutil, "disk_usage", lambda path: usage._replace(free=free))
    store.set_limit(100 * entry)
    assert store.limit == 7 * entry  # the 4 entries kept and the room for 3 more
    assert "room for" in caplog.text
    for inode in range(10, 30):
        store.put(_version(inode), np.zeros(1000))
    assert store.held == sum(p.stat().st_size for p in _entries(tmp_path)) <= 7 * entry
    store.set_limit(2 * entry)  # within the room: as asked, the oldest dropped
    assert store.limit == 2 * entry and store.held <= 2 * entry and store.errors == 0
