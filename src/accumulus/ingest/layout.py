"""How a cube created by ``append`` is chunked.

On creation, chunk shapes come from the user (``--chunks time=40``) or from the rule of thumb
of the seed on continuously extended Zarr datasets: object stores charge about 100 ms per
request, so a chunk should hold more than 10 MiB; several chunks should fit in memory at once,
so not much more than 100 MiB. Data variables therefore get as many steps of the append
dimension as fit in 100 MiB, whole along the other dimensions (split only when one step alone
is larger). Coordinates along the append dimension (time itself, time bounds) are small 1-D
arrays: they get chunks of about 1 MiB, not the data's 40 steps.

With ``--chunking month|year|per-granule`` the data variables get variable chunks along the
append dimension instead (ZEP 3: a rectilinear chunk grid, Zarr v3), declared as values
arrive: where chunk edges fall for new data is ``grid.RegularGrid`` and ``grid.VariableGrid``.

With ``--shards`` (Zarr v3) the data variables' chunks are packed into shards, one object
each: ``choose_shards`` checks that the shards hold whole chunks. A shard is then what an
append writes whole (and rewrites when it was partial), the chunks inside it what readers
and accumulations read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from math import prod

from accumulus.errors import AccumulusError
from accumulus.grid import MONTH, PER_GRANULE, YEAR, growing_rule

TARGET_CHUNK_BYTES = 100 * 2**20
MIN_CHUNK_BYTES = 10 * 2**20
COORDINATE_CHUNK_BYTES = 2**20

# The variable chunk rules of appends, as the chunk choice explains them.
RULE_TEXT = {
    MONTH: "one chunk per calendar month",
    YEAR: "one chunk per calendar year",
    PER_GRANULE: "one chunk per granule",
}


@dataclass(frozen=True)
class ArraySpec:
    """What the chunk choice needs to know about one array."""

    dims: tuple[str, ...]
    shape: tuple[int, ...]  # of one granule; the append dimension's size is irrelevant
    itemsize: int
    is_coordinate: bool  # a coordinate (or bounds) variable rather than data


@dataclass(frozen=True)
class ChunkChoice:
    chunks: dict[str, tuple[int, ...]]  # array name -> chunk shape, in its dimensions' order
    reason: str  # what was chosen and why, for the user
    # The variable rule chunks along the append dimension follow when chosen here (growing
    # chunks, ``grid.growing_rule``); None: as asked, or regular.
    rule: str | None = None
    # Data variables' shard shapes (inner chunks are ``chunks``); empty: not sharded.
    shards: dict[str, tuple[int, ...]] = field(default_factory=dict)


def choose_chunks(
    arrays: Mapping[str, ArraySpec],
    dim: str,
    given: Mapping[str, int] | None = None,
    rule: str | None = None,
    month: int | None = None,
    grow: bool = False,
) -> ChunkChoice:
    """Chunk shapes for every array of a new cube appended along ``dim``.

    With a variable ``rule`` (a key of ``RULE_TEXT``) the data variables' chunks along
    ``dim`` are declared as values arrive (``VariableGrid``); the arrays are created, still
    empty, with one step there. ``month``: how many steps of the archive's cadence make a
    calendar month; chunks chosen from bytes hold about that many (``cadence_steps``). ``grow``
    (Zarr v3): chunks chosen from bytes grow to that size with the cube (``GrowingGrid``):
    the arrays are created with one step along ``dim`` and ``rule`` says how they grow."""
    given = dict(given or {})
    _check_dimensions("--chunks", given, arrays)
    for d, size in given.items():
        if int(size) < 1:
            raise AccumulusError(f"--chunks {d}={size}: a chunk size must be a positive integer")
    data = {n: s for n, s in arrays.items() if dim in s.dims and not s.is_coordinate}
    chunks: dict[str, tuple[int, ...]] = {}
    step_chunks = {n: _step_chunks(s, dim, given) for n, s in data.items()}
    step_bytes = {n: _chunk_bytes(data[n], step_chunks[n], dim, 1) for n in data}
    largest = max(step_bytes, key=step_bytes.__getitem__, default=None)
    if rule is not None:
        steps = 1
    elif dim in given:
        steps = int(given[dim])
    elif largest is not None:
        steps = cadence_steps(step_bytes[largest], month)
    else:
        steps = 1
    grown = growing_rule(steps) if grow and rule is None and dim not in given and data else None
    for name, spec in arrays.items():
        sizes = dict(zip(spec.dims, spec.shape, strict=True))
        if name in data:
            # Growing chunks are declared as values arrive (``GrowingGrid``).
            along = 1 if grown else steps
            chunks[name] = _with(spec.dims, step_chunks[name], dim, along)
        elif dim in spec.dims:
            one_step = prod(n for d, n in sizes.items() if d != dim) * spec.itemsize
            along = max(1, COORDINATE_CHUNK_BYTES // max(1, one_step))
            chunks[name] = _with(spec.dims, spec.shape, dim, along)
        else:
            chunks[name] = tuple(max(1, n) for n in spec.shape)
    shown = dict(chunks)
    if grown and largest is not None:
        shown[largest] = _with(data[largest].dims, step_chunks[largest], dim, steps)
    reason = _reason(data, shown, step_bytes, largest, dim, steps, given, rule, month)
    if grown:
        reason = reason.replace(f"{dim}={steps}", f"{dim}=up to {steps}", 1)
        reason = _with_growth(reason, dim, steps)
    return ChunkChoice(chunks, reason, rule=grown)


def _with_growth(reason: str, dim: str, steps: int) -> str:
    """``reason`` saying, before its note on coordinates, how chunks grow to ``steps``."""
    tail = f"); coordinates along {dim} in chunks of about 1 MiB"
    growth = (
        f"; chunks along {dim} grow with the cube, each new one as long as the cube before "
        f"it, up to {steps} steps: a query decodes at most about twice what the cube holds"
    )
    head = reason.removesuffix(tail)
    return f"{head}{growth}{tail}" if head != reason else f"{reason}{growth}"


def cadence_steps(step_bytes: int, month: int | None) -> int:
    """How many steps of the append dimension a chunk holds when they are not given: a
    calendar month of them (``month``), but at least as many as make ``MIN_CHUNK_BYTES`` and
    at most as many as fit ``TARGET_CHUNK_BYTES``. Every cadence alike: 6-hourly 1-degree
    maps get a month, daily ones 10 MiB (41 days), yearly ones 10 MiB (41 years, where a
    51-year series used to read 51 chunks), a 10 x 10 cut of half-hourly IMERG 10 MiB.
    Chunks that grow (``grid.GrowingGrid``) reach this size once the cube has; while a chunk
    fills, what follows the accumulations' coverage is at most this."""
    steps = max(1, TARGET_CHUNK_BYTES // step_bytes)
    if month is None:
        return steps
    floor = -(-MIN_CHUNK_BYTES // step_bytes)
    return min(steps, max(month, floor))


def _check_dimensions(
    option: str, given: Mapping[str, int], arrays: Mapping[str, ArraySpec]
) -> None:
    """Every dimension ``option`` names is one of the granule's."""
    known = {d for spec in arrays.values() for d in spec.dims}
    unknown = sorted(set(given) - known)
    if unknown:
        raise AccumulusError(
            f"{option} names dimension(s) {unknown} that the granule does not have; "
            f"its dimensions are {sorted(known)}"
        )


def choose_shards(
    choice: ChunkChoice,
    arrays: Mapping[str, ArraySpec],
    dim: str,
    given: Mapping[str, int],
) -> ChunkChoice:
    """``choice`` with the data variables (those along ``dim``) in shards of ``given``
    sizes ({dimension: size}; a dimension not given gets one chunk per shard). A shard holds
    whole chunks: every size must be a multiple of the chunk size along its dimension."""
    if not given:
        return choice
    _check_dimensions("--shards", given, arrays)
    for d, size in given.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise AccumulusError(f"--shards {d}={size}: a shard size must be a positive integer")
    shards: dict[str, tuple[int, ...]] = {}
    for name, spec in arrays.items():
        if dim not in spec.dims or spec.is_coordinate:
            continue
        chunks = choice.chunks[name]
        for d, chunk in zip(spec.dims, chunks, strict=True):
            size = given.get(d, chunk)
            if size % chunk:
                raise AccumulusError(
                    f"--shards {d}={size}: a shard holds whole chunks, and {name}'s chunks are "
                    f"{chunk} along {d}; give a multiple of {chunk} (or choose the chunks with "
                    "--chunks)"
                )
        shards[name] = tuple(given.get(d, c) for d, c in zip(spec.dims, chunks, strict=True))
    if not shards:
        return choice
    name = max(shards, key=lambda n: prod(shards[n]) * arrays[n].itemsize)
    spec = arrays[name]
    text = ", ".join(f"{d}={n}" for d, n in zip(spec.dims, shards[name], strict=True))
    inner = prod(s // c for s, c in zip(shards[name], choice.chunks[name], strict=True))
    shard_bytes = prod(shards[name]) * spec.itemsize
    # Objects are shards now: warn about their size, not the chunks'.
    small = SMALL_OBJECTS if shard_bytes < MIN_CHUNK_BYTES else ""
    reason = (
        f"{choice.reason.replace(SMALL_OBJECTS, '')}; data in shards {text} ({inner} chunks "
        f"of {name} per shard, {_mib(shard_bytes)}: one object each, its chunks read one by "
        f"one{small})"
    )
    return replace(choice, shards=shards, reason=reason)


def _step_chunks(spec: ArraySpec, dim: str, given: Mapping[str, int]) -> list[int]:
    """Chunk sizes of one step of ``dim``: given sizes, else whole dimensions; dimensions not
    given are halved (largest first) while one step is bigger than the target."""
    sizes = zip(spec.dims, spec.shape, strict=True)
    chunks = [1 if d == dim else max(1, int(given.get(d, n))) for d, n in sizes]
    free = [i for i, d in enumerate(spec.dims) if d != dim and d not in given]
    while prod(chunks) * spec.itemsize > TARGET_CHUNK_BYTES:
        splittable = [i for i in free if chunks[i] > 1]
        if not splittable:
            break
        widest = max(splittable, key=chunks.__getitem__)
        chunks[widest] = (chunks[widest] + 1) // 2
    return chunks


def _with(dims: Sequence[str], chunks: Sequence[int], dim: str, steps: int) -> tuple[int, ...]:
    """``chunks`` with ``steps`` along ``dim``."""
    return tuple(steps if d == dim else max(1, c) for d, c in zip(dims, chunks, strict=True))


def _chunk_bytes(spec: ArraySpec, chunks: Sequence[int], dim: str, steps: int) -> int:
    return prod(_with(spec.dims, chunks, dim, steps)) * spec.itemsize


def _reason(
    data: Mapping[str, ArraySpec],
    chunks: Mapping[str, tuple[int, ...]],
    step_bytes: Mapping[str, int],
    largest: str | None,
    dim: str,
    steps: int,
    given: Mapping[str, int],
    rule: str | None,
    month: int | None = None,
) -> str:
    if largest is None:
        return f"no data variable along {dim!r}; coordinates get chunks of about 1 MiB"
    spec = data[largest]
    shape: dict[str, int | str] = dict(zip(spec.dims, chunks[largest], strict=True))
    if rule is not None:
        shape[dim] = rule
    text = ", ".join(f"{d}={n}" for d, n in shape.items())
    size = _mib(step_bytes[largest] * steps)
    if rule is not None:
        return (
            f"chunks {text} ({RULE_TEXT[rule]} of {dim}, in a rectilinear chunk grid of Zarr "
            f"v3; one {dim} step of {largest} is {size}); coordinates along {dim} in chunks "
            "of about 1 MiB"
        )
    if dim in given:
        why = f"{dim}={steps} as given; {largest} chunks are {size}"
    elif month is not None and steps == month:
        why = (
            f"one {dim} step of {largest} is {_mib(step_bytes[largest])}; a chunk holds a "
            f"calendar month of steps, {steps} here, {size} (--chunks or --chunking choose "
            "otherwise)"
        )
    elif month is not None and month < steps < TARGET_CHUNK_BYTES // step_bytes[largest]:
        why = (
            f"one {dim} step of {largest} is {_mib(step_bytes[largest])}; a calendar month "
            f"of steps ({month}) makes less than 10 MiB, so a chunk holds {steps} steps, "
            f"{size} (--chunks or --chunking choose otherwise)"
        )
    else:
        why = (
            f"one {dim} step of {largest} is {_mib(step_bytes[largest])}, so {steps} steps "
            f"make chunks of {size}: the 10–100 MiB that object storage wants (above 10 MiB "
            "the ~100 ms per request is amortized; up to 100 MiB several chunks fit in memory)"
        )
    total = step_bytes[largest] * steps
    if total < MIN_CHUNK_BYTES and not (month is not None and steps == month):
        why += SMALL_OBJECTS
    elif total > TARGET_CHUNK_BYTES:
        why += "; above 100 MiB, few chunks fit in memory at once"
    return f"chunks {text} ({why}); coordinates along {dim} in chunks of about 1 MiB"


SMALL_OBJECTS = "; below 10 MiB, reads from object storage will pay many requests"


def _mib(n: float) -> str:
    if n < 1024:
        return f"{n:.0f} B"
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 / 10 else f"{n / 1024:.1f} KiB"


# Blosc blocks of a data chunk along the append dimension (``step_blocksize``): c-blosc 1.x
# (numcodecs' own) splits a block of values of up to 16 bytes into one stream per byte of
# a value, and then reads a block size asked for as a count of values, keeping blocks of
# 64 KiB to 1 MiB (and at most 256 Ki values).
BLOCK_MIN_BYTES = 2**16
BLOCK_MAX_BYTES = 2**20
_BLOCK_MAX_VALUES = 2**18
_SPLIT_ITEMSIZE = 16


def step_blocksize(chunks: Sequence[int], itemsize: int) -> int | None:
    """numcodecs' ``Blosc(blocksize=...)`` for a data chunk of ``chunks`` (the append
    dimension first) of values of ``itemsize`` bytes, so that its Blosc blocks hold whole
    steps of the append dimension (as many as make 64 KiB), or a whole number of them one
    step (a step of more than 1 MiB): a map's raw day at a period's end then decodes its
    own block, not the two 512 KiB blocks c-blosc would choose around it (docs/appending.md).
    None where no such blocks are possible: a 1-D array, values wider than 16 bytes, or a
    step whose values divide into no block of 1 MiB or less."""
    if len(chunks) < 2 or itemsize > _SPLIT_ITEMSIZE:
        return None
    values = prod(chunks[1:])  # of one step
    largest = min(BLOCK_MAX_BYTES // itemsize, _BLOCK_MAX_VALUES)  # values in a block
    if values <= largest:
        steps = max(1, -(-BLOCK_MIN_BYTES // (values * itemsize)))
        return min(steps * values, largest // values * values)
    fewest = -(-values // largest)
    return next((values // n for n in range(fewest, 4 * fewest) if values % n == 0), None)
