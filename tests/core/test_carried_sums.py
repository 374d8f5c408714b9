"""Slabs continue the running sums the slab before left along the batch dimension
(``stream._Work.carried``): where entries end inside raw chunks (``--at time=5``,
``time=month+2``, ZEP 5 strides longer than a slab), a build reads each raw chunk once, and
writes byte for byte the group a build in one slab writes; answers equal xarray's."""

from __future__ import annotations

import shutil
import time
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

import accumulus
from accumulus.accumulation.build import stream
from accumulus.stores.counting import CountingStore
from accumulus.stores.keys import is_metadata_key
from accumulus.stores.opening import open_store
from cubes import VAR, synthetic_dataset, write_cube, xarray_reference


class KeysRead(CountingStore):
    """Counts how many times each key is read (``CountingStore`` keeps the last read)."""

    def __init__(self, store) -> None:
        super().__init__(store)
        self.times_read: Counter[str] = Counter()

    def _count_read(self, key, value) -> None:
        super()._count_read(key, value)
        self.times_read[key] += 1


def _files(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and ".accumulus" not in p.parts
    }


EVERY_CELL = {"time": "month+2", "lat": 1, "lon": 1}
LAYOUTS = {
    "every 5 days": ([("time",)], {"at": {"time": 5}}),
    "month+2 and every cell": ([("time",), ("lat", "lon")], {"at": EVERY_CELL}),
    "chunk ends every 3 chunks": (None, {"strides": {"time": 3}}),
    "variance, month+2": ([("time",)], {"at": {"time": "month+2"}, "stats": ["var"]}),
}  # fmt: skip


@pytest.mark.parametrize("layout", LAYOUTS)
def test_each_raw_chunk_is_read_once_and_the_group_is_the_one_slab_build(
    tmp_path, monkeypatch, layout
):
    dims, options = LAYOUTS[layout]
    full = synthetic_dataset({"time": 100, "lat": 6, "lon": 8}, seed=11)
    cube = tmp_path / "cube.zarr"
    write_cube(full, cube, {"time": 7, "lat": 6, "lon": 8})
    whole = tmp_path / "whole.zarr"
    shutil.copytree(cube, whole)
    accumulus.accumulate(str(whole), VAR, dims, **options)

    # Slabs of one raw chunk (7 days): entries every 5 days, at month ends and every 2
    # days, or every 21 days end inside slabs and chunks.
    monkeypatch.setattr(stream, "SLAB_BYTES", 1)
    monkeypatch.setattr(stream, "SUMS_BYTES", 1)
    # Every slab's sums are kept to be filled again, and writes lag behind: a write made
    # from sums given back too early stores a later slab's entries.
    monkeypatch.setattr(stream, "KEPT_LEAST_BYTES", 0)
    write_row = stream._Writer._write_row

    def slow_write(self, name, row):
        time.sleep(0.02)
        write_row(self, name, row)

    monkeypatch.setattr(stream._Writer, "_write_row", slow_write)
    counting = KeysRead(open_store(cube, "r+"))
    accumulus.accumulate(counting, VAR, dims, **options)

    raw = {k: n for k, n in counting.times_read.items() if k.startswith(f"{VAR}/")}
    raw = {k: n for k, n in raw.items() if not is_metadata_key(k)}
    if "stats" in options:  # the first raw chunk gives the sums of squares their centre
        raw[f"{VAR}/0.0.0"] -= 1
    assert len(raw) == 15  # every raw chunk, each once
    assert set(raw.values()) == {1}, raw
    # Arrays chunked alike hold the same bytes (series are chunked by the slab's length
    # along time, placement.chunks), and every array along time is chunked alike.
    group = f"{VAR}_accumulation_group"
    sliced, one_slab = _files(cube / group), _files(whole / group)
    alike = {
        Path(key).parent
        for key, data in sliced.items()
        if Path(key).name == ".zarray" and one_slab.get(key) == data
    }
    assert any("time" in array.name for array in alike)
    assert all("time" not in k or Path(k).parent in alike for k in sliced)
    for key in sliced:
        if Path(key).parent in alike:
            assert sliced[key] == one_slab[key], key

    for start, stop in [(3, 58), (0, 99), (41, 43), (64, 90)]:
        period = tuple(str(full.time.values[i])[:10] for i in (start, stop))
        got = accumulus.query(str(cube), VAR, "time", {"time": period}, plan="accumulation")
        if stop - start > 42:  # spans two entries of every layout
            assert got.stats.accumulation_chunks_read > 0
        data = full[VAR].isel(time=slice(start, stop + 1))
        expected = xarray_reference(data, ["time"], "area", "mean")
        np.testing.assert_allclose(np.asarray(got.data), expected.values, rtol=1e-9)
