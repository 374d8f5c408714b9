"""``/api/datasets/{dataset}/{variable}/average``: the answer of one question, as JSON, CSV or
PNG; GET for a box or a named region, POST to send a GeoJSON shape (two operations).

Each request takes one snapshot of its dataset and answers from it alone: checked in a
worker thread (reading a shape or a region set, and the snapshot), then answered from the
cache or computed under the service's guard (``Service.compute``).
"""

from __future__ import annotations

import logging
import re
import time
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from accumulus.regions import MAX_GEOJSON_BYTES
from accumulus.service import schemas
from accumulus.service.answers import MEDIA_TYPES
from accumulus.service.datasets import DatasetSnapshot
from accumulus.service.errors import ERRORS
from accumulus.service.parameters import (
    OPTIONS,
    AverageParameters,
    AverageRequest,
    check_average_request,
    requested_shape,
)
from accumulus.service.routes.datasets import DatasetName
from accumulus.service.state import Service, ServiceDep

PATH = "/api/datasets/{dataset}/{variable}/average"
_AVERAGE_PATH = re.compile(r"/api/datasets/([^/]+)/([^/]+)/average")
log = logging.getLogger("accumulus.service")
# A variable named in the path (the OpenAPI document lists the names).
VariableName = Annotated[str, Path(description="A data variable.")]

SHAPE_BODY = {
    "required": False,
    "description": f"POST only: a GeoJSON geometry, Feature or FeatureCollection (at most "
    f"{MAX_GEOJSON_BYTES} bytes) to average within, in longitude/latitude.",
    "content": {"application/geo+json": {"schema": {"type": "object"}}},
}

router = APIRouter(tags=["average"])
route: dict[str, Any] = {
    "path": PATH,
    "response_class": Response,
    "responses": {
        200: {
            "model": schemas.AverageResult,
            "description": "The answer, as `accumulus average --json` (or CSV, or PNG).",
            "content": {MEDIA_TYPES["csv"]: {}, MEDIA_TYPES["png"]: {}},
        },
        **ERRORS,
    },
}


@router.post(**route, openapi_extra={"requestBody": SHAPE_BODY})
@router.get(**route)
async def average(
    request: Request,
    dataset: DatasetName,
    variable: VariableName,
    parameters: Annotated[AverageParameters, Query()],
    service: ServiceDep,
) -> Response:
    """The `stat` of `variable` over the dimensions `over`, within the ranges given as
    query parameters named by dimensions (e.g. `time=2001-01-01/2001-12-31`), and
    within a shape when one is named or posted."""
    started = time.perf_counter()
    body = await _limited_body(request) if request.method == "POST" else None
    snapshot, checked, scan = await run_in_threadpool(
        _checked, service, dataset, variable, parameters, request.query_params.multi_items(), body
    )
    return await _answered(service, request, snapshot, checked, scan, started)


async def _answered(
    service: Service,
    request: Request,
    snapshot: DatasetSnapshot,
    checked: AverageRequest,
    scan: bool,
    started: float,
) -> Response:
    """The response to a checked request: from the cache, or computed (and kept)."""
    answer = service.cache.get(snapshot, checked.key)
    hit = answer is not None
    if answer is None:
        answer = await service.compute(request, snapshot, checked, scan)
        service.cache.put(snapshot, checked.key, answer)
    headers = {
        "X-Accumulus-Snapshot": snapshot.token,
        "X-Accumulus-Cache": "hit" if hit else "miss",
    }
    body = answer.body
    if answer.gzipped is not None:
        headers["Vary"] = "Accept-Encoding"
        if accepts_gzip(request.headers.get("accept-encoding", "")):
            body, headers["Content-Encoding"] = answer.gzipped, "gzip"
    elapsed_ms = (time.perf_counter() - started) * 1000
    headers["Server-Timing"] = f"total;dur={elapsed_ms:.1f}"
    return Response(body, media_type=answer.media_type, headers=headers)


def accepts_gzip(accept_encoding: str) -> bool:
    """Whether an ``Accept-Encoding`` header accepts gzip (``gzip`` or ``*``, not with
    ``q=0``)."""
    for coding in accept_encoding.lower().split(","):
        name, _, parameters = coding.partition(";")
        if name.strip() in ("gzip", "*"):
            q = parameters.strip().removeprefix("q=").strip()
            try:
                return not q or float(q) > 0
            except ValueError:
                return False
    return False


def _checked(
    service: Service,
    dataset: str,
    variable: str,
    parameters: AverageParameters,
    query: list[tuple[str, str]],
    body: bytes | None,
) -> tuple[DatasetSnapshot, AverageRequest, bool]:
    """The dataset's snapshot, the request checked against it, and whether it is a scan (in
    a worker thread: this reads a shape or a region set, and the snapshot)."""
    snapshot = service.snapshot_of(service.dataset(dataset))
    checked = check_average_request(
        snapshot,
        variable,
        parameters,
        query=query,
        max_cells=service.max_cells,
        shape=requested_shape(parameters.shape, body),
    )
    return snapshot, checked, snapshot.scans(checked.query)


async def _limited_body(request: Request) -> bytes:
    """The request body, refused with a 413 past ``MAX_GEOJSON_BYTES`` (read no further)."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_GEOJSON_BYTES:
            raise HTTPException(413, f"the posted shape is larger than {MAX_GEOJSON_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


class FastAverages:
    """The GET of an average answered without FastAPI's routing, dependencies and
    exception middleware (a third of the service's CPU per answer when measured, on the
    load benchmark's questions): the request is checked and answered as ``average`` does,
    by the same functions. Anything else, and any request the check refuses, goes on to
    the application, which answers it (its error body included) as it always has; an error
    while computing is answered by the application's handler of its kind."""

    def __init__(self, app: ASGIApp, service: Service, handlers: dict) -> None:
        self.app = app
        self.service = service
        self.handlers = handlers

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            found = _AVERAGE_PATH.fullmatch(scope["path"])
        if found is None:
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        service = self.service
        try:
            query = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
            options = {name: text for name, text in query if name in OPTIONS}
            parameters = AverageParameters.model_validate(options)
            dataset, variable = found.groups()
            snapshot, checked, scan = await run_in_threadpool(
                _checked, service, dataset, variable, parameters, query, None
            )
        except Exception:  # refused: the application answers it, with its error body
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        try:
            response = await _answered(service, request, snapshot, checked, scan, started)
        except Exception as exc:
            response = self._error(request, exc)
        await response(scope, receive, send)

    def _error(self, request: Request, exc: Exception) -> Response:
        """The application's answer to ``exc`` (its handler for the nearest class)."""
        for kind in type(exc).__mro__:
            handler = self.handlers.get(kind)
            if handler is not None:
                if kind is Exception:  # a bug: logged with its traceback, as the server does
                    log.error("answering %s failed", request.url.path, exc_info=exc)
                return handler(request, exc)
        raise exc
