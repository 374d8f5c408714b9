"""Running the service with uvicorn: in the foreground (``accumulus serve``), in several worker
processes (``serve --workers N``), or on a thread of the calling process (tests, benchmarks,
notebooks)."""

from __future__ import annotations

import copy
import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict
from typing import Any, Unpack

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from accumulus.scope import hold_scope
from accumulus.service import http
from accumulus.service.app import ServiceSettings, catalog, chunk_cache_bytes_of, create_app
from accumulus.service.guard import ServiceLimits
from accumulus.service.memory import freeze_survivors
from accumulus.shared_chunks import shared_directory

# How ``serve(..., workers=N)`` hands its settings to the worker processes uvicorn starts
# (each builds its own application from them: ``app_from_environment``).
SETTINGS_VARIABLE = "ACCUMULUS_SERVE_SETTINGS"
WORKER_START_SECONDS = 60

# Answers computed at once by each process of ``serve(..., workers=N)`` unless its limits say
# otherwise (one process computes ``ServiceLimits``' two): two threads computing in one
# process take turns holding its interpreter lock, and its event loop waits for it behind
# them; with one, the other cores go to the other workers (figures in docs/benchmarks.md).
WORKER_COMPUTATIONS = 1

# The longest request target an access log line shows; the rest is counted, not written
# (a request's URL can be as long as the client likes).
LOGGED_TARGET_CHARS = 200


class ShortTargets(logging.Filter):
    """Cuts long request targets in uvicorn's access log lines."""

    def filter(self, record: logging.LogRecord) -> bool:
        args = record.args
        if isinstance(args, tuple) and len(args) == 5 and isinstance(args[2], str):
            target = args[2]
            if len(target) > LOGGED_TARGET_CHARS:
                cut = f"{target[:LOGGED_TARGET_CHARS]}...(+{len(target) - LOGGED_TARGET_CHARS})"
                record.args = (*args[:2], cut, *args[3:])
        return True


def logging_config() -> dict[str, Any]:
    """uvicorn's logging configuration with long targets cut in access lines."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config.setdefault("filters", {})["short_targets"] = {"()": ShortTargets}
    config["handlers"]["access"]["filters"] = ["short_targets"]
    return config


def default_computations(workers: int) -> int:
    """Answers computed at once per process by default, when ``workers`` processes serve."""
    return ServiceLimits.computations if workers == 1 else WORKER_COMPUTATIONS


def serve(
    stores: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 1,
    access_log: bool = False,
    share_chunks: bool = True,
    **settings: Unpack[ServiceSettings],
) -> None:
    """Serve ``stores`` as ``ServiceSettings`` say on ``host:port`` until interrupted
    (loopback only unless ``host`` says otherwise), answering requests for the loopback
    names, ``host`` and ``allowed_hosts`` (``Host``).

    ``workers``: how many processes answer, sharing the port; each opens the stores itself
    and has its own cache and ``limits``, which therefore hold per process (without
    ``limits``, each computes ``default_computations(workers)`` answers at once), except the
    decoded chunks, which two or more share (``chunk_cache_bytes`` for all of them, as files in
    memory: ``shared_chunks``) unless ``share_chunks`` is False (by default room for every
    served accumulation chunk, at most a share of the memory for all the workers together:
    ``app.default_chunk_cache_bytes``). A store that
    cannot be read stops the start (an ``AccumulusError``) before any process is started.
    ``access_log``: a line per request (off by default: it adds to the CPU of every answer,
    docs/benchmarks.md)."""
    settings["allowed_hosts"] = http.allowed_hosts(host, settings.get("allowed_hosts") or ())
    options = uvicorn_options(host, port, workers, access_log)
    if workers == 1:
        hold_scope()  # (this process serves until it ends)
        app = create_app(stores, **settings)
        freeze_survivors()
        uvicorn.run(app, **options)
        return
    served = catalog(stores, settings)
    for dataset in served:
        dataset.snapshot()  # refused here, once, rather than by every worker
    if settings.get("limits") is None:
        settings["limits"] = ServiceLimits(computations=default_computations(workers))
    # Held once when the workers share it, else by each (the default's size for that many).
    chunk_cache_bytes = chunk_cache_bytes_of(settings, served, 1 if share_chunks else workers)
    with ExitStack() as stack:
        if share_chunks and chunk_cache_bytes:
            shared = stack.enter_context(shared_directory(chunk_cache_bytes))
            settings["shared_chunks"] = None if shared is None else str(shared)
        settings["chunk_cache_holders"] = 1 if settings.get("shared_chunks") else workers
        os.environ[SETTINGS_VARIABLE] = json.dumps(settings_json(stores, settings))
        uvicorn.run(f"{__name__}:app_from_environment", factory=True, **options)


def uvicorn_options(host: str, port: int, workers: int, access_log: bool) -> dict[str, Any]:
    """``uvicorn.run``'s keywords for serving on ``host:port`` by ``workers`` processes as
    ``serve`` does (the load benchmark serves a bare application with them, the HTTP floor);
    with more than one, the application is given by name (a factory, as uvicorn's workers
    need)."""
    options: dict[str, Any] = {
        "host": host,
        "port": port,
        "log_level": "info",
        "log_config": logging_config(),
        "access_log": access_log,
        "http": http.BoundedHttpToolsProtocol,
    }
    if workers > 1:
        options |= {
            "workers": workers,
            # A worker answers its parent's health pings once its imports are done, which
            # takes seconds on a busy machine: uvicorn's 5 s would restart workers starting.
            "timeout_worker_healthcheck": WORKER_START_SECONDS,
            # The workers share the connections (uvicorn takes a loop class by name).
            "loop": f"{http.__name__}:TakingTurnsLoop",
        }
    return options


def settings_json(stores: Sequence[str], settings: ServiceSettings) -> dict[str, Any]:
    """``stores`` and ``settings`` as JSON takes them (``app_from_json`` reads them back)."""
    limits = settings.get("limits") or ServiceLimits()
    return {"stores": list(stores), **settings, "limits": asdict(limits)}


def app_from_json(document: dict[str, Any]) -> FastAPI:
    """The application ``settings_json`` describes."""
    settings = dict(document)
    limits = ServiceLimits(**settings.pop("limits"))
    return create_app(settings.pop("stores"), limits=limits, **settings)


def app_from_environment() -> FastAPI:
    """The application of one worker process of ``serve(..., workers=N)``, from the settings
    its parent left in the environment. The process serves until it ends: it holds
    accumulus' scope (``scope.hold_scope``) from now on."""
    hold_scope()
    app = app_from_json(json.loads(os.environ[SETTINGS_VARIABLE]))
    freeze_survivors()  # (its imports and stores: never garbage)
    return app


@contextmanager
def running(
    app: FastAPI, host: str = "127.0.0.1", protocol: type = http.BoundedHttpToolsProtocol
) -> Iterator[str]:
    """Serve ``app`` on a free port of ``host`` from a background thread, as ``serve`` does
    (by ``protocol``); yields its base URL (``http://127.0.0.1:PORT``) and stops the server
    on exit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    port = listener.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", http=protocol)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the service stopped while starting")
            time.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        listener.close()
