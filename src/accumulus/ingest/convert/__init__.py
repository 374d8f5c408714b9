"""NetCDF4/HDF5 or NetCDF-3 → Zarr v2 (default) or v3, keeping groups, dimensions,
attributes, fill values, chunk shapes and each variable's filter chain (mapped to codecs).

A NetCDF4/HDF5 source is read with h5py, whose HDF5 has every hdf5plugin filter registered
(netCDF4's own HDF5 copy does not), so any file whose filters decode here converts. A NetCDF-3
source (classic, 64-bit offset or 64-bit data, "CDF5") is read with netCDF4 (netcdf-c): it has
one group, no chunks and no compression to keep, so its variables get ``NETCDF3_CODEC``
(zarr-python's default compression, as ``append`` gives NetCDF-3 granules) and the plan says
so. Every byte of Zarr goes through zarr-python. Conversion runs in two phases:
``plan_conversion`` (``plan.py``, with ``codecs.py`` for each variable's codecs) inspects the
whole file (``source.py``) and resolves every variable's codecs, failing before anything is
written; then ``convert`` (``write.py``) writes into a temporary directory beside the
destination, chunk-aligned block by block (bounded memory), consolidates metadata and renames
the directory into place. On any failure the temporary directory is removed, so a destination
either appears whole or not.

Conventions are xarray's, so ``xarray.open_zarr`` reads the result like the source file:
dimension names in ``_ARRAY_DIMENSIONS`` (v2) or ``dimension_names`` (v3); ``_FillValue``
as the v2 ``fill_value`` or, in v3, as the attribute xarray writes; CF attributes (time
units, calendar, scale_factor...) copied as they are, values left encoded, except where
Zarr cannot carry their decoding (``cf.stored_form``): fill values the type cannot hold
are dropped with a warning, and float32-packed values are stored decoded.
"""

from accumulus.ingest.convert.codecs import NETCDF3_CODEC, CodecSpec, parse_codec_options
from accumulus.ingest.convert.plan import (
    ArrayPlan,
    ConversionPlan,
    GroupPlan,
    plan_conversion,
    plan_file,
)
from accumulus.ingest.convert.source import hdf5_dataset, source_group
from accumulus.ingest.convert.write import convert, create_zarr_array

__all__ = [
    "NETCDF3_CODEC",
    "ArrayPlan",
    "CodecSpec",
    "ConversionPlan",
    "GroupPlan",
    "convert",
    "create_zarr_array",
    "hdf5_dataset",
    "parse_codec_options",
    "plan_conversion",
    "plan_file",
    "source_group",
]
