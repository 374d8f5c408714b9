"""``accumulation_delta_filter``: the numcodecs filter of the ZEP 5 reference generator.

The NASA GES DISC generator stores some accumulation arrays as differences along the first
accumulated axis of each chunk: encode = difference along that axis, decode = cumulative sum.
Its configuration names ``accumulation_dimension`` (the accumulated dimensions, as indices
into the group's dimension order), ``accumulation_stride`` and
``accumulation_dim_order_idx`` (for each axis of the array, the index of its dimension).

A Zarr v2 filter's ``decode`` receives the flat bytes of a chunk, without its shape, so a
cumulative sum along one axis cannot be taken from the configuration alone. ``with_chunk_shape``
(applied when accumulus opens such an array) gives each filter instance the chunk shape and
dtype; the configuration written to ``.zarray`` stays the generator's three keys.

numcodecs (and so zarr) finds the codec through the ``numcodecs.codecs`` entry point in
``pyproject.toml``, importing this module only when a store names the codec.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
from numcodecs.abc import Codec
from zarr.core.metadata import ArrayMetadata, ArrayV2Metadata

from accumulus.errors import AccumulusError


class AccumulationDeltaFilter(Codec):
    codec_id = "accumulation_delta_filter"

    def __init__(
        self,
        accumulation_dimension: Sequence[int],
        accumulation_stride: Sequence[int],
        accumulation_dim_order_idx: Sequence[int],
        chunk_shape: Sequence[int] | None = None,
        dtype: str | None = None,
    ) -> None:
        self.accumulation_dimension = tuple(accumulation_dimension)
        self.accumulation_stride = tuple(accumulation_stride)
        self.accumulation_dim_order_idx = tuple(accumulation_dim_order_idx)
        self.chunk_shape = tuple(chunk_shape) if chunk_shape is not None else None
        self.dtype = np.dtype(dtype) if dtype is not None else None

    @property
    def axis(self) -> int:
        """The first axis of the array whose dimension is accumulated."""
        for axis, dim_index in enumerate(self.accumulation_dim_order_idx):
            if dim_index in self.accumulation_dimension:
                return axis
        raise AccumulusError(
            f"accumulation_delta_filter: no axis of accumulation_dim_order_idx "
            f"{list(self.accumulation_dim_order_idx)} is in accumulation_dimension "
            f"{list(self.accumulation_dimension)}"
        )

    def get_config(self) -> dict:
        return {
            "id": self.codec_id,
            "accumulation_dimension": list(self.accumulation_dimension),
            "accumulation_stride": list(self.accumulation_stride),
            "accumulation_dim_order_idx": list(self.accumulation_dim_order_idx),
        }

    def encode(self, buf: np.ndarray) -> np.ndarray:
        array = np.asarray(buf)
        if array.ndim != len(self.accumulation_dim_order_idx):
            array = self._shaped(array)
        return np.diff(array, axis=self.axis, prepend=np.zeros_like(array.take([0], self.axis)))

    def decode(self, buf, out=None) -> np.ndarray:
        array = np.asarray(buf)
        if array.ndim != len(self.accumulation_dim_order_idx):
            array = self._shaped(array)
        decoded = np.cumsum(array, axis=self.axis, dtype=array.dtype)
        if out is not None:
            np.asarray(out).reshape(decoded.shape)[...] = decoded
            return out
        return decoded

    def _shaped(self, buf: np.ndarray) -> np.ndarray:
        if self.chunk_shape is None or self.dtype is None:
            raise AccumulusError(
                "accumulation_delta_filter needs the chunk shape to decode a flat chunk; "
                "read the array through accumulus, which supplies it"
            )
        return np.frombuffer(memoryview(buf).cast("B"), dtype=self.dtype).reshape(self.chunk_shape)


def with_chunk_shape(metadata: ArrayMetadata) -> ArrayMetadata:
    """``metadata`` with every accumulation_delta_filter told its array's chunk shape and dtype
    (Zarr v2 only: the generator writes v2)."""
    if not isinstance(metadata, ArrayV2Metadata) or not metadata.filters:
        return metadata
    filters = tuple(
        AccumulationDeltaFilter(
            f.accumulation_dimension,
            f.accumulation_stride,
            f.accumulation_dim_order_idx,
            chunk_shape=metadata.chunks,
            dtype=metadata.dtype.to_native_dtype().str,
        )
        if isinstance(f, AccumulationDeltaFilter)
        else f
        for f in metadata.filters
    )
    return replace(metadata, filters=filters)
