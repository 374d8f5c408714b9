"""Fuzzing the API from its own OpenAPI document: whatever the parameters, never a 5xx, and
every answer matches the document (status codes, content types, JSON shapes). About 500
requests, some ten seconds."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.specs.openapi.checks import positive_data_acceptance

from accumulus.service import create_app

EXAMPLES_PER_STRATEGY = 100
AVERAGE = "/api/datasets/{dataset}/{variable}/average"


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_no_request_gets_a_server_error(cube: Path, mode: GenerationMode):
    app = create_app([str(cube)], max_cells=2_000)
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
            max_examples=EXAMPLES_PER_STRATEGY,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def call(case) -> None:
            # A request the document allows can still be refused with a 422 because of the
            # data (a reversed range, a box outside the grid): that check does not apply.
            response = case.call_and_validate(excluded_checks=[positive_data_acceptance])
            statuses[(case.operation.path, response.status_code)] += 1

        call()
    assert all(status < 500 for _, status in statuses)
    if mode == GenerationMode.POSITIVE:
        # The fuzzer got past the checks to real answers, not only to refusals.
        assert statuses[(AVERAGE, 200)] > 0
    print(mode.value, sum(statuses.values()), "requests:", dict(sorted(statuses.items())))
