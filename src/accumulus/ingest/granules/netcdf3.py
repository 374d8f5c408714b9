"""A NetCDF-3 file (classic, 64-bit offset or 64-bit data "CDF5"), read through netCDF4 as a
NetCDF4 file is, from its one group. It has no chunks and no compression to keep: a cube
created from it gets zarr's default compression. netcdf-c reads a file shorter than its
header declares without complaint (zeros past its end), so one is refused before it is
opened, as ``convert`` refuses it."""

from __future__ import annotations

import os
from typing import Any

from accumulus.errors import AccumulusError
from accumulus.ingest.convert.source import check_complete
from accumulus.ingest.granules.base import CodecChain, GranuleSource, OpenOptions
from accumulus.ingest.granules.netcdf4 import NetCDF4File, local_file
from accumulus.ingest.netcdf3_header import NETCDF3_SIGNATURES


class NetCDF3Kind:
    description = "NetCDF-3 file"
    types = (str, os.PathLike)

    def guess_can_open(self, item: GranuleSource) -> bool:
        path = local_file(item)
        if path is None:
            return False
        with path.open("rb") as file:
            return file.read(4) in NETCDF3_SIGNATURES

    def open(self, item: GranuleSource, options: OpenOptions) -> NetCDF3File:
        path = local_file(item)
        if path is None or not isinstance(item, str | os.PathLike):
            raise AccumulusError(f"granule {item}: no such file")
        name = os.fspath(item)
        with path.open("rb") as file:
            signature = file.read(4)
        check_complete(str(path), NETCDF3_SIGNATURES[signature], f"granule {name}")
        return NetCDF3File(path, name)


class NetCDF3File(NetCDF4File):
    def _chunks(self, var: Any) -> tuple[int, ...] | None:
        return None  # contiguous

    def compression(self, zarr_format: int, group: str) -> dict[str, CodecChain | None]:
        return {}
