"""Issue 19, part 3: an append that rewrites a shard keeps every inner chunk of the stored
shard at its offset, byte for byte (``stores/stable_shards.py``), for the raw arrays and for
the sharded accumulation arrays alike, so that a reader holding the old index reads right
values. Indexes are parsed here from the bytes (zarr's default index: little-endian
offset/length pairs and a crc32c, at the end), not with accumulus's or zarr's code."""

from __future__ import annotations

import itertools
import json
from math import prod
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

import accumulus

from .helpers import VAR, truth, write_granule

# Fine inner chunks: the accumulation arrays are sharded too.
CHUNKS = {"time": 1, "lat": 3, "lon": 2}
SHARDS = {"time": 6, "lat": 12, "lon": 8}
ABSENT = 2**64 - 1


def sharded_arrays(store: Path) -> dict[Path, int]:
    """Every sharded array under ``store``: its folder and inner chunks per shard."""
    found = {}
    for document in store.rglob("zarr.json"):
        meta = json.loads(document.read_text())
        codecs = meta.get("codecs") or [{}]
        if meta.get("node_type") != "array" or codecs[0].get("name") != "sharding_indexed":
            continue
        config = codecs[0]["configuration"]
        assert config.get("index_location", "end") == "end"
        assert [c["name"] for c in config["index_codecs"]] == ["bytes", "crc32c"]
        shard = meta["chunk_grid"]["configuration"]["chunk_shape"]
        found[document.parent] = prod(
            s // c for s, c in zip(shard, config["chunk_shape"], strict=True)
        )
    return found


def index(shard: bytes, inner: int) -> np.ndarray:
    """(offset, length) of each inner chunk of a shard; ABSENT for both when missing."""
    return np.frombuffer(shard[-(16 * inner + 4) : -4], "<u8").reshape(inner, 2)


def shards_of(store: Path) -> dict[Path, tuple[bytes, int]]:
    return {
        path: (path.read_bytes(), inner)
        for folder, inner in sharded_arrays(store).items()
        for path in (folder / "c").rglob("*")
        if path.is_file()
    }


@pytest.mark.slow  # end to end, tens of seconds: run by .ci/run
def test_appends_keep_every_stored_inner_chunk_at_its_offset(tmp_path):
    t = truth(40, nlat=12, nlon=8)
    store = tmp_path / "cube.zarr"
    first = write_granule(tmp_path / "g0.nc", t, 0, 13)
    accumulus.append(str(store), first, chunks=CHUNKS, shards=SHARDS)
    accumulus.accumulate(str(store), VAR, minimal=True)  # chunk ends: entries grow in place
    rewritten = set()
    # Appends of 1 to 4 steps: partial shards are rewritten, of the data and of the
    # accumulation arrays (whose chunks along time grow past the extent they were built at).
    cuts = [13, 14, 15, 17, 20, 21, 25, 26, 29, 33, 34, 40]
    for a, b in itertools.pairwise(cuts):
        before = shards_of(store)
        accumulus.append(str(store), write_granule(tmp_path / f"g{a}.nc", t, a, b))
        for path, (old, inner) in before.items():
            new = path.read_bytes()
            if new == old:
                continue
            rewritten.add(path.relative_to(store).parts[0])
            for offset, length in index(old, inner):
                if offset != ABSENT:
                    assert new[offset : offset + length] == old[offset : offset + length], path
    # The raw array's shards and accumulation arrays' shards were rewritten.
    assert VAR in rewritten and f"{VAR}_accumulation_group" in rewritten
    # Readers other than accumulus read the result as well.
    xr.testing.assert_allclose(xr.open_zarr(store)[VAR].load(), t.decoded()[VAR])
    assert all(report.ok for report in accumulus.verify(str(store)))


def test_dead_bytes_stay_within_two_versions_of_the_changing_inner_chunk(tmp_path):
    """One step per append into shards of 12 steps, inner chunks of 4 steps (the whole
    globe): each shard keeps, besides its inner chunks and index, at most two superseded
    versions of an inner chunk, however many appends it took to fill."""
    t = truth(36, nlat=12, nlon=16)
    store = tmp_path / "cube.zarr"
    first = write_granule(tmp_path / "g0.nc", t, 0, 1)
    accumulus.append(str(store), first, chunks={"time": 4}, shards={"time": 12})
    most = 0
    for step in range(1, 36):
        accumulus.append(str(store), write_granule(tmp_path / f"g{step}.nc", t, step, step + 1))
        for path, (data, inner) in shards_of(store / VAR).items():
            entries = index(data, inner)
            lengths = entries[entries[:, 0] != ABSENT, 1]
            dead = len(data) - int(lengths.sum()) - (16 * inner + 4)
            assert 0 <= dead <= 2 * int(lengths.max()), (step, path)
            most = max(most, dead)
    assert most > 0  # appends did leave superseded versions behind
    xr.testing.assert_allclose(xr.open_zarr(store)[VAR].load(), t.decoded()[VAR])
