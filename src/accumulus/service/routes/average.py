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
from collections.abc import Sequence
from functools import partial
from typing import Annotated, Any
from urllib.parse import parse_qsl

from fastapi import APIRouter, Path, Query, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Receive, Scope, Send

from accumulus.regions import MAX_GEOJSON_BYTES
from accumulus.service import schemas
from accumulus.service.answers import MEDIA_TYPES, Answer
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
from accumulus.service.state import HereCall, Service, ServiceDep

PATH = "/api/datasets/{dataset}/{variable}/average"
_AVERAGE_PATH = re.compile(r"/api/datasets/([^/]+)/([^/]+)/average")
_PLAIN_HOST = re.compile(r"([a-z0-9.-]+)(?::[0-9]{1,5})?")
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
    query = request.query_params.multi_items()

    def checked_scan() -> tuple[DatasetSnapshot, AverageRequest, bool]:
        snapshot, checked = _checked(service, dataset, variable, parameters, query, body)
        return snapshot, checked, service.scans(snapshot, checked)

    snapshot, checked, scan = await run_in_threadpool(checked_scan)
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
) -> tuple[DatasetSnapshot, AverageRequest]:
    """The dataset's snapshot and the request checked against it (in a worker thread: this
    reads a shape or a region set, and the snapshot)."""
    snapshot = service.snapshot_of(service.dataset(dataset))
    checked = check_average_request(
        snapshot,
        variable,
        parameters,
        query=query,
        max_cells=service.max_cells,
        shape=requested_shape(parameters.shape, body),
    )
    return snapshot, checked


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
    """The GET of an average answered without FastAPI's routing, dependencies, middleware
    and response classes (a third of the service's CPU per answer when measured, on the
    load benchmark's questions, and then the hand-overs between threads: docs/service.md):
    checked, looked up in the cache and computed by the route's own functions in one call on
    a worker thread (``Service.run_here``), the answer sent as the route sends it. It wraps
    the whole application, so it checks the ``Host`` as ``TrustedHostMiddleware`` does
    (``allowed_hosts``; None: any). Anything else, a host it does not take, and any request
    the check refuses, goes on to the application, which answers it (its error body
    included) as it always has; an error while computing is answered by the application's
    handler of its kind; a scan goes to the scans' queue (``Service.compute``)."""

    def __init__(
        self,
        app: ASGIApp,
        service: Service,
        handlers: dict,
        allowed_hosts: Sequence[str] | None = None,
    ) -> None:
        self.app = app
        self.service = service
        self.handlers = handlers
        self.allowed_hosts = (
            None if allowed_hosts is None or "*" in allowed_hosts else allowed_hosts
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = None
        if scope["type"] == "http" and scope["method"] == "GET" and not scope.get("root_path"):
            found = _AVERAGE_PATH.fullmatch(scope["path"])
        headers = _headers(scope) if found is not None else {}
        if found is None or not self._host_allowed(headers.get(b"host", b"")):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        service = self.service
        dataset, variable = found.groups()
        work = partial(_here, service, dataset, variable, scope["query_string"])
        request = Request(scope, receive)
        try:
            done = await service.run_here(work, request.is_disconnected)
            if done is None:  # refused: the application answers it, with its error body
                await self.app(scope, receive, send)
                return
            snapshot, checked, answer, hit = done
            if answer is None:  # a scan: in the scans' queue
                answer = await service.compute(request, snapshot, checked, scan=True)
                service.cache.put(snapshot, checked.key, answer)
        except Exception as exc:
            await self._error(request, exc)(scope, receive, send)
            return
        body, media_type = answer.body, answer.media_type.encode()
        sent = [
            (b"content-type", media_type),
            (b"x-accumulus-snapshot", snapshot.token.encode()),
            (b"x-accumulus-cache", b"hit" if hit else b"miss"),
        ]
        if answer.gzipped is not None:
            sent.append((b"vary", b"Accept-Encoding"))
            if accepts_gzip(headers.get(b"accept-encoding", b"").decode("latin-1")):
                body = answer.gzipped
                sent.append((b"content-encoding", b"gzip"))
        elapsed_ms = (time.perf_counter() - started) * 1000
        sent += [
            (b"server-timing", b"total;dur=%.1f" % elapsed_ms),
            (b"content-length", b"%d" % len(body)),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": sent})
        await send({"type": "http.response.body", "body": body})

    def _host_allowed(self, host: bytes) -> bool:
        """Whether ``TrustedHostMiddleware`` lets ``host`` (the header) through: a plain
        name (and port) matched by its rule; any other form (an IPv6 literal, something
        malformed) is left to the middleware itself."""
        if self.allowed_hosts is None:
            return True
        plain = _PLAIN_HOST.fullmatch(host.decode("latin-1").lower())
        if plain is None:
            return False
        name = plain[1]
        return any(
            name == pattern or (pattern.startswith("*") and name.endswith(pattern[1:]))
            for pattern in self.allowed_hosts
        )

    def _error(self, request: Request, exc: Exception) -> Response:
        """The application's answer to ``exc`` (its handler for the nearest class)."""
        for kind in type(exc).__mro__:
            handler = self.handlers.get(kind)
            if handler is not None:
                if kind is Exception:  # a bug: logged with its traceback, as the server does
                    log.error("answering %s failed", request.url.path, exc_info=exc)
                return handler(request, exc)
        raise exc


def _headers(scope: Scope) -> dict[bytes, bytes]:
    """The request's headers by lower-case name (the first of a repeated one, as
    Starlette's ``Headers.get``)."""
    found: dict[bytes, bytes] = {}
    for name, value in scope["headers"]:
        found.setdefault(name.lower(), value)
    return found


def _here(
    service: Service, dataset: str, variable: str, query_string: bytes, call: HereCall
) -> tuple[DatasetSnapshot, AverageRequest, Answer | None, bool] | None:
    """On a worker thread: the request checked (None when refused), and its answer from the
    cache or computed and kept (None for a scan, which queues apart), and whether it was
    a cache hit."""
    query = parse_qsl(query_string.decode("latin-1"), keep_blank_values=True)
    try:
        options = {name: text for name, text in query if name in OPTIONS}
        parameters = AverageParameters.model_validate(options)
        snapshot, checked = _checked(service, dataset, variable, parameters, query, None)
    except Exception:  # pydantic's, ours, FastAPI's: the full path asks again and answers
        return None
    answer = service.cache.get(snapshot, checked.key)
    if answer is not None:
        return snapshot, checked, answer, True
    if service.scans(snapshot, checked):
        return snapshot, checked, None, False
    answer = service.compute_here(call, snapshot, checked)
    service.cache.put(snapshot, checked.key, answer)
    return snapshot, checked, answer, False
