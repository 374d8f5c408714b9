"""Running the service with uvicorn: in the foreground (``accumulus serve``) or on a thread
of the calling process (tests, benchmarks, notebooks)."""

from __future__ import annotations

import copy
import logging
import socket
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import uvicorn
from fastapi import FastAPI
from uvicorn.config import LOGGING_CONFIG

from accumulus.service.app import DEFAULT_CACHE_BYTES, DEFAULT_MAX_CELLS, create_app
from accumulus.service.guard import ServiceLimits

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


def serve(
    stores: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    max_cells: int = DEFAULT_MAX_CELLS,
    cache_bytes: int = DEFAULT_CACHE_BYTES,
    storage_options: dict[str, Any] | None = None,
    limits: ServiceLimits | None = None,
    group: str | None = None,
    accumulations: Sequence[str] | None = None,
) -> None:
    """Serve ``stores`` (from their group ``group``, with their sidecars ``accumulations``)
    on ``host:port`` until interrupted (loopback only unless ``host`` says otherwise)."""
    app = create_app(
        stores,
        max_cells=max_cells,
        cache_bytes=cache_bytes,
        storage_options=storage_options,
        limits=limits,
        group=group,
        accumulations=accumulations,
    )
    uvicorn.run(app, host=host, port=port, log_level="info", log_config=logging_config())


@contextmanager
def running(app: FastAPI, host: str = "127.0.0.1") -> Iterator[str]:
    """Serve ``app`` on a free port of ``host`` from a background thread; yields its base URL
    (``http://127.0.0.1:PORT``) and stops the server on exit."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind((host, 0))
    port = listener.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
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
