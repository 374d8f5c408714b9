"""The FastAPI application: routes, error bodies, the web page.

Each request takes one snapshot of its dataset and answers from it alone. Every user mistake
(an ``AccumulusError``, or a parameter FastAPI cannot parse) becomes a 4xx JSON body
``{"error": ..., "parameter": ...}``; a 5xx would be a bug.
"""

import time
from collections.abc import Sequence
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from accumulus.api import STATS
from accumulus.errors import AccumulusError
from accumulus.service import schemas
from accumulus.service.answers import MEDIA_TYPES, compute_answer
from accumulus.service.cache import AnswerCache
from accumulus.service.datasets import Catalog, Dataset
from accumulus.service.describe import describe_snapshot
from accumulus.service.geography import router as geography
from accumulus.service.parameters import (
    FORMATS,
    OPTIONS,
    ParameterError,
    check_average_request,
    http_status,
    range_pattern,
)

DEFAULT_MAX_CELLS = 2_000_000
DEFAULT_CACHE_BYTES = 256 * 2**20
STATIC = resources.files("accumulus.service") / "static"

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "Unknown dataset or variable."},
    422: {"model": schemas.ErrorBody, "description": "A parameter is wrong; it is named."},
}


def create_app(
    stores: Sequence[str],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    storage_options: dict[str, Any] | None = None,
) -> FastAPI:
    """The service for ``stores`` (paths or URLs). Each is opened now, so a store that
    cannot be read stops the start with an ``AccumulusError``. Answers larger than
    ``max_cells`` values are refused; up to ``cache_bytes`` of answers are kept."""
    catalog = Catalog(stores, storage_options)
    first = [dataset.snapshot() for dataset in catalog]
    range_patterns = {
        str(d): range_pattern(s.cube.index(str(d)))
        for s in reversed(first)  # the first dataset's coordinate wins a shared name
        for d in s.cube.raw.dims
        if d not in OPTIONS
    }
    variables = sorted({v for s in first for v in s.cube.data_variables})
    cache = AnswerCache(cache_bytes)

    app = FastAPI(
        title="accumulus",
        summary="Area-averaged time series and time-averaged maps from Zarr datacubes with "
        "ZEP 5 chunk-level accumulations.",
        # FastAPI's interactive pages load their scripts from a CDN; the service works
        # offline, so it serves the OpenAPI document (/openapi.json) alone.
        docs_url=None,
        redoc_url=None,
    )
    _add_error_handlers(app)
    app.include_router(geography)

    def dataset_of(name: str) -> Dataset:
        dataset = catalog.get(name)
        if dataset is None:
            raise ParameterError("dataset", f"no dataset {name!r}; datasets are {catalog.names}")
        return dataset

    DatasetName = Annotated[
        str, Path(description="A dataset (store) name.", json_schema_extra={"enum": catalog.names})
    ]

    @app.get("/api/health", response_model=schemas.Health, tags=["service"])
    def health() -> dict[str, Any]:
        """Whether every store can be read, with its current snapshot token."""
        tokens = {}
        for dataset in catalog:
            try:
                tokens[dataset.name] = dataset.snapshot().token
            except AccumulusError as exc:
                tokens[dataset.name] = f"error: {exc}"
        ok = not any(t.startswith("error: ") for t in tokens.values())
        return {"status": "ok" if ok else "degraded", "datasets": tokens}

    @app.get("/api/datasets", response_model=schemas.DatasetList, tags=["datasets"])
    def list_datasets() -> dict[str, Any]:
        """Datasets, their dimensions and coordinate ranges, variables and units, and which
        accumulations exist and how far they cover."""
        return {"datasets": [describe_snapshot(d.snapshot()) for d in catalog]}

    @app.get(
        "/api/datasets/{dataset}",
        response_model=schemas.Dataset,
        responses={404: ERRORS[404]},
        tags=["datasets"],
    )
    def get_dataset(dataset: DatasetName) -> dict[str, Any]:
        """One dataset, as in the list."""
        return describe_snapshot(dataset_of(dataset).snapshot())

    range_parameters = [
        {
            "name": dim,
            "in": "query",
            "required": False,
            "description": f"Range of {dim} (when the variable has this dimension): start/end, "
            "inclusive coordinate labels (ISO 8601 for times); leave a side empty for an "
            "open end.",
            "schema": {"type": "string", "pattern": pattern},
        }
        for dim, pattern in sorted(range_patterns.items())
    ]

    @app.get(
        "/api/datasets/{dataset}/{variable}/average",
        response_class=Response,
        responses={
            200: {
                "model": schemas.AverageResult,
                "description": "The answer, as `accumulus average --json` (or CSV, or PNG).",
                "content": {MEDIA_TYPES["csv"]: {}, MEDIA_TYPES["png"]: {}},
            },
            **ERRORS,
        },
        openapi_extra={"parameters": range_parameters},
        tags=["average"],
    )
    def average(
        request: Request,
        dataset: DatasetName,
        variable: Annotated[
            str, Path(description="A data variable.", json_schema_extra={"enum": variables})
        ],
        over: Annotated[
            str,
            Query(description="Dimensions averaged away, comma-separated: latitude,longitude."),
        ],
        stat: Annotated[
            str,
            Query(
                description="mean, sum, or count (Σ weights).",
                json_schema_extra={"enum": list(STATS)},
            ),
        ] = "mean",
        weights: Annotated[
            str | None,
            Query(
                description="area (cos latitude), none, or a weights array of the dataset; "
                "default: the accumulations' weights."
            ),
        ] = None,
        output_format: Annotated[
            str,
            Query(
                alias="format",
                description="json, csv or png.",
                json_schema_extra={"enum": list(FORMATS)},
            ),
        ] = "json",
        accumulation: Annotated[
            bool, Query(description="false: scan the raw data (for comparison).")
        ] = True,
    ) -> Response:
        """The `stat` of `variable` over the dimensions `over`, within the ranges given as
        query parameters named by dimensions (e.g. `time=2001-01-01/2001-12-31`)."""
        started = time.perf_counter()
        snapshot = dataset_of(dataset).snapshot()
        checked = check_average_request(
            snapshot,
            variable,
            over=over,
            stat=stat,
            weights=weights,
            output_format=output_format,
            use_accumulation=accumulation,
            query=request.query_params.multi_items(),
            max_cells=max_cells,
        )
        answer = cache.get(snapshot, checked.key)
        hit = answer is not None
        if answer is None:
            answer = compute_answer(snapshot, checked)
            cache.put(snapshot, checked.key, answer)
        elapsed_ms = (time.perf_counter() - started) * 1000
        return Response(
            answer.body,
            media_type=answer.media_type,
            headers={
                "X-Accumulus-Snapshot": snapshot.token,
                "X-Accumulus-Cache": "hit" if hit else "miss",
                "Server-Timing": f"total;dur={elapsed_ms:.1f}",
            },
        )

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app


def _add_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ParameterError)
    def parameter_error(request: Request, exc: ParameterError) -> JSONResponse:
        return JSONResponse({"error": str(exc), "parameter": exc.parameter}, http_status(exc))

    @app.exception_handler(AccumulusError)
    def accumulus_error(request: Request, exc: AccumulusError) -> JSONResponse:
        # Found while answering (e.g. a store that cannot be read): not one parameter's fault.
        return JSONResponse({"error": str(exc), "parameter": None}, 422)

    @app.exception_handler(RequestValidationError)
    def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        parameter = str(first["loc"][-1]) if first.get("loc") else None
        return JSONResponse({"error": f"{parameter}: {first['msg']}", "parameter": parameter}, 422)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return JSONResponse(
            {"error": str(exc.detail), "parameter": None}, exc.status_code, headers=exc.headers
        )
