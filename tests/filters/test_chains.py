"""Chains on real chunks: bytes HDF5 wrote decode with the mapped codecs (reverse order),
bytes the codecs write decode in HDF5, and chains land in the right Zarr v2/v3 slots."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
import zarr

from accumulus.filters import (
    FilterError,
    HDF5Filter,
    codecs_to_pipeline,
    dataset_pipeline,
    decode_chunk,
    default_registry,
    encode_chunk,
    for_array,
    join_v2,
    join_v3,
    pipeline_to_codecs,
    split_v2,
    v3_codecs,
)

from .samples import CHUNKS, HDF5_FILTERS, sample


def _codecs_for(dataset: h5py.Dataset) -> list[dict]:
    return for_array(
        pipeline_to_codecs(dataset_pipeline(dataset)), dataset.dtype, dataset.shape, dataset.chunks
    )


@pytest.mark.parametrize("name", HDF5_FILTERS)
def test_hdf5_chunks_decode_with_mapped_codecs(hdf5_file, name):
    with h5py.File(hdf5_file) as file:
        dataset = file[name]
        configs = _codecs_for(dataset)
        same_bytes = all(
            default_registry().codec_side(s.hdf5_id).same_bytes for s in dataset_pipeline(dataset)
        )
        mask, raw = dataset.id.read_direct_chunk((12, 5))
        assert mask == 0  # every filter ran on this chunk
        expected = sample()[12:24, 5:10]
        if same_bytes:
            decoded = decode_chunk(raw, configs, dataset.dtype, CHUNKS)
            np.testing.assert_array_equal(decoded, expected)
        else:  # lz4: the declared difference is real
            with pytest.raises(FilterError):
                np.testing.assert_array_equal(
                    decode_chunk(raw, configs, dataset.dtype, CHUNKS), expected
                )


ROUND_TRIP = [name for name in HDF5_FILTERS if name != "lz4"]  # lz4: not the same bytes


@pytest.mark.parametrize("name", ROUND_TRIP)
def test_codec_chunks_decode_in_hdf5(tmp_path, name):
    """Encode with numcodecs, store the bytes raw in an HDF5 dataset with the same filters,
    and let HDF5 decode them."""
    data = sample(CHUNKS, "f4") * 3.5
    with h5py.File(tmp_path / "out.h5", "w") as file:
        dataset = file.create_dataset(
            "v", shape=CHUNKS, dtype="f4", chunks=CHUNKS, **HDF5_FILTERS[name]
        )
        configs = _codecs_for(dataset)
        dataset.id.write_direct_chunk((0, 0), encode_chunk(data, configs))
        np.testing.assert_array_equal(dataset[...], data)


def test_chain_order_is_kept_and_decoding_reverses_it(hdf5_file):
    with h5py.File(hdf5_file) as file:
        dataset = file["shuffle_deflate_fletcher32"]
        configs = _codecs_for(dataset)
        assert [c["id"] for c in configs] == ["shuffle", "zlib", "fletcher32"]
        _, raw = dataset.id.read_direct_chunk((0, 0))
    # Decoding in the wrong order fails: fletcher32 must be undone first.
    with pytest.raises(FilterError, match="'shuffle' cannot decode"):
        decode_chunk(raw, list(reversed(configs)), "f4", CHUNKS)
    # Back to HDF5: user-form parameters, same order.
    assert codecs_to_pipeline(configs) == [
        HDF5Filter(2, (4,), "shuffle"),
        HDF5Filter(1, (4,), "deflate"),
        HDF5Filter(3, (), "fletcher32"),
    ]


def test_v2_split_puts_the_last_filter_in_compressor():
    chain = [{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 4}, {"id": "fletcher32"}]
    filters, compressor = split_v2(chain)
    assert filters == chain[:2] and compressor == {"id": "fletcher32"}
    assert join_v2(filters, compressor) == chain
    assert split_v2([{"id": "zstd", "level": 1}]) == (None, {"id": "zstd", "level": 1})
    assert split_v2([]) == (None, None)


def test_v3_places_codecs_by_kind_and_reads_back(tmp_path):
    chain = [
        {"id": "delta", "dtype": "<f4"},  # array→array (numcodecs only, no HDF5 filter)
        {"id": "shuffle", "elementsize": 4},
        {"id": "zstd", "level": 3},
    ]
    codecs = v3_codecs(chain)
    assert [type(c).__name__ for c in codecs.filters] == ["Delta"]
    assert codecs.serializer == "auto"
    assert [type(c).__name__ for c in codecs.compressors] == ["Shuffle", "Zstd"]
    array = zarr.create_array(
        tmp_path / "a.zarr",
        shape=(24,),
        chunks=(12,),
        dtype="f4",
        filters=codecs.filters,
        serializer=codecs.serializer,
        compressors=codecs.compressors,
    )
    array[:] = np.arange(24, dtype="f4")
    written = array.metadata.to_dict()["codecs"]
    assert [c["name"] for c in written] == [
        "numcodecs.delta",
        "bytes",
        "numcodecs.shuffle",
        "numcodecs.zstd",
    ]
    assert join_v3(written) == chain
    np.testing.assert_array_equal(zarr.open_array(tmp_path / "a.zarr")[:], np.arange(24))


def test_v3_rejects_array_codec_after_bytes_codec():
    with pytest.raises(FilterError, match="'delta' is array→array but follows"):
        v3_codecs([{"id": "zstd", "level": 1}, {"id": "delta", "dtype": "<f4"}])


def test_v3_reads_zarr_native_codecs():
    native = [
        {"name": "bytes", "configuration": {"endian": "little"}},
        {
            "name": "blosc",
            "configuration": {"cname": "lz4", "clevel": 5, "shuffle": "shuffle", "typesize": 4},
        },
        {"name": "zstd", "configuration": {"level": 0, "checksum": False}},
    ]
    assert join_v3(native) == [
        {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0},
        {"id": "zstd", "level": 0, "checksum": False},
    ]
    with pytest.raises(FilterError, match="'gzip' has no HDF5 filter counterpart"):
        join_v3([{"name": "gzip", "configuration": {"level": 1}}])


def test_corrupt_chunk_names_the_codec(hdf5_file):
    with h5py.File(hdf5_file) as file:
        dataset = file["zstd"]
        configs = _codecs_for(dataset)
        _, raw = dataset.id.read_direct_chunk((0, 0))
    corrupt = raw[:8] + bytes(len(raw) - 8)
    with pytest.raises(FilterError, match="codec 'zstd' cannot decode the chunk"):
        decode_chunk(corrupt, configs, "f4", CHUNKS)


def test_shuffle_element_size_is_resolved_for_the_dtype():
    assert for_array([{"id": "shuffle", "elementsize": 0}], "f8") == [
        {"id": "shuffle", "elementsize": 8}
    ]
    assert for_array([{"id": "shuffle", "elementsize": 2}], "f8") == [
        {"id": "shuffle", "elementsize": 2}
    ]
    assert for_array([{"id": "lzma"}], "f8") == [{"id": "lzma"}]  # no HDF5 mapping: as is
