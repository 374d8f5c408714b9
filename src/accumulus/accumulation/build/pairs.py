"""Building and verifying a correlation's pair sums (``model.pairs``): ``accumulate --stats
corr:VAR2``.

Both variables are read one run of time steps at a time (between two chunk ends of the
first), the eight pair sums of the run taken with NumPy (``statistics.pair_sums``) and added
to a running total that is written as the run's entry. An update after the data grew keeps
the final entries whose positions did not move and goes on from the last of them; anything
else (other references, other positions, a rebuild) starts again.
"""

from __future__ import annotations

import numpy as np
import zarr

from accumulus.accumulation.build.placement import codecs
from accumulus.accumulation.model import pairs, statistics
from accumulus.accumulation.model.years import time_dimension
from accumulus.errors import AccumulusError
from accumulus.raw_cube import RawCube, VariableInfo
from accumulus.stores.arrays import consolidate


def partner_of(stats: list[str] | tuple[str, ...]) -> tuple[list[str], list[str]]:
    """``stats`` as ``accumulate --stats`` takes them, split into the statistics of one
    variable and the partners of ``corr:VAR2`` (a bare ``corr`` names none: refused)."""
    plain, partners = [], []
    for stat in stats:
        name, _, other = stat.partition(":")
        if name.strip() == "corr":
            if not other.strip():
                raise AccumulusError("--stats corr needs its second variable: corr:VAR2")
            partners.append(other.strip())
        else:
            plain.append(stat)
    return plain, partners


def check_partner(cube: RawCube, var: VariableInfo, other: str) -> str:
    """The time dimension ``var``'s pair sums with ``other`` run along, or an error naming
    what is wrong (checked before anything is written)."""
    if other not in cube.data_variables:
        raise AccumulusError(f"--stats corr:{other}: no such data variable")
    partner = cube.variable(other)
    if (partner.dims, partner.shape) != (var.dims, var.shape):
        sizes = dict(zip(partner.dims, partner.shape, strict=True))
        raise AccumulusError(
            f"--stats corr:{other}: dimensions {sizes} differ from {var.name!r}'s "
            f"{dict(zip(var.dims, var.shape, strict=True))}"
        )
    dim = time_dimension(cube.decoded, var.dims)
    if dim is None:
        raise AccumulusError(f"--stats corr:{other}: {var.name!r} has no time dimension")
    return dim


def _finite_mean(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(finite.mean()) if finite.size else 0.0


def build_pairs(
    cube: RawCube, variable: str, other: str, covered: int, rebuild: bool = False
) -> str:
    """Store (or bring up to date) the pair sums of ``variable`` with ``other`` in ``cube``;
    ``covered``: the extent along time whose chunk ends are final (``final_coverage``).
    Returns what was done: "built", "updated" or "up to date"."""
    var = cube.variable(variable)
    dim = check_partner(cube, var, other)
    axis = var.axis(dim)
    positions = tuple(var.bounds[axis].edges[1:])
    final = sum(p <= covered for p in positions)
    rest = [d for d in var.dims if d != dim]
    shape = (len(positions), pairs.ROWS, *(var.shape[var.axis(d)] for d in rest))
    root = zarr.open_group(cube.store, mode="r+", use_consolidated=False)
    found = None if rebuild else pairs.read_pairs(root, variable, other)
    start, total = 0, np.zeros(shape[1:])
    if found is not None and tuple(found[1].shape[2:]) == shape[2:]:
        old, array = found
        kept = 0
        while kept < min(old.final, final) and old.positions[kept] == positions[kept]:
            kept += 1
        if kept == len(positions) and old.final == final and old.positions == positions:
            return "up to date"
        start, references = kept, old.references
        if start:
            total = np.asarray(array[start - 1], dtype="f8")
        array.resize(shape)
        action = "updated"
    else:
        first = {d: slice(0, b.edges[1] if len(b.edges) > 1 else 0) for d, b in
                 zip(var.dims, var.bounds, strict=True)}  # fmt: skip
        references = (
            _finite_mean(cube.decoded_values(variable, first)),
            _finite_mean(cube.decoded_values(other, first)),
        )
        v3 = root.metadata.zarr_format == 3
        names = [f"{dim}_entry", "pair_sum", *rest]
        array = root.create_array(
            pairs.pairs_path(variable, other),
            shape=shape,
            chunks=(1, *shape[1:]),
            dtype="float64",
            fill_value=np.nan,
            dimension_names=names if v3 else None,
            attributes={} if v3 else {"_ARRAY_DIMENSIONS": names},
            overwrite=True,
            **codecs(3 if v3 else 2, bit_shuffle=False),
        )
        action = "built"
    # The description is taken away while entries are written, and put back last: a reader
    # sees the old entries described, or none (``read_pairs``: no description, no sums).
    array.attrs.pop(pairs.PAIRS_KEY, None)
    lo = positions[start - 1] if start else 0
    for k in range(start, len(positions)):
        box = {dim: slice(lo, positions[k])}
        x = cube.decoded_values(variable, box)
        y = cube.decoded_values(other, box)
        total = total + statistics.pair_sums(x, y, (axis,), references)
        array[k] = total
        lo = positions[k]
    described = pairs.PairSums(variable, other, dim, positions, final, references)
    array.attrs[pairs.PAIRS_KEY] = described.attributes()
    if cube.consolidated:
        consolidate(cube.store)
    return action


def verify_pairs(cube: RawCube, variable: str, root: zarr.Group) -> tuple[list[str], list[str]]:
    """Recompute every final entry of ``variable``'s pair sums (in ``root``) from the raw
    data: the arrays checked, and a line per one that differs."""
    checked, problems = [], []
    var = cube.variable(variable)
    for other in pairs.partners(root, variable):
        found = pairs.read_pairs(root, variable, other)
        if found is None:
            problems.append(f"{pairs.pairs_path(variable, other)}: unfinished (build again)")
            continue
        described, array = found
        axis = var.axis(described.dim)
        total = np.zeros(array.shape[1:])
        lo = 0
        for k, end in enumerate(described.usable_positions()):
            box = {described.dim: slice(lo, end)}
            x = cube.decoded_values(variable, box)
            y = cube.decoded_values(other, box)
            total = total + statistics.pair_sums(x, y, (axis,), described.references)
            stored = np.asarray(array[k])
            scale = np.maximum(np.abs(total), 1.0)
            if not np.all(np.abs(stored - total) <= 1e-9 * scale):
                problems.append(
                    f"{described.path}: entry {k} (to index {end} of {described.dim}) differs "
                    "from the raw data: rebuild it with `accumulus accumulate --rebuild`"
                )
                break
            lo = end
        checked.append(described.path)
    return checked, problems
