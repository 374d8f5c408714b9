"""Real servers on 127.0.0.1 for remote-store tests: an S3 endpoint (moto in server mode) and a
static HTTP server with Range support (aiohttp's static files), optionally slowed by a fixed
latency per request and logging the requests it serves."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import boto3
import pytest
from aiohttp import web


@dataclass
class HttpLog:
    """What the server was asked: one (method, path, Range header) per request."""

    requests: list[tuple[str, str, str | None]] = field(default_factory=list)
    arrived: list[float] = field(default_factory=list)  # perf_counter() of each request
    authorizations: list[str | None] = field(default_factory=list)  # each request's header

    def clear(self) -> None:
        self.requests.clear()
        self.arrived.clear()
        self.authorizations.clear()

    def round_trips(self, gap: float) -> int:
        """Waves of requests: those arriving within ``gap`` seconds of the previous one
        went out together (one round trip for a client that waits for each wave)."""
        times = sorted(self.arrived)
        return sum(1 for i, t in enumerate(times) if i == 0 or t - times[i - 1] > gap)


@contextmanager
def http_server(
    root: Path, latency: float = 0.0, redirects: dict[str, str] | None = None
) -> Iterator[tuple[str, HttpLog]]:
    """Serve ``root`` read-only over HTTP on a free loopback port; yields (base URL, log).
    ``redirects``: paths answered with a 302 to another URL instead."""
    log = HttpLog()

    @web.middleware
    async def slow_and_logged(request: web.Request, handler):
        log.requests.append((request.method, request.path, request.headers.get("Range")))
        log.arrived.append(time.perf_counter())
        log.authorizations.append(request.headers.get("Authorization"))
        if latency:
            await asyncio.sleep(latency)
        if request.path in (redirects or {}):
            raise web.HTTPFound(redirects[request.path])
        return await handler(request)

    loop = asyncio.new_event_loop()
    app = web.Application(middlewares=[slow_and_logged])
    app.router.add_static("/", root, show_index=False, follow_symlinks=False)
    runner = web.AppRunner(app, access_log=None)
    loop.run_until_complete(runner.setup())
    site = web.TCPSite(runner, "127.0.0.1", 0)
    loop.run_until_complete(site.start())
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


@contextmanager
def s3_server() -> Iterator[str]:
    """A moto S3 endpoint on a free loopback port; yields its URL."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one log line per request
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.stop()


# moto's S3 takes any credentials; botocore wants some.
S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def s3_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch, prefix: str) -> str:
    """A new bucket on ``endpoint`` (its name starting ``prefix``), with ``S3_CREDENTIALS``
    set for the test."""
    for name, value in S3_CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket=name)
    return name
