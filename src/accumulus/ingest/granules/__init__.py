"""Granules, one at a time, whatever their kind: a NetCDF4/HDF5 file, a NetCDF-3 file, a Zarr
store (or a reference set), an ``xarray.Dataset``.

A granule is opened as xarray sees it *encoded*, the way its bytes are stored
(``decode_cf=False``): integers with their scale factor and fill value, times as numbers
"since" a date. Values are then copied as they are when the store's encoding is the same, and
converted only where it differs (``conform``). A granule is identified by its name, size and
fingerprint (a SHA-256 checksum), which the journal records. Compression is read from the
granule too, as a chain of numcodecs codec JSON in encoding order; the cube created from a
first granule keeps it.

Each kind is one module (``netcdf4``, ``netcdf3``, ``zarr_store``, ``dataset``) behind the
interface in ``base`` (xarray's backend entry points are the model); ``registry`` finds a
granule's kind, ``opening`` opens it, ``groups`` reads a group and its nested groups as one
Dataset for every kind that has groups, ``referenced_hdf5`` reads an HDF5 granule a virtual
cube references in place.
"""

from accumulus.ingest.granules.base import (
    CodecChain,
    Granule,
    GranuleFile,
    GranuleKind,
    GranuleLike,
    Identity,
    InGroup,
)
from accumulus.ingest.granules.opening import open_granule, read_granule, resolve_group
from accumulus.ingest.granules.registry import GRANULE_TYPES, KINDS, kind_of
from accumulus.ingest.granules.zarr_store import open_zarr_tree

__all__ = [
    "GRANULE_TYPES",
    "KINDS",
    "CodecChain",
    "Granule",
    "GranuleFile",
    "GranuleKind",
    "GranuleLike",
    "Identity",
    "InGroup",
    "kind_of",
    "open_granule",
    "open_zarr_tree",
    "read_granule",
    "resolve_group",
]
