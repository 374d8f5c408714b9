"""Where accumulation entries end along a dimension: position rules (``--at DIM=RULE``).

An accumulation entry ``k`` along a dimension holds the sum over raw indices
``[0, positions[k])``. ZEP 5 puts the positions at raw chunk ends (every ``stride`` chunks);
accumulus also puts them where a user's questions start and end, whatever the chunks. A rule
is what a user writes after ``--at DIM=``:

- ``chunk`` (the default): at chunk ends, every ``--stride`` chunks: ZEP 5 as written;
- an integer ``N``: every N elements (``1``: every element, so any range is two entries);
- ``month`` or ``year``: at the calendar boundaries of the dimension's CF-decoded time
  coordinate, in whatever calendar it uses (``grid.period_keys``): whole months or years of
  daily data chunked by 73 days are two entries each;
- ``month+N`` (or ``year+N``): those boundaries, and every N elements counted from each
  period's start (``month+4`` on daily data: days 5, 9, ... of each month begin an entry):
  whole months are two entries, and any other period ends at most N/2 elements from one
  (a quarter of ``1``'s storage for ``month+4``; the raw elements between are read);
- labels (``2001-01-01,2006-01-01`` or ``-30,0,30``): before each label, in the
  coordinate's order (a range that starts at a label ends just before the next one).

Every rule also ends an entry at the data's end, as ZEP 5 counts a partial last chunk as a
chunk. Along the dimension a cube is appended to, that last entry is *provisional* unless the
rule fixes it (a multiple of N; a label or a month end followed by data): the next append
moves it, so queries do not use it (``final_entries``), as they do not use the entries of a
partial last chunk today.

Everything here is pure: positions are computed from sizes, chunk bounds and coordinates.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from accumulus.errors import AccumulusError
from accumulus.grid import CALENDAR_RULES, ChunkBounds, dim_items, period_keys

CHUNK = "chunk"
NAMED = (CHUNK, *CALENDAR_RULES)
# A calendar rule with steps within each period: ``month+4``.
_SUBDIVIDED = re.compile(r"^(" + "|".join(CALENDAR_RULES) + r")\+(\d+)$")

# "chunk", "month" or "year", "month+N" or "year+N"; an integer step N; or a tuple of labels
# (as text).
Rule = str | int | tuple[str, ...]


def parse_at(spec: str | Sequence[str] | Mapping[str, Any] | None) -> dict[str, Rule]:
    """Rules per dimension from ``--at`` text (``time=month``, ``lat=1,lon=1``,
    ``time=2001-01-01,2006-01-01``; repeated options merge) or a mapping
    (``{"time": "month", "lat": 1, "lon": ["-30", "0", "30"]}``)."""
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        return {str(dim): as_position_rule(value, str(dim)) for dim, value in spec.items()}
    items = dim_items(spec, "--at", "time=month, time=1 or lat=1,lon=1")
    return {
        dim: as_position_rule(values[0] if len(values) == 1 else tuple(values), dim)
        for dim, values in items.items()
    }


def as_position_rule(value: Any, dim: str) -> Rule:
    """One dimension's rule, checked. Text is a named rule, a step (an integer) or one
    label; a list or tuple is labels."""
    if isinstance(value, bool):
        raise AccumulusError(
            f"--at {dim}={value}: expected chunk, month, year, month+N, N or labels"
        )
    if isinstance(value, int | np.integer):
        if value < 1:
            raise AccumulusError(f"--at {dim}={value}: a step must be a positive integer")
        return int(value)
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in NAMED:
            return text.lower()
        subdivided = _SUBDIVIDED.match(text.lower().replace(" ", ""))
        if subdivided:
            if int(subdivided[2]) < 1:
                raise AccumulusError(f"--at {dim}={text}: a step must be a positive integer")
            return f"{subdivided[1]}+{int(subdivided[2])}"
        if not text:
            raise AccumulusError(f"--at {dim}=: give chunk, month, year, a step N or labels")
        try:
            step = int(text)
        except ValueError:
            return (text,)
        return as_position_rule(step, dim)
    if isinstance(value, Sequence) and value:
        labels = tuple(str(v).strip() for v in value)
        if any(not label for label in labels):
            raise AccumulusError(f"--at {dim}: an empty label in {list(value)}")
        return labels
    raise AccumulusError(
        f"--at {dim}={value!r}: expected chunk, month, year, month+N, a step N or a list of labels"
    )


def rule_text(rule: Rule) -> str:
    """A rule as a user writes it after ``--at DIM=``."""
    return ",".join(rule) if isinstance(rule, tuple) else str(rule)


def rule_json(rule: Rule) -> str | int | list[str]:
    """A rule as the group's ``accumulus`` attribute records it."""
    return list(rule) if isinstance(rule, tuple) else rule


def rule_from_json(value: Any, dim: str) -> Rule:
    return as_position_rule(tuple(value) if isinstance(value, list) else value, dim)


def rule_slug(rule: Rule) -> str:
    """A rule in an array name: ``1``, ``month``, ``month_4``, ``labels``."""
    return "labels" if isinstance(rule, tuple) else str(rule).replace("+", "_")


def rule_label(rule: Rule) -> str:
    """A rule as outputs name it: as written (``month+4``), or ``labels``."""
    return "labels" if isinstance(rule, tuple) else str(rule)


def subdivision(rule: Rule) -> tuple[str, int] | None:
    """The calendar period and step of a ``month+N`` rule; None for other rules."""
    found = _SUBDIVIDED.match(rule) if isinstance(rule, str) else None
    return (found[1], int(found[2])) if found else None


def is_fine(rule: Rule) -> bool:
    """Whether a rule puts entries within calendar periods (every N elements, or ``month+N``):
    as many entries as a fraction of the elements, where ``chunk``, ``month`` and labels put
    a few."""
    return isinstance(rule, int) or subdivision(rule) is not None


def is_chunk_rule(rule: Rule) -> bool:
    return rule == CHUNK


def entry_positions(
    rule: Rule,
    size: int,
    *,
    dim: str,
    bounds: ChunkBounds | None = None,
    stride: int = 1,
    index: pd.Index | None = None,
) -> tuple[int, ...]:
    """Where each entry along a dimension of length ``size`` ends under ``rule``: strictly
    increasing positions in ``(0, size]``, the last one ``size`` (for ``chunk``, ZEP 5's:
    a trailing group of fewer than ``stride`` chunks has no entry). ``bounds``: the raw
    chunks (``chunk``); ``index``: the decoded coordinate (calendar rules and labels)."""
    if size <= 0:
        return ()
    if rule == CHUNK:
        if bounds is None:
            raise ValueError("chunk positions need the chunk bounds")
        return bounds.strided_edges(stride)
    if isinstance(rule, int):
        return (*range(rule, size + 1, rule), *((size,) if size % rule else ()))
    if index is None or len(index) != size:
        raise AccumulusError(
            f"--at {dim}={rule_text(rule)}: dimension {dim!r} needs a coordinate of its length"
        )
    steps = subdivision(rule)
    if rule in CALENDAR_RULES or steps is not None:
        period, step = steps if steps is not None else (str(rule), 0)
        try:
            keys = period_keys(np.asarray(index), period)
        except ValueError as exc:
            raise AccumulusError(
                f"--at {dim}={rule} needs a CF time coordinate, but {dim!r} holds {exc}"
            ) from None
        changes = (np.flatnonzero(np.diff(keys)) + 1).tolist()
        if not step:
            return (*changes, size)
        starts, ends = [0, *changes], [*changes, size]
        return tuple(
            p for a, b in zip(starts, ends, strict=True) for p in (*range(a + step, b, step), b)
        )
    assert isinstance(rule, tuple)
    found = {label_position(index, dim, label) for label in rule}
    return (*sorted(p for p in found if 0 < p < size), size)


def label_position(index: pd.Index, dim: str, label: str) -> int:
    """How many coordinate values come before ``label`` in the coordinate's order (for a
    descending coordinate, the values above it): where a range that starts at ``label``
    starts, as ``sel(dim=slice(label, ...))`` selects it."""
    if len(index) > 1 and not (index.is_monotonic_increasing or index.is_monotonic_decreasing):
        raise AccumulusError(f"--at {dim}: coordinate {dim!r} is not monotonic")
    value: Any = label
    if pd.api.types.is_numeric_dtype(index.dtype):
        try:
            value = float(label)
        except ValueError:
            raise AccumulusError(f"--at {dim}: label {label!r} is not a number") from None
    elif isinstance(index, pd.DatetimeIndex):
        try:
            value = pd.Timestamp(label)
        except ValueError:
            raise AccumulusError(
                f"--at {dim}: label {label!r} is not a date (use ISO 8601, e.g. 2001-01-01)"
            ) from None
    try:
        return int(index.get_slice_bound(value, "left"))
    except (KeyError, ValueError, TypeError) as exc:
        raise AccumulusError(f"--at {dim}: cannot place label {label!r}: {exc}") from None


def final_entries(rule: Rule, positions: Sequence[int], size: int, appended: bool) -> int:
    """How many of the entries at ``positions`` are final. All of them, unless the cube is
    appended along this dimension (``appended``) and the last one ends at the data's end
    where the rule does not fix it: the next append moves it (a month still open, a step
    not yet complete, a label past the data); a ``month+N`` step left short at the data's
    end is not final however the data grow. ``chunk`` entries are judged by the raw
    chunks instead (``build.accumulate.final_coverage``): all are counted here."""
    n = len(positions)
    if not n or rule == CHUNK or positions[-1] < size:
        return n
    steps = subdivision(rule)
    if steps is not None:
        # A step left short at the data's end: the data growing moves that entry, whoever
        # grows them (``append``, or xarray's ``to_zarr(append_dim=...)``).
        return n if size - (positions[-2] if n > 1 else 0) == steps[1] else n - 1
    if not appended or (isinstance(rule, int) and size % rule == 0):
        return n
    return n - 1
