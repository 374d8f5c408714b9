"""The second phase of a conversion: the plan carried out into a temporary directory beside
the destination, block by block, then renamed into place."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Unpack

import numpy as np
import zarr
from zarr.storage import LocalStore

from accumulus.destinations import check_directory
from accumulus.errors import AccumulusError, Interrupted
from accumulus.filters import numcodecs_codec, split_v2, v3_codecs
from accumulus.ingest.cf import decode
from accumulus.ingest.convert.plan import (
    ArrayPlan,
    ConversionOptions,
    ConversionPlan,
    plan_conversion,
)
from accumulus.ingest.convert.source import blocks, open_source, source_variable
from accumulus.stores.arrays import checked_format, consolidate
from accumulus.stores.locations import local_path


def convert(
    src: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    **options: Unpack[ConversionOptions],
) -> ConversionPlan:
    """Convert a NetCDF4/HDF5 or NetCDF-3 file to a Zarr directory store at ``dest`` (which
    must not exist).

    ``zarr_format``: 2 (the default) or 3. ``codecs`` maps a variable ("precip" or
    "group/precip") to codec JSON (one codec or a chain in encoding order) replacing its
    mapped filters; ``default_codec`` replaces the filters of every other variable.
    ``group`` converts one group and its nested groups only, kept at their place, with the
    coordinate variables their dimensions take from ancestor groups. Returns the plan that
    was carried out.
    """
    destination = local_path(dest) or Path(dest)
    if destination.exists() and (not destination.is_dir() or any(destination.iterdir())):
        raise AccumulusError(f"{destination}: destination exists; remove it or choose another")
    # Missing directories are made, in the nearest one that exists, which must take them.
    nearest = next(p for p in (destination.parent, *destination.parent.parents) if p.exists())
    check_directory(nearest, os.fspath(dest))
    plan = plan_conversion(src, **options)
    destination.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        try:
            with open_source(plan.source, plan.source_format) as source:
                _write(plan, source, staging)
        except OSError as exc:  # data past the end of a truncated file, a damaged chunk
            raise AccumulusError(f"{plan.source}: reading failed ({exc})") from None
        if destination.exists():
            destination.rmdir()  # empty, checked above
        staging.rename(destination)
    except BaseException as exc:  # cleanup, then re-raised (an interruption said in a line)
        shutil.rmtree(staging, ignore_errors=True)
        if isinstance(exc, KeyboardInterrupt):
            raise Interrupted(f"nothing was written to {dest}; run the command again") from None
        raise
    return plan


def _write(plan: ConversionPlan, source: Any, staging: Path) -> None:
    store = LocalStore(staging)
    root = zarr.open_group(store=store, mode="w", zarr_format=checked_format(plan.zarr_format))
    for group in plan.groups:
        node = root if not group.path else root.require_group(group.path)
        node.attrs.update(group.attributes)
    for array_plan in plan.arrays:
        array = create_zarr_array(root, array_plan, plan.zarr_format)
        _copy_data(source_variable(source, array_plan.path), array, array_plan, plan.source)
    consolidate(store)


def create_zarr_array(
    root: zarr.Group,
    plan: ArrayPlan,
    zarr_format: int,
    chunk_key_encoding: dict[str, str] | None = None,
) -> zarr.Array:
    """The Zarr array (metadata only) a plan describes, in xarray's conventions; with
    ``chunk_key_encoding`` (v3) other than zarr's default."""
    attributes = dict(plan.attributes)
    options: dict[str, Any] = {}
    if chunk_key_encoding is not None:
        options["chunk_key_encoding"] = chunk_key_encoding
    if zarr_format == 2:
        attributes["_ARRAY_DIMENSIONS"] = list(plan.dimensions)
        options["fill_value"] = plan.fill_value
        if plan.fill_value is not None:
            # netcdf-c takes _FillValue from the attributes only (as it writes it itself);
            # xarray reads the same value from fill_value.
            attributes["_FillValue"] = plan.fill_value
        if not plan.text:
            filters, compressor = split_v2(plan.codecs)
            options["filters"] = [numcodecs_codec(c) for c in filters] if filters else None
            options["compressors"] = numcodecs_codec(compressor) if compressor else None
    else:
        options["dimension_names"] = list(plan.dimensions)
        if plan.fill_value is not None:
            # xarray's own encoding of _FillValue for v3 (base64 for floats), so it masks.
            from xarray.backends.zarr import FillValueCoder

            options["fill_value"] = plan.fill_value
            attributes["_FillValue"] = FillValueCoder.encode(plan.fill_value, plan.dtype)
        if not plan.text:
            codecs = v3_codecs(plan.codecs)
            options.update(
                filters=codecs.filters, serializer=codecs.serializer, compressors=codecs.compressors
            )
    return root.create_array(
        plan.path,
        shape=plan.shape,
        dtype=str if plan.dtype.kind == "O" else plan.dtype,  # v3 text: zarr's string type
        chunks=plan.chunks or "auto",
        attributes=attributes,
        **options,
    )


def _copy_data(dataset: Any, array: zarr.Array, plan: ArrayPlan, source: str) -> None:
    if array.size == 0:
        return
    chain = " → ".join(f"{s.name or '?'} ({s.hdf5_id})" for s in plan.source_filters) or "none"
    for region in blocks(array.shape, array.chunks, array.dtype.itemsize):
        try:
            block = dataset[region]
        except (OSError, RuntimeError) as exc:  # HDF5: a failed filter; netcdf-c: a short file
            raise AccumulusError(
                f"{source}: variable {plan.path!r}: cannot read the chunk(s) at "
                f"{_region_text(region)} through filters {chain}: {exc}"
            ) from None
        if plan.text:
            block = _text_block(block, plan.dtype)
        elif plan.decoding is not None:
            block = decode(plan.path, block, plan.decoding).astype(plan.dtype, copy=False)
        array[region] = block


def _region_text(region: tuple[slice, ...]) -> str:
    return "[" + ", ".join(f"{s.start}:{s.stop}" for s in region) + "]"


def _text_block(block: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Strings as the destination stores them: str objects, or UTF-8 bytes of fixed width."""
    texts = [v.decode("utf-8") if isinstance(v, bytes) else str(v) for v in block.flat]
    if dtype.kind == "S":
        return np.array([t.encode("utf-8") for t in texts], dtype=dtype).reshape(block.shape)
    return np.array(texts, dtype=object).reshape(block.shape)
