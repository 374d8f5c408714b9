"""The HTTP edge (issue 35.6): HEAD wherever GET is answered; only the Host names the
service is reached by (DNS rebinding); a request's head and body must arrive in time (slow
clients cannot hold sockets); every malformed body is a 4xx naming the shape."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from accumulus.service import create_app
from accumulus.service.http import (
    LOOPBACK_NAMES,
    BoundedH11Protocol,
    BoundedHttpToolsProtocol,
    TakingTurnsLoop,
    allowed_hosts,
)
from accumulus.service.server import running

AVERAGE = "/api/datasets/surface/tas/average?over=lat,lon&time=2001-01-01/2001-01-05"
# Generous: a refused or closed connection answers at once, a slow client after its limit.
PATIENCE = 30


class QuickLimits(BoundedHttpToolsProtocol):
    """What ``serve`` uses, with short limits."""

    head_seconds = 0.5
    body_seconds = 0.5


class QuickH11Limits(BoundedH11Protocol):
    head_seconds = 0.5
    body_seconds = 0.5


QUICK = pytest.mark.parametrize("quick", [QuickLimits, QuickH11Limits], ids=["httptools", "h11"])


@pytest.mark.parametrize(
    "path",
    ["/", "/api/health", "/api/datasets", "/api/datasets/surface", AVERAGE, "/api/regions",
     "/static/app.js", "/openapi.json"],
)  # fmt: skip
def test_head_is_answered_where_get_is(client: TestClient, path: str):
    got, head = client.get(path), client.head(path)
    assert got.status_code == head.status_code == 200
    assert head.content == b""
    for header in ("content-type", "content-length"):
        assert head.headers.get(header) == got.headers.get(header)


def test_head_is_refused_where_get_is(client: TestClient):
    assert client.head("/api/datasets/nothing").status_code == 404
    assert client.head("/api/datasets/surface/tas/average").status_code == 422  # no over


def test_head_through_a_real_server_has_no_body(cube: Path):
    with running(create_app([str(cube)])) as base:
        head = httpx.head(base + AVERAGE)
        assert head.status_code == 200 and head.content == b""
        assert int(head.headers["content-length"]) == len(httpx.get(base + AVERAGE).content)


def test_the_hosts_answered_by_default():
    assert allowed_hosts("127.0.0.1") == list(LOOPBACK_NAMES)
    assert allowed_hosts("127.0.0.2") == [*LOOPBACK_NAMES, "127.0.0.2"]
    assert allowed_hosts("::1") == list(LOOPBACK_NAMES)
    assert allowed_hosts("0.0.0.0", ["Data.Example.org"]) == [*LOOPBACK_NAMES, "data.example.org"]
    assert allowed_hosts("::", ["*"]) == [*LOOPBACK_NAMES, "*"]
    assert allowed_hosts("fe80::1") == [*LOOPBACK_NAMES, "[fe80::1]"]
    assert allowed_hosts("myhost") == [*LOOPBACK_NAMES, "myhost"]


@pytest.mark.parametrize(
    ("host", "status"),
    [("localhost", 200), ("localhost:8000", 200), ("127.0.0.1:8000", 200), ("[::1]:8000", 200),
     ("data.example.org", 200), ("x.data.example.org", 400), ("maps.example.com", 200),
     ("attacker.example", 400), ("127.0.0.1.attacker.example", 400), ("localhost.", 400),
     ("", 400)],
)  # fmt: skip
def test_only_the_allowed_hosts_are_answered(cube: Path, host: str, status: int):
    hosts = allowed_hosts("127.0.0.1", ["data.example.org", "*.example.com"])
    app = create_app([str(cube)], allowed_hosts=hosts)
    client = TestClient(app)
    for path in ("/api/health", AVERAGE, "/"):
        assert client.get(path, headers={"Host": host}).status_code == status


def test_a_rebound_name_is_refused_by_a_loopback_service(cube: Path):
    """A web page at attacker.example whose name was made to resolve to 127.0.0.1 (DNS
    rebinding) reaches the loopback service with its own name as Host: refused, while the
    service answers its own names."""
    app = create_app([str(cube)], allowed_hosts=allowed_hosts("127.0.0.1"))
    with running(app) as base:
        port = base.rsplit(":", 1)[1]
        rebound = httpx.get(base + AVERAGE, headers={"Host": f"attacker.example:{port}"})
        assert rebound.status_code == 400
        assert httpx.get(base + AVERAGE).status_code == 200
        assert httpx.get(f"http://localhost:{port}/api/health").status_code == 200


def read_response(sock: socket.socket) -> bytes:
    """One whole response (its head, then as many bytes as its content-length says)."""
    sock.settimeout(PATIENCE)
    received = b""
    while b"\r\n\r\n" not in received:
        received += sock.recv(4096)
    head, _, body = received.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length:")))  # fmt: skip
    while len(body) < length:
        body += sock.recv(4096)
    return head + b"\r\n\r\n" + body


def read_until_closed(sock: socket.socket) -> bytes:
    """What the server sends until it closes the connection (at most ``PATIENCE`` s)."""
    sock.settimeout(PATIENCE)
    received = b""
    while chunk := sock.recv(4096):
        received += chunk
    return received


@QUICK
def test_slow_headers_are_cut_off_and_the_service_still_answers(cube: Path, quick: type):
    """50 clients that send half a request head and wait, and one that sends its head a
    byte at a time: each gets 408 and its connection is closed once its head is late, while
    the service answers everyone else."""
    with running(create_app([str(cube)]), protocol=quick) as base:
        port = int(base.rsplit(":", 1)[1])
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(50)]
        for sock in slow:
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        assert httpx.get(base + "/api/health", timeout=PATIENCE).status_code == 200
        dribbling = socket.create_connection(("127.0.0.1", port))
        head = b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n\r\n"
        started = time.monotonic()
        sent = 0
        with pytest.raises(OSError):  # the server closes it before the head is complete
            while sent < len(head):
                dribbling.sendall(head[sent : sent + 1])
                sent += 1
                time.sleep(0.05)
        assert sent < len(head) and time.monotonic() - started < PATIENCE
        for sock in slow:
            assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
            sock.close()
        dribbling.close()
        assert httpx.get(base + "/api/health", timeout=PATIENCE).status_code == 200


@QUICK
def test_a_late_head_after_a_first_request_and_a_late_body_are_cut_off(cube: Path, quick: type):
    with running(create_app([str(cube)]), protocol=quick) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")
            sock.sendall(b"GET /api/health HTTP/1.1\r\n")  # the next request, half sent
            assert read_until_closed(sock).startswith(b"HTTP/1.1 408 ")
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.sendall(
                b"POST /api/datasets/surface/tas/average?over=lat,lon HTTP/1.1\r\n"
                b"Host: 127.0.0.1\r\nContent-Type: application/geo+json\r\n"
                b'Content-Length: 1000\r\n\r\n{"type": '
            )
            answer = read_until_closed(sock)
            assert answer.startswith(b"HTTP/1.1 408 ") and b"body" in answer


@QUICK
def test_a_prompt_client_is_not_cut_off(cube: Path, quick: type):
    """Limits count from the start of what is owed, not while a connection idles between
    requests: a client that sends each request whole keeps its connection for many of them,
    however long it lasts, and may post its body."""
    body = json.dumps(SQUARE).encode()
    with running(create_app([str(cube)]), protocol=quick) as base:
        port = int(base.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port)) as sock:
            for _ in range(3):
                sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert read_response(sock).startswith(b"HTTP/1.1 200 ")
                time.sleep(1.0)  # idle: twice the head's limit, under keep-alive's 5 s
            sock.sendall(
                b"POST " + AVERAGE.encode() + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
            )
            assert read_response(sock).startswith(b"HTTP/1.1 200 ")


def nagle_off(protocol: type) -> tuple[type, list[int]]:
    """``protocol``, recording TCP_NODELAY on each connection it is given (once it is made)."""
    seen: list[int] = []

    class Recording(protocol):  # type: ignore[valid-type, misc]
        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            sock = transport.get_extra_info("socket")
            seen.append(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    return Recording, seen


@pytest.mark.parametrize("protocol", [BoundedHttpToolsProtocol, BoundedH11Protocol])
def test_responses_are_sent_without_waiting_for_acknowledgements(cube: Path, protocol: type):
    """Every connection has Nagle's algorithm off, also when accepted from a listening socket
    made without TCP's protocol number, as ``running`` makes it and uvicorn does for
    ``serve --workers N`` (asyncio leaves such connections as they are: a response's body,
    written after its head, then waited for the client's delayed acknowledgement)."""
    recording, seen = nagle_off(protocol)
    with running(create_app([str(cube)]), protocol=recording) as base:
        port = int(base.rsplit(":", 1)[1])
        for _ in range(2):
            with socket.create_connection(("127.0.0.1", port)) as sock:
                sock.sendall(b"GET /api/health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                assert read_response(sock).startswith(b"HTTP/1.1 200 ")
    assert len(seen) == 2 and all(seen)


SQUARE = {
    "type": "Polygon",
    "coordinates": [[[-90, -45], [90, -45], [90, 45], [-90, 45], [-90, -45]]],
}
POLYGON = json.dumps({"type": "Polygon", "coordinates": [[[0, 0], [10, 0], [10, 10], [0, 0]]]})
MALFORMED = {
    "100k nested brackets": b"[" * 100_000 + b"]" * 100_000,
    "100k nested objects": b'{"a":' * 100_000 + b"1" + b"}" * 100_000,
    "deep geometry collection": b'{"type":"GeometryCollection","geometries":[' * 5000
    + POLYGON.encode()
    + b"]}" * 5000,
    "features that are ints": json.dumps({"type": "FeatureCollection", "features": [1, 2]}),
    "features that are a string": json.dumps({"type": "FeatureCollection", "features": "ab"}),
    "features that are an object": json.dumps({"type": "FeatureCollection", "features": {}}),
    "features that are a number": json.dumps({"type": "FeatureCollection", "features": 5}),
    "a geometry that is a number": json.dumps({"type": "Feature", "geometry": 5}),
    "a null geometry": json.dumps({"type": "Feature", "geometry": None}),
    "a type that is a list": json.dumps({"type": ["Polygon"], "coordinates": []}),
    "a 5000-digit number": b'{"type":"Polygon","coordinates":[[[' + b"9" * 5000 + b",0]]]}",
    "NaN coordinates": b'{"type":"Polygon","coordinates":[[[NaN,0],[1,1],[0,1],[NaN,0]]]}',
    "a ring of one point": json.dumps({"type": "Polygon", "coordinates": [[[0, 0]]]}),
    "coordinates that are text": json.dumps({"type": "Polygon", "coordinates": "abc"}),
    "not UTF-8": b'{"type": "\xff"}',
    "not JSON": b"{'type': 'Polygon'}",
    "JSON null": b"null",
    "a JSON number": b"12",
    "a point": json.dumps({"type": "Point", "coordinates": [1, 2]}),
}


@pytest.mark.parametrize("name", list(MALFORMED))
def test_every_malformed_body_is_a_4xx_naming_the_shape(client: TestClient, name: str):
    response = client.post(AVERAGE, content=MALFORMED[name])
    assert 400 <= response.status_code < 500, response.text
    assert response.json()["parameter"] == "shape"
    assert "\n" not in response.json()["error"]


def accepted_within(loop: asyncio.AbstractEventLoop, waiting: int, seconds: float) -> int:
    """How many of ``waiting`` connections queued on a listening socket ``loop`` accepts in
    ``seconds``."""
    listener = socket.create_server(("127.0.0.1", 0))
    clients = [socket.create_connection(listener.getsockname()) for _ in range(waiting)]
    accepted = []

    async def serve() -> None:
        server = await loop.create_server(asyncio.Protocol, sock=listener)
        original = server._attach  # type: ignore[attr-defined]  # counts each connection
        server._attach = lambda *a: (accepted.append(1), original(*a))  # type: ignore[attr-defined]
        await asyncio.sleep(seconds)
        server.close()

    try:
        loop.run_until_complete(serve())
    finally:
        loop.close()
        for client in clients:
            client.close()
    return len(accepted)


def test_worker_processes_take_turns_at_accepting():
    """``serve --workers N`` shares one listening socket between its processes: asyncio's loop
    takes every waiting connection the moment it wakes (a client's 16 kept-alive connections
    all went to one worker); ``TakingTurnsLoop`` takes one, then leaves the others a turn,
    and still takes them all when no one else does."""
    assert accepted_within(asyncio.SelectorEventLoop(), 16, 0.002) == 16
    assert 1 <= accepted_within(TakingTurnsLoop(), 16, 0.002) < 16
    assert accepted_within(TakingTurnsLoop(), 16, 2.0) == 16
