"""``chunk_work`` keeps one ``ChunkRequests`` per snapshot's groups, so that each plan does
not work out an array's facts again: the requests it makes for a later plan, and after the
array is resized, are the requests a fresh one makes (each request's facts as it would work
them out alone)."""

from __future__ import annotations

import numpy as np
import zarr

from accumulus.chunk_reader import ChunkRequest, ChunkRequests

FACTS = ("key", "store_key", "spec", "nbytes", "partly")


def alone(request: ChunkRequest) -> ChunkRequest:
    """The same request, its facts worked out by itself."""
    return ChunkRequest(
        request.array, request.coords, request.store, request.needed, request.regions,
        request.keep, request.derive,
    )  # fmt: skip


def same(kept: ChunkRequest, fresh: ChunkRequest) -> None:
    for fact in FACTS:
        assert getattr(kept, fact) == getattr(fresh, fact), fact
    if fresh.partly:
        assert kept.spans == fresh.spans


def test_a_kept_batch_maker_makes_a_fresh_ones_requests(tmp_path):
    array = zarr.create_array(tmp_path / "a.zarr", shape=(8, 6), chunks=(2, 3), dtype="f8")
    array[...] = np.arange(48.0).reshape(8, 6)
    other = zarr.create_array(tmp_path / "b.zarr", shape=(5,), chunks=(2,), dtype="i4")
    kept = ChunkRequests()
    plans = [
        [(array, (0, 0), (slice(0, 1), slice(0, 3))), (other, (2,), None)],
        [(array, (3, 1), (slice(1, 2), slice(0, 2))), (other, (0,), (slice(0, 1),))],
    ]
    for plan in plans:
        for target, coords, needed in plan:
            made = kept.request(target, coords, None, needed, None, True)
            same(made, alone(made))
    array.resize((12, 6))  # (an array appended to in place: chunks past its old end)
    for coords in [(5, 0), (3, 1)]:
        made = kept.request(array, coords, None, (slice(0, 1), slice(0, 3)), None, True)
        same(made, alone(made))
