"""An ``xarray.Dataset`` in memory, encoded the way ``to_zarr`` would encode it (its
variables' ``encoding`` decides time units, dtypes, fill values, compression).

It has no groups: ``group`` only says where in the cube it goes. It is identified by the
SHA-256 of its encoded variables; one without a source file is named after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.ingest.declared import DeclaredVariable
from accumulus.ingest.granules.base import CodecChain, GranuleSource, Identity, OpenOptions
from accumulus.ingest.granules.groups import Tree
from accumulus.names import check_names
from accumulus.stores.group import normalize_group

_UNNAMED = "xarray.Dataset"


class DatasetKind:
    description = "xarray.Dataset"
    types = (xr.Dataset,)

    def guess_can_open(self, item: GranuleSource) -> bool:
        return isinstance(item, xr.Dataset)

    def open(self, item: GranuleSource, options: OpenOptions) -> DatasetFile:
        if not isinstance(item, xr.Dataset):
            raise AccumulusError(f"granule {item}: not an xarray.Dataset")
        return DatasetFile(item)


class DatasetFile:
    def __init__(self, dataset: xr.Dataset) -> None:
        self.source = dataset
        source = dataset.encoding.get("source")
        self.name = Path(source).name if source else _UNNAMED
        self._encoded: xr.Dataset | None = None
        self._identity: Identity | None = None

    def resolve_group(self, dim: str, group: str | None) -> str:
        return normalize_group(group) if group else ""

    def declared(self, group: str) -> list[DeclaredVariable]:
        return []  # in memory already: nothing it declares is more than it holds

    def identity(self) -> Identity:
        if self._identity is None:
            self._identity = _identity(self._encode())
            if self.name == _UNNAMED:
                self.name = f"{_UNNAMED}-{self._identity.fingerprint[7:19]}"
        return self._identity

    def read(self, group: str, dim: str | None) -> Tree:
        return Tree(self._encode(), {}, {})

    def compression(self, zarr_format: int, group: str) -> dict[str, CodecChain | None]:
        return {str(name): _chain(var.encoding) for name, var in self.source.variables.items()}

    def close(self) -> None:
        pass  # nothing is held open

    def _encode(self) -> xr.Dataset:
        if self._encoded is None:
            where = f"granule {self.name}"
            check_names(where, map(str, self.source.variables), map(str, self.source.dims))
            try:
                variables, attrs = xr.conventions.cf_encoder(
                    dict(self.source.variables), dict(self.source.attrs)
                )
                self._encoded = xr.Dataset(variables, attrs=attrs).load()
            except Exception as exc:  # whatever xarray's CF encoder raises on what it cannot encode
                raise AccumulusError(f"{where}: cannot encode it for storage: {exc}") from None
        return self._encoded


def _identity(encoded: xr.Dataset) -> Identity:
    digest = hashlib.sha256()
    size = 0
    for key in sorted(map(str, encoded.variables)):
        var = encoded.variables[key]
        header = {"name": key, "dims": var.dims, "dtype": str(var.dtype), "attrs": var.attrs}
        digest.update(json.dumps(header, sort_keys=True, default=str).encode())
        values = np.ascontiguousarray(var.values)
        digest.update(values.tobytes() if values.dtype != object else repr(values).encode())
        size += values.nbytes
    return Identity(size, f"sha256:{digest.hexdigest()}")


def _chain(encoding: Mapping[str, Any]) -> CodecChain | None:
    codecs = encoding.get("compressors") or encoding.get("compressor")
    if codecs is None and not encoding.get("filters"):
        return None
    codecs = codecs if isinstance(codecs, list | tuple) else [codecs] if codecs else []
    filters = list(encoding.get("filters") or [])
    try:
        return [c.get_config() for c in [*filters, *codecs]]
    except AttributeError:  # zarr v3 codec objects: no numcodecs form
        return None
