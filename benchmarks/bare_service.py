"""The HTTP floor of the load benchmark (``bench_service_load.py --bare-bytes``): a bare ASGI
application served as ``accumulus serve`` serves (``server.uvicorn_options``: uvicorn, its
httptools protocol with deadlines, the workers taking turns at the shared socket), answering
every request with one fixed JSON body of a given size and nothing else to do. What its
workers spend per request is what HTTP itself costs on this machine, whatever the service
does around the query.

``/api/health`` answers what the benchmark asks of the service's (the process, no decoded
chunks); every other path gets the fixed body with the headers the service's answers carry.

    python benchmarks/bare_service.py PORT WORKERS BODY_BYTES
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any

import uvicorn

from accumulus.service import server

BYTES_VARIABLE = "ACCUMULUS_BARE_BODY_BYTES"

ASGI = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Any]


def fixed_body(size: int) -> bytes:
    """A JSON document of ``size`` bytes (at least a few): a list of numbers, as answers are."""
    head, tail = b'{"values": [', b"]}"
    room = max(0, size - len(head) - len(tail))
    numbers = b", ".join([b"0.123456789012"] * (room // 16 + 1))[:room].rstrip(b", ")
    return (head + numbers + tail).ljust(size)


def bare_app() -> ASGI:
    """The application of one worker: the fixed body for every request but the health's."""
    body = fixed_body(int(os.environ[BYTES_VARIABLE]))
    health = json.dumps(
        {
            "process": os.getpid(),
            "decoded_chunks": {"hits": 0, "misses": 0, "held_bytes": 0, "shared": False},
        }
    ).encode()

    async def app(scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return
        sent = health if scope["path"] == "/api/health" else body
        headers = [
            (b"content-type", b"application/json"),
            (b"x-accumulus-snapshot", b"0123456789abcdef"),
            (b"x-accumulus-cache", b"miss"),
            (b"server-timing", b"total;dur=0.1"),
            (b"content-length", b"%d" % len(sent)),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": sent})

    return app


def main() -> None:
    port, workers, size = (int(a) for a in sys.argv[1:4])
    os.environ[BYTES_VARIABLE] = str(size)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    options = server.uvicorn_options("127.0.0.1", port, workers, access_log=False)
    target: Any = "bare_service:bare_app" if workers > 1 else bare_app()
    uvicorn.run(target, factory=workers > 1, **options)


if __name__ == "__main__":
    main()
