"""Granules, one at a time: a NetCDF4/HDF5 file, a Zarr store, or an ``xarray.Dataset``.

A granule is opened as xarray sees it *encoded*, the way its bytes are stored
(``decode_cf=False``): integers with their scale factor and fill value, times as numbers
"since" a date. Values are then copied as they are when the store's encoding is the same, and
converted only where it differs (``conform``). A granule is identified by its name, size and
SHA-256 checksum, which the journal records.

Compression is read from the granule too, as a chain of numcodecs codec JSON in encoding
order: HDF5 filters through ``accumulus.filters`` (as ``convert`` maps them), a Zarr store's
codecs, or an ``xarray.Dataset``'s ``encoding``. The cube created from a first granule keeps it.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import xarray as xr
import zarr
from zarr.abc.store import Store

from accumulus import keys
from accumulus.errors import AccumulusError
from accumulus.filters import FilterError, join_v2, join_v3
from accumulus.scope import accumulus_scope
from accumulus.storage import local_path, open_store, store_label

GranuleLike = str | os.PathLike[str] | xr.Dataset | Store
CodecChain = list[dict[str, Any]]

_READ_BLOCK = 2**22


@dataclass
class Granule:
    """One granule, open, with its variables as stored (lazy until read)."""

    name: str
    size: int  # bytes of the file or store, or of the Dataset's encoded values
    checksum: str
    dataset: xr.Dataset  # CF-encoded
    kind: str  # "netcdf", "zarr" or "dataset"
    source: Any  # path, Store or Dataset it came from

    def close(self) -> None:
        self.dataset.close()

    def compression(self, zarr_format: int) -> dict[str, CodecChain | None]:
        """Per variable, its codec chain (encoding order), or None when unknown."""
        if self.kind == "netcdf":
            return _netcdf_chains(self.source, self.name, zarr_format)
        if self.kind == "zarr":
            return _zarr_chains(self.source)
        return {name: _dataset_chain(var.encoding) for name, var in self.source.variables.items()}


def granule_name(item: GranuleLike) -> str:
    """How messages and the journal name a granule before it is opened."""
    if isinstance(item, xr.Dataset):
        source = item.encoding.get("source")
        return Path(source).name if source else "xarray.Dataset"
    if isinstance(item, Store):
        return store_label(item)
    return os.fspath(item)


def open_granule(item: GranuleLike, storage_options: dict | None = None) -> Granule:
    """Open one granule; raises ``AccumulusError`` naming it when it cannot be read."""
    if isinstance(item, xr.Dataset):
        return _open_dataset(item)
    path = None if isinstance(item, Store) else local_path(item)
    if path is None:
        return _open_zarr(item, storage_options)
    if path.is_dir():
        return _open_zarr(path, storage_options)
    if not path.is_file():
        raise AccumulusError(f"granule {item}: no such file or Zarr store")
    return _open_netcdf(path, os.fspath(item))


def _open_netcdf(path: Path, name: str) -> Granule:
    size, checksum = _file_identity(path)
    try:
        dataset = xr.open_dataset(path, engine="netcdf4", decode_cf=False, cache=False)
    except Exception as exc:  # netCDF4/HDF5 raise OSError, RuntimeError, ValueError...
        raise AccumulusError(
            f"granule {name}: cannot read it as NetCDF4/HDF5 (truncated or not a NetCDF "
            f"file?): {exc}"
        ) from None
    return Granule(name, size, checksum, dataset, "netcdf", path)


def _file_identity(path: Path) -> tuple[int, str]:
    digest = hashlib.sha256()
    size = 0
    with path.open("rb") as file:
        while block := file.read(_READ_BLOCK):
            digest.update(block)
            size += len(block)
    return size, f"sha256:{digest.hexdigest()}"


def _open_zarr(item: str | os.PathLike[str] | Store, storage_options: dict | None) -> Granule:
    name = granule_name(item)
    try:
        store = open_store(item, "r", storage_options=storage_options)
    except AccumulusError as exc:
        raise AccumulusError(f"granule {name}: {exc}") from None
    digest = hashlib.sha256()
    size = 0
    for key in keys.list_keys(store):
        data = keys.read(store, key) or b""
        digest.update(key.encode() + b"\0" + len(data).to_bytes(8, "little") + data)
        size += len(data)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "no consolidated metadata"
            dataset = xr.open_dataset(store, engine="zarr", decode_cf=False, chunks=None)
    except Exception as exc:
        raise AccumulusError(f"granule {name}: cannot read it as a Zarr dataset: {exc}") from None
    return Granule(name, size, f"sha256:{digest.hexdigest()}", dataset, "zarr", store)


def _open_dataset(dataset: xr.Dataset) -> Granule:
    """An in-memory Dataset is encoded the way ``to_zarr`` would encode it (its variables'
    ``encoding`` decides time units, dtypes, fill values)."""
    name = granule_name(dataset)
    try:
        variables, attrs = xr.conventions.cf_encoder(dict(dataset.variables), dict(dataset.attrs))
        encoded = xr.Dataset(variables, attrs=attrs).load()
    except Exception as exc:
        raise AccumulusError(f"granule {name}: cannot encode it for storage: {exc}") from None
    digest = hashlib.sha256()
    size = 0
    for key in sorted(encoded.variables):
        var = encoded.variables[key]
        header = {"name": key, "dims": var.dims, "dtype": str(var.dtype), "attrs": var.attrs}
        digest.update(json.dumps(header, sort_keys=True, default=str).encode())
        values = np.ascontiguousarray(var.values)
        digest.update(values.tobytes() if values.dtype != object else repr(values).encode())
        size += values.nbytes
    checksum = f"sha256:{digest.hexdigest()}"
    if name == "xarray.Dataset":
        name = f"xarray.Dataset-{checksum[7:19]}"
    return Granule(name, size, checksum, encoded, "dataset", dataset)


# Compression ----------------------------------------------------------------------------------


def _netcdf_chains(path: Path, name: str, zarr_format: int) -> dict[str, CodecChain | None]:
    from accumulus.ingest.convert import plan_conversion

    if not h5py.is_hdf5(path):
        return {}  # netCDF-3: never compressed; the cube gets zarr's default compression
    try:
        plan = plan_conversion(path, zarr_format=zarr_format, warn=False)
    except AccumulusError as exc:
        raise AccumulusError(f"granule {name}: cannot keep its compression: {exc}") from None
    return {array.path: list(array.codecs) for array in plan.arrays}


def _zarr_chains(store: Store) -> dict[str, CodecChain | None]:
    chains: dict[str, CodecChain | None] = {}
    with accumulus_scope():
        group = zarr.open_group(store, mode="r")
        for name, array in group.arrays():
            document = array.metadata.to_dict()
            try:
                if document.get("zarr_format") == 2:
                    chains[name] = join_v2(document.get("filters"), document.get("compressor"))
                else:
                    chains[name] = join_v3(document["codecs"])
            except FilterError:
                chains[name] = None  # a codec without a numcodecs form: the store's default
    return chains


def _dataset_chain(encoding: Mapping[str, Any]) -> CodecChain | None:
    codecs = encoding.get("compressors") or encoding.get("compressor")
    if codecs is None and not encoding.get("filters"):
        return None
    codecs = codecs if isinstance(codecs, list | tuple) else [codecs] if codecs else []
    filters = list(encoding.get("filters") or [])
    try:
        return [c.get_config() for c in [*filters, *codecs]]
    except AttributeError:  # zarr v3 codec objects: no numcodecs form
        return None
