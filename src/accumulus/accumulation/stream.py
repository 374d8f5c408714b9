"""Computing accumulation entries from the raw data, slab by slab, with Dask.

The raw array is walked along its "batch" dimension (the one with the most chunks) in slabs
of whole chunks of about ``SLAB_BYTES``. Within a slab, each Dask task reads a block of
several raw chunks (``VariableInfo.grouped_blocks``) and sums it per raw chunk for every
accumulated combination at once (``sums.chunk_sums``: one compiled pass per axis, no copy
of the block per sum), so every raw chunk is read and decoded once. The per-chunk sums
(much smaller than the data) come back to this process, where they are prefix-summed,
thinned to every ``stride``-th chunk and written, while the next slab is being read.
Entries along the batch dimension continue from the last entry written by the previous
slab. So peak memory is set by the slab and block sizes, not by the array, and the same
code serves a full build (starting at 0) and an update after the data grew (starting at
the old coverage).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from math import prod

import dask
import dask.array as da
import numpy as np
import zarr

from accumulus import compute
from accumulus.accumulation import spec, statistics
from accumulus.accumulation.sums import chunk_sums, prefix_entries
from accumulus.cube import VariableInfo

SLAB_BYTES = 128 * 2**20  # stored bytes of raw data per slab


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
    terms = statistics.stored_sums(group.weights)
    # Along ``dim``, blocks stay single chunks: a slab (or an update) reads nothing outside.
    x = var.dask_array(var.grouped_blocks(keep=dim))

    def slab_sums(done: int) -> list[tuple[_Work, np.ndarray]]:
        """Each accumulation's per-chunk sums over slab ``done`` (one pass over its data)."""
        slab_start, slab_stop = slabs[done]
        work = [_work(var, acc, dim, slab_start, slab_stop) for acc in group.accumulations]
        work = [w for w in work if w.raw_stop > w.raw_start]
        regions = sorted({(w.raw_start, w.raw_stop) for w in work})
        in_region = [[w for w in work if (w.raw_start, w.raw_stop) == r] for r in regions]
        tasks = [
            _region_tasks(x, var, dim, region, weights, terms, items)
            for region, items in zip(regions, in_region, strict=True)
        ]
        slab_chunks = len(bounds.chunks_overlapping(slab_start, slab_stop))
        computed = iter(
            compute.run(
                [t for ts in tasks for t in ts.ravel()],
                scheduler,
                _scaled(progress, done * per_slab, slab_chunks, total),
            )
        )
        sums = []
        for region_tasks, items in zip(tasks, in_region, strict=True):
            results = np.empty(region_tasks.shape, dtype=object)
            for index in np.ndindex(region_tasks.shape):
                results[index] = next(computed)
            for item in items:
                sums.append(
                    (item, _concatenate(results, tuple(var.axis(d) for d in item.acc.dims)))
                )
        return sums

    # The next slab is read and summed while this one's entries are written; entries are
    # written slab after slab, as each continues from the last entry of the one before.
    with ThreadPoolExecutor(1) as reader:
        pending = reader.submit(slab_sums, 0) if slabs else None
        for done in range(len(slabs)):
            assert pending is not None
            ready = pending.result()
            if done + 1 < len(slabs):
                pending = reader.submit(slab_sums, done + 1)
            for item, per_chunk in ready:
                _write_entries(var, item, dim, terms, per_chunk, targets)


def _region_tasks(
    x: da.Array,
    var: VariableInfo,
    dim: str,
    region: tuple[int, int],
    weights: np.ndarray | float,
    terms: Sequence[str],
    work: Sequence[_Work],
) -> np.ndarray:
    """Delayed per-block sums of raw ``region`` along ``dim``: an array shaped like the
    block grid of tasks, each returning ``{reduced axes: per-chunk sums}`` (``chunk_sums``)."""
    axis = var.axis(dim)
    index = [slice(None)] * x.ndim
    index[axis] = slice(*region)
    x = x[tuple(index)]
    reductions = sorted({tuple(var.axis(d) for d in w.acc.dims) for w in work})
    offsets = [region[0] if a == axis else 0 for a in range(x.ndim)]
    starts = [np.cumsum((o, *c[:-1])).tolist() for o, c in zip(offsets, x.chunks, strict=True)]
    blocks = x.to_delayed()
    tasks = np.empty(blocks.shape, dtype=object)
    for block_index in np.ndindex(blocks.shape):
        location = [
            (starts[a][i], starts[a][i] + x.chunks[a][i]) for a, i in enumerate(block_index)
        ]
        # Where raw chunks start inside the block, along each axis.
        edges = [
            [e - lo for e in var.bounds[a].edges if lo <= e < hi]
            for a, (lo, hi) in enumerate(location)
        ]
        w = weights
        if isinstance(weights, np.ndarray):
            w = weights[
                tuple(slice(lo, hi) if n > 1 else slice(None)
                      for (lo, hi), n in zip(location, weights.shape, strict=True))
            ]  # fmt: skip
        tasks[block_index] = dask.delayed(chunk_sums, pure=True)(
            blocks[block_index], w, terms, reductions, edges
        )
    return tasks


def _concatenate(results: np.ndarray, reduced: tuple[int, ...]) -> np.ndarray:
    """One reduction's per-chunk sums over a region, from its blocks' results."""
    parts = np.empty(results.shape, dtype=object)
    for index in np.ndindex(results.shape):
        parts[index] = results[index][reduced]
    for axis in reversed(range(parts.ndim)):
        joined = np.empty(parts.shape[:axis], dtype=object)
        for index in np.ndindex(joined.shape):
            joined[index] = np.concatenate(list(parts[index]), axis=axis + 1)
        parts = joined
    return parts[()]


def _write_entries(
    var: VariableInfo,
    work: _Work,
    dim: str,
    terms: Sequence[str],
    per_chunk: np.ndarray,
    targets: dict[str, zarr.Array],
) -> None:
    """Prefix-sum one accumulation's per-chunk sums over a region into its entries, continue
    them from the entry before ``work.first``, and write them."""
    acc = work.acc
    entries = per_chunk
    for d in acc.dims:
        entries = prefix_entries(entries, var.axis(d) + 1, acc.stride(d))
    order = [var.axis(d) for d in acc.array_dims]
    t_axis = acc.array_dims.index(dim)
    window = [slice(None)] * len(order)
    window[t_axis] = slice(work.first, work.first + entries.shape[var.axis(dim) + 1])
    written: set[str] = set()
    for t, term in enumerate(terms):
        name = acc.arrays[term]
        if name in written:
            continue
        written.add(name)
        target = targets[name]
        values = entries[t].transpose(order)
        if dim in acc.dims and work.first > 0:
            # Continue from the last entry the previous slab (or build) wrote.
            before = list(window)
            before[t_axis] = slice(work.first - 1, work.first)
            values = values + np.asarray(target[tuple(before)], dtype="f8")
        if statistics.SUMS[term].is_count:
            values = np.round(values).astype("int64")
        target[tuple(window)] = values


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
