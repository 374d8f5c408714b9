"""Computing accumulation entries from the raw data, slab by slab, with Dask.

The raw array is walked along its "batch" dimension (the one with the most chunks) in slabs
of whole chunks of about ``SLAB_BYTES`` (fewer when accumulations at every element make as
many sums as values: ``SUMS_BYTES``). Within a slab, each Dask task reads a block of several
raw chunks (``VariableInfo.grouped_blocks``) and sums it, for every accumulation at once,
per *segment*: along each dimension an accumulation prefix-sums, the block is cut where its
entries end (chunk ends every ``stride`` chunks for ZEP 5; every element, month ends or
labels for ``--at`` rules, ``positions``), so every raw chunk is read and decoded once
(``chunk_sums.chunk_sums``: one compiled pass per axis, no copy of the block per sum). The
per-segment sums (much smaller than the data, except at every element) come back to this
process, where they are prefix-summed, the sums ending where entries end are kept, and
written, while the next slab is being read. Entries along the batch dimension continue from
the running sums the previous slab left at its end (``_Work.carried``: where entries end
inside raw chunks, ``--at time=month+N`` or ZEP 5 strides longer than a slab, no slab reads
the chunk before it again), or from the last entry written (the first slab of an update). So
peak memory is set by the slab and block sizes, not by the array, and the same code serves a
full build (starting at 0) and an update after the data grew (starting at the old coverage).

Arrays whose chunks span several slabs along the batch dimension (long series, read along
time) are written a whole chunk row at a time (``_Writer``), so no chunk is written twice;
a series' rows at every element are summed along the last axis by the writer itself:
from the raw values, kept as they come until a chunk row is whole (``raw_series``: the
default layout's ``lat+lon``, half the bytes of its sums, no sums taken per slab), or else
straight into a row held in chunk order (``_prefix_in_writer``). Accumulations summing
nothing (entries at every element) share one array of per-segment sums.
A build whose sums all run along one other dimension at every element (``--at lat=1,lon=1``
with area weights: longitude) walks that dimension instead, within tiles of the others that
hold whole chunks (``tiled_walk``): its entries are carried from slab to slab within a tile,
and every slab writes whole chunks at once. Where a slab's sums are as large as its data
(builds at every element), a block is the slab's whole tile: its sums are the slab's.
"""

from __future__ import annotations

import bisect
import gc
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, replace
from itertools import product
from math import lcm, prod

import dask
import dask.array as da
import numpy as np
import zarr

from accumulus import compute
from accumulus.accumulation.build import raw_series
from accumulus.accumulation.build.buffers import Buffers
from accumulus.accumulation.build.chunk_sums import (
    STEP_VALUES,
    chunk_sums,
    load_kernel,
    prefix_entries,
)
from accumulus.accumulation.build.encoded_chunks import ordered_layout, write_ordered, write_region
from accumulus.accumulation.model import spec, statistics
from accumulus.glibc import M_MMAP_THRESHOLD, M_TRIM_THRESHOLD, allocator
from accumulus.raw_cube import VariableInfo
from accumulus.stores.arrays import array_at

SLAB_BYTES = 256 * 2**20  # stored bytes of raw data per slab, at most
# Per-segment sums (float64) per slab of a walk along the batch dimension: at 96 MiB a build
# at every element alone (--at lat=1,lon=1) took slabs of two raw chunks and held twice the
# memory for no less CPU (docs/benchmarks.md, "Default path: build passes").
SUMS_BYTES = 48 * 2**20
TILE_SUMS_BYTES = 96 * 2**20  # and per tile of a walk along another one (``tiled_walk``)
KEPT_BYTES = 320 * 2**20  # arrays kept for the next slab to fill, at most (``Buffers``)
KEPT_LEAST_BYTES = 16 * 2**20  # and not smaller ones (``MMAP_THRESHOLD``: malloc reuses them)
WRITES_BOUND = 0.5  # sums per value from which a build is bound by its writes
READ_AHEAD = 2  # slabs read at once where each is one task


class InfinityMet(Exception):
    """The raw data holds an infinity, and the group being written keeps no tallies of them
    (they are written only once an infinity is met): it must be built with them."""


def batch_dimension(var: VariableInfo) -> str:
    """The dimension walked slab by slab: the one with the most chunks."""
    return max(var.dims, key=lambda d: var.bounds[var.axis(d)].n_chunks)


def chunks_per_slab(var: VariableInfo, dim: str, group: spec.AccumulationGroup | None) -> int:
    """Raw chunks of ``dim`` per slab: a power of two, so that slabs line up with
    accumulation chunks (which grow by doubling) along ``dim``."""
    axis = var.axis(dim)
    other = prod(n for a, n in enumerate(var.shape) if a != axis)
    row = max(var.bounds[axis].sizes, default=1) * other  # values per row of chunks
    sums = 8 * sums_per_value(var, group) if group is not None else 0.0
    count = 1
    while row * count * 2 * var.array.dtype.itemsize <= SLAB_BYTES and (
        row * count * 2 * sums <= SUMS_BYTES
    ):
        count *= 2
    return count


def tiled_walk(
    var: VariableInfo, group: spec.AccumulationGroup, targets: Mapping[str, zarr.Array]
) -> tuple[str, list[dict[str, tuple[int, int]]]] | None:
    """The dimension to walk and the tiles of the others, for a build whose accumulations all
    prefix-sum one same dimension other than the batch one, at every element of it (chunks
    one entry wide there): ``--at lat=1,lon=1`` with area weights sums along longitude only.
    Walked along the batch dimension, its series chunks (584 days of every cell on the bench
    cube) are held back until whole, and their writes wait for the next row's entries (and
    those for the writes). Walked along that dimension instead, one raw chunk at a time,
    within tiles of the other dimensions that hold whole chunks of every array and of the raw
    data (prefix sums carried from one slab to the next within a tile), every slab's entries
    are whole chunks, written as soon as they are summed. None when that does not apply (or a
    tile's sums would pass ``TILE_SUMS_BYTES``)."""
    prefixed = {acc.prefix_dims for acc in group.accumulations}
    if len(prefixed) != 1:
        return None
    (walked,) = prefixed
    if len(walked) != 1 or walked[0] == batch_dimension(var):
        return None
    (dim,) = walked
    sides: dict[str, int] = {}
    for acc in group.accumulations:
        for name in set(acc.arrays.values()):
            chunks = dict(zip(acc.array_dims, targets[name].chunks, strict=True))
            if chunks[dim] != 1 or targets[name].shards:
                return None
            for d in var.dims:
                if d != dim:
                    sides[d] = lcm(sides.get(d, 1), chunks[d])
    for d in sides:
        sizes = var.bounds[var.axis(d)].sizes
        if len(set(sizes[:-1])) > 1 or not sizes:
            return None  # raw chunks of varying size: no tile holds whole ones
        sides[d] = lcm(sides[d], sizes[0])
    along = max(var.bounds[var.axis(dim)].sizes, default=1)
    terms = max(len(set(acc.arrays.values())) for acc in group.accumulations)
    if prod(min(n, var.shape[var.axis(d)]) for d, n in sides.items()) * along * terms * 8 > (
        TILE_SUMS_BYTES
    ):
        return None
    ranges = [
        [(lo, min(lo + n, var.shape[var.axis(d)])) for lo in range(0, var.shape[var.axis(d)], n)]
        for d, n in sides.items()
    ]
    return dim, [dict(zip(sides, corner, strict=True)) for corner in product(*ranges)]


def _tile_blocks(
    var: VariableInfo, dim: str, tiles: Sequence[Mapping[str, tuple[int, int]]]
) -> tuple[tuple[int, ...], ...]:
    """Dask blocks of one per slab: raw chunks along ``dim``, the tiles (or, for a tile that
    does not name a dimension, its whole extent) along the others."""
    blocks = []
    for d, bounds, n in zip(var.dims, var.bounds, var.shape, strict=True):
        if d == dim:
            blocks.append(bounds.sizes)
        else:
            edges = sorted({tile.get(d, (0, n)) for tile in tiles})
            blocks.append(tuple(hi - lo for lo, hi in edges))
    return tuple(blocks)


def _slab_ranges(
    var: VariableInfo, dim: str, region: tuple[int, int], tile: Mapping[str, tuple[int, int]]
) -> dict[str, tuple[int, int]]:
    """The raw index range a slab covers along each dimension: ``region`` along ``dim``,
    ``tile`` along the dimensions it names, the whole extent along the others."""
    ranges = {d: tile.get(d, (0, n)) for d, n in zip(var.dims, var.shape, strict=True)}
    ranges[dim] = region
    return ranges


def _raw_chunks(
    var: VariableInfo, dim: str, region: tuple[int, int], tile: Mapping[str, tuple[int, int]]
) -> int:
    """Raw chunks a slab reads."""
    ranges = _slab_ranges(var, dim, region, tile)
    return prod(
        len(bounds.chunks_overlapping(*ranges[d]))
        for d, bounds in zip(var.dims, var.bounds, strict=True)
    )


def sums_per_value(var: VariableInfo, group: spec.AccumulationGroup) -> float:
    """Per-segment sums a build computes per raw value, every accumulation together (about
    the number of sums stored per value at every element; a few per chunk at chunk ends)."""
    bounds = dict(zip(var.dims, var.bounds, strict=True))
    terms = statistics.stored_sums(group.weights)
    total = 0.0
    for acc in group.accumulations:
        count = float(len(stored_terms(acc, terms)))
        for dim, positions in acc.entry_positions(bounds).items():
            count *= max(len(positions), 1) / max(var.shape[var.axis(dim)], 1)
        total += count
    return total


def stored_terms(acc: spec.Accumulation, terms: Sequence[str]) -> tuple[str, ...]:
    """The sums an accumulation stores, one per array (``terms``: what the build computes)."""
    named: dict[str, str] = {}
    for term in terms:
        if term in acc.arrays:
            named.setdefault(acc.arrays[term], term)
    return tuple(named.values())


@dataclass(frozen=True)
class _Work:
    """What one slab does for one accumulation: read raw ``[raw_start, raw_stop)`` along the
    batch dimension and write entries (or indices) from ``first`` on, continuing from the
    entry before ``first`` when the batch dimension is accumulated, or from the running sums
    the slab before left at this slab's start (``carried``)."""

    acc: spec.Accumulation
    positions: Mapping[str, tuple[int, ...]]  # where entries end, per prefix dimension
    terms: tuple[str, ...]  # the sums its arrays hold
    raw_start: int
    raw_stop: int
    first: int
    # Its entries are made by the writer from the raw values (``raw_series``): the slab's
    # raw block is handed over as it is, no sums taken.
    raw: bool = False
    # Along the batch dimension, where entries do not end at the slab's edges: the running
    # sums at the slab's start come from the slab before (``carried``: its region starts at
    # the slab's start, not at the entry before, inside a raw chunk the slab before read),
    # and its own at the slab's end go to the next (``carries``: its region ends there).
    carried: bool = False
    carries: bool = False


def fill(
    root: zarr.Group,
    var: VariableInfo,
    group: spec.AccumulationGroup,
    weights: np.ndarray | float,
    start: int = 0,
    dim: str | None = None,
    scheduler: str | None = None,
    progress: compute.Progress | None = None,
    *,
    times: np.ndarray | None = None,
) -> bool:
    """Write every entry of ``group`` that depends on raw indices from ``start`` on along
    ``dim`` (default: the batch dimension; ``start`` must be a chunk edge there). Entries
    that end before ``start`` are kept and continued from. Returns whether any tally
    written counts an infinity; raises ``InfinityMet`` when the raw data holds one and the
    group keeps no tally arrays. ``times``: the years of each step, broadcastable to the
    variable, for a group keeping sums against time (a trend's)."""
    _large_arrays_from_the_system()
    targets = {
        name: array_at(root, f"{group.path}/{name}")
        for acc in group.accumulations
        for name in set(acc.arrays.values())
    }
    # Blocks summed in this process fill arrays the slab before filled (not new memory).
    in_process = scheduler in (None, "threads", "synchronous")
    # Tiles make many small slabs: each is a graph run, which another scheduler starts
    # anew (a pool of processes per run).
    tiled = tiled_walk(var, group, targets) if dim is None and start == 0 and in_process else None
    dim, tiles = tiled if tiled is not None else (dim or batch_dimension(var), [{}])
    axis = var.axis(dim)
    bounds = var.bounds[axis]
    edges = [start, *(e for e in bounds.edges if e > start)]
    per_slab = 1 if tiled is not None else chunks_per_slab(var, dim, group)
    slabs = [
        (tile, edges[i], edges[min(i + per_slab, len(edges) - 1)])
        for tile in tiles
        for i in range(0, len(edges) - 1, per_slab)
    ]
    # Progress in raw chunks: those before each slab, and all.
    widths = [_raw_chunks(var, dim, (lo, hi), tile) for tile, lo, hi in slabs]
    slab_progress = _by_slab(progress, widths)
    # A build storing about as many sums as values (entries at every element) is bound by
    # its writes: two threads, so that a write waiting on the file system lets the other
    # encode. Otherwise one: a second would take the cores from the reads, which bound it
    # (docs/benchmarks.md).
    writes_bound = sums_per_value(var, group) >= WRITES_BOUND
    writer = _Writer(targets, threads=2 if writes_bound else 1)
    terms = statistics.stored_sums(group.weights)
    chunk_bounds = dict(zip(var.dims, var.bounds, strict=True))
    accumulations = [
        (acc, acc.entry_positions(chunk_bounds), stored_terms(acc, terms))
        for acc in group.accumulations
    ]
    # A group keeps tallies of infinities only once one is met: until then, every block
    # summed is checked to hold none.
    refuse_infinities = statistics.can_be_infinite(var.array.dtype) and not any(
        t in acc.arrays for acc in group.accumulations for t in spec.TALLIES
    )
    # Along ``dim``, blocks stay single chunks: a slab (or an update) reads nothing outside.
    # Where a slab's sums are as large as its data, a block spans its tile (all of the other
    # dimensions, untiled): one task per raw chunk along ``dim``, whose sums are the slab's
    # as they are, not copied together from many blocks' (the copies were a large part of a
    # build at every day: docs/benchmarks.md).
    whole = writes_bound and in_process
    # A slab of one raw chunk read as one task keeps one core busy: two are read at once, so
    # that both cores are until the writes take them (docs/benchmarks.md, "Build, session
    # build47"); otherwise Dask reads a slab's blocks side by side already, and larger
    # slabs would hold twice their memory.
    ahead = READ_AHEAD if whole and per_slab == 1 else 1
    blocks = _tile_blocks(var, dim, tiles) if whole else var.grouped_blocks(keep=dim)
    x = var.dask_array(blocks, as_summed=True)
    # Series at every element of the last axis whose entries the writer makes from the raw
    # values (``raw_series``), where the data cannot hold an infinity unseen.
    from_raw = {
        id(acc)
        for acc, positions, stored in accumulations
        if refuse_infinities
        and tiled is None
        and x.dtype in (np.float32, np.float64)
        and _from_raw(var, acc, positions, stored, targets, dim, start)
    }
    buffers = Buffers(KEPT_BYTES, least_bytes=KEPT_LEAST_BYTES)

    # Slabs that continue the one before (the same tile, from where it stopped): along the
    # batch dimension, each takes the running sums the one before left (``_Work.carried``),
    # so every raw chunk is read once, whatever the positions of the entries.
    follows = [
        i > 0 and slabs[i - 1][0] == slabs[i][0] and slabs[i - 1][2] == slabs[i][1]
        for i in range(len(slabs))
    ]
    carries: dict[int, np.ndarray] = {}  # each accumulation's running sums, by id

    def slab_sums(done: int) -> list[tuple[_Work, np.ndarray, list[list[tuple[int, int]]]]]:
        """Each accumulation's per-segment sums over slab ``done`` (one pass over its data),
        with where the blocks summed lie."""
        tile, slab_start, slab_stop = slabs[done]
        carried, carrying = follows[done], done + 1 < len(slabs) and follows[done + 1]
        work = [
            _work(*item, dim, slab_start, slab_stop, id(item[0]) in from_raw, carried, carrying)
            for item in accumulations
        ]
        work = [w for w in work if w.raw_stop > w.raw_start]
        regions = sorted({(w.raw_start, w.raw_stop) for w in work})
        in_region = [[w for w in work if (w.raw_start, w.raw_stop) == r] for r in regions]
        empty = buffers.empty if in_process else None
        tasks = [
            _region_tasks(
                x,
                var,
                dim,
                region,
                weights,
                items,
                refuse_infinities,
                empty,
                tile,
                group.reference or 0.0,
                times,
            )
            for region, items in zip(regions, in_region, strict=True)
        ]
        # Dask's progress callbacks hear every graph run meanwhile, in any thread: slabs
        # read side by side (one task each) report once done.
        computed = iter(
            compute.run(
                [t for ts, _ in tasks for t in ts.ravel()],
                scheduler,
                slab_progress(done) if ahead == 1 else None,
            )
        )
        if ahead > 1:
            report = slab_progress(done)
            if report is not None:
                report(1, 1)
        sums = []
        for (region_tasks, locations), items in zip(tasks, in_region, strict=True):
            results = np.empty(region_tasks.shape, dtype=object)
            for index in np.ndindex(region_tasks.shape):
                results[index] = next(computed)
            for n, item in enumerate(items):
                sums.append((item, _concatenate(results, n, buffers.empty), locations))
            if results.size > 1:  # every block's sums were copied: they are done with
                buffers.give(_owners(part for parts in results.flat for part in parts))
        return sums

    # The next slabs are read and summed while this one's entries are computed and the one
    # before's are written; entries are computed slab after slab, as each continues from
    # the last entry of the one before.
    with (
        ThreadPoolExecutor(ahead) as reader,
        writer,
        _collector_skips_older_objects(),
        _freed_memory_kept(),
    ):
        pending = deque(reader.submit(slab_sums, i) for i in range(min(ahead, len(slabs))))
        if in_process and any(
            _summed(var, *item) for item in accumulations if id(item[0]) not in from_raw
        ):
            # Blocks are summed in this process: the compiled loop is loaded meanwhile.
            threading.Thread(target=load_kernel, args=(x.dtype,), daemon=True).start()
        for done in range(len(slabs)):
            ready = pending.popleft().result()
            if done + ahead < len(slabs):
                pending.append(reader.submit(slab_sums, done + ahead))
            tile = slabs[done][0]
            written_from = False
            # Accumulations may share their sums (``chunk_sums``: the same per-segment sums):
            # those whose entries the writer takes without changing them go first, and only
            # the last to use them may change them (prefix sums in place).
            raw = [r for r in ready if r[0].raw]
            ready = [r for r in ready if not r[0].raw]
            for item, block, _ in raw:  # the raw values, kept by the writer as they are
                writer.write_raw(
                    item.acc.arrays[spec.SUM], item.acc.arrays[spec.COUNT], item.first, block[0]
                )
            ready.sort(key=lambda r: not _prefix_in_writer(var, r[0], dim, r[1], r[2]))
            earlier = writer.queued()  # writes not made from this slab's sums
            users = Counter(id(per_segment) for _, per_segment, _ in ready)
            for item, per_segment, locations in ready:
                users[id(per_segment)] -= 1
                kept = users[id(per_segment)] > 0
                written_from |= _write_entries(
                    var, item, dim, per_segment, locations, writer, tile, kept, carries
                )
            # The slab's sums (a block's sums are views of the array the compiled loop
            # filled, shared by the accumulations summed alike) are filled again by a later
            # slab once every write made from them is done: not waiting for the writes queued
            # before (a series' raw row takes as long as several slabs), for which the next
            # slabs took new memory (docs/benchmarks.md, "Build CPU (session build46)").
            owners = _owners(per_segment for _, per_segment, _ in ready)
            if written_from:
                writer.after_writes(buffers.give, owners, earlier=earlier)
            else:
                buffers.give(owners)
            del ready, owners, raw
        writer.flush()
    return writer.infinities


MMAP_THRESHOLD = 16 * 2**20  # bytes: larger arrays are the system's pages, given back when freed


@contextmanager
def _collector_skips_older_objects() -> Iterator[None]:
    """Python's cycle collector ignores the objects made before (``gc.freeze``) while the
    slabs are summed and written: its full passes walked every object of the process (zarr,
    xarray, numba...) as slabs were made (docs/benchmarks.md). Objects made during the build
    are collected as usual. Python cannot unfreeze only what it froze: objects frozen before
    (a few hundred by Python at start; the command line's, which it freezes again as it
    ends) are unfrozen with them."""
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


TRIM_THRESHOLD = 64 * 2**20  # bytes of freed heap memory kept for reuse during a build


@contextmanager
def _freed_memory_kept() -> Iterator[None]:
    """While slabs are summed and written, glibc keeps up to ``TRIM_THRESHOLD`` of freed
    heap memory instead of handing it back at once (128 KiB, as a fixed mmap threshold
    leaves it): the blocks each slab decodes, reads and encodes (a few MB each) then reuse
    the memory of those before, not fresh pages, each a fault (docs/benchmarks.md). Given
    back (``malloc_trim``) once done, and left at twice the fixed mmap threshold, glibc's own
    pairing: at its 128 KiB default every later query of this process (a service, a script
    that builds then asks) would give back and fault in again the pages it frees."""
    libc = allocator()
    if libc is None:
        yield
        return
    libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    try:
        yield
    finally:
        libc.mallopt(M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD)
        libc.malloc_trim(0)


def _large_arrays_from_the_system() -> None:
    """Make large temporary arrays (a slab's sums, grouped raw blocks) go back to the system
    when freed. glibc raises its threshold for that as large blocks are freed (up to 32 MiB),
    after which such arrays are carved from the heaps of the threads that made them and
    their memory stays with the process, raising a build's peak memory (docs/benchmarks.md,
    "Figures behind the code"). A fixed threshold stops it (for the whole process: glibc has
    no other way); 16 MiB, not lower, as each fresh page is a fault (at 1 MiB the same
    build's system time doubled). Elsewhere than glibc nothing is done."""
    libc = allocator()
    if libc is not None:
        libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)


def _region_tasks(
    x: da.Array,
    var: VariableInfo,
    dim: str,
    region: tuple[int, int],
    weights: np.ndarray | float,
    work: Sequence[_Work],
    refuse_infinities: bool = False,
    empty: Callable[[int], np.ndarray] | None = None,
    tile: Mapping[str, tuple[int, int]] | None = None,
    reference: float = 0.0,
    times: np.ndarray | None = None,
) -> tuple[np.ndarray, list[list[tuple[int, int]]]]:
    """Delayed per-block sums of raw ``region`` along ``dim`` (within ``tile`` along the
    dimensions it names): an array shaped like the block grid of tasks, each returning every
    work item's per-segment sums (``_block_sums``; raising ``InfinityMet`` at an infinity if
    ``refuse_infinities``), and where the blocks lie along each axis. ``empty(n)``: where a
    task's sums go."""
    ranges = _slab_ranges(var, dim, region, tile or {})
    x = x[tuple(slice(*ranges[d]) for d in var.dims)]
    offsets = [ranges[d][0] for d in var.dims]
    starts = [np.cumsum((o, *c[:-1])).tolist() for o, c in zip(offsets, x.chunks, strict=True)]
    locations = [
        [(s, s + n) for s, n in zip(starts[a], x.chunks[a], strict=True)] for a in range(x.ndim)
    ]
    blocks = x.to_delayed()
    tasks = np.empty(blocks.shape, dtype=object)
    for block_index in np.ndindex(blocks.shape):
        location = [locations[a][i] for a, i in enumerate(block_index)]
        w = weights
        if isinstance(weights, np.ndarray):
            w = weights[
                tuple(slice(lo, hi) if n > 1 else slice(None)
                      for (lo, hi), n in zip(location, weights.shape, strict=True))
            ]  # fmt: skip
        t = times
        if t is not None:
            t = t[tuple(slice(lo, hi) if n > 1 else slice(None)
                        for (lo, hi), n in zip(location, t.shape, strict=True))]  # fmt: skip
        tasks[block_index] = dask.delayed(_block_sums, pure=True)(
            blocks[block_index],
            w,
            _calls(var, work, location),
            [n for n, item in enumerate(work) if item.raw],
            refuse_infinities,
            empty,
            reference,
            t,
        )
    return tasks, locations


Call = tuple[tuple[str, ...], list[list[int]], list[tuple[int, tuple[int, ...]]]]


def _calls(var: VariableInfo, work: Sequence[_Work], location: Sequence[tuple[int, int]]):
    """The ``chunk_sums`` calls that give every work item its per-segment sums of the block
    at ``location``: items summing the same sums, cut alike along the axes they both
    reduce, share one call (one pass over the block)."""
    calls: list[tuple[tuple[str, ...], dict[int, list[int]], list]] = []
    for n, item in enumerate(work):
        if item.raw:
            continue
        axes = tuple(var.axis(d) for d in item.acc.prefix_dims)
        cuts = {
            var.axis(d): segment_starts(*location[var.axis(d)], item.positions[d])
            for d in item.acc.prefix_dims
        }
        for terms, edges, members in calls:
            if terms == item.terms and all(edges.get(a, e) == e for a, e in cuts.items()):
                edges.update(cuts)
                members.append((n, axes))
                break
        else:
            calls.append((item.terms, cuts, [(n, axes)]))
    return [
        (terms, [edges.get(a, [0]) for a in range(len(location))], members)
        for terms, edges, members in calls
    ]


def _block_sums(
    block: np.ndarray,
    w: np.ndarray | float,
    calls: Sequence[Call],
    raw: Sequence[int],
    refuse_infinities: bool = False,
    empty: Callable[[int], np.ndarray] | None = None,
    reference: float = 0.0,
    times: np.ndarray | None = None,
):
    """Every work item's per-segment sums of one block (sums of squares about
    ``reference``; sums against time with ``times``, the block's years); for the items
    ``raw`` (their entries made from the raw values), the block itself, as sums are shaped
    (a first axis of one)."""
    if refuse_infinities and np.isinf(block).any():
        raise InfinityMet("the data hold an infinity")
    out: list[np.ndarray | None] = [None] * (len(raw) + sum(len(c[2]) for c in calls))
    for n in raw:
        out[n] = block[None]
    for terms, edges, members in calls:
        reductions = [axes for _, axes in members]
        sums = chunk_sums(block, w, terms, reductions, edges, empty, reference, times)
        for n, axes in members:
            out[n] = sums[axes]
    return out


def segment_starts(lo: int, hi: int, positions: Sequence[int]) -> list[int]:
    """Where segments start in the block ``[lo, hi)`` along an axis: at its start and at
    every entry position inside it (relative to ``lo``)."""
    inside = positions[bisect.bisect_right(positions, lo) : bisect.bisect_left(positions, hi)]
    return [0, *(p - lo for p in inside)]


def segment_ends(lo: int, hi: int, positions: Sequence[int]) -> list[int]:
    """Where the segments of ``segment_starts`` end (absolute indices)."""
    inside = positions[bisect.bisect_right(positions, lo) : bisect.bisect_left(positions, hi)]
    return [*inside, hi]


def _concatenate(
    results: np.ndarray, item: int, empty: Callable[..., np.ndarray] = np.empty
) -> np.ndarray:
    """One work item's per-segment sums over a region, from its blocks' results (copied once
    into an array of the region's shape, made by ``empty(shape, dtype)``)."""
    parts = np.empty(results.shape, dtype=object)
    for index in np.ndindex(results.shape):
        parts[index] = results[index][item]
    if parts.size == 1:
        return parts.flat[0]
    # Along each axis, the sizes of the blocks' parts (taken from the first row of blocks).
    sizes = [
        [parts[tuple(i if a == axis else 0 for a in range(parts.ndim))].shape[axis + 1]
         for i in range(parts.shape[axis])]
        for axis in range(parts.ndim)
    ]  # fmt: skip
    starts = [np.cumsum([0, *s]).tolist() for s in sizes]
    first = parts.flat[0]
    out = empty((first.shape[0], *(st[-1] for st in starts)), first.dtype)
    for index in np.ndindex(parts.shape):
        where = tuple(slice(starts[a][i], starts[a][i + 1]) for a, i in enumerate(index))
        out[(slice(None), *where)] = parts[index]
    return out


def _owners(arrays: Iterable[np.ndarray]) -> list[np.ndarray]:
    """The arrays holding ``arrays`` (each once: views of one array share it; sums that came
    from another process may be views of the bytes they came in, which are not kept)."""
    owners: dict[int, np.ndarray] = {}
    for array in arrays:
        owner = array if array.base is None else array.base
        if isinstance(owner, np.ndarray):
            owners[id(owner)] = owner
    return list(owners.values())


def _write_entries(
    var: VariableInfo,
    work: _Work,
    dim: str,
    per_segment: np.ndarray,
    locations: Sequence[Sequence[tuple[int, int]]],
    writer: _Writer,
    tile: Mapping[str, tuple[int, int]] | None = None,
    keep_sums: bool = False,
    carries: dict[int, np.ndarray] | None = None,
) -> bool:
    """Prefix-sum one accumulation's per-segment sums over a region (within ``tile``) into
    its entries (the sums ending where entries end), continue them from the entry before
    ``work.first`` (or from the running sums in ``carries``, ``work.carried``), and write
    them. Returns whether writes queued are to be made from ``per_segment`` itself.
    ``keep_sums``: ``per_segment`` is left as it is (another accumulation's entries are taken
    from it next). ``work.carries``: the running sums at the region's end are put in
    ``carries`` for the next slab."""
    acc = work.acc
    order = [var.axis(d) for d in acc.array_dims]
    t_axis = acc.array_dims.index(dim)
    # Where a tile lies in the arrays (None: their whole extent, untiled).
    window = None
    if tile:
        window = tuple(slice(*tile[d]) if d in tile else slice(None) for d in acc.array_dims)
    entries = per_segment
    # Entries at every element along the last axis only (a series' rows, --at lat=1,lon=1):
    # the writer takes their prefix sums itself, straight into the rows it holds.
    prefix_last = _prefix_in_writer(var, work, dim, per_segment, locations)
    if keep_sums and not prefix_last:
        entries = per_segment.copy()  # summed in place below
    # The batch dimension last: the entry before ``work.first`` (the previous slab's last,
    # or the last one an earlier build wrote) is added to the first segment before that
    # prefix sum, which carries it into every entry.
    for d in sorted(acc.prefix_dims, key=lambda d: d == dim):
        if prefix_last:
            break
        axis = var.axis(d)
        first = entries[(slice(None),) * (axis + 1) + (slice(0, 1),)]
        if d == dim and work.carried:
            assert carries is not None, "running sums carried without a place for them"
            first += carries.pop(id(acc))
        elif d == dim and work.first > 0:
            for t, term in enumerate(work.terms):
                before = writer.entry(acc.arrays[term], t_axis, work.first - 1, window)
                first[t] += before.transpose(np.argsort(order))
        positions = work.positions[d]
        ends = [e for lo, hi in locations[axis] for e in segment_ends(lo, hi, positions)]
        wanted = set(positions)
        keep = [i for i, e in enumerate(ends) if e in wanted]
        # The running sums at the region's end go to the next slab: the last entry, or
        # (where no entry ends there) the sums of one more segment, taken and left out.
        carry = d == dim and work.carries
        extra = carry and (not keep or keep[-1] != len(ends) - 1)
        if extra:
            keep.append(len(ends) - 1)
        entries = prefix_entries(entries, axis + 1, keep, in_place=entries.dtype == "f8")
        if carry:
            assert carries is not None, "running sums to carry without a place for them"
            at = (slice(None),) * (axis + 1)
            carries[id(acc)] = entries[(*at, slice(-1, None))].copy()
            if extra:
                entries = entries[(*at, slice(0, -1))]
    uncopied = False
    for t, term in enumerate(work.terms):
        values = entries[t].transpose(order)
        if term in spec.TALLIES and values.any():
            writer.infinities = True
        uncopied |= writer.write(
            acc.arrays[term], t_axis, work.first, values, window, prefix_last, keep_sums
        )
    # (Entries taken in place are ``per_segment`` or, with a carry left out, a view of it.)
    return uncopied and np.may_share_memory(entries, per_segment)


def _summed(
    var: VariableInfo,
    acc: spec.Accumulation,
    positions: Mapping[str, tuple[int, ...]],
    stored: tuple[str, ...],
) -> bool:
    """Whether ``acc``'s per-segment sums need the compiled loop: summed along another axis
    than the first (at positions other than every element), or more than values and counts
    (``chunk_sums`` takes those in NumPy)."""
    along_first = all(
        (var.axis(d) == 0 and prod(var.shape[1:]) >= STEP_VALUES)
        or list(positions[d]) == list(range(1, var.shape[var.axis(d)] + 1))
        for d in acc.prefix_dims
    )
    plain = all(statistics.unweighted(t) in (spec.SUM, spec.COUNT) for t in stored)
    return not (along_first and plain)


def _from_raw(
    var: VariableInfo,
    acc: spec.Accumulation,
    positions: Mapping[str, tuple[int, ...]],
    stored: tuple[str, ...],
    targets: Mapping[str, zarr.Array],
    dim: str,
    start: int,
) -> bool:
    """Whether ``acc``'s entries are made by the writer from the raw values
    (``raw_series.write_part``): a series (``dim``, the first axis, kept) summed along the
    last axis alone, an entry at every element, storing Σx and the count only, in arrays
    held in chunk order from ``start`` on."""
    if acc.array_dims != var.dims or dim != var.dims[0] or len(acc.prefix_dims) != 1:
        return False
    (d,) = acc.prefix_dims
    n = var.shape[-1]
    if d != var.dims[-1] or d == dim or list(positions[d]) != list(range(1, n + 1)):
        return False
    if set(stored) != {spec.SUM, spec.COUNT}:
        return False
    sums, counts = targets[acc.arrays[spec.SUM]], targets[acc.arrays[spec.COUNT]]
    return sums is not counts and raw_series.eligible(sums, counts, start)


def _prefix_in_writer(
    var: VariableInfo,
    work: _Work,
    dim: str,
    per_segment: np.ndarray,
    locations: Sequence[Sequence[tuple[int, int]]],
) -> bool:
    """Whether ``work``'s entries are the cumulative sums of ``per_segment`` along the last
    axis alone, every segment an entry (entries at every element, the batch dimension not
    summed), its arrays in the variable's order: then ``_Writer.write(prefix_last=True)``
    takes them, in one pass into the rows it holds."""
    acc = work.acc
    if len(acc.prefix_dims) != 1 or acc.array_dims != var.dims or per_segment.dtype != "f8":
        return False
    (d,) = acc.prefix_dims
    axis = var.axis(d)
    if d == dim or axis != len(var.dims) - 1:
        return False
    ends = [e for lo, hi in locations[axis] for e in segment_ends(lo, hi, work.positions[d])]
    return len(ends) == per_segment.shape[-1] and ends == list(work.positions[d])


@dataclass
class _Row:
    """Entries of one array waiting for a whole chunk row along the batch dimension: its
    space allocated once, at the row's length, and filled as slabs make them."""

    axis: int
    start: int  # first entry of the row
    stop: int  # entries filled so far end here
    end: int  # the row ends here (a chunk boundary, or the array's end)
    values: np.ndarray
    held: bool = True  # the writer's own space (not a view of entries it was given)
    # Where it lies along the other dimensions (a tile of them; None: their whole extent).
    window: tuple[slice, ...] | None = None
    # Held in chunk order (``encoded_chunks.ordered_layout``), not in the array's.
    ordered: bool = False


@dataclass
class _RawRow:
    """The raw values of a series' chunk row along the batch dimension, kept as they came
    until the row is whole, then made into the entries of its arrays (``raw_series``)."""

    counts: str  # the array of counts beside the sums it is keyed by
    start: int
    stop: int  # values kept so far end here
    end: int  # the row ends here (a chunk boundary, or the array's end)
    blocks: list[np.ndarray]


class _Writer:
    """Writes entries as slabs make them, in threads of its own (``threads``, a few writes
    behind), so the next slab's entries are computed meanwhile. Along the batch dimension an
    array may be chunked longer than a slab: its entries wait here, in space allocated once
    per chunk row (``_Row``), until the row is whole (or the build ends), so each chunk is
    written once. A row is written in pieces of at most ``PIECE_BYTES`` across the other
    dimensions, so zarr's copies of what it encodes stay small beside the row. The last
    entry written is kept, to continue the next slab's prefix sums from.

    No two writes store the same chunk (rows are whole chunk rows, or end where the array
    ends), so they run side by side, except into a sharded array, where rows of one shard are
    written one after the other (each reads and rewrites the shard)."""

    IN_FLIGHT = 4  # writes queued at most (each holds its entries)
    QUEUED_BYTES = 256 * 2**20  # and entries they hold at most (a larger write goes alone)
    PIECE_BYTES = 32 * 2**20
    RAW_THREADS = 2  # threads writing series' rows from the raw values (``write_raw``)

    def __init__(self, targets: Mapping[str, zarr.Array], threads: int = 1) -> None:
        # Prefix sums are never all fill values: write every chunk without comparing.
        self.targets = {n: a.with_config({"write_empty_chunks": True}) for n, a in targets.items()}
        self._pending: dict[str, _Row] = {}
        self._raw: dict[str, _RawRow] = {}  # by the array of sums
        self._spare: dict[str, np.ndarray] = {}  # each array's last row written, to reuse
        self._last: dict[str, tuple[int, np.ndarray]] = {}
        self._thread = ThreadPoolExecutor(threads)
        # Series' chunk rows made from the raw values (``write_raw``) in threads of their
        # own: a row's parts take a while (a 328-day row of the bench cube, 1,080 chunks),
        # during which the entries of the slabs read meanwhile are written, not queued
        # behind them (their sums are then given back for the next slabs to fill).
        self._raw_threads = ThreadPoolExecutor(self.RAW_THREADS)
        self._shard_locks = {n: threading.Lock() for n, a in targets.items() if a.shards}
        self._writes: list[tuple[Future, int]] = []
        self.infinities = False  # whether a tally written counts an infinity

    def __enter__(self) -> _Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        # On an error, writes already queued finish (or fail) before it propagates.
        self._thread.shutdown(wait=True)
        self._raw_threads.shutdown(wait=True)

    def entry(
        self, name: str, axis: int, index: int, window: tuple[slice, ...] | None = None
    ) -> np.ndarray:
        """Entry ``index`` along ``axis`` of array ``name`` (float64, the axis kept), within
        ``window`` along the other axes (default: all of them)."""
        if name in self._last and self._last[name][0] == index:
            return self._last[name][1]
        target = self.targets[name]
        where = list(window or [slice(None)] * target.ndim)
        where[axis] = slice(index, index + 1)
        return np.asarray(target[tuple(where)], dtype="f8")

    def write(
        self,
        name: str,
        axis: int,
        first: int,
        values: np.ndarray,
        window: tuple[slice, ...] | None = None,
        prefix_last: bool = False,
        keep_values: bool = False,
    ) -> bool:
        """Write entries from ``first`` on along ``axis``, within ``window`` along the other
        axes (a tile of whole chunks; default: all of them). Returns whether a write queued
        is made from ``values`` itself (whole chunk rows, not copied): then ``values`` must
        stay as it is until those writes are done (``after_writes``). ``prefix_last``: the
        entries are the cumulative sums of ``values`` (float64, C-ordered) along its last
        axis, taken here (in place unless ``keep_values``, or into a row held in chunk
        order), and ``entry`` is not asked for them."""
        n = values.shape[axis]
        if n == 0:
            return False
        uncopied = False
        if prefix_last:
            self._last.pop(name, None)
        else:
            self._last[name] = (first + n - 1, values.take([n - 1], axis=axis).astype("f8"))
        done = 0
        while done < n:
            start = first + done
            whole = 0 if name in self._pending else self._whole_rows(name, axis, start, n - done)
            if whole:
                # Whole chunk rows are written from ``values`` itself (the write keeps it
                # alive): entries at every element of time, one per chunk, are not copied.
                stop = start + whole
                whole_rows = _along(values, axis, done, whole)
                if prefix_last:
                    whole_rows = _prefix(whole_rows, keep_values)
                self._store(
                    name, _Row(axis, start, stop, stop, whole_rows, held=False, window=window)
                )
                done += whole
                uncopied = True
                continue
            # A tiled walk's slabs end at chunk edges along ``axis``: they hold whole rows.
            assert window is None, f"{name}: a tile's entries do not end at a chunk edge"
            row = self._pending.pop(name, None) or self._new_row(name, axis, start, prefix_last)
            assert row.stop == start, f"{name}: entries written out of order"
            assert prefix_last or not row.ordered, f"{name}: entries given summed and not"
            take = min(n - done, row.end - row.stop)
            part = _along(values, axis, done, take)
            if row.ordered:  # summed along the last axis straight into chunk order
                from accumulus.accumulation.build.kernel import prefix_into_chunks

                prefix_into_chunks(part, row.values, row.stop - row.start)
            else:
                if prefix_last:
                    part = _prefix(part, keep_values)
                # Counts arrive as float64 sums of ones (exact): cast on assignment.
                _along(row.values, axis, row.stop - row.start, take)[...] = part
            row.stop += take
            done += take
            if row.stop == row.end:
                self._store(name, row)
            else:
                self._pending[name] = row
        return uncopied

    def write_raw(self, sums: str, counts: str, first: int, values: np.ndarray) -> None:
        """Entries of a series' arrays ``sums`` and ``counts`` from ``first`` on along axis 0,
        made from the raw values ``values`` (``raw_series``): kept as they are until their
        chunk row is whole, then summed and written in parts, side by side in the writing
        threads."""
        target = self.targets[sums]
        chunk = target.chunks[0]
        n = values.shape[0]
        done = 0
        while done < n:
            start = first + done
            row = self._raw.pop(sums, None)
            if row is None:
                assert start % chunk == 0, f"{sums}: raw values from inside a chunk row"
                end = min((start // chunk + 1) * chunk, target.shape[0])
                row = _RawRow(counts, start, start, end, [])
            assert row.stop == start, f"{sums}: entries written out of order"
            take = min(n - done, row.end - row.stop)
            row.blocks.append(values[done : done + take])
            row.stop += take
            done += take
            if row.stop == row.end:
                self._store_raw(sums, row)
            else:
                self._raw[sums] = row

    def _store_raw(self, sums: str, row: _RawRow) -> None:
        size = sum(b.nbytes for b in row.blocks)
        self._wait_for_writes(size, self.IN_FLIGHT)
        target = self.targets[sums]
        chunk_row = row.start // target.chunks[0]
        parts = [
            self._raw_threads.submit(
                raw_series.write_part, part, chunk_row, row.blocks, self.PIECE_BYTES
            )
            for part in raw_series.parts(target, self.targets[row.counts])
        ]
        # One write for the queue's bounds: the row's values are held until every part is done.
        self._writes.append((_all_done(parts), size))

    def queued(self) -> set[Future]:
        """The writes queued so far and not yet seen done."""
        return {future for future, _ in self._writes}

    def after_writes(
        self, call: Callable[..., object], *args: object, earlier: set[Future] | None = None
    ) -> None:
        """``call(*args)`` once the writes queued so far, but those ``earlier`` (``queued``
        before the writes ``call`` waits for), are done (in the thread of the last to
        finish, or here if none is left)."""
        queued = [
            future
            for future, _ in self._writes
            if not future.done() and (earlier is None or future not in earlier)
        ]
        _all_done(queued).add_done_callback(lambda _: call(*args))

    def flush(self) -> None:
        """Write what waits, and wait for every write (raising the first that failed)."""
        for name in list(self._raw):
            self._store_raw(name, self._raw.pop(name))
        for name in list(self._pending):
            row = self._pending.pop(name)
            if not row.ordered:  # (an ordered row knows its length: stop - start)
                row = replace(row, values=_along(row.values, row.axis, 0, row.stop - row.start))
            self._store(name, row)
        while self._writes:
            self._writes.pop(0)[0].result()

    def _whole_rows(self, name: str, axis: int, start: int, available: int) -> int:
        """How many entries from ``start`` make whole chunk rows of ``name`` along ``axis``
        (ending at a chunk boundary or the array's end) within ``available``: 0 if
        ``start`` is not a chunk boundary or no row is whole."""
        target = self.targets[name]
        chunk = target.chunks[axis]
        if start % chunk:
            return 0
        stop = min(start + available, target.shape[axis])
        if stop < target.shape[axis]:
            stop -= stop % chunk
        return max(stop - start, 0)

    def _new_row(self, name: str, axis: int, start: int, prefix_last: bool = False) -> _Row:
        target = self.targets[name]
        chunk = target.chunks[axis]
        end = min((start // chunk + 1) * chunk, target.shape[axis])
        shape = list(target.shape)
        shape[axis] = end - start
        # Entries summed here along the last axis go straight into chunk order when the
        # row starts a chunk row (not an update from inside one, which reads it back).
        layout = ordered_layout(target, axis) if prefix_last and start % chunk == 0 else None
        if layout is not None:
            shape = list(layout)
        # A new row is allocated only once it fits beside the writes queued: a long series
        # row (378 MB for lat=1,lon=1 on the bench cube, walked along time: an update, or
        # blocks summed in other processes) is never held twice. It takes the
        # space of the array's row written before when that is done with and alike (the
        # system zeroes every page of new space).
        self._wait_for_writes(prod(shape) * target.dtype.itemsize)
        spare = self._spare.pop(name, None)
        if spare is None or spare.shape != tuple(shape):
            spare = np.empty(shape, dtype=target.dtype)
        return _Row(axis, start, start, end, spare, ordered=layout is not None)

    def _wait_for_writes(self, nbytes: int | None, most: int | None = None) -> None:
        """Wait for writes to finish while those queued and ``nbytes`` more would hold more
        than ``QUEUED_BYTES`` (unless ``nbytes`` is None), or be more than ``most`` writes,
        or none is left: for any of them, not the oldest (a series' chunk row, written
        while several slabs are read, would hold back the slabs behind it: docs/benchmarks.md,
        "Build, session build47")."""
        while self._writes and (
            (most is not None and len(self._writes) >= most)
            or (nbytes is not None and sum(n for _, n in self._writes) + nbytes > self.QUEUED_BYTES)
        ):
            done, _ = wait([future for future, _ in self._writes], return_when=FIRST_COMPLETED)
            self._writes = [(f, n) for f, n in self._writes if f not in done]
            for future in done:
                future.result()  # raises what the write raised

    def _store(self, name: str, row: _Row) -> None:
        # The writer may be slower than the slabs: what waits to be written is bounded by
        # bytes too (the slabs then wait for the writes). A row of the writer's own is in
        # memory already, and the next is made only once the writes leave room for it
        # (``_new_row``): it is queued at once, beside the other arrays' rows (otherwise the
        # counts of lat=1,lon=1 waited for its sums: docs/benchmarks.md).
        size = row.values.nbytes
        self._wait_for_writes(None if row.held else size, self.IN_FLIGHT)
        self._writes.append((self._thread.submit(self._write_row, name, row), size))

    def _write_row(self, name: str, row: _Row) -> None:
        with self._shard_locks.get(name, nullcontext()):
            if row.ordered:
                target = self.targets[name]
                chunk_row = row.start // target.chunks[row.axis]
                write_ordered(target, chunk_row, row.values, row.stop - row.start, self.PIECE_BYTES)
            else:
                _write_pieces(self.targets[name], row, self.PIECE_BYTES)
        if row.held:  # before the write is seen done, so that the next row finds it
            self._spare[name] = row.values


def _all_done(futures: Sequence[Future]) -> Future:
    """A future done once every one of ``futures`` is, failed with the first failure among
    them."""
    out: Future = Future()
    left = [len(futures)]
    lock = threading.Lock()

    def one_done(_: Future) -> None:
        with lock:
            left[0] -= 1
            last = left[0] == 0
        if last:
            failed = [f.exception() for f in futures if f.exception() is not None]
            if failed:
                out.set_exception(failed[0])
            else:
                out.set_result(None)

    if not futures:
        out.set_result(None)
    for future in futures:
        future.add_done_callback(one_done)
    return out


def _prefix(values: np.ndarray, keep: bool) -> np.ndarray:
    """The cumulative sums of ``values`` (float64) along the last axis: in their place
    unless ``keep``."""
    last = values.ndim - 1
    return prefix_entries(values, last, range(values.shape[last]), in_place=not keep)


def _along(values: np.ndarray, axis: int, start: int, length: int) -> np.ndarray:
    """The view of ``values`` from ``start`` along ``axis``, ``length`` long."""
    window = [slice(None)] * values.ndim
    window[axis] = slice(start, start + length)
    return values[tuple(window)]


def _write_pieces(target: zarr.Array, row: _Row, piece_bytes: int) -> None:
    """Write a row's entries, whole objects at a time, in pieces of about ``piece_bytes``
    cut along the widest other dimension at the edges of what is stored (shards when the
    array is sharded: a piece cutting a shard would make zarr read and rewrite it)."""
    length = row.values.shape[row.axis]
    window = list(row.window or [slice(None)] * target.ndim)
    window[row.axis] = slice(row.start, row.start + length)
    others = [d for d in range(target.ndim) if d != row.axis]
    if not others or row.values.nbytes <= piece_bytes:
        write_region(target, window, row.values)
        return
    stored = target.shards or target.chunks
    extent = row.values.shape
    cut = max(others, key=lambda d: extent[d] // stored[d])
    per_object = row.values.nbytes * stored[cut] // max(extent[cut], 1)
    step = stored[cut] * max(1, piece_bytes // max(per_object, 1))
    offset = window[cut].start or 0
    for lo in range(0, extent[cut], step):
        hi = min(lo + step, extent[cut])
        window[cut] = slice(offset + lo, offset + hi)
        write_region(target, window, _along(row.values, cut, lo, hi - lo))


def _by_slab(
    progress: compute.Progress | None, widths: Sequence[int]
) -> Callable[[int], compute.Progress | None]:
    """For each slab, its task progress reported as raw chunks done out of all (``widths``:
    each slab's raw chunks), every slab's so far added up: slabs may be read side by side."""
    if progress is None:
        return lambda slab: None
    done_by_slab: dict[int, int] = {}
    lock = threading.Lock()

    def of(slab: int) -> compute.Progress:
        def report(done: int, tasks: int) -> None:
            with lock:  # (reported in the order taken)
                done_by_slab[slab] = (widths[slab] * done) // max(tasks, 1)
                progress(sum(done_by_slab.values()), sum(widths))

        return report

    return of


def _work(
    acc: spec.Accumulation,
    positions: Mapping[str, tuple[int, ...]],
    terms: tuple[str, ...],
    dim: str,
    slab_start: int,
    slab_stop: int,
    raw: bool = False,
    carried: bool = False,
    carries: bool = False,
) -> _Work:
    """What slab ``[slab_start, slab_stop)`` does for ``acc``. Along ``dim``: ``carried``,
    the slab before left its running sums at ``slab_start``; ``carries``, a slab follows,
    to be left the running sums at ``slab_stop``."""
    if dim not in acc.prefix_dims:
        return _Work(acc, positions, terms, slab_start, slab_stop, slab_start, raw)
    ends = positions[dim]
    # Entries ending at or before the slab's start are done; the slab computes those that
    # end within it (up to the end for the last slab), from the last done entry's end, or
    # from the slab's start with the running sums carried there.
    k0 = bisect.bisect_right(ends, slab_start)
    k1 = bisect.bisect_right(ends, slab_stop)
    raw_start = slab_start if carried else ends[k0 - 1] if k0 else 0
    raw_stop = slab_stop if carries else ends[k1 - 1] if k1 > k0 else raw_start
    return _Work(acc, positions, terms, raw_start, raw_stop, k0, carried=carried, carries=carries)
