"""A NetCDF4/HDF5 file, read through netCDF4 (netcdf-c) as xarray's ``netcdf4`` engine reads
it, from one handle for every group read.

It is opened as xarray sees it *encoded*, the way its bytes are stored (``decode_cf=False``):
integers with their scale factor and fill value, times as numbers "since" a date. It is
identified by its size and the SHA-256 of its bytes. Its compression is its HDF5 filter
chain mapped to codecs (``accumulus.filters``), as ``convert`` maps it.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import h5py
import xarray as xr

from accumulus.errors import AccumulusError
from accumulus.ingest.convert import plan_conversion
from accumulus.ingest.declared import DeclaredVariable, itemsize
from accumulus.ingest.granules.base import (
    CodecChain,
    GranuleSource,
    Identity,
    OpenOptions,
)
from accumulus.ingest.granules.groups import (
    Layout,
    Tree,
    group_to_append,
    named_dimensions,
    read_with,
    tree_dataset,
)
from accumulus.stores.locations import local_path

_READ_BLOCK = 2**22


def local_file(item: GranuleSource) -> Path | None:
    """The local file ``item`` names, or None (a store, a Dataset, a URL, a directory)."""
    if not isinstance(item, str | os.PathLike):
        return None
    path = local_path(item)
    return path if path is not None and path.is_file() else None


class NetCDF4Kind:
    """Any local file: netCDF4 says what is wrong with one that is not NetCDF4/HDF5."""

    description = "NetCDF4/HDF5 file"
    types = (str, os.PathLike)

    def guess_can_open(self, item: GranuleSource) -> bool:
        return local_file(item) is not None

    def open(self, item: GranuleSource, options: OpenOptions) -> NetCDF4File:
        path = local_file(item)
        if path is None or not isinstance(item, str | os.PathLike):
            raise AccumulusError(f"granule {item}: no such file")
        return NetCDF4File(path, os.fspath(item))


class NetCDF4File:
    def __init__(self, path: Path, name: str) -> None:
        import netCDF4

        self.path, self.name = path, name
        try:
            self._file = netCDF4.Dataset(path)
        except Exception as exc:  # netCDF4/HDF5 raise OSError, RuntimeError, ValueError...
            raise AccumulusError(
                f"granule {name}: cannot read it as NetCDF4/HDF5 (truncated or not a NetCDF "
                f"file?): {exc}"
            ) from None

    def resolve_group(self, dim: str, group: str | None) -> str:
        return group_to_append(self._layout(), dim, group, self.name)

    def declared(self, group: str) -> list[DeclaredVariable]:
        out = []
        pending = [self._file]
        while pending:
            node = pending.pop()
            pending.extend(node.groups.values())
            if not read_with(node.path.strip("/"), group):
                continue
            for name, var in node.variables.items():
                out.append(
                    DeclaredVariable(
                        name=str(name),
                        dims=named_dimensions(
                            tuple(var.dimensions), getattr(var, "DimensionNames", None)
                        ),
                        shape=tuple(int(n) for n in var.shape),
                        itemsize=itemsize(var.dtype),
                        chunks=self._chunks(var),
                    )
                )
        return out

    def _chunks(self, var: Any) -> tuple[int, ...] | None:
        """A variable's stored chunk shape (None: contiguous)."""
        chunking = var.chunking()
        return tuple(chunking) if isinstance(chunking, list | tuple) else None

    def identity(self) -> Identity:
        digest = hashlib.sha256()
        size = 0
        with self.path.open("rb") as file:
            while block := file.read(_READ_BLOCK):
                digest.update(block)
                size += len(block)
        return Identity(size, f"sha256:{digest.hexdigest()}")

    def read(self, group: str, dim: str | None) -> Tree:
        from xarray.backends import NetCDF4DataStore

        def open_group(path_in_file: str) -> xr.Dataset:
            node = self._file[path_in_file] if path_in_file else self._file
            dataset = xr.open_dataset(NetCDF4DataStore(node), decode_cf=False)
            dataset.set_close(None)  # the file is closed once, by ``close``
            return dataset

        return tree_dataset(open_group, self._layout(), group, dim, f"granule {self.name}")

    def compression(self, zarr_format: int, group: str) -> dict[str, CodecChain | None]:
        if not h5py.is_hdf5(self.path):
            return {}  # not HDF5 (an HDF4 file netCDF4 reads): no filters we can map
        try:
            plan = plan_conversion(self.path, zarr_format=zarr_format, warn=False, group=group)
        except AccumulusError as exc:
            raise AccumulusError(
                f"granule {self.name}: cannot keep its compression: {exc}"
            ) from None
        return dict(plan.codec_chains())

    def close(self) -> None:
        if self._file.isopen():
            self._file.close()

    def _layout(self) -> Layout:
        layout: Layout = {}
        pending = [self._file]
        while pending:
            node = pending.pop()
            layout[node.path.strip("/")] = {
                v: named_dimensions(tuple(var.dimensions), getattr(var, "DimensionNames", None))
                for v, var in node.variables.items()
            }
            pending.extend(node.groups.values())
        return layout
