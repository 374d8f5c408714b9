"""Reading Zarr v2 stores written by netcdf-c (NCZarr), whose codec JSON leaves some
parameters to the array, as HDF5's set_local does: the shuffle filter as
``{"id": "shuffle", "elementsize": 0}`` ("the variable's type size"; numcodecs' Shuffle reads
0 as "do not shuffle" and would return scrambled values), and szip without the bits per pixel
and pixels per scanline its codec needs. ``NCZarrCompatStore`` presents every ``.zarray``
(and the consolidated ``.zmetadata``) with those parameters resolved from the array's dtype,
shape and chunks (``filters.chain.for_array``), leaving the bytes on disk alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from accumulus.filters.base import FilterError
from accumulus.filters.chain import for_array
from accumulus.stores.rewriting import MetadataRewritingStore


def normalize_zarray(document: dict[str, Any]) -> dict[str, Any]:
    """A v2 ``.zarray`` with netcdf-c's array-relative codec parameters made explicit."""
    try:
        dtype = np.dtype(document["dtype"])
        shape, chunks = tuple(document["shape"]), tuple(document["chunks"])
    except (KeyError, TypeError):  # structured dtypes are lists; nothing to resolve then
        return document

    def resolve(codecs: list[Any]) -> list[Any]:
        if not all(isinstance(codec, dict) and "id" in codec for codec in codecs):
            return codecs
        try:
            return for_array(codecs, dtype, shape, chunks)
        except FilterError:  # parameters that cannot apply: numcodecs will say so on use
            return codecs

    fixed = dict(document)
    if fixed.get("filters"):
        fixed["filters"] = resolve(fixed["filters"])
    if fixed.get("compressor"):
        fixed["compressor"] = resolve([fixed["compressor"]])[0]
    return fixed


def normalize_consolidated(document: dict[str, Any]) -> dict[str, Any]:
    """A ``.zmetadata`` document with every ``.zarray`` entry normalized."""
    metadata = {
        key: normalize_zarray(value) if key.endswith(".zarray") else value
        for key, value in document.get("metadata", {}).items()
    }
    return {**document, "metadata": metadata}


class NCZarrCompatStore(MetadataRewritingStore):
    """A read-through wrapper that serves normalized v2 array metadata."""

    documents = frozenset({".zarray", ".zmetadata"})

    def rewrite(self, key: str, document: dict[str, Any]) -> dict[str, Any]:
        if key.rsplit("/", 1)[-1] == ".zarray":
            return normalize_zarray(document)
        return normalize_consolidated(document)
