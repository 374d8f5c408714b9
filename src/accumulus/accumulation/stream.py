"""Computing accumulation entries from the raw data, slab by slab, with Dask.

The raw array is walked along its "batch" dimension (the one with the most chunks) in slabs
of whole chunks of about ``SLAB_BYTES``. Within a slab, each Dask task reads a block of
several raw chunks (``VariableInfo.grouped_blocks``), sums it per raw chunk for every
accumulated combination at once (``sums.chunk_sums``), and the per-chunk sums are
prefix-summed, thinned to every ``stride``-th chunk, and written. Entries along the batch
dimension continue from the last entry written by the previous slab. So peak memory is set
by the slab and block sizes, not by the array, and the same code serves a full build
(starting at 0) and an update after the data grew (starting at the old coverage).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import dask.array as da
import numpy as np
import zarr

from accumulus import compute
from accumulus.accumulation import spec
from accumulus.accumulation.sums import chunk_sums
from accumulus.cube import VariableInfo
from accumulus.grid import ChunkBounds

SLAB_BYTES = 128 * 2**20  # stored bytes of raw data per slab


def terms_for(weights: str) -> tuple[str, ...]:
    """The sums a build stores: with unit weights, Σw·x is Σx and Σw is the count."""
    if weights == "none":
        return (spec.SUM, spec.COUNT)
    return (spec.WSUM, spec.WCOUNT, spec.SUM, spec.COUNT)


def batch_dimension(var: VariableInfo) -> str:
    """The dimension walked slab by slab: the one with the most chunks."""
    return max(var.dims, key=lambda d: var.bounds[var.axis(d)].n_chunks)


def chunks_per_slab(var: VariableInfo, dim: str) -> int:
    """Raw chunks of ``dim`` per slab: a power of two, so that slabs line up with
    accumulation chunks (which grow by doubling) along ``dim``."""
    axis = var.axis(dim)
    other = prod(n for a, n in enumerate(var.shape) if a != axis)
    one_chunk = max(var.bounds[axis].sizes, default=1) * other * var.array.dtype.itemsize
    count = 1
    while one_chunk * count * 2 <= SLAB_BYTES:
        count *= 2
    return count


@dataclass(frozen=True)
class _Work:
    """What one slab does for one accumulation: read raw ``[raw_start, raw_stop)`` along the
    batch dimension and write entries (or indices) from ``first`` on, continuing from the
    entry before ``first`` when the batch dimension is accumulated."""

    acc: spec.Accumulation
    raw_start: int
    raw_stop: int
    first: int


def fill(
    root: zarr.Group,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    weights: np.ndarray | float,
    start: int = 0,
    dim: str | None = None,
    scheduler: str | None = None,
    progress: compute.Progress | None = None,
) -> None:
    """Write every entry of ``group`` that depends on raw indices from ``start`` on along
    ``dim`` (default: the batch dimension; ``start`` must be a chunk edge there). Entries
    that end before ``start`` are kept and continued from."""
    dim = dim or batch_dimension(var)
    axis = var.axis(dim)
    bounds = var.bounds[axis]
    edges = [start, *(e for e in bounds.edges if e > start)]
    per_slab = chunks_per_slab(var, dim)
    slabs = [
        (edges[i], edges[min(i + per_slab, len(edges) - 1)])
        for i in range(0, len(edges) - 1, per_slab)
    ]
    total = len(edges) - 1
    targets = {
        name: root[f"{group.path}/{name}"]
        for acc in group.accumulations
        for name in set(acc.arrays.values())
    }
    # Along ``dim``, blocks stay single chunks: a slab (or an update) reads nothing outside.
    x = var.dask_array(var.grouped_blocks(keep=dim))
    for done, (slab_start, slab_stop) in enumerate(slabs):
        work = [_work(var, acc, dim, slab_start, slab_stop) for acc in group.accumulations]
        work = [w for w in work if w.raw_stop > w.raw_start]
        writes = []
        for item in work:
            sources = _entries(x, var, group, item, dim, weights, targets)
            writes += [_write(source, targets[name], item, dim) for name, source in sources.items()]
        offset = done * per_slab
        slab_chunks = len(bounds.chunks_overlapping(slab_start, slab_stop))
        compute.run(writes, scheduler, _scaled(progress, offset, slab_chunks, total))


def _scaled(
    progress: compute.Progress | None, offset: int, width: int, total: int
) -> compute.Progress | None:
    """Task progress within one slab, reported as raw chunks done out of all."""
    if progress is None:
        return None
    return lambda done, tasks: progress(offset + (width * done) // max(tasks, 1), total)


def _work(
    var: VariableInfo, acc: spec.Accumulation, dim: str, slab_start: int, slab_stop: int
) -> _Work:
    if dim not in acc.dims:
        return _Work(acc, slab_start, slab_stop, slab_start)
    bounds = var.bounds[var.axis(dim)]
    positions = bounds.strided_edges(acc.stride(dim))
    # Entries ending at or before the slab's start are done; the slab computes those that
    # end within it (up to the end for the last slab), from the last done entry's end.
    k0 = sum(p <= slab_start for p in positions)
    k1 = sum(p <= slab_stop for p in positions)
    raw_start = positions[k0 - 1] if k0 else 0
    raw_stop = positions[k1 - 1] if k1 > k0 else raw_start
    return _Work(acc, raw_start, raw_stop, k0)


def _entries(
    x: da.Array,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    work: _Work,
    dim: str,
    weights: np.ndarray | float,
    targets: dict[str, zarr.Array],
) -> dict[str, da.Array]:
    """The Dask arrays of one accumulation's entries for one slab, per array name."""
    acc = work.acc
    axis = var.axis(dim)
    region = [slice(None)] * x.ndim
    region[axis] = slice(work.raw_start, work.raw_stop)
    x = x[tuple(region)]
    w = weights
    if isinstance(weights, np.ndarray):
        if weights.shape[axis] > 1:
            weights = weights[tuple(region)]
        w = da.from_array(
            weights,
            chunks=tuple(
                c if n > 1 else (1,) for c, n in zip(x.chunks, weights.shape, strict=True)
            ),
        )
    terms = terms_for(group.weights)
    reduced = tuple(var.axis(d) for d in acc.dims)
    offsets = [0] * x.ndim
    offsets[axis] = work.raw_start
    starts = [np.cumsum((o, *c[:-1])).tolist() for o, c in zip(offsets, x.chunks, strict=True)]
    # Raw chunks inside each block, along each reduced axis: the block's partial sums.
    chunk_counts = [
        tuple(
            len(var.bounds[a].chunks_overlapping(s, s + n))
            for s, n in zip(starts[a], x.chunks[a], strict=True)
        )
        for a in range(x.ndim)
    ]
    sums = da.map_blocks(
        _block_sums,
        x,
        w,
        offsets=tuple(offsets),
        bounds=var.bounds,
        terms=terms,
        axes=reduced,
        new_axis=0,
        chunks=(
            (len(terms),),
            *(chunk_counts[a] if a in reduced else c for a, c in enumerate(x.chunks)),
        ),
        dtype="f8",
    )
    # Prefix sums over blocks of whole output chunks (entry chunk x stride raw chunks), so
    # the scan has few steps and each block becomes one chunk of the target array.
    first_target = targets[acc.arrays[terms[0]]]
    target_chunk = dict(zip(acc.array_dims, first_target.chunks, strict=True))
    blocks = [len(terms)]
    for a, d in enumerate(var.dims):
        blocks.append(target_chunk[d] * acc.stride(d) if a in reduced else target_chunk[d])
    sums = sums.rechunk(tuple(blocks))
    for a in reduced:
        stride = acc.stride(var.dims[a])
        sums = da.cumsum(sums, axis=a + 1)
        step = [slice(None)] * sums.ndim
        step[a + 1] = slice(stride - 1, None, stride)
        sums = sums[tuple(step)]
    order = [var.axis(d) for d in acc.array_dims]
    out: dict[str, da.Array] = {}
    for t, term in enumerate(terms):
        name = acc.arrays[term]
        if name in out:
            continue
        entries = sums[t].transpose(order)
        if dim in acc.dims and work.first > 0:
            # Continue from the last entry the previous slab (or build) wrote.
            target = targets[name]
            before = [slice(None)] * target.ndim
            before[acc.array_dims.index(dim)] = slice(work.first - 1, work.first)
            entries = entries + target[tuple(before)].astype("f8")
        if name == acc.arrays[spec.COUNT]:
            entries = da.round(entries).astype("int64")
        out[name] = entries
    return out


def _block_sums(
    x: np.ndarray,
    w: np.ndarray | float,
    *,
    offsets: Sequence[int],
    bounds: Sequence[ChunkBounds],
    terms: Sequence[str],
    axes: tuple[int, ...],
    block_info: dict | None = None,
) -> np.ndarray:
    """One block's sums per raw chunk along ``axes`` (full resolution along the others)."""
    location = block_info[0]["array-location"]
    local_edges = []
    for a, (lo, hi) in enumerate(location):
        start = offsets[a] + lo
        local_edges.append([e - start for e in bounds[a].edges if start <= e < start + hi - lo])
    return chunk_sums(x, w, terms, [axes], local_edges)[axes]


def _write(source: da.Array, target: zarr.Array, work: _Work, dim: str):
    """A lazy region write of ``source`` into ``target`` from ``work.first`` along ``dim``,
    chunked so that each target chunk is written by exactly one task."""
    t_axis = work.acc.array_dims.index(dim)
    window = [slice(None)] * target.ndim
    window[t_axis] = slice(work.first, work.first + source.shape[t_axis])
    aligned = source.rechunk(_aligned_chunks(target, t_axis, work.first, source.shape))
    return da.store(aligned, target, regions=tuple(window), lock=False, compute=False)


def _aligned_chunks(
    target: zarr.Array, axis: int, offset: int, shape: Sequence[int]
) -> tuple[tuple[int, ...], ...]:
    chunks = []
    for a, (n, c) in enumerate(zip(shape, target.chunks, strict=True)):
        first = (c - offset % c) % c if a == axis else 0
        sizes = [min(first, n)] if first else []
        rest = n - sum(sizes)
        sizes += [c] * (rest // c) + ([rest % c] if rest % c else [])
        chunks.append(tuple(s for s in sizes if s) or (0,))
    return tuple(chunks)
