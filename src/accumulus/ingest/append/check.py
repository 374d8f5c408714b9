"""Phase 2 of an append: open, check and read every granule, and decide what each appends.
Nothing is written here."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from accumulus.errors import AccumulusError
from accumulus.grid import CALENDAR_RULES, GROW, growing_cap, regular_chunk_size
from accumulus.ingest.append.cube_state import cube_array, stored_coordinate
from accumulus.ingest.append.values import (
    Batch,
    Checked,
    Committed,
    Planned,
    Recovered,
    Request,
    Target,
)
from accumulus.ingest.conform import Template, blocks, check_fits, conform, template_of, time_labels
from accumulus.ingest.granules import GranuleLike, open_granule
from accumulus.stores.arrays import dimension_names


def check(
    target: Target, request: Request, recovered: Recovered, items: Sequence[GranuleLike]
) -> Checked:
    """Open, check and read every granule, and decide what each one appends. Without a cube
    yet, the first granule's template is the one the others must fit.

    Crash safety: nothing is written here, and nothing is written before every granule has
    passed: a truncated, corrupt or misfitting granule (or a bad option) changes nothing."""
    cube = recovered.cube
    template = cube.template if cube else None
    if cube is not None:
        _check_chunking_unchanged(target, request, cube)
    journal = cube.journal if cube else None
    planned: list[Planned] = []
    skipped: list[tuple[str, str]] = []
    first = None
    for done, item in enumerate(items, start=1):
        granule = open_granule(item, request.storage_options, request.allow_references)
        try:
            known = journal.find(granule.checksum) if journal else None
            if known is not None:
                skipped.append((granule.name, f"already ingested as {known.name}"))
                continue
            twin = next((p for p in planned if p.checksum == granule.checksum), None)
            if twin is not None:
                skipped.append((granule.name, f"the same as {twin.name}"))
                continue
            if template is None:
                template = template_of(granule.dataset, target.dim, f"granule {granule.name}")
            first = item if first is None else first
            check_fits(granule, template)
            # Every value is read and converted here, block by block, so that a granule
            # that cannot be stored exactly is refused before anything is written.
            steps = blocks(granule, template)
            coordinate = np.concatenate([conform(granule, template, s)[target.dim] for s in steps])
            _check_increasing(granule.name, coordinate, template)
            planned.append(Planned(item, granule.name, granule.size, granule.checksum, coordinate))
        finally:
            granule.close()
            request.progress(done, request.steps)
    planned.sort(key=lambda p: p.coordinate[0])
    if template is None or first is None or not planned:
        return Checked(None, tuple(skipped))
    planned = _trim_overlaps(target, request, cube, template, planned, skipped)
    if cube is None:
        _check_rule_fits(request.variable_rule, template)
    batch = Batch(tuple(planned), template, first) if planned else None
    return Checked(batch, tuple(skipped))


def _check_chunking_unchanged(target: Target, request: Request, cube: Committed) -> None:
    """``--chunks``, ``--chunking`` and ``--shards`` apply when a cube is created: on an
    existing cube they must say how it is chunked already."""
    asked: dict[str, int | tuple[int, ...] | str] = dict(request.chunks)
    if request.rule == GROW:
        if growing_cap(cube.variable_rule) is None:
            raise AccumulusError(
                f"{target.label}: chunks along {target.dim} do not grow in this cube; "
                "--chunking grow applies when a cube is created"
            )
    elif request.rule is not None:
        asked[target.dim] = request.rule
    if request.shards:
        _check_shards_unchanged(target, request, cube)
    if not asked:
        return
    if request.variable_rule is not None and cube.root.metadata.zarr_format == 2:
        raise AccumulusError(
            f"{target.label} is Zarr v2, which cannot store chunks of different sizes; "
            f"--chunking {request.rule} needs a cube created with Zarr v3 (--zarr-format 3, "
            "the default with --chunking)"
        )
    for name in cube.template.data:
        array = cube_array(cube.root, name)
        stored: dict[str, int | str | None] = {
            d: array.chunks[axis] if array.shards else regular_chunk_size(array, axis)
            for axis, d in enumerate(dimension_names(array))
        }
        if cube.variable_rule is not None:
            # Chunks that grow to a size are asked for again by that size.
            stored[target.dim] = growing_cap(cube.variable_rule) or cube.variable_rule
        differ = {d: n for d, n in asked.items() if stored.get(d, n) != n}
        if differ:
            text = ",".join(f"{d}={stored[d]}" for d in differ)
            raise AccumulusError(
                f"{target.label}: {name} is chunked {text}; --chunks and --chunking apply "
                "when a cube is created and cannot change an existing one"
            )


def _check_shards_unchanged(target: Target, request: Request, cube: Committed) -> None:
    for name in cube.template.data:
        array = cube_array(cube.root, name)
        names = dimension_names(array)
        if not array.shards:
            raise AccumulusError(
                f"{target.label}: {name} is not sharded; --shards applies when a cube is "
                "created and cannot change an existing one"
            )
        stored = dict(zip(names, array.shards, strict=True))
        differ = {d: n for d, n in request.shards.items() if stored.get(d, n) != n}
        if differ:
            text = ",".join(f"{d}={stored[d]}" for d in differ)
            raise AccumulusError(
                f"{target.label}: {name} is in shards {text}; --shards applies when a cube is "
                "created and cannot change an existing one"
            )


def _check_rule_fits(rule: str | None, template: Template) -> None:
    """A calendar rule reads dates: the dimension must have a CF time coordinate."""
    dim = template.dim
    if rule in CALENDAR_RULES and template.variables[dim].time is None:
        units = template.variables[dim].attrs.get("units")
        raise AccumulusError(
            f"--chunking {rule} needs a CF time coordinate along "
            f"{dim!r} (units like 'days since 2000-01-01'); its units are {units!r}"
        )


def _trim_overlaps(
    target: Target,
    request: Request,
    cube: Committed | None,
    template: Template,
    planned: list[Planned],
    skipped: list[tuple[str, str]],
) -> list[Planned]:
    """Refuse (or, with ``skip_existing``, drop) steps at or before the end of the cube or
    of the granule before; ``skipped`` gets the granules dropped whole."""
    dim = target.dim
    existing = stored_coordinate(cube, dim)
    end, end_name = (existing[-1], "the cube") if existing.size else (None, "")
    kept = []
    for plan in planned:
        if end is not None and plan.coordinate[0] <= end:
            new = plan.coordinate > end
            old = plan.coordinate[~new]
            labels = time_labels(old[:1], template)
            end_label = time_labels(np.asarray([end]), template)[0]
            if not request.skip_existing:
                raise AccumulusError(
                    f"granule {plan.name}: {dim} {labels[0]} is not after the end of "
                    f"{end_name} ({end_label}): an overlap or a duplicate, or {dim} "
                    "going backwards; --skip-existing skips steps already in the cube"
                )
            present = np.isin(old, existing)
            if not present.all():
                missing = time_labels(old[~present][:1], template)[0]
                raise AccumulusError(
                    f"granule {plan.name}: {dim} {missing} goes backwards: it is "
                    f"before the end of {end_name} ({end_label}) but not in the cube"
                )
            if not new.any():
                skipped.append((plan.name, f"every {dim} already in the cube"))
                continue
            plan = replace(plan, keep=slice(int(np.argmax(new)), None))
        kept.append(plan)
        end, end_name = plan.coordinate[-1], f"granule {plan.name}"
        existing = np.concatenate([existing, plan.coordinate[plan.keep]])
    return kept


def _check_increasing(name: str, coordinate: np.ndarray, template: Template) -> None:
    steps = np.diff(coordinate)
    if (steps <= 0).any():
        at = int(np.argmax(steps <= 0))
        pair = time_labels(coordinate[at : at + 2], template)
        raise AccumulusError(
            f"granule {name}: {template.dim} is not strictly increasing ({pair[0]} is followed "
            f"by {pair[1]})"
        )
