"""The FastAPI application: routes, error bodies, the web page.

Each request takes one snapshot of its dataset and answers from it alone. Every user mistake
(an ``AccumulusError``, or a parameter FastAPI cannot parse) becomes a 4xx JSON body
``{"error": ..., "parameter": ...}``. A store that cannot be read (damaged, removed, a chunk
that is not a file) is a 503 naming the dataset; a busy service a 503 with ``Retry-After``; a
computation past its time a 504. No response carries a server path or an internal name.

Answers are computed on worker threads, at most ``ServiceLimits.computations`` at once
(``guard``); the event loop only waits, so ``/api/health`` answers while they run.
"""

import asyncio
import contextlib
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from importlib import resources
from typing import Annotated, Any

from fastapi import FastAPI, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.middleware.trustedhost import TrustedHostMiddleware

from accumulus.api import STATS, StaleSidecarError
from accumulus.errors import AccumulusError
from accumulus.regions import MAX_GEOJSON_BYTES
from accumulus.service import schemas
from accumulus.service.answers import MEDIA_TYPES, Answer, compute_answer
from accumulus.service.cache import AnswerCache
from accumulus.service.datasets import Catalog, Dataset, DatasetSnapshot
from accumulus.service.describe import averageable, describe_snapshot
from accumulus.service.geography import router as geography
from accumulus.service.guard import ComputeSlots, RequestGuard, ServiceLimits
from accumulus.service.http import HeadAsGet
from accumulus.service.memory import release_free_memory, tune_allocator
from accumulus.service.parameters import (
    FORMATS,
    OPTIONS,
    AverageRequest,
    ParameterError,
    check_average_request,
    http_status,
    range_pattern,
    requested_shape,
)
from accumulus.stores.guarded import GuardedStore

DEFAULT_MAX_CELLS = 2_000_000
DEFAULT_CACHE_BYTES = 256 * 2**20
STATIC = resources.files("accumulus.service") / "static"
# /api/health waits up to this long for fresh snapshot reads when no computation runs; while
# some run it answers at once with the last ones read (and starts reading afresh).
HEALTH_WAIT_IDLE_SECONDS = 1.0
# How often a waiting request looks whether its client is still there.
WATCH_SECONDS = 0.1
POLL_SECONDS = 0.005
CLIENT_GONE = 499  # nginx's "client closed request": nobody reads this response

log = logging.getLogger("accumulus.service")

ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": schemas.ErrorBody, "description": "Unknown dataset or variable."},
    422: {"model": schemas.ErrorBody, "description": "A parameter is wrong; it is named."},
    503: {
        "model": schemas.ErrorBody,
        "description": "The dataset cannot be read now, or the service is busy (then with "
        "Retry-After).",
    },
    504: {"model": schemas.ErrorBody, "description": "The answer took longer than allowed."},
}


class ServiceError(AccumulusError):
    """Answered with ``status`` (5xx) and a JSON error body; not the request's fault."""

    def __init__(self, message: str, status: int = 503, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


def create_app(
    stores: Sequence[str],
    *,
    max_cells: int = DEFAULT_MAX_CELLS,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    storage_options: dict[str, Any] | None = None,
    limits: ServiceLimits | None = None,
    group: str | None = None,
    accumulations: Sequence[str] | None = None,
    allow_references: Sequence[str] | None = None,
    allowed_hosts: Sequence[str] | None = None,
) -> FastAPI:
    """The service for ``stores`` (paths or URLs), each from its group ``group`` (by default
    the one group holding data variables). A store may be a sidecar (served for the source it
    names); ``accumulations`` gives each store a sidecar (one per store, in order). Each is
    opened now, so a store that cannot be read stops the start with an ``AccumulusError``.
    Answers larger than ``max_cells`` values are refused; up to ``cache_bytes`` of answers
    are kept; ``limits`` bound the computations (see ``ServiceLimits``). A store that is a
    reference set reads only under its own location and ``allow_references``. Requests whose
    ``Host`` is not one of ``allowed_hosts`` (``http.allowed_hosts``) get 400; None answers
    any (``serve`` gives the names the service is reached by)."""
    limits = limits or ServiceLimits()
    tune_allocator()
    sys.setswitchinterval(0.001)
    catalog = Catalog(stores, storage_options, group, accumulations, allow_references)
    first = [dataset.snapshot() for dataset in catalog]
    range_patterns = {
        str(d): range_pattern(s.cube.index(str(d)))
        for s in reversed(first)  # the first dataset's coordinate wins a shared name
        for d in s.cube.raw.dims
        if d not in OPTIONS
    }
    variables = sorted({v for s in first for v in averageable(s.cube)})
    cache = AnswerCache(cache_bytes)
    slots = ComputeSlots(limits.computations)
    workers = ThreadPoolExecutor(limits.computations, thread_name_prefix="accumulus-answer")
    health = HealthMonitor(catalog, {s.dataset: s.token for s in first})
    public = PublicText(catalog)

    app = FastAPI(
        title="accumulus",
        summary="Area-averaged time series and time-averaged maps from Zarr datacubes with "
        "ZEP 5 chunk-level accumulations.",
        # FastAPI's interactive pages load their scripts from a CDN; the service works
        # offline, so it serves the OpenAPI document (/openapi.json) alone.
        docs_url=None,
        redoc_url=None,
    )
    app.state.slots = slots
    app.state.cache = cache
    app.add_middleware(HeadAsGet)
    if allowed_hosts is not None:
        app.add_middleware(
            TrustedHostMiddleware, allowed_hosts=list(allowed_hosts), www_redirect=False
        )
    _add_error_handlers(app, public)
    app.include_router(geography)

    def dataset_of(name: str) -> Dataset:
        dataset = catalog.get(name)
        if dataset is None:
            raise ParameterError(
                "dataset", f"no dataset {name!r}; datasets are {catalog.names}", missing=True
            )
        return dataset

    DatasetName = Annotated[
        str, Path(description="A dataset (store) name.", json_schema_extra={"enum": catalog.names})
    ]

    @app.get(
        "/api/health",
        response_model=schemas.Health,
        responses={503: {"model": schemas.Health, "description": "A computation is stuck."}},
        tags=["service"],
    )
    async def health_check() -> JSONResponse:
        """Whether every store can be read, with its current snapshot token, and how many
        computations run in the process that answered (``process``: one of ``serve --workers``).
        Answers at once even when the service is saturated (then with the tokens read by the
        previous call). A computation holding its slot past ``ServiceLimits.stuck_seconds``
        makes it "unhealthy", with status 503: the process needs a restart."""
        wait = 0.0 if slots.busy else HEALTH_WAIT_IDLE_SECONDS
        tokens = await health.tokens(wait)
        held = slots.held_longest()
        status = "ok"
        if any(t.startswith("error: ") for t in tokens.values()):
            status = "degraded"
        if held > limits.stuck_seconds:
            status = "unhealthy"
        body = {
            "status": status,
            "datasets": tokens,
            "computations": slots.busy,
            "longest_computation_seconds": round(held, 3),
            "process": os.getpid(),
        }
        return JSONResponse(body, 503 if status == "unhealthy" else 200)

    @app.get(
        "/api/datasets",
        response_model=schemas.DatasetList,
        responses={503: ERRORS[503]},
        tags=["datasets"],
    )
    def list_datasets() -> dict[str, Any]:
        """Datasets, their dimensions and coordinate ranges, variables and units, and which
        accumulations exist and how far they cover. Datasets that cannot be read now are
        listed apart, with the reason."""
        described, unavailable = [], {}
        for dataset in catalog:
            try:
                described.append(describe_snapshot(snapshot_of(dataset)))
            except ServiceError as exc:
                unavailable[dataset.name] = str(exc)
        return {"datasets": described, "unavailable": unavailable}

    @app.get(
        "/api/datasets/{dataset}",
        response_model=schemas.Dataset,
        responses={404: ERRORS[404], 503: ERRORS[503]},
        tags=["datasets"],
    )
    def get_dataset(dataset: DatasetName) -> dict[str, Any]:
        """One dataset, as in the list."""
        return describe_snapshot(snapshot_of(dataset_of(dataset)))

    range_parameters = [
        {
            "name": dim,
            "in": "query",
            "required": False,
            "description": f"Range of {dim} (when the variable has this dimension): start/end, "
            "inclusive coordinate labels (ISO 8601 for times; numbers in either order); "
            "leave a side empty for an open end. Longitudes compare modulo 360, and west > "
            "east crosses the date line (lon=170/-170). A range past the data is clipped "
            "with a note in the answer.",
            "schema": {"type": "string", "pattern": pattern},
        }
        for dim, pattern in sorted(range_patterns.items())
    ]

    average_route: dict[str, Any] = {
        "path": "/api/datasets/{dataset}/{variable}/average",
        "response_class": Response,
        "responses": {
            200: {
                "model": schemas.AverageResult,
                "description": "The answer, as `accumulus average --json` (or CSV, or PNG).",
                "content": {MEDIA_TYPES["csv"]: {}, MEDIA_TYPES["png"]: {}},
            },
            **ERRORS,
        },
        "tags": ["average"],
    }

    # GET for a box or a named region; POST to send a GeoJSON shape (two operations).
    @app.post(
        **average_route, openapi_extra={"parameters": range_parameters, "requestBody": SHAPE_BODY}
    )
    @app.get(**average_route, openapi_extra={"parameters": range_parameters})
    async def average(
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
        shape: Annotated[
            str | None,
            Query(
                description="Average over the cells whose centres lie in a named region, "
                "SET:NAME (see /api/regions), e.g. ar6:WAF. Or POST a GeoJSON geometry, "
                "Feature or FeatureCollection as the body."
            ),
        ] = None,
    ) -> Response:
        """The `stat` of `variable` over the dimensions `over`, within the ranges given as
        query parameters named by dimensions (e.g. `time=2001-01-01/2001-12-31`), and
        within a shape when one is named or posted."""
        started = time.perf_counter()
        body = await _limited_body(request) if request.method == "POST" else None

        def check() -> tuple[DatasetSnapshot, AverageRequest]:
            # In a worker thread: reading a shape or a region set, and the snapshot.
            snapshot = snapshot_of(dataset_of(dataset))
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
                shape=requested_shape(shape, body),
            )
            return snapshot, checked

        snapshot, checked = await run_in_threadpool(check)
        answer = cache.get(snapshot, checked.key)
        hit = answer is not None
        if answer is None:
            answer = await compute(request, snapshot, checked)
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

    async def compute(
        request: Request, snapshot: DatasetSnapshot, checked: AverageRequest
    ) -> Answer:
        """Compute on a worker thread once a slot is free; stop it when its time is up or its
        client leaves. The slot is given back by the thread, when the work has really ended."""
        slot = await slots.acquire(limits.queue_seconds)
        if slot is None:
            retry = max(1, round(limits.queue_seconds))
            raise ServiceError(
                f"the service is busy ({limits.computations} computations running and others "
                f"waiting); try again in {retry} s",
                503,
                {"Retry-After": str(retry)},
            )
        guard = RequestGuard(limits.request_seconds)
        loop, finished = asyncio.get_running_loop(), asyncio.Event()

        def work() -> Answer:
            try:
                # The snapshot's chunks (a sidecar's too) and arrays read through the guard.
                guarded = snapshot.reading_through(
                    lambda store: GuardedStore(store, guard, limits.read_seconds)
                )
                return compute_answer(guarded, checked, limits.memory_bytes)
            finally:
                slot.release()
                if not slots.busy:
                    release_free_memory()
                with contextlib.suppress(RuntimeError):  # that request's loop is gone
                    loop.call_soon_threadsafe(finished.set)

        try:
            running = workers.submit(work)
        except BaseException:  # never started (the service is shutting down)
            slot.release()
            raise
        try:
            while not await _finished(finished, WATCH_SECONDS):
                if guard.expired:
                    guard.stop(f"the request took more than {limits.request_seconds:g} s")
                elif await request.is_disconnected():
                    guard.stop("the client went away")
                if guard.reason is not None:
                    break
        except asyncio.CancelledError:
            guard.stop("the client went away")
            raise
        stopped = guard.reason is not None and (
            not running.done() or running.exception() is not None
        )
        if stopped:
            if "client" in guard.reason:
                raise ServiceError(f"answer abandoned: {guard.reason}", CLIENT_GONE)
            raise ServiceError(
                f"no answer within {limits.request_seconds:g} s; narrow the ranges, use the "
                "accumulations, or try again when the service is less busy",
                504,
            )
        try:
            return running.result()
        except AccumulusError as exc:
            if isinstance(exc, ParameterError | StaleSidecarError):
                raise
            raise ServiceError(f"dataset {snapshot.dataset!r}: {exc}") from None
        except Exception as exc:  # a store's content made a library fail: not the client's
            log.exception("computing an answer on dataset %s failed", snapshot.dataset)
            raise ServiceError(
                f"dataset {snapshot.dataset!r} could not be read to answer this "
                f"({type(exc).__name__})"
            ) from None

    def snapshot_of(dataset: Dataset) -> DatasetSnapshot:
        try:
            return dataset.snapshot()
        except Exception as exc:
            if not isinstance(exc, AccumulusError):
                log.exception("reading the snapshot of dataset %s failed", dataset.name)
            raise ServiceError(f"dataset {dataset.name!r} cannot be read now: {exc}") from None

    health.read = snapshot_of

    @app.get("/", include_in_schema=False)
    def page() -> FileResponse:
        return FileResponse(str(STATIC / "index.html"))

    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app


SHAPE_BODY = {
    "required": False,
    "description": f"POST only: a GeoJSON geometry, Feature or FeatureCollection (at most "
    f"{MAX_GEOJSON_BYTES} bytes) to average within, in longitude/latitude.",
    "content": {"application/geo+json": {"schema": {"type": "object"}}},
}


async def _limited_body(request: Request) -> bytes:
    """The request body, refused with a 413 past ``MAX_GEOJSON_BYTES`` (read no further)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_GEOJSON_BYTES:
            raise HTTPException(413, f"the posted shape is larger than {MAX_GEOJSON_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _finished(event: asyncio.Event, seconds: float) -> bool:
    """Whether ``event`` is set within ``seconds``."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(event.wait(), seconds)
    return event.is_set()


class HealthMonitor:
    """Snapshot tokens for ``/api/health``: read afresh when the stores answer in time, else
    the last ones read (a read still under way finishes in the background and is not
    started twice)."""

    def __init__(self, catalog: Catalog, tokens: dict[str, str]) -> None:
        self.catalog = catalog
        self.last = dict(tokens)
        self.read: Callable[[Dataset], DatasetSnapshot] = Dataset.snapshot
        self._pool = ThreadPoolExecutor(len(catalog.names), thread_name_prefix="accumulus-health")
        self._reading: dict[str, Future] = {}
        self._lock = threading.Lock()

    async def tokens(self, wait: float) -> dict[str, str]:
        with self._lock:
            for dataset in self.catalog:
                reading = self._reading.get(dataset.name)
                if reading is None or reading.done():
                    self._reading[dataset.name] = self._pool.submit(self._check, dataset)
            readings = list(self._reading.values())
        deadline = time.monotonic() + wait
        while not all(r.done() for r in readings) and time.monotonic() < deadline:
            await asyncio.sleep(POLL_SECONDS)
        return dict(self.last)

    def _check(self, dataset: Dataset) -> None:
        try:
            self.last[dataset.name] = self.read(dataset).token
        except AccumulusError as exc:
            self.last[dataset.name] = f"error: {exc}"


# An absolute path of two or more parts (not a range like 2001/2002 or units like mm/day).
_ABSOLUTE_PATH = re.compile(r"(?<![\w.:=/-])(?:file://)?(?:/[\w.@+-]+){2,}/?")
_STORE_REPR = re.compile(r"\b\w*Store\(")
# A URL (s3://bucket/key, http://10.0.0.5:9000/…): an internal location a client need not see.
_URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>()]*")


class PublicText:
    """Error texts as clients see them: a served store's location becomes its dataset name,
    other URLs, absolute paths and internal store objects (``LocalStore(...)``) are left
    out."""

    def __init__(self, catalog: Catalog) -> None:
        forms: dict[str, str] = {}
        for dataset in catalog:
            for location, name in dataset.locations().items():
                path = location.removeprefix("file://")
                for form in {location, path, os.path.abspath(path), os.path.realpath(path)}:
                    forms.setdefault(form, f"<{name}>")
        self._forms = sorted(forms.items(), key=lambda item: -len(item[0]))

    def __call__(self, text: str) -> str:
        for form, name in self._forms:
            text = text.replace(form, name)
        text = _URL.sub("<url>", _without_store_reprs(text))
        return _ABSOLUTE_PATH.sub("<path>", text)


def _without_store_reprs(text: str) -> str:
    """``... in LocalStore('file:///x') at ...`` -> ``... in the store at ...``."""
    while match := _STORE_REPR.search(text):
        depth, end = 0, match.end() - 1
        for end in range(match.end() - 1, len(text)):
            depth += {"(": 1, ")": -1}.get(text[end], 0)
            if depth == 0:
                break
        text = text[: match.start()] + "the store" + text[end + 1 :]
    return text


def _add_error_handlers(app: FastAPI, public: Callable[[str], str]) -> None:
    def body(message: str, parameter: str | None, status: int, headers=None) -> JSONResponse:
        return JSONResponse(
            {"error": public(message), "parameter": parameter}, status, headers=headers
        )

    @app.exception_handler(ParameterError)
    def parameter_error(request: Request, exc: ParameterError) -> JSONResponse:
        return body(str(exc), exc.parameter, http_status(exc))

    @app.exception_handler(StaleSidecarError)
    def stale_sidecar(request: Request, exc: StaleSidecarError) -> JSONResponse:
        # The operator's sidecar no longer matches its source: a conflict to resolve by
        # refreshing it (the raw scan, accumulation=false, still answers).
        return body(str(exc), None, 409)

    @app.exception_handler(ServiceError)
    def service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return body(str(exc), None, exc.status, exc.headers)

    @app.exception_handler(AccumulusError)
    def accumulus_error(request: Request, exc: AccumulusError) -> JSONResponse:
        # Found while answering (e.g. a store that cannot be read): not one parameter's fault.
        return body(str(exc), None, 422)

    @app.exception_handler(RequestValidationError)
    def validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0]
        parameter = str(first["loc"][-1]) if first.get("loc") else None
        return body(f"{parameter}: {first['msg']}", parameter, 422)

    @app.exception_handler(HTTPException)
    def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        return body(str(exc.detail), None, exc.status_code, exc.headers)

    @app.exception_handler(Exception)
    def unexpected(request: Request, exc: Exception) -> JSONResponse:
        # A bug: logged with its traceback by the server, told to the client without details.
        return body("internal error (the server's log has the details)", None, 500)
