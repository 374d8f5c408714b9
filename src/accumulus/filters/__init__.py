"""HDF5 filters ↔ Zarr codecs (the NCZarr filter design, seed 004).

``hdf5_to_codec(32015, [5]) == {"id": "zstd", "level": 5}`` and
``codec_to_hdf5({"id": "zstd", "level": 5}) == (32015, (5,))``; chains map between an HDF5
pipeline and Zarr v2/v3 codecs; ``pairing_table()`` says which filters are usable here.
"""

from accumulus.filters.base import ArrayLayout, CodecConfig, CodecSide, FilterError, HDF5Side
from accumulus.filters.chain import (
    HDF5Filter,
    V3Codecs,
    codecs_to_pipeline,
    dataset_pipeline,
    decode_chunk,
    encode_chunk,
    for_array,
    join_v2,
    join_v3,
    numcodecs_codec,
    pipeline_to_codecs,
    split_v2,
    v3_codecs,
)
from accumulus.filters.registry import (
    ENTRY_POINT_GROUP,
    FilterPair,
    FilterRegistry,
    codec_to_hdf5,
    default_registry,
    hdf5_to_codec,
    pairing_table,
    refresh_registry,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "ArrayLayout",
    "CodecConfig",
    "CodecSide",
    "FilterError",
    "FilterPair",
    "FilterRegistry",
    "HDF5Filter",
    "HDF5Side",
    "V3Codecs",
    "codec_to_hdf5",
    "codecs_to_pipeline",
    "dataset_pipeline",
    "decode_chunk",
    "default_registry",
    "encode_chunk",
    "for_array",
    "hdf5_to_codec",
    "join_v2",
    "join_v3",
    "numcodecs_codec",
    "pairing_table",
    "pipeline_to_codecs",
    "refresh_registry",
    "split_v2",
    "v3_codecs",
]
