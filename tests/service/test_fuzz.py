"""Fuzzing the API from its own OpenAPI document: whatever the parameters, never a 5xx, and
every answer matches the document (status codes, content types, JSON shapes). About 500
requests, some ten seconds. Then again on damaged stores: only 4xx and 503, never a path."""

from __future__ import annotations

import shutil
from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from damaged_stores import damaged_cube, with_text_and_dates
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accumulus.service import create_app

EXAMPLES_PER_STRATEGY = 100
AVERAGE = "/api/datasets/{dataset}/{variable}/average"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(cube: Path, mode: GenerationMode):
    app = create_app([str(cube)], max_cells=2_000)
    statuses = fuzz(app, mode, EXAMPLES_PER_STRATEGY)
    assert all(status < 500 for _, status in statuses)
    if mode == GenerationMode.POSITIVE:
        # The fuzzer got past the checks to real answers, not only to refusals.
        assert statuses[(AVERAGE, 200)] > 0


def test_damaged_stores_get_no_server_error(cube: Path, tmp_path: Path):
    damages = ["metadata", "scribble", "fifo", "symlink", "directory"]
    stores = [str(with_text_and_dates(tmp_path / "mixed.zarr"))]
    for damage in damages:
        stores.append(str(damaged_cube(tmp_path / f"{damage}.zarr", "scribble")))
    app = create_app([str(cube), *stores], max_cells=2_000)
    for damage in damages:  # now the damage, as if done while served
        shutil.rmtree(tmp_path / f"{damage}.zarr")
        damaged_cube(tmp_path / f"{damage}.zarr", damage)
    # 503 is this case's documented answer, which schemathesis's own check counts as an error.
    statuses = fuzz(
        app,
        GenerationMode.POSITIVE,
        40,
        check=lambda r: no_path(r, tmp_path),
        excluded=[not_a_server_error],
    )
    assert all(status < 500 or status == 503 for _, status in statuses)
    assert statuses[(AVERAGE, 503)] > 0 and statuses[(AVERAGE, 200)] > 0


def no_path(response, path: Path) -> None:
    assert str(path).encode() not in response.content and b"Store(" not in response.content


def fuzz(
    app, mode: GenerationMode, examples: int, check=None, excluded=()
) -> Counter[tuple[str, int]]:
    """Calls generated from the app's OpenAPI document, validated against it; the count of
    each (path, status)."""
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {op.path for op in operations} == {
        "/api/health",
        "/api/datasets",
        "/api/datasets/{dataset}",
        AVERAGE,
        "/api/coastlines",
        "/api/regions",
        "/api/regions/{region_set}/{region}",
    }
    statuses: Counter[tuple[str, int]] = Counter()
    strategies = []
    for operation in operations:
        has_parameters = len(operation.path_parameters) + len(operation.query) > 0
        if mode == GenerationMode.NEGATIVE and not has_parameters:
            continue  # nothing to get wrong
        strategies.append(operation.as_strategy(generation_mode=mode))
        if operation.path == AVERAGE and mode == GenerationMode.POSITIVE:
            # Random text rarely names a dimension: also fuzz everything else with the two
            # averages the page asks for.
            for over in ("lat,lon", "time"):
                strategies.append(operation.as_strategy(generation_mode=mode, query={"over": over}))

    for strategy in strategies:

        @given(case=strategy)
        @settings(
            max_examples=examples,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def call(case) -> None:
            # A request the document allows can still be refused with a 422 because of the
            # data (a reversed range, a box outside the grid): that check does not apply.
            response = case.call_and_validate(excluded_checks=[positive_data_acceptance, *excluded])
            statuses[(case.operation.path, response.status_code)] += 1
            if check is not None:
                check(response)

        call()
    print(mode.value, sum(statuses.values()), "requests:", dict(sorted(statuses.items())))
    return statuses
