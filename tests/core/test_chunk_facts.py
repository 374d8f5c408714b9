"""What ``chunk_reader`` works out once per chunk (``ChunkRequest.spans``, ``.key``) and once
per array object (``_ArrayFacts``: where its chunks' keys begin) is what each use worked out
again before: a chunk's key is zarr's own, also after the array is resized, and the byte
spans of its parts are ``partial_decode.byte_span`` of each part."""

from __future__ import annotations

from math import prod

import numpy as np
import pytest
import zarr
from hypothesis import given, settings
from hypothesis import strategies as st

from accumulus import chunk_reader
from accumulus.chunk_reader import ChunkRequest, PartReads, decoded_in_part
from accumulus.partial_decode import blosc_chain, byte_span

LAYOUTS = {
    "v2 dots": dict(zarr_format=2, chunk_key_encoding={"name": "v2", "separator": "."}),
    "v2 slashes": dict(zarr_format=2, chunk_key_encoding={"name": "v2", "separator": "/"}),
    "v3": dict(zarr_format=3),
    "v3 sharded": dict(zarr_format=3, shards=(4, 6)),
}


def zarr_key(array: zarr.Array, coords: tuple[int, ...]) -> str:
    """The key zarr itself stores the chunk at ``coords`` under (its shard's, when sharded)."""
    metadata = array.metadata
    if array.shards is not None:
        shards = zip(coords, array.chunks, array.shards, strict=True)
        coords = tuple(c * n // s for c, n, s in shards)
    key = metadata.encode_chunk_key(coords)
    return f"{array.path}/{key}" if array.path else key


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_chunk_keys_are_zarrs_own(tmp_path, layout):
    settings_ = dict(LAYOUTS[layout])
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=settings_.pop("zarr_format"))
    array = root.create_array("a", shape=(10, 12), chunks=(2, 3), dtype="f4", **settings_)
    for coords in [(0, 0), (4, 3), (1, 2), (3, 1)] * 2:  # the second time remembered
        request = ChunkRequest(array, coords)
        assert request.store_key == zarr_key(array, coords)
        if array.shards is None:
            assert request.key == request.store_key
        else:
            assert request.key.startswith(request.store_key + "[")
    at_root = zarr.create_array(tmp_path / "r.zarr", shape=(4,), chunks=(2,), dtype="f4")
    assert ChunkRequest(at_root, (1,)).key == zarr_key(at_root, (1,))  # no leading "/"


def test_a_resized_array_is_known_by_its_new_metadata(tmp_path):
    array = zarr.create_array(tmp_path / "a.zarr", shape=(4, 6), chunks=(2, 3), dtype="f8")
    array[...] = np.arange(24.0).reshape(4, 6)
    before = chunk_reader._facts(array)
    array.resize((6, 6))
    after = chunk_reader._facts(array)
    assert after is not before and after.metadata is array.metadata
    assert after.grids.grid_shape == (3, 2)
    assert ChunkRequest(array, (2, 1)).key == zarr_key(array, (2, 1))


def region(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[slice, ...]]:
    """A box of a chunk of ``shape``, empty at times."""
    return st.tuples(
        *(
            st.tuples(st.integers(0, n), st.integers(0, n)).map(lambda ab: slice(min(ab), max(ab)))
            for n in shape
        )
    )


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_the_spans_of_a_chunks_parts_are_each_parts_byte_span(data):
    shape = data.draw(st.tuples(*(st.integers(1, 7) for _ in range(data.draw(st.integers(1, 3))))))
    dtype = data.draw(st.sampled_from(["<f4", "<f8", "<u2"]))
    array = zarr.create_array({}, shape=shape, chunks=shape, dtype=dtype)
    parts = data.draw(st.lists(region(shape), min_size=1, max_size=4))
    if len(parts) == 1:
        request = ChunkRequest(array, (0,) * len(shape), needed=parts[0])
    else:
        request = ChunkRequest(array, (0,) * len(shape), needed=parts[0], regions=tuple(parts))
    itemsize = np.dtype(dtype).itemsize
    spans, values = request.spans
    want = [byte_span(part, shape, itemsize) for part in parts]
    assert list(spans) == [span for span in want if span is not None]
    assert values == sum(prod(s.stop - s.start for s in part) for part in parts)


def test_a_whole_chunk_is_one_span(tmp_path):
    array = zarr.create_array(tmp_path / "a.zarr", shape=(8, 5), chunks=(4, 5), dtype="f8")
    assert ChunkRequest(array, (1, 0)).spans == (((0, 4 * 5 * 8),), 20)


def test_the_planner_reads_the_decoded_bytes_from_the_spans(tmp_path):
    """``decoded_in_part``: each part's span rounded out to whole Blosc blocks, blocks two
    parts share counted once."""
    array = zarr.create_array(
        tmp_path / "a.zarr", shape=(64, 512), chunks=(64, 512), dtype="<f8",
        compressors=zarr.codecs.BloscCodec(cname="lz4"),
    )  # fmt: skip
    chain = blosc_chain(array.metadata)
    assert chain is not None
    block = 4096  # read in the calling thread, Blosc blocks of 4096 bytes
    reads = PartReads(chain, block, header_first=False, shape=(64, 512), itemsize=8)
    two_rows = (slice(10, 12), slice(0, 512))
    request = ChunkRequest(array, (0, 0), needed=two_rows)
    first, stop = request.spans[0][0]
    assert decoded_in_part(request, reads) == (
        -(-stop // block) * block - first // block * block,
        2 * 512,
    )
    # A second part within the same blocks adds its values, not its blocks.
    both = ChunkRequest(
        array, (0, 0), needed=(slice(10, 13), slice(0, 512)),
        regions=(two_rows, (slice(11, 12), slice(0, 512))),
    )  # fmt: skip
    assert decoded_in_part(both, reads) == (decoded_in_part(request, reads)[0], 3 * 512)


FACTS = ("spec", "nbytes", "partly", "spans", "key", "store_key")


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_a_batchs_requests_know_what_each_request_works_out(tmp_path, layout):
    """``ChunkRequests`` works out once what chunks of one array share; each request it makes
    holds the facts a request made alone works out, the same parts at many chunks included,
    on a grid whose last chunks are short."""
    settings_ = dict(LAYOUTS[layout])
    root = zarr.open_group(tmp_path / "g.zarr", mode="w", zarr_format=settings_.pop("zarr_format"))
    array = root.create_array("a", shape=(11, 12), chunks=(4, 6), dtype="f4", **settings_)
    counts = root.create_array("n", shape=(11, 12), chunks=(4, 6), dtype="u2", **settings_)
    parts: list[tuple[tuple[slice, ...] | None, tuple[tuple[slice, ...], ...] | None]] = [
        (None, None),
        ((slice(0, 2), slice(1, 3)), None),
        ((slice(0, 4), slice(0, 6)), None),
        ((slice(0, 4), slice(1, 5)), ((slice(0, 1), slice(1, 5)), (slice(3, 4), slice(1, 5)))),
    ]
    requests = chunk_reader.ChunkRequests()
    for target in (array, counts):
        for coords in [(0, 0), (2, 1), (1, 0), (2, 0)]:
            for needed, regions in parts:
                made = requests.request(target, coords, None, needed, regions)
                alone = ChunkRequest(target, coords, None, needed, regions)
                assert made == alone
                for fact in FACTS:
                    assert getattr(made, fact) == getattr(alone, fact), (fact, coords, needed)
