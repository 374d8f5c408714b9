"""ZEP 5 layout: names, the ``_ACCUMULATION_GROUP`` tree, array attributes, JSON schemas.

A variable ``V`` with dimensions ``D`` gets a group ``V_accumulation_group`` beside it. Its
attribute ``_ACCUMULATION_GROUP`` is the recursive tree of ZEP 5: keys are dimension names in
``D``'s order, every ordered combination is present, a combination that is not accumulated is
``{}``, and a leaf names its arrays under ``_DATA_WEIGHTED``, ``_DATA_UNWEIGHTED`` and
``_WEIGHTS``. Each array carries ``_ARRAY_DIMENSIONS`` and ``_ACCUMULATION_STRIDE``.

What ZEP 5 has no key for lives in one extra group attribute, ``accumulus`` (the schema allows
extra top-level attributes): the weights used, the raw extent covered, whether the build
finished, and the arrays of valid-value counts that unweighted means need when the weights
are not all one.

Accumulations with entries at other positions than chunk ends (``positions``: every N
elements, month or year boundaries, labels) are not ZEP 5 accumulations: they are left out
of ``_ACCUMULATION_GROUP`` (a ZEP 5 reader sees ``{}`` for their combination, or the
chunk-end arrays of the same combination if there are any, and is not misled) and described
in the ``accumulus`` attribute under ``positioned``, with their positions. Their arrays carry
``_ARRAY_DIMENSIONS`` but no ``_ACCUMULATION_STRIDE``, which could only say "every k chunks",
so they live in a subgroup, ``accumulus_positions``, where a ZEP 5 reader does not look: the
group itself and every array in it follow the seed's schemas. The ``accumulus`` attribute
names them by their path in the group (``accumulus_positions/acc_time_at_month``); groups
written before (positioned arrays directly in the group) are read as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any, Literal

import jsonschema

from accumulus.accumulation.model.positions import (
    Rule,
    entry_positions,
    is_fine,
    rule_from_json,
    rule_json,
    rule_label,
    rule_slug,
)
from accumulus.errors import AccumulusError
from accumulus.grid import ChunkBounds

# Weights as a group records them and a query names them: "area" (cos latitude), "none" (every
# valid value weighs 1), "array:NAME" (an array of the dataset, which a user may name bare), or
# "unknown" in another producer's group.
Weights = Literal["area", "none"] | str

GROUP_SUFFIX = "_accumulation_group"
TREE_KEY = "_ACCUMULATION_GROUP"
EXTENSION_KEY = "accumulus"
FORMAT_VERSION = 1

# The sums an accumulation can hold. ZEP 5 names three; "count" (valid values) is ours.
WSUM = "wsum"  # Σ w·x   _DATA_WEIGHTED
WCOUNT = "wcount"  # Σ w     _WEIGHTS
SUM = "sum"  # Σ x     _DATA_UNWEIGHTED
COUNT = "count"  # Σ 1     (with weights "none" this is _WEIGHTS)
# Sums of squares about the group's reference value c (opt-in: ``accumulate --stats var``).
WSUMSQ = "wsumsq"  # Σ w·(x−c)²
SUMSQ = "sumsq"  # Σ (x−c)²
# Sums against time t in years since the first step (``years``): a trend's.
TSUM = "tsum"  # Σ t     over the valid values
TTSUM = "ttsum"  # Σ t²
TXSUM = "txsum"  # Σ t·x
OPTIONAL = (WSUMSQ, SUMSQ, TSUM, TTSUM, TXSUM)  # the sums a build stores only when asked
# Tallies: how many values are +inf and -inf. Sums hold finite values only (a prefix sum
# that met an infinity would carry it forever, and inf - inf is NaN); an answer is rebuilt
# from the sums and the tallies of its range. Kept only where values can be infinite.
POSINF = "posinf"
NEGINF = "neginf"
TALLIES = (POSINF, NEGINF)
ZEP5_KEYS = {WSUM: "_DATA_WEIGHTED", WCOUNT: "_WEIGHTS", SUM: "_DATA_UNWEIGHTED"}
_TERM_OF_KEY = {v: k for k, v in ZEP5_KEYS.items()}

_ARRAY_PREFIX = {
    WSUM: "acc",
    WCOUNT: "acc_wt",
    SUM: "acc_uw",
    COUNT: "acc_n",
    POSINF: "acc_pinf",
    NEGINF: "acc_ninf",
}

# The sums a positioned accumulation stores when its weights factor out of them: the
# weighted ones are the weights times these (Σw·x = w·Σx, Σw = w·count).
FACTORED_HOLDERS = {SUM: SUM, COUNT: COUNT}

# What ZEP 5's stride counts along a dimension: the raw array's chunks, or, for a sharded
# raw array, its inner chunks (each readable on its own, as a byte range of its shard).
# Groups say "inner chunk" in their ``accumulus`` attribute; no mention means "chunk".
CHUNK = "chunk"
INNER_CHUNK = "inner chunk"

# The subgroup of an accumulation group holding its positioned arrays.
POSITIONS_GROUP = "accumulus_positions"


def group_name(variable: str) -> str:
    return f"{variable}{GROUP_SUFFIX}"


def array_name(term: str, dims: Sequence[str]) -> str:
    """Accumulation array names in the style of the ZEP 5 example: acc_lat_lon, acc_wt_time."""
    return f"{_ARRAY_PREFIX.get(term, f'acc_{term}')}_{'_'.join(dims)}"


@dataclass(frozen=True)
class Placement:
    """Where a positioned accumulation's entries end, and how its sums are stored.

    ``accumulated`` are the dimensions its arrays hold prefix sums along; the combination's
    other dimensions (``rows``) are kept at full resolution and summed when queried: a
    latitude+longitude accumulation at every element with area weights holds prefix sums
    along longitude for each latitude row, as the weights vary along latitude only.
    ``factored``: the weights do not vary along ``accumulated``, so only Σx and the count are
    stored and the weighted sums are formed at query time (Σw·x = w·Σx, Σw = w·count).
    """

    rules: Mapping[str, Rule]  # per dimension of the combination
    accumulated: tuple[str, ...]
    positions: Mapping[str, tuple[int, ...]]  # per accumulated dim: where each entry ends
    final: Mapping[str, int]  # per accumulated dim: entries that are not provisional
    factored: bool = False

    def rows(self, dims: Sequence[str]) -> tuple[str, ...]:
        return tuple(d for d in dims if d not in self.accumulated)


@dataclass(frozen=True)
class Accumulation:
    """One accumulated combination of dimensions and the arrays holding its prefix sums:
    entries at chunk ends (ZEP 5, ``placement`` None) or at positions of a rule."""

    dims: tuple[str, ...]  # the combination, in the variable's order
    strides: tuple[int, ...]  # one per dimension of the combination, >= 1 (ZEP 5)
    arrays: Mapping[str, str]  # term (WSUM, WCOUNT, SUM, COUNT) -> array name in the group
    array_dims: tuple[str, ...]  # _ARRAY_DIMENSIONS of those arrays: a permutation of D
    placement: Placement | None = None

    def stride(self, dim: str) -> int:
        return self.strides[self.dims.index(dim)]

    @property
    def is_zep5(self) -> bool:
        return self.placement is None

    @property
    def prefix_dims(self) -> tuple[str, ...]:
        """The dimensions the arrays hold prefix sums along (entries, not indices)."""
        return self.dims if self.placement is None else self.placement.accumulated

    @property
    def factored(self) -> bool:
        return self.placement is not None and self.placement.factored

    @property
    def key(self) -> str:
        """Names the accumulation within its group: ``time`` (ZEP 5), ``time@month``."""
        dims = ",".join(self.dims)
        if self.placement is None:
            return dims
        return f"{dims}@{','.join(rule_slug(self.placement.rules[d]) for d in self.dims)}"

    def entry_positions(self, bounds: Mapping[str, ChunkBounds]) -> dict[str, tuple[int, ...]]:
        """Where each entry ends along each prefix dimension (``bounds``: the raw chunks)."""
        if self.placement is not None:
            return dict(self.placement.positions)
        return {d: bounds[d].strided_edges(self.stride(d)) for d in self.dims}

    def rule_text(self) -> str:
        """Where the entries are, as a person reads it: ``chunk ends``, ``time=month``."""
        if self.placement is None:
            strides = ",".join(map(str, self.strides))
            return "chunk ends" + (f" (stride {strides})" if set(self.strides) != {1} else "")
        rules = self.placement.rules
        return ",".join(f"{d}={rule_label(rules[d])}" for d in self.dims)


@dataclass(frozen=True)
class AccumulationGroup:
    """What a variable's accumulation group holds, read from (or about to be written to) a store."""

    variable: str
    variable_dims: tuple[str, ...]
    accumulations: tuple[Accumulation, ...]
    weights: Weights
    coverage: Mapping[str, int]  # raw extent covered, per variable dimension
    complete: bool = True
    producer: str = "accumulus"
    stride_unit: str = CHUNK  # CHUNK or INNER_CHUNK: what the strides count
    # Whether the values summed held an infinity (their tallies are then read by queries;
    # otherwise they are all 0 and not read). None: not recorded (no tallies, or a group
    # built before tallies).
    infinities: bool | None = None
    # The value sums of squares are taken about (``statistics``: centred sums); None where
    # the group holds none.
    reference: float | None = None

    @property
    def path(self) -> str:
        return group_name(self.variable)

    def find(self, dims: Iterable[str]) -> Accumulation | None:
        wanted = set(dims)
        return next((a for a in self.accumulations if set(a.dims) == wanted), None)

    def by_key(self, key: str) -> Accumulation:
        return next(a for a in self.accumulations if a.key == key)

    def is_sums_sibling(self, acc: Accumulation) -> bool:
        """Whether ``acc`` holds a statistic's optional sums beside another accumulation of
        the same dimensions that holds none (``split_for_sums``): it was added for them."""
        return bool(set(acc.arrays) & set(OPTIONAL)) and any(
            other.dims == acc.dims and not set(other.arrays) & set(OPTIONAL)
            for other in self.accumulations
        )

    @property
    def chosen(self) -> tuple[Accumulation, ...]:
        """The accumulations a user asked for: all but the sums' siblings."""
        return tuple(a for a in self.accumulations if not self.is_sums_sibling(a))

    def config(self) -> dict[str, Any]:
        """What a user chose when building: compared to refuse silent reconfiguration."""

        def rules(a: Accumulation) -> list[Any]:
            if a.placement is None:
                return []
            return [rule_json(a.placement.rules[d]) for d in a.dims]

        return {
            "weights": self.weights,
            "accumulations": sorted(
                ([list(a.dims), list(a.strides), rules(a)] for a in self.accumulations),
                key=json.dumps,  # (rules mix words and steps: "chunk", 1)
            ),
            "stride_unit": self.stride_unit,
            "sums": sorted({t for a in self.accumulations for t in a.arrays if t in OPTIONAL}),
        }

    def request(self) -> BuildRequest:
        """The request this group was built from (to bring it up to date, or build it
        again elsewhere)."""
        strides: dict[str, int] = {}
        at: dict[str, Rule] = {}
        for acc in self.chosen:
            for dim, stride in zip(acc.dims, acc.strides, strict=True):
                strides.setdefault(dim, stride)
            if acc.placement is not None:
                for dim, rule in acc.placement.rules.items():
                    at.setdefault(dim, rule)
        return BuildRequest(
            combinations=tuple(acc.dims for acc in self.chosen),
            strides=strides,
            weights=self.weights,
            at=at,
            sums=tuple(sorted({t for a in self.accumulations for t in a.arrays if t in OPTIONAL})),
        )


@dataclass(frozen=True)
class BuildRequest:
    """A user's choice of combinations, strides, positions and weights for one variable."""

    combinations: tuple[tuple[str, ...], ...]
    strides: Mapping[str, int] = field(default_factory=dict)
    weights: Weights = "none"
    at: Mapping[str, Rule] = field(default_factory=dict)  # dims not named: "chunk"
    # Accumulation arrays in shards (Zarr v3): None for "when the raw array is sharded".
    # How arrays are stored, not what they hold: not part of the group's configuration.
    shards: bool | None = None
    # Optional sums to store beside the default ones (``statistics.extra_sums``).
    sums: tuple[str, ...] = ()
    # Every combination positioned, at chunk ends too (``split_for_sums``' siblings: their
    # entries are final or provisional as positioned ones are).
    positioned: bool = False
    # Variables to keep a correlation's pair sums with (``--stats corr:VAR2``, ``pairs``).
    partners: tuple[str, ...] = ()

    def rules(self, combination: Sequence[str]) -> dict[str, Rule]:
        return {d: self.at.get(d, "chunk") for d in combination}

    def is_positioned(self, combination: Sequence[str]) -> bool:
        return self.positioned or any(r != "chunk" for r in self.rules(combination).values())


def split_for_sums(
    request: BuildRequest, dated: str | None
) -> tuple[BuildRequest, tuple[BuildRequest, ...]]:
    """Where a build stores the optional sums of ``request`` (a statistic's: Σ(x−c)², Σt·x, ...).

    A combination with entries every N elements (the default layout's, every 2 days and
    at every cell) would hold each optional sum as one more full-size float64 array (Σx² 4.3x
    the raw bytes, docs/benchmarks.md); the maps the statistics answer need entries where
    periods start and end, not at every day. So such a combination keeps the default sums
    only, and the optional ones go to *siblings* of the same dimensions at chunk ends (the
    first of several keeping its rule: rows of latitude) and, for the time dimension
    ``dated`` alone, at month boundaries, each with the default sums
    beside (an accumulation holds every sum a plan reads from it). Other combinations (at
    chunk ends, months, labels) are coarse already and hold them inline.

    Returns the request for the fine combinations without optional sums (all of them, with
    their sums, when none is fine), and the requests holding the optional sums: the coarse
    combinations' and one per sibling (``positioned``)."""
    if not request.sums:
        return request, ()
    rules_of = request.rules
    fine = tuple(c for c in request.combinations if any(is_fine(r) for r in rules_of(c).values()))
    if not fine:
        return request, ()
    coarse = tuple(c for c in request.combinations if c not in fine)
    summed = [replace(request, combinations=coarse)] if coarse else []
    for combo in fine:
        ordered = tuple(combo)
        rules = request.rules(ordered)
        # Of several dimensions (latitude, longitude) the first keeps its rule: rows of
        # latitude, so that a series over any band of latitudes reads no raw chunk, for a
        # few entries per row (the longitude chunks').
        places: list[dict[str, Rule]] = [
            {d: rules[d] if k == 0 and len(ordered) > 1 else CHUNK for k, d in enumerate(ordered)}
        ]
        if ordered == (dated,):
            places.append({ordered[0]: "month"})
        for at in places:
            summed.append(
                BuildRequest(
                    (ordered,), {}, request.weights, at, sums=request.sums, positioned=True
                )
            )
    return replace(request, combinations=fine, sums=()), tuple(summed)


def storage_form(
    combination: Sequence[str], rules: Mapping[str, Rule], weight_dims: Sequence[str]
) -> tuple[tuple[str, ...], bool]:
    """How a positioned accumulation is stored: the dimensions its arrays hold prefix sums
    along, and whether the weights factor out (they vary along none of those).

    A dimension at every element (rule 1) that the weights vary along is kept as rows when
    another dimension remains to accumulate: its sums are then summed over the rows a box
    holds at query time, and the weights factor out of what is stored."""
    combo = tuple(combination)
    rows = tuple(d for d in combo if rules.get(d) == 1 and d in weight_dims)
    accumulated = tuple(d for d in combo if d not in rows)
    if rows and accumulated and not set(weight_dims) & set(accumulated):
        return accumulated, True
    return combo, bool(weight_dims) and not set(weight_dims) & set(combo)


# --------------------------------------------------------------------------------------------
# Writing


def make_group(
    variable: str,
    variable_dims: Sequence[str],
    request: BuildRequest,
    coverage: Mapping[str, int],
    holders: Mapping[str, str],
    placements: Mapping[tuple[str, ...], Placement] | None = None,
    stride_unit: str = CHUNK,
) -> AccumulationGroup:
    """The group a build request describes (array names, strides, sums). ``holders`` maps
    each sum stored to the sum whose array holds it (``statistics.stored_arrays``: with
    unit weights Σw·x is Σx and Σw the count, so two arrays serve all four sums).
    ``placements``: the positions of each positioned combination (in the variable's order)."""
    dims = tuple(variable_dims)
    placements = placements or {}
    accumulations = []
    for combo in request.combinations:
        ordered = tuple(d for d in dims if d in combo)
        strides = tuple(int(request.strides.get(d, 1)) for d in ordered)
        placement = placements.get(ordered)
        held = holders
        if placement is not None and placement.factored:
            # The unweighted sums (Σx², tallies) beside Σx and the count.
            held = {
                **FACTORED_HOLDERS,
                **{t: holders[t] for t in (*TALLIES, SUMSQ, TSUM, TTSUM, TXSUM) if t in holders},
            }
        prefix, suffix = "", ""
        if placement is not None:
            prefix = f"{POSITIONS_GROUP}/"
            suffix = "_at_" + "_".join(rule_slug(placement.rules[d]) for d in ordered)
        arrays = {
            term: prefix + array_name(holder, ordered) + suffix for term, holder in held.items()
        }
        accumulations.append(Accumulation(ordered, strides, arrays, dims, placement))
    return AccumulationGroup(
        variable=variable,
        variable_dims=dims,
        accumulations=tuple(accumulations),
        weights=request.weights,
        coverage=dict(coverage),
        complete=False,
        stride_unit=stride_unit,
    )


def accumulation_tree(variable_dims: Sequence[str], accumulations: Sequence[Accumulation]) -> dict:
    """The ZEP 5 ``_ACCUMULATION_GROUP`` tree: every ordered combination, ``{}`` where unused."""
    by_dims = {a.dims: a for a in accumulations}

    def node(prefix: tuple[str, ...], rest: Sequence[str]) -> dict:
        out: dict[str, Any] = {}
        acc = by_dims.get(prefix)
        if acc is not None:
            out.update({ZEP5_KEYS[t]: acc.arrays[t] for t in ZEP5_KEYS if t in acc.arrays})
        for i, dim in enumerate(rest):
            out[dim] = node((*prefix, dim), rest[i + 1 :])
        return out

    return node((), tuple(variable_dims))


def group_attributes(group: AccumulationGroup) -> dict[str, Any]:
    zep5 = [a for a in group.accumulations if a.is_zep5]
    counts = {a.key: a.arrays[COUNT] for a in zep5 if COUNT in a.arrays}
    # Sums neither ZEP 5 nor "counts" has a key for (e.g. Σx² for a variance).
    others = {
        a.key: {t: n for t, n in a.arrays.items() if t not in ZEP5_KEYS and t != COUNT}
        for a in zep5
    }
    extra: dict[str, Any] = {"sums": others} if any(others.values()) else {}
    positioned = [_placement_json(a) for a in group.accumulations if not a.is_zep5]
    if positioned:
        extra["positioned"] = positioned
    if group.stride_unit != CHUNK:
        extra["stride_unit"] = group.stride_unit
    if group.infinities is not None:
        extra["infinities"] = group.infinities
    if group.reference is not None:
        extra["reference"] = group.reference
    return {
        TREE_KEY: accumulation_tree(group.variable_dims, zep5),
        EXTENSION_KEY: {
            "version": FORMAT_VERSION,
            "variable": group.variable,
            "weights": group.weights,
            "coverage": dict(group.coverage),
            "complete": group.complete,
            "counts": counts,
        }
        | extra,
    }


def _placement_json(acc: Accumulation) -> dict[str, Any]:
    placement = acc.placement
    assert placement is not None
    rules = placement.rules
    return {
        "dims": list(acc.dims),
        "at": {d: rule_json(rules[d]) for d in acc.dims},
        "accumulated": list(placement.accumulated),
        "factored": placement.factored,
        "arrays": dict(acc.arrays),
        "array_dims": list(acc.array_dims),
        # Positions every N elements follow from the extent; the others are listed.
        "positions": {
            d: list(placement.positions[d])
            for d in placement.accumulated
            if not isinstance(rules[d], int)
        },
        "extent": {
            d: placement.positions[d][-1] if placement.positions[d] else 0
            for d in placement.accumulated
        },
        "final": {d: int(placement.final[d]) for d in placement.accumulated},
    }


def array_attributes(acc: Accumulation) -> dict[str, Any]:
    if acc.placement is not None:
        # No _ACCUMULATION_STRIDE: no stride in chunks says where these entries end (the
        # group's "accumulus" attribute does).
        return {
            "_ARRAY_DIMENSIONS": list(acc.array_dims),
            EXTENSION_KEY: {"accumulation": acc.key},
        }
    return {
        "_ARRAY_DIMENSIONS": list(acc.array_dims),
        "_ACCUMULATION_STRIDE": [acc.stride(d) if d in acc.dims else 0 for d in acc.array_dims],
    }


# --------------------------------------------------------------------------------------------
# Reading and validating


@cache
def _schema(name: str) -> dict:
    text = resources.files("accumulus.accumulation.model").joinpath("schemas", name).read_text()
    return json.loads(text)


@cache
def _validator(name: str) -> jsonschema.protocols.Validator:
    """The validator of one of the schemas, made once per process: ``jsonschema.validate``
    checks the schema itself at every call, and opening a cube's groups validates every
    group and array document (docs/benchmarks.md)."""
    schema = _schema(name)
    kind = jsonschema.validators.validator_for(schema)
    kind.check_schema(schema)
    return kind(schema)


def validate_group_attributes(attrs: Mapping[str, Any], where: str) -> None:
    _validate(attrs, "group.schema.json", where)


def validate_array_attributes(attrs: Mapping[str, Any], where: str) -> None:
    _validate(attrs, "array.schema.json", where)
    dims, strides = attrs["_ARRAY_DIMENSIONS"], attrs["_ACCUMULATION_STRIDE"]
    if len(dims) != len(strides):
        raise AccumulusError(
            f"{where}: _ACCUMULATION_STRIDE has {len(strides)} entries but _ARRAY_DIMENSIONS "
            f"has {len(dims)}; they must have the same length"
        )
    if any(s < 0 for s in strides):
        raise AccumulusError(f"{where}: _ACCUMULATION_STRIDE must be >= 0, got {strides}")


def _validate(instance: Mapping[str, Any], schema: str, where: str) -> None:
    # The error jsonschema.validate would raise: the best match among all.
    error = jsonschema.exceptions.best_match(_validator(schema).iter_errors(dict(instance)))
    if error is not None:
        at = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise AccumulusError(
            f"{where}: attributes do not follow the ZEP 5 schema at {at}: {error.message}"
        )


def tree_leaves(tree: Mapping[str, Any]) -> dict[tuple[str, ...], dict[str, str]]:
    """Every accumulated combination in a ``_ACCUMULATION_GROUP`` tree: dims -> {term: array}."""
    leaves: dict[tuple[str, ...], dict[str, str]] = {}

    def walk(node: Mapping[str, Any], path: tuple[str, ...]) -> None:
        terms = {_TERM_OF_KEY[k]: v for k, v in node.items() if k in _TERM_OF_KEY}
        if terms:
            leaves[path] = terms
        for key, child in node.items():
            if key not in _TERM_OF_KEY:
                walk(child, (*path, key))

    walk(tree, ())
    return leaves


def parse_group(
    variable: str,
    variable_dims: Sequence[str],
    attrs: Mapping[str, Any],
    array_attrs: Callable[[str], Mapping[str, Any] | None],
) -> AccumulationGroup:
    """Read a variable's accumulation group from its attributes.

    ``array_attrs(name)`` returns the attributes of the group's array ``name`` (None when the
    array is missing). Groups written by other producers (the ZEP 5 reference generator) lack
    our ``accumulus`` attribute: their coverage is then derived by the caller from the array
    shapes, and their weights are "unknown".
    """
    where = group_name(variable)
    validate_group_attributes(attrs, where)
    dims = tuple(variable_dims)
    accumulations = []
    for path, terms in tree_leaves(attrs[TREE_KEY]).items():
        unknown = [d for d in path if d not in dims]
        if unknown:
            raise AccumulusError(
                f"{where}: the accumulation tree names dimension(s) {unknown} that variable "
                f"{variable!r} does not have (its dimensions are {list(dims)})"
            )
        ordered = tuple(d for d in dims if d in path)
        arrays = dict(terms)
        extension = attrs.get(EXTENSION_KEY, {})
        count_name = extension.get("counts", {}).get(",".join(ordered))
        arrays.update(extension.get("sums", {}).get(",".join(ordered), {}))
        if count_name:
            arrays[COUNT] = count_name
        elif extension.get("weights") == "none" and WCOUNT in arrays:
            arrays[COUNT] = arrays[WCOUNT]
        array_dims, strides = None, None
        for name in set(arrays.values()):
            a_attrs = array_attrs(name)
            if a_attrs is None:
                raise AccumulusError(
                    f"{where}: array {name!r} named in the accumulation tree for {list(ordered)} "
                    "is missing"
                )
            validate_array_attributes(a_attrs, f"{where}/{name}")
            a_dims = tuple(a_attrs["_ARRAY_DIMENSIONS"])
            if sorted(a_dims) != sorted(dims):
                raise AccumulusError(
                    f"{where}/{name}: _ARRAY_DIMENSIONS {list(a_dims)} is not a permutation of "
                    f"the dimensions of {variable!r} {list(dims)}"
                )
            stride_of = dict(zip(a_dims, a_attrs["_ACCUMULATION_STRIDE"], strict=True))
            these = tuple(stride_of[d] for d in ordered)
            if any(s <= 0 for s in these) or any(
                stride_of[d] != 0 for d in dims if d not in ordered
            ):
                raise AccumulusError(
                    f"{where}/{name}: _ACCUMULATION_STRIDE {a_attrs['_ACCUMULATION_STRIDE']} "
                    f"must be > 0 exactly on the accumulated dimensions {list(ordered)}"
                )
            if array_dims is None:
                array_dims, strides = a_dims, these
            elif (a_dims, these) != (array_dims, strides):
                raise AccumulusError(
                    f"{where}/{name}: dimensions or strides differ from the other arrays of "
                    f"the {list(ordered)} accumulation"
                )
        assert array_dims is not None and strides is not None
        accumulations.append(Accumulation(ordered, strides, arrays, array_dims))
    extension = attrs.get(EXTENSION_KEY)
    for item in (extension or {}).get("positioned", []):
        accumulations.append(_parse_placement(where, dims, item, array_attrs))
    if extension is None:
        return AccumulationGroup(
            variable=variable,
            variable_dims=dims,
            accumulations=tuple(accumulations),
            weights="unknown",
            coverage={},
            complete=True,
            producer="foreign",
        )
    return AccumulationGroup(
        variable=variable,
        variable_dims=dims,
        accumulations=tuple(accumulations),
        weights=str(extension.get("weights", "unknown")),
        coverage={d: int(n) for d, n in extension.get("coverage", {}).items()},
        complete=bool(extension.get("complete", False)),
        stride_unit=str(extension.get("stride_unit", CHUNK)),
        infinities=_flag(extension.get("infinities")),
        reference=_number(extension.get("reference")),
    )


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _parse_placement(
    where: str,
    dims: tuple[str, ...],
    item: Mapping[str, Any],
    array_attrs: Callable[[str], Mapping[str, Any] | None],
) -> Accumulation:
    """A positioned accumulation as the ``accumulus`` attribute describes it."""
    try:
        combo = tuple(d for d in dims if d in item["dims"])
        if len(combo) != len(item["dims"]):
            raise AccumulusError(
                f"{where}: a positioned accumulation names dimension(s) {item['dims']} that "
                f"are not all among {list(dims)}"
            )
        rules = {d: rule_from_json(item["at"][d], d) for d in combo}
        accumulated = tuple(d for d in combo if d in item["accumulated"])
        positions = {}
        for dim in accumulated:
            rule = rules[dim]
            if isinstance(rule, int):
                positions[dim] = entry_positions(rule, int(item["extent"][dim]), dim=dim)
            else:
                positions[dim] = tuple(int(p) for p in item["positions"][dim])
        final = {d: int(item["final"][d]) for d in accumulated}
        arrays = {str(t): str(n) for t, n in item["arrays"].items()}
        array_dims = tuple(item["array_dims"])
    except (KeyError, TypeError, ValueError) as exc:
        raise AccumulusError(
            f"{where}: the accumulus attribute describes a positioned accumulation it cannot "
            f"be read from ({type(exc).__name__}: {exc})"
        ) from None
    if sorted(array_dims) != sorted(dims):
        raise AccumulusError(
            f"{where}: array dimensions {list(array_dims)} of the {list(combo)} accumulation "
            f"are not a permutation of {list(dims)}"
        )
    for name in set(arrays.values()):
        a_attrs = array_attrs(name)
        if a_attrs is None:
            raise AccumulusError(
                f"{where}: array {name!r} of the positioned {list(combo)} accumulation is missing"
            )
        if tuple(a_attrs.get("_ARRAY_DIMENSIONS", ())) != array_dims:
            raise AccumulusError(
                f"{where}/{name}: _ARRAY_DIMENSIONS {a_attrs.get('_ARRAY_DIMENSIONS')} differs "
                f"from {list(array_dims)}"
            )
    placement = Placement(rules, accumulated, positions, final, bool(item.get("factored")))
    strides = (1,) * len(combo)
    return Accumulation(combo, strides, arrays, array_dims, placement)


def default_combinations(dims: Sequence[str], horizontal: Sequence[str]) -> list[tuple]:
    """Every dimension alone, plus the ``horizontal`` ones (those of the latitudes and
    longitudes: ``lat, lon``, or ``rlat, rlon`` of a curvilinear grid) together."""
    combos: list[tuple[str, ...]] = [(d,) for d in dims]
    together = tuple(d for d in dims if d in horizontal)
    if len(together) > 1:
        combos.append(together)
    return combos


# Where the default layout's time entries end: at month boundaries and every 2 steps of each
# month, so any whole-month period is two entries and any other period ends at most one step
# from an entry (read from the raw chunk); half the storage of an entry at every step.
DEFAULT_DATED_RULE: Rule = "month+2"


def default_layout(
    dims: Sequence[str], horizontal: Sequence[str], dated: Sequence[str] = ()
) -> tuple[list[tuple[str, ...]], dict[str, Rule]]:
    """What ``accumulate`` builds with no options: the combinations and positions that answer
    the common questions from accumulations, whatever the raw chunks.

    - Each dimension other than the ``horizontal`` ones (time) alone: where its coordinate
      holds dates (``dated``), entries at month boundaries and every 2 steps of each month
      (``DEFAULT_DATED_RULE``): a map over whole months is two entries, a day-precise one two
      entries and at most a step read raw at each end; other dimensions an entry at every
      element.
    - The horizontal dimensions together, with an entry at every cell (kept as rows along
      latitude with area weights): a series over any box, for any period, reads no raw
      chunk.

    Without horizontal dimensions (no latitude and longitude found), ZEP 5 as written:
    ``default_combinations`` at chunk ends. What it costs is storage (a full-size float64
    array of sums and its counts for the cells, half of that along time), which
    ``accumulate`` and ``inspect`` report; ``--minimal`` builds the ZEP 5 layout only."""
    together = tuple(d for d in dims if d in horizontal)
    if len(together) < 2:
        return default_combinations(dims, horizontal), {}
    combos: list[tuple[str, ...]] = [(d,) for d in dims if d not in together]
    combos.append(together)
    at: dict[str, Rule] = {
        d: DEFAULT_DATED_RULE if d in dated and d not in together else 1 for d in dims
    }
    return combos, at


def layout_name(group: AccumulationGroup) -> str:
    """What a group's layout is, as ``inspect`` names it: ``default`` (what ``accumulate``
    builds with no options: ``default_layout``), ``ZEP 5`` (entries at chunk ends only, as
    ``--minimal`` builds), or ``custom`` (other ``--dims``, ``--stride`` or ``--at``)."""
    if all(a.is_zep5 for a in group.chosen):
        return "ZEP 5"
    combos = [a.dims for a in group.chosen]
    together = [c for c in combos if len(c) > 1]
    alone = {c[0] for c in combos if len(c) == 1}
    # Entries at every element, or along dates at the default's positions (groups built
    # before it put them at every day are named so too).
    default_rules = {1, DEFAULT_DATED_RULE}
    positioned = all(
        a.placement is not None
        and set(a.placement.rules.values()) <= ({1} if len(a.dims) > 1 else default_rules)
        for a in group.chosen
    )
    if (
        positioned
        and len(together) == 1
        and alone == set(group.variable_dims) - set(together[0])
        and len(combos) == len(alone) + 1
    ):
        return "default"
    return "custom"
