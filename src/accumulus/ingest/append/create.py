"""Phase 3 of an append: a new cube's arrays from the first granule, empty along the append
dimension."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import numcodecs
import numpy as np

from accumulus.filters import numcodecs_codec, split_v2, v3_codecs
from accumulus.grid import GROW
from accumulus.hierarchy import write_tree
from accumulus.ingest.append.cube_state import fresh_root
from accumulus.ingest.append.values import Batch, Committed, Request, Target
from accumulus.ingest.cadence import step_seconds, steps_per_month
from accumulus.ingest.conform import cube_dataset
from accumulus.ingest.granules import CodecChain, Granule, open_granule
from accumulus.ingest.journal import CREATING, READY, Journal, write_journal
from accumulus.ingest.layout import (
    ArraySpec,
    ChunkChoice,
    choose_chunks,
    choose_shards,
    step_blocksize,
)


def create(target: Target, request: Request, batch: Batch) -> tuple[Committed, ChunkChoice]:
    """The cube's arrays from the first granule: its encodings, empty along ``dim``.
    Everything is decided (and may fail) before the first write.

    Crash safety: the journal says ``creating`` before the first array is written and
    ``ready`` only once all are; ``recover`` wipes a creation cut short, and the next run
    creates the cube again."""
    template, dim, store = batch.template, target.dim, target.store
    zarr_format, variable_rule = request.zarr_format, request.variable_rule
    granule = open_granule(batch.first, request.storage_options, request.allow_references)
    try:
        specs = {
            str(name): ArraySpec(
                dims=tuple(map(str, var.dims)),
                shape=tuple(var.shape),
                itemsize=template.variables[str(name)].dtype.itemsize,
                is_coordinate=name in template.coordinates,
            )
            for name, var in granule.dataset.variables.items()
        }
        month = steps_per_month(_step_seconds(granule, batch))
        # Asked for (--chunking grow): chunks along ``dim`` grow with the cube, so a young
        # cube is not read as one mostly empty chunk (Zarr v3: a rectilinear grid, which
        # plain zarr-python reads with its rectilinear setting, GDAL and netcdf-c not yet).
        grow = request.rule == GROW and not request.shards
        choice = choose_chunks(specs, dim, request.chunks, variable_rule, month, grow)
        choice = choose_shards(choice, specs, dim, request.shards)
        variable_rule = variable_rule or choice.rule
        chains = granule.compression(zarr_format)
        empty, fills = cube_dataset(granule.dataset, template)
        encoding = {}
        for name, var in empty.variables.items():
            fill = fills[str(name)]
            chain = chains.get(str(name))
            chunks = choice.chunks[str(name)]
            codecs = _codec_encoding(chain, zarr_format)
            if not chain and dim in var.dims:
                # Uncompressed in the granule (or not known), but chunks along the append
                # dimension fill over many appends, rewritten at each commit and mostly fill
                # until then: zarr's default compression, in Zarr v2 in Blosc blocks of
                # whole steps (``_step_blocks``).
                blocks = _step_blocks(var.dims, var.dtype, chunks, dim, zarr_format)
                codecs = blocks or _codec_encoding(None, zarr_format)
            encoding[name] = {
                "chunks": chunks,
                **({"shards": choice.shards[str(name)]} if str(name) in choice.shards else {}),
                "_FillValue": fill,
                **codecs,
            }
        settings = {"append_dim": dim}
        if variable_rule is not None:
            settings["chunking"] = variable_rule
        empty.attrs["accumulus"] = settings
        write_journal(store, Journal(dim, CREATING))
        write_tree(
            empty,
            store,
            group_attrs=granule.group_attrs,
            mode="a",
            zarr_format=zarr_format,
            encoding=encoding,
            consolidated=False,
        )
    finally:
        granule.close()
    journal = Journal(dim, READY, 0, ())
    write_journal(store, journal)
    return Committed(journal, fresh_root(store), variable_rule, template), choice


def _step_seconds(granule: Granule, batch: Batch) -> float | None:
    """The archive's cadence along the append dimension, from the times being appended or
    the CF bounds of the first granule's (``cadence.py``)."""
    template = batch.template
    coordinate = template.variables[template.dim]
    bounds = coordinate.attrs.get("bounds")
    values = granule.dataset[bounds].values if bounds in granule.dataset.variables else None
    units = coordinate.time.units if coordinate.time is not None else None
    times = np.concatenate([plan.coordinate for plan in batch.planned])
    return step_seconds(times, units, values)


def _step_blocks(
    dims: tuple[Hashable, ...], dtype: np.dtype, chunks: tuple[int, ...], dim: str, zarr_format: int
) -> dict[str, Any] | None:
    """Zarr v2's default compression (Blosc LZ4 at level 5, byte shuffle) in Blosc blocks
    of whole steps of ``dim`` (``layout.step_blocksize``), for a numeric array along ``dim``
    first: None otherwise, and in Zarr v3 (whose default is zstd)."""
    if zarr_format != 2 or not dims or dims[0] != dim or dtype.kind not in "biuf":
        return None
    blocksize = step_blocksize(chunks, dtype.itemsize)
    if blocksize is None:
        return None
    blosc = numcodecs.Blosc("lz4", 5, numcodecs.Blosc.SHUFFLE, blocksize)
    return {"filters": None, "compressors": [blosc]}


def _codec_encoding(chain: CodecChain | None, zarr_format: int) -> dict[str, Any]:
    """xarray ``to_zarr`` encoding for a codec chain (None: zarr's default compression)."""
    if chain is None:
        return {}
    if zarr_format == 2:
        filters, compressor = split_v2(chain)
        return {
            "filters": [numcodecs_codec(c) for c in filters] if filters else None,
            "compressors": [numcodecs_codec(compressor)] if compressor else None,
        }
    codecs = v3_codecs(chain)
    return {
        "filters": list(codecs.filters) or None,
        "serializer": codecs.serializer,
        "compressors": list(codecs.compressors) or None,
    }
