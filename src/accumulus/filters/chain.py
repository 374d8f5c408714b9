"""Filter chains: an HDF5 pipeline ↔ Zarr v2 filters + compressor ↔ Zarr v3 codecs.

An HDF5 pipeline (f1, ..., fn, c) encodes forward and decodes in reverse. Zarr v2 stores it as
``filters=[f1..fn]`` and ``compressor=c`` (the seed's rule: the last filter is the compressor,
whatever it is). Zarr v3 orders codecs by kind: array→array first, then exactly one
array→bytes (``bytes`` unless a codec serializes, as zfpy does), then bytes→bytes. Every HDF5
filter works on bytes, so a pipeline maps to ``[bytes, f1, ..., fn, c]``; codecs come from
``zarr.codecs.numcodecs`` (the maintained home of numcodecs' ``numcodecs.zarr3``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numcodecs
import numpy as np
from numcodecs.abc import Codec
from numcodecs.compat import ensure_bytes

from accumulus.filters.base import ArrayLayout, CodecConfig, FilterError
from accumulus.filters.registry import FilterRegistry, codec_registry, default_registry


@dataclass(frozen=True)
class HDF5Filter:
    """One stage of an HDF5 pipeline: the filter id and its unsigned-int parameters."""

    hdf5_id: int
    params: tuple[int, ...] = ()
    name: str = ""


@dataclass(frozen=True)
class V3Codecs:
    """A Zarr v3 codec list split as ``zarr.create_array`` takes it."""

    filters: tuple[Any, ...] = ()
    serializer: Any = "auto"
    compressors: tuple[Any, ...] = field(default_factory=tuple)


def dataset_pipeline(dataset: Any, registry: FilterRegistry | None = None) -> list[HDF5Filter]:
    """The filter pipeline of an h5py dataset, in encoding order, with stored parameters.
    Stages are named as the registry names them, else as HDF5 does."""
    registry = registry or default_registry()
    plist = dataset.id.get_create_plist()
    stages = []
    for index in range(plist.get_nfilters()):
        hdf5_id, _flags, params, hdf5_name = plist.get_filter(index)
        name = registry.filter_name(int(hdf5_id))
        if name == "unknown":
            name = hdf5_name.decode("utf-8", "replace").split(";", 1)[0].strip()
        stages.append(HDF5Filter(int(hdf5_id), tuple(int(p) for p in params), name))
    return stages


def pipeline_to_codecs(
    pipeline: Sequence[HDF5Filter], registry: FilterRegistry | None = None
) -> list[CodecConfig]:
    """Codec JSON for each stage, in encoding order."""
    registry = registry or default_registry()
    return [registry.hdf5_to_codec(stage.hdf5_id, stage.params) for stage in pipeline]


def codecs_to_pipeline(
    configs: Sequence[Mapping[str, Any]], registry: FilterRegistry | None = None
) -> list[HDF5Filter]:
    """The HDF5 pipeline (user-form parameters) for codec JSON in encoding order."""
    registry = registry or default_registry()
    stages = []
    for config in configs:
        hdf5_id, params = registry.codec_to_hdf5(config)
        stages.append(HDF5Filter(hdf5_id, params, registry.filter_name(hdf5_id)))
    return stages


def for_array(
    configs: Sequence[Mapping[str, Any]],
    dtype: Any,
    shape: Sequence[int] | None = None,
    chunks: Sequence[int] | None = None,
    registry: FilterRegistry | None = None,
) -> list[CodecConfig]:
    """Resolve parameters left to the array (shuffle's element size 0, szip's bits per pixel
    and scanline) for an array of ``dtype``, ``shape`` and ``chunks``. Codecs without an
    HDF5 mapping (any numcodecs codec) pass through unchanged."""
    registry = registry or codec_registry()
    layout = ArrayLayout(
        np.dtype(dtype),
        tuple(shape) if shape is not None else None,
        tuple(chunks) if chunks is not None else None,
    )
    resolved = []
    for config in configs:
        side = registry.find_codec_side(config["id"])  # numcodecs_codec checked every id
        resolved.append(side.for_array(dict(config), layout) if side else dict(config))
    return resolved


# Zarr v2 -------------------------------------------------------------------------------------


def split_v2(configs: Sequence[CodecConfig]) -> tuple[list[CodecConfig] | None, CodecConfig | None]:
    """(filters, compressor) for codecs in encoding order: the last one is the compressor."""
    if not configs:
        return None, None
    return (list(configs[:-1]) or None), configs[-1]


def join_v2(
    filters: Sequence[Mapping[str, Any]] | None, compressor: Mapping[str, Any] | None
) -> list[CodecConfig]:
    """Codecs in encoding order from a v2 ``.zarray``'s filters and compressor."""
    return [dict(f) for f in filters or ()] + ([dict(compressor)] if compressor else [])


def numcodecs_codec(config: Mapping[str, Any]) -> Codec:
    """A numcodecs codec for JSON, with numcodecs' own complaint turned into one line."""
    if not isinstance(config, Mapping) or not isinstance(config.get("id"), str):
        raise FilterError(f"codec JSON {config!r} has no string 'id'")
    try:
        return numcodecs.get_codec(dict(config))
    except TypeError as exc:  # unknown keyword arguments
        raise FilterError(
            f"codec {config['id']!r}: invalid parameters in {dict(config)}: {exc}"
        ) from None
    except Exception as exc:  # an unknown id (ValueError) or a codec whose library is missing
        if config["id"] not in numcodecs.registry.codec_registry | numcodecs.registry.entries:
            raise FilterError(f"no numcodecs codec named {config['id']!r} is installed") from None
        raise FilterError(f"codec {config['id']!r} cannot be used here: {exc}") from exc


# Zarr v3 -------------------------------------------------------------------------------------


def v3_codecs(configs: Sequence[Mapping[str, Any]]) -> V3Codecs:
    """zarr.codecs.numcodecs objects for codec JSON in encoding order, placed by kind."""
    from zarr.abc.codec import ArrayArrayCodec, ArrayBytesCodec, BytesBytesCodec
    from zarr.registry import get_codec_class

    filters: list[Any] = []
    serializer: Any = "auto"
    compressors: list[Any] = []
    for config in configs:
        numcodecs_codec(config)  # validate the JSON with numcodecs first, for a clear error
        name = f"numcodecs.{config['id']}"
        try:
            codec_class = get_codec_class(name)
        except (KeyError, ValueError):  # zarr >= 3.4 raises UnknownCodecError, a ValueError
            raise FilterError(
                f"codec {config['id']!r} has no Zarr v3 codec ({name!r} is not registered "
                "with zarr); write Zarr v2 instead"
            ) from None
        codec = codec_class(**{k: v for k, v in config.items() if k != "id"})
        if isinstance(codec, ArrayArrayCodec):
            if serializer != "auto" or compressors:
                raise FilterError(_order_error(config, "array→array", configs))
            filters.append(codec)
        elif isinstance(codec, ArrayBytesCodec):
            if serializer != "auto" or compressors:
                raise FilterError(_order_error(config, "array→bytes", configs))
            serializer = codec
        elif isinstance(codec, BytesBytesCodec):
            compressors.append(codec)
    return V3Codecs(tuple(filters), serializer, tuple(compressors))


def _order_error(config: Mapping[str, Any], kind: str, configs: Sequence[Any]) -> str:
    ids = [c.get("id") for c in configs]
    return (
        f"codec {config['id']!r} is {kind} but follows a later-stage codec in {ids}; Zarr v3 "
        "needs array→array codecs, then one array→bytes codec, then bytes→bytes codecs"
    )


def join_v3(codecs: Sequence[Mapping[str, Any]]) -> list[CodecConfig]:
    """Codec JSON in encoding order from a v3 ``zarr.json`` codec list. The ``bytes``
    serializer is dropped (HDF5 has no stage for it); zarr's own ``zstd`` and ``blosc``
    codecs are read as their numcodecs equivalents."""
    configs: list[CodecConfig] = []
    for codec in codecs:
        name = codec["name"]
        settings = dict(codec.get("configuration") or {})
        if name == "bytes":
            continue
        if name.startswith("numcodecs."):
            configs.append({"id": name.removeprefix("numcodecs."), **settings})
        elif name == "zstd":
            configs.append({"id": "zstd", **settings})
        elif name == "blosc":
            shuffle = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}[settings["shuffle"]]
            configs.append(
                {
                    "id": "blosc",
                    "cname": settings["cname"],
                    "clevel": settings["clevel"],
                    "shuffle": shuffle,
                    "blocksize": settings.get("blocksize", 0),
                }
            )
        else:
            raise FilterError(f"Zarr v3 codec {name!r} has no HDF5 filter counterpart")
    return configs


# Applying a chain to one chunk ---------------------------------------------------------------


def encode_chunk(data: np.ndarray, configs: Sequence[Mapping[str, Any]]) -> bytes:
    """Encode one chunk with codecs in encoding order (as an HDF5 pipeline would)."""
    buffer: Any = np.ascontiguousarray(data)
    for config in configs:
        buffer = numcodecs_codec(config).encode(buffer)
    return ensure_bytes(buffer)


def decode_chunk(
    data: bytes, configs: Sequence[Mapping[str, Any]], dtype: Any, shape: Sequence[int]
) -> np.ndarray:
    """Decode one chunk's bytes: the codecs run in reverse order."""
    buffer: Any = data
    for config in reversed(configs):
        try:
            buffer = numcodecs_codec(config).decode(buffer)
        except FilterError:
            raise
        except Exception as exc:  # codecs raise many kinds on corrupt input
            raise FilterError(f"codec {config['id']!r} cannot decode the chunk: {exc}") from exc
    return np.frombuffer(ensure_bytes(buffer), dtype).reshape(shape)
