"""Building a variable's ZEP 5 accumulation group with Dask, chunk by chunk.

Each raw chunk is read once and reduced, in one task, to its sums over every accumulated
combination (``sums.chunk_sums``). Per combination, those per-chunk sums are prefix-summed
along the accumulated axes, thinned to every ``stride``-th chunk, rechunked to the
accumulation array's chunks and written. Peak memory is a few raw chunks plus the (much
smaller) reduced chunks, whatever the size of the array.

Write order keeps readers safe: the group is created marked incomplete (queries ignore it),
arrays are filled, then the group is marked complete and consolidated metadata refreshed.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import dask
import dask.array as da
import numpy as np
import zarr

from accumulus import compute
from accumulus.accumulation import spec
from accumulus.accumulation.sums import chunk_sums
from accumulus.accumulation.weights import weight_values
from accumulus.cube import Cube, VariableInfo
from accumulus.errors import AccumulusError

# Accumulation arrays are chunked to about this many bytes (uncompressed): big enough that
# a time series reads few objects, small enough that reading one entry reads little else.
CHUNK_BUDGET = 4 * 2**20


@dataclass(frozen=True)
class BuildResult:
    variable: str
    action: str  # "built", "rebuilt" or "up to date"
    group: spec.AccumulationGroup
    arrays: tuple[str, ...]
    seconds: float


def terms_for(weights: str) -> tuple[str, ...]:
    """The sums a build stores: with unit weights, Σw·x is Σx and Σw is the count."""
    if weights == "none":
        return (spec.SUM, spec.COUNT)
    return (spec.WSUM, spec.WCOUNT, spec.SUM, spec.COUNT)


def build_accumulations(
    cube: Cube,
    variable: str,
    request: spec.BuildRequest,
    *,
    rebuild: bool = False,
    scheduler: str | None = None,
    progress: compute.Progress | None = None,
) -> BuildResult:
    """Build (or confirm up to date) ``variable``'s accumulation group in ``cube``'s store."""
    started = time.perf_counter()
    var = cube.variable(variable)
    check_request(var, request)
    coverage = dict(zip(var.dims, var.shape, strict=True))
    wanted = spec.make_group(variable, var.dims, request, coverage)
    existing = cube.accumulation_group(variable)
    action = "built"
    if existing is not None:
        same = existing.producer == "accumulus" and existing.config() == wanted.config()
        if same and existing.complete and dict(existing.coverage) == coverage and not rebuild:
            return BuildResult(variable, "up to date", existing, (), 0.0)
        if not same and existing.complete and not rebuild:
            raise AccumulusError(
                f"{variable!r} already has accumulations ({_describe(existing)}); asked for "
                f"{_describe(wanted)}. Add --rebuild (rebuild=True) to replace them"
            )
        action = "rebuilt"
    if scheduler and scheduler != "threads" and cube.label.startswith("memory://"):
        raise AccumulusError("memory:// stores live in this process: use the threads scheduler")

    root = _writable_root(cube)
    group = _create_group(root, wanted)
    targets = _create_arrays(group, var, wanted)
    sources = _accumulation_sources(cube, var, wanted)
    # Dask chunks match the target chunks, so no two tasks write the same chunk.
    writes = [
        da.store(sources[n].rechunk(t.chunks), t, lock=False, compute=False)
        for n, t in targets.items()
    ]
    compute.run(writes, scheduler=scheduler, progress=progress)

    done = spec.AccumulationGroup(**{**wanted.__dict__, "complete": True})
    group.attrs.put(spec.group_attributes(done))
    if cube.consolidated:
        zarr.consolidate_metadata(cube.store)
    return BuildResult(
        variable, action, done, tuple(sorted(targets)), time.perf_counter() - started
    )


def check_request(var: VariableInfo, request: spec.BuildRequest) -> None:
    if not request.combinations:
        raise AccumulusError("no dimension combination to accumulate was given")
    for combo in request.combinations:
        unknown = [d for d in combo if d not in var.dims]
        if unknown or not combo:
            raise AccumulusError(
                f"cannot accumulate {var.name!r} over {list(combo)}: dimension(s) {unknown} "
                f"not among its dimensions {list(var.dims)}"
            )
        if len(set(combo)) != len(combo):
            raise AccumulusError(f"dimension combination {list(combo)} repeats a dimension")
    for dim, stride in request.strides.items():
        if dim not in var.dims:
            raise AccumulusError(
                f"stride given for {dim!r}, which is not a dimension of {var.name!r} "
                f"{list(var.dims)}"
            )
        if int(stride) < 1:
            raise AccumulusError(f"stride for {dim!r} must be a positive integer, got {stride}")
    seen = [tuple(sorted(c)) for c in request.combinations]
    if len(set(seen)) != len(seen):
        raise AccumulusError("the same dimension combination is asked for twice")


def _describe(group: spec.AccumulationGroup) -> str:
    combos = "; ".join(
        ",".join(f"{d}/{s}" if s != 1 else d for d, s in zip(a.dims, a.strides, strict=True))
        for a in group.accumulations
    )
    return f"dims {combos}, weights {group.weights}"


def _writable_root(cube: Cube) -> zarr.Group:
    if cube.store.read_only:
        raise AccumulusError(f"{cube.label} is opened read-only; cannot write accumulations")
    return zarr.open_group(cube.store, mode="r+", use_consolidated=False)


def _create_group(root: zarr.Group, group: spec.AccumulationGroup) -> zarr.Group:
    if group.path in root:
        del root[group.path]
    return root.create_group(group.path, attributes=spec.group_attributes(group))


def accumulation_shape(var: VariableInfo, acc: spec.Accumulation) -> tuple[int, ...]:
    """Entries along accumulated dimensions, full extent along the others (array_dims order)."""
    shape = {}
    for dim, size, bounds in zip(var.dims, var.shape, var.bounds, strict=True):
        shape[dim] = bounds.n_chunks // acc.stride(dim) if dim in acc.dims else size
    return tuple(shape[d] for d in acc.array_dims)


def accumulation_chunks(
    shape: Sequence[int],
    accumulated: Sequence[bool],
    raw_chunks: Sequence[int],
    itemsize: int = 8,
    budget: int = CHUNK_BUDGET,
) -> tuple[int, ...]:
    """Chunk shape of an accumulation array of about ``budget`` bytes.

    Accumulated axes start with all their entries and are halved while the chunk is too big;
    the other axes start at the raw chunk size and are doubled while it is too small (up to
    their extent).
    """
    chunks = [
        max(1, n) if acc else max(1, c)
        for n, acc, c in zip(shape, accumulated, raw_chunks, strict=True)
    ]

    def nbytes() -> int:
        return prod(chunks) * itemsize

    while nbytes() > budget:
        axes = [i for i, acc in enumerate(accumulated) if acc and chunks[i] > 1]
        if not axes:
            break
        widest = max(axes, key=lambda i: chunks[i])
        chunks[widest] = (chunks[widest] + 1) // 2
    while nbytes() * 2 <= budget:
        axes = [i for i, acc in enumerate(accumulated) if not acc and chunks[i] < shape[i]]
        if not axes:
            break
        most_chunks = max(axes, key=lambda i: shape[i] / chunks[i])
        chunks[most_chunks] = min(chunks[most_chunks] * 2, shape[most_chunks])
    return tuple(chunks)


def _create_arrays(
    group: zarr.Group, var: VariableInfo, wanted: spec.AccumulationGroup
) -> dict[str, zarr.Array]:
    targets: dict[str, zarr.Array] = {}
    raw_chunk = {d: max(b.sizes, default=1) for d, b in zip(var.dims, var.bounds, strict=True)}
    v3 = group.metadata.zarr_format == 3
    for acc in wanted.accumulations:
        shape = accumulation_shape(var, acc)
        accumulated = [d in acc.dims for d in acc.array_dims]
        chunks = accumulation_chunks(shape, accumulated, [raw_chunk[d] for d in acc.array_dims])
        for name in acc.arrays.values():
            if name in targets:
                continue
            count = name == acc.arrays[spec.COUNT]
            # A fill value no real sum can take: a missing chunk is detected, not read as 0.
            targets[name] = group.create_array(
                name,
                shape=shape,
                chunks=chunks,
                dtype="int64" if count else "float64",
                fill_value=-1 if count else np.nan,
                attributes=spec.array_attributes(acc),
                dimension_names=acc.array_dims if v3 else None,
            )
    return targets


def _raw_dask_array(var: VariableInfo) -> da.Array:
    stored = da.from_array(
        var.array, chunks=tuple(b.sizes for b in var.bounds), lock=False, asarray=True
    )
    return stored.map_blocks(var.decoder, dtype="f8")


def _accumulation_sources(
    cube: Cube, var: VariableInfo, group: spec.AccumulationGroup
) -> dict[str, da.Array]:
    """For every accumulation array of ``group``, the Dask array of its entries."""
    x = _raw_dask_array(var)
    terms = terms_for(group.weights)
    full = {d: slice(0, n) for d, n in zip(var.dims, var.shape, strict=True)}
    weights = weight_values(cube.decoded, group.weights, var.dims, full)
    reductions = [tuple(var.axis(d) for d in acc.dims) for acc in group.accumulations]

    # One task per raw chunk computes all its reductions at once.
    grid = x.numblocks
    starts = [np.cumsum((0, *c[:-1])) for c in x.chunks]
    per_chunk = np.empty(grid, dtype=object)
    for index, block in zip(np.ndindex(*grid), x.to_delayed().ravel(), strict=True):
        w = weights
        if isinstance(weights, np.ndarray):
            w = weights[
                tuple(
                    slice(None) if weights.shape[a] == 1 else slice(s[i], s[i] + c[i])
                    for a, (i, s, c) in enumerate(zip(index, starts, x.chunks, strict=True))
                )
            ]
        per_chunk[index] = dask.delayed(chunk_sums, pure=True)(block, w, terms, reductions)

    sources: dict[str, da.Array] = {}
    for acc, axes in zip(group.accumulations, reductions, strict=True):
        pieces = np.empty(grid, dtype=object)
        for index in np.ndindex(*grid):
            shape = (
                len(terms),
                *(1 if a in axes else x.chunks[a][i] for a, i in enumerate(index)),
            )
            item = dask.delayed(operator.getitem, pure=True)(per_chunk[index], axes)
            pieces[index] = da.from_delayed(item, shape=shape, dtype="f8")
        sums = da.block(pieces.tolist()) if pieces.size else da.zeros((len(terms), *x.shape))
        for axis in axes:
            sums = da.cumsum(sums, axis=axis + 1)
            step = [slice(None)] * sums.ndim
            stride = acc.stride(var.dims[axis])
            step[axis + 1] = slice(stride - 1, None, stride)
            sums = sums[tuple(step)]
        order = [var.axis(d) for d in acc.array_dims]
        for t, term in enumerate(terms):
            name = acc.arrays[term]
            if name in sources:
                continue
            entries = sums[t].transpose(order)
            if name == acc.arrays[spec.COUNT]:
                entries = da.round(entries).astype("int64")
            sources[name] = entries
    return sources
