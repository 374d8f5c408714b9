"""The FastAPI application: the service's state, its routers, error bodies, the web page.

Each request takes one snapshot of its dataset and answers from it alone. Every user mistake
(an ``AccumulusError``, or a parameter FastAPI cannot parse) becomes a 4xx JSON body
``{"error": ..., "parameter": ...}``. A store that cannot be read (damaged, removed, a chunk
that is not a file) is a 503 naming the dataset; a busy service a 503 with ``Retry-After``; a
computation past its time a 504. No response carries a server path or an internal name
(``errors``).

The routes live in ``routes/`` (one ``APIRouter`` each) and reach the ``Service`` this app
holds through a dependency (``state.ServiceDep``). What only the served data tells (the
datasets and variables a path may name, a range parameter per dimension) is added to the
OpenAPI document when it is first asked for (``openapi_document``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from importlib import resources
from pathlib import Path
from typing import Any, TypedDict, Unpack

from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

from accumulus.decoded_chunks import DECODED
from accumulus.service.datasets import Catalog, Dataset
from accumulus.service.errors import PublicText, add_error_handlers
from accumulus.service.guard import ServiceLimits
from accumulus.service.http import HeadAsGet
from accumulus.service.memory import tune_allocator
from accumulus.service.routes import average, datasets, geography, health
from accumulus.service.state import Service
from accumulus.shared_chunks import SharedChunks

DEFAULT_MAX_CELLS = 2_000_000
DEFAULT_CACHE_BYTES = 256 * 2**20
# Without a size given, the decoded accumulation chunks kept may take this share of the
# machine's memory at most (``default_chunk_cache_bytes``).
CHUNK_CACHE_MEMORY_SHARE = 0.25
STATIC = resources.files("accumulus.service") / "static"


class ServiceSettings(TypedDict, total=False):
    """How a service serves its stores (keyword arguments of ``create_app`` and ``serve``).

    Each store is read from its group ``group`` (by default the one group holding data
    variables) with fsspec's ``storage_options``; ``accumulations`` gives each store a
    sidecar (one per store, in order). A store that is a reference set reads only under its
    own location and ``allow_references``. Answers larger than ``max_cells`` values are
    refused (default ``DEFAULT_MAX_CELLS``); up to ``cache_bytes`` of answers are kept
    (default ``DEFAULT_CACHE_BYTES``), and up to ``chunk_cache_bytes`` of decoded
    accumulation chunks, per process (``decoded_chunks``), or for all the processes given
    the same ``shared_chunks`` directory (``shared_chunks``: ``serve --workers N``). Without
    ``chunk_cache_bytes``, that is ``default_chunk_cache_bytes`` for
    ``chunk_cache_holders`` processes each keeping their own (default 1), worked out again
    whenever a dataset's snapshot changes: the cache follows an archive as it grows. ``limits``
    bound the computations (see ``ServiceLimits``). Requests whose ``Host`` is not one of
    ``allowed_hosts`` (``http.allowed_hosts``) get 400; None answers any (``serve`` gives the
    names the service is reached by). ``refs``: of icechunk repositories, the branches, tags
    or snapshot ids served, one dataset each (``name@ref``); a branch is followed as it gets
    new commits."""

    max_cells: int
    cache_bytes: int
    chunk_cache_bytes: int | None
    chunk_cache_holders: int
    shared_chunks: str | None
    storage_options: dict[str, Any] | None
    limits: ServiceLimits | None
    group: str | None
    accumulations: Sequence[str] | None
    allow_references: Sequence[str] | None
    allowed_hosts: Sequence[str] | None
    refs: Sequence[str] | None


def catalog(stores: Sequence[str], settings: ServiceSettings) -> Catalog:
    """The datasets ``stores`` are served as (opened by their first snapshot)."""
    return Catalog(
        stores,
        settings.get("storage_options"),
        settings.get("group"),
        settings.get("accumulations"),
        settings.get("allow_references"),
        settings.get("refs"),
    )


def chunk_cache_bytes_of(settings: ServiceSettings, served: Catalog, holders: int = 1) -> int:
    """The memory for decoded accumulation chunks ``settings`` give, or by default room
    for those of the ``served`` datasets, kept by ``holders`` processes each (as ``serve``
    works it out for its workers)."""
    given = settings.get("chunk_cache_bytes")
    return default_chunk_cache_bytes(served, holders) if given is None else given


def default_chunk_cache_bytes(served: Iterable[Dataset], holders: int = 1) -> int:
    """Room for every accumulation chunk of the ``served`` datasets decoded (as their
    snapshots stand now), with a sixteenth more for the entries' own bytes, but at most a
    ``CHUNK_CACHE_MEMORY_SHARE`` of the machine's memory for all the ``holders`` (processes
    that each keep their own) together. The chunks are held only as questions read them; a
    cache smaller than the chunks the questions reach makes each miss decode a chunk and
    evict another (docs/benchmarks.md)."""
    decoded = sum(dataset.snapshot().current.groups.decoded_bytes() for dataset in served)
    memory = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return min(decoded + decoded // 16, int(memory * CHUNK_CACHE_MEMORY_SHARE) // holders)


def create_app(stores: Sequence[str], **settings: Unpack[ServiceSettings]) -> FastAPI:
    """The service for ``stores`` (paths or URLs), served as ``ServiceSettings`` say. A store
    may be a sidecar (served for the source it names). Each is opened now, so a store that
    cannot be read stops the start with an ``AccumulusError``."""
    tune_allocator()
    sys.setswitchinterval(0.001)
    served = catalog(stores, settings)
    # A size given, or the default's rule (sized again as the datasets change).
    given = settings.get("chunk_cache_bytes")
    holders = settings.get("chunk_cache_holders", 1)
    sizing: Callable[[], int] | None = None
    if given is None:
        sizing = partial(default_chunk_cache_bytes, served, holders)
        chunk_cache_bytes = sizing()
    else:
        chunk_cache_bytes = given
    shared = settings.get("shared_chunks")
    DECODED.share(None if shared is None else SharedChunks.opened(Path(shared), chunk_cache_bytes))
    DECODED.set_limit(chunk_cache_bytes)
    service = Service(
        served,
        max_cells=settings.get("max_cells", DEFAULT_MAX_CELLS),
        cache_bytes=settings.get("cache_bytes", DEFAULT_CACHE_BYTES),
        limits=settings.get("limits") or ServiceLimits(),
        chunk_cache_sizing=sizing,
    )

    app = ServiceApp(
        title="accumulus",
        summary="Area-averaged time series and time-averaged maps from Zarr datacubes with "
        "ZEP 5 chunk-level accumulations.",
        # FastAPI's interactive pages load their scripts from a CDN; the service works
        # offline, so it serves the OpenAPI document (/openapi.json) alone.
        docs_url=None,
        redoc_url=None,
    )
    app.state.service = service
    allowed_hosts = settings.get("allowed_hosts")
    # GETs of averages answered on a short path, before everything else (``ServiceApp``).
    app.fast = average.FastAverages(
        partial(FastAPI.__call__, app), service, app.exception_handlers, allowed_hosts
    )
    app.add_middleware(HeadAsGet)
    if allowed_hosts is not None:
        app.add_middleware(
            TrustedHostMiddleware, allowed_hosts=list(allowed_hosts), www_redirect=False
        )
    add_error_handlers(app, PublicText(service.catalog))
    for module in (geography, health, datasets, average):
        app.include_router(module.router)
    app.openapi = partial(openapi_document, app)  # type: ignore[method-assign]  # FastAPI's way
    app.add_api_route("/", page, include_in_schema=False)
    app.mount("/static", StaticFiles(directory=str(STATIC)), name="static")
    return app


class ServiceApp(FastAPI):
    """FastAPI's application, whose requests go first to ``fast`` (when set: a GET of an
    average is answered there, everything else passed on to the application)."""

    fast: ASGIApp | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.fast is None:
            await super().__call__(scope, receive, send)
        else:
            await self.fast(scope, receive, send)


def page() -> FileResponse:
    """The web page."""
    return FileResponse(str(STATIC / "index.html"))


def openapi_document(app: FastAPI) -> dict[str, Any]:
    """FastAPI's OpenAPI document of ``app``, with what only its data tells: the datasets and
    variables a path may name (as enums), and a range parameter for each dimension of the
    datasets on the average's operations. Made once, when first asked for."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    document = FastAPI.openapi(app)  # made and kept in app.openapi_schema
    service: Service = app.state.service
    names = {"dataset": service.catalog.names, "variable": service.variables}
    for operations in document["paths"].values():
        for operation in operations.values():
            for parameter in operation.get("parameters", []):
                if parameter["in"] == "path" and parameter["name"] in names:
                    parameter["schema"]["enum"] = names[parameter["name"]]
    for operation in document["paths"][average.PATH].values():
        operation["parameters"] += range_parameters(service.range_patterns)
    return document


def range_parameters(patterns: dict[str, str]) -> list[dict[str, Any]]:
    """The query parameters of ranges, one per dimension (with the pattern of its bounds)."""
    return [
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
        for dim, pattern in sorted(patterns.items())
    ]
