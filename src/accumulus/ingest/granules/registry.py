"""Which kind a granule is: the first of ``KINDS`` that can open it, as xarray guesses an
engine. The order matters where kinds overlap: a local file is NetCDF-3 by its signature,
else NetCDF4/HDF5 (netCDF4 then says what it is not)."""

from __future__ import annotations

from accumulus.errors import AccumulusError
from accumulus.ingest.granules.base import GranuleKind, GranuleSource, InGroup
from accumulus.ingest.granules.dataset import DatasetKind
from accumulus.ingest.granules.netcdf3 import NetCDF3Kind
from accumulus.ingest.granules.netcdf4 import NetCDF4Kind
from accumulus.ingest.granules.zarr_store import ZarrKind

KINDS: tuple[GranuleKind, ...] = (DatasetKind(), ZarrKind(), NetCDF3Kind(), NetCDF4Kind())
# What one granule may be given as (anything else is an iterable of granules).
GRANULE_TYPES: tuple[type, ...] = (InGroup, *{t: None for kind in KINDS for t in kind.types})


def kind_of(item: GranuleSource) -> GranuleKind:
    for kind in KINDS:
        if kind.guess_can_open(item):
            return kind
    raise AccumulusError(f"granule {item}: no such file or Zarr store")
