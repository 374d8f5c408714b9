"""Reading Zarr v2 stores written by netcdf-c (NCZarr), whose codec JSON differs from
numcodecs' in one way that changes the data: netcdf-c writes the shuffle filter as
``{"id": "shuffle", "elementsize": 0}`` ("the variable's type size", which HDF5's set_local
fills in). numcodecs' Shuffle reads 0 as "do not shuffle", so zarr-python would return
scrambled values. ``NCZarrCompatStore`` presents every ``.zarray`` (and the consolidated
``.zmetadata``) with that 0 replaced by the array's item size, leaving the bytes on disk alone.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from zarr.abc.store import ByteRequest, Store
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype
from zarr.storage import WrapperStore


def normalize_zarray(document: dict[str, Any]) -> dict[str, Any]:
    """A v2 ``.zarray`` with netcdf-c's dtype-relative codec parameters made explicit."""
    try:
        itemsize = np.dtype(document["dtype"]).itemsize
    except (KeyError, TypeError):  # structured dtypes are lists; nothing to resolve then
        return document

    def resolve(codec: Any) -> Any:
        unsized = isinstance(codec, dict) and not codec.get("elementsize")
        if unsized and codec.get("id") == "shuffle":
            return {**codec, "elementsize": itemsize}
        return codec

    fixed = dict(document)
    if fixed.get("filters"):
        fixed["filters"] = [resolve(codec) for codec in fixed["filters"]]
    fixed["compressor"] = resolve(fixed.get("compressor"))
    return fixed


def normalize_consolidated(document: dict[str, Any]) -> dict[str, Any]:
    """A ``.zmetadata`` document with every ``.zarray`` entry normalized."""
    metadata = {
        key: normalize_zarray(value) if key.endswith(".zarray") else value
        for key, value in document.get("metadata", {}).items()
    }
    return {**document, "metadata": metadata}


class NCZarrCompatStore(WrapperStore[Store]):
    """A read-through wrapper that serves normalized v2 array metadata."""

    def _with_store(self, store: Store) -> NCZarrCompatStore:
        return type(self)(store)

    async def get(
        self, key: str, prototype: BufferPrototype, byte_range: ByteRequest | None = None
    ) -> Buffer | None:
        value = await self._store.get(key, prototype, byte_range)
        return _normalized(key, value, prototype, byte_range)

    def get_sync(
        self,
        key: str,
        *,
        prototype: BufferPrototype | None = None,
        byte_range: ByteRequest | None = None,
    ) -> Buffer | None:
        value = super().get_sync(key, prototype=prototype, byte_range=byte_range)
        return _normalized(key, value, prototype or default_buffer_prototype(), byte_range)


def _normalized(
    key: str, value: Buffer | None, prototype: BufferPrototype, byte_range: ByteRequest | None
) -> Buffer | None:
    name = key.rsplit("/", 1)[-1]
    if value is None or byte_range is not None or name not in (".zarray", ".zmetadata"):
        return value
    document = json.loads(value.to_bytes())
    normalize = normalize_zarray if name == ".zarray" else normalize_consolidated
    fixed = normalize(document)
    if fixed == document:
        return value
    return prototype.buffer.from_bytes(json.dumps(fixed).encode())
