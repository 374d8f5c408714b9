"""Error bodies: every failure of a request is a JSON body ``{"error": ..., "parameter":
...}``, whose text names parameters, datasets and keys but never a server path, an internal
URL or a store object (``PublicText``).

A user mistake (an ``AccumulusError``, or a parameter FastAPI cannot parse) is a 4xx naming
its parameter; a store that cannot be read, or a busy service, a ``ServiceError`` (503, with
``Retry-After`` when busy; 504 past the time limit); a bug a 500 that says nothing more.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from accumulus.api import StaleSidecarError
from accumulus.errors import AccumulusError
from accumulus.service import schemas
from accumulus.service.datasets import Catalog
from accumulus.service.parameters import ParameterError, http_status

# The error responses of the OpenAPI document.
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
CLIENT_GONE = 499  # nginx's "client closed request": nobody reads this response


class ServiceError(AccumulusError):
    """Answered with ``status`` (5xx) and a JSON error body; not the request's fault."""

    def __init__(self, message: str, status: int = 503, headers: dict | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.headers = headers


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


def add_error_handlers(app: FastAPI, public: Callable[[str], str]) -> None:
    """Every error of ``app`` answered as a JSON error body, its text made ``public``."""

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
