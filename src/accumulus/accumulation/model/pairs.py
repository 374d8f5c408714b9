"""A correlation's sums (``accumulate --stats corr:VAR2``): prefix sums of pairs along time.

Pearson's r of two variables over time needs sums over the pairs where *both* are valid (n,
Σa, Σb, Σa², Σb², Σab: ``statistics.PAIR_SUMS``), which no sum of one variable gives. They
are kept beside the first variable's accumulation group as one array per partner,
``V_accumulation_group/accumulus_pairs/VAR2``, of shape ``(entries, 8, *rest)``: entry k
holds the eight sums of ``statistics.pair_sums`` (the six, then the tallies of infinities)
over time ``[0, positions[k])``, at full resolution along the other dimensions (``rest``,
in the variable's order), each value less its variable's reference (the mean of its first
raw chunk's finite values: the squares then cancel little). Entries end at the variable's
chunk ends along time, so a map over whole chunks reads two entries; its description (the
positions, what is final, the references) is the array's ``accumulus_pairs`` attribute,
written after its entries. ZEP 5 readers do not look into the subgroup.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import zarr

from accumulus.accumulation.model import spec

PAIRS_GROUP = "accumulus_pairs"
PAIRS_KEY = "accumulus_pairs"
ROWS = 8  # statistics.PAIR_SUMS and the two tallies


def pairs_path(variable: str, other: str) -> str:
    """Where the pair sums of ``variable`` with ``other`` live, from the cube's root."""
    return f"{spec.group_name(variable)}/{PAIRS_GROUP}/{other}"


@dataclass(frozen=True)
class PairSums:
    """The pair sums of ``variable`` with ``other`` as stored: entry k sums time (``dim``)
    over ``[0, positions[k])``; the first ``final`` entries are final."""

    variable: str
    other: str
    dim: str
    positions: tuple[int, ...]
    final: int
    references: tuple[float, float]

    @property
    def path(self) -> str:
        return pairs_path(self.variable, self.other)

    def usable_positions(self) -> tuple[int, ...]:
        return self.positions[: self.final]

    def attributes(self) -> dict[str, Any]:
        return {
            "variable": self.variable,
            "with": self.other,
            "dim": self.dim,
            "positions": list(self.positions),
            "final": self.final,
            "references": list(self.references),
        }


def partners(root: zarr.Group, variable: str) -> list[str]:
    """The variables ``variable`` has pair sums with in ``root``."""
    node = root.get(f"{spec.group_name(variable)}/{PAIRS_GROUP}")
    if not isinstance(node, zarr.Group):
        return []
    return sorted(name for name, child in node.arrays() if PAIRS_KEY in child.attrs)


def read_pairs(
    root: zarr.Group, variable: str, other: str
) -> tuple[PairSums, zarr.Array[Any]] | None:
    """The pair sums of ``variable`` with ``other`` in ``root`` and their array; None when
    there are none (or an array without its description: a build that did not finish)."""
    node = root.get(pairs_path(variable, other))
    if not isinstance(node, zarr.Array):
        return None
    described = node.attrs.get(PAIRS_KEY)
    if not isinstance(described, dict):
        return None
    try:
        pairs = PairSums(
            variable=str(described["variable"]),
            other=str(described["with"]),
            dim=str(described["dim"]),
            positions=tuple(int(p) for p in described["positions"]),
            final=int(described["final"]),
            references=_two(described["references"]),
        )
    except (KeyError, TypeError, ValueError):
        return None
    if node.shape[0] < len(pairs.positions) or node.shape[1] != ROWS:
        return None
    return pairs, node


def _two(values: Sequence[Any]) -> tuple[float, float]:
    a, b = values
    return float(a), float(b)
