"""The HTTP edge of the service: which requests it answers at all, and how long a client may
take to send one.

- ``HeadAsGet``: HEAD is answered wherever GET is, with GET's status and headers and no body
  (FastAPI routes answer GET alone; monitors and link checkers send HEAD).
- ``allowed_hosts``: the ``Host`` names the service answers for. A web page whose own name
  is made to resolve to 127.0.0.1 (DNS rebinding) sends its requests with that name as Host:
  answering only the names the service is reached by keeps such pages out of a loopback
  service (Starlette's ``TrustedHostMiddleware`` refuses the others with 400).
- ``BoundedHttpToolsProtocol`` (and ``BoundedH11Protocol``): uvicorn's HTTP/1.1 protocols
  with a time limit on receiving a request's head and its body; uvicorn bounds only idle
  keep-alive connections, so a client sending a header byte now and then held its socket
  forever.
- ``no_delay``: a response is sent as soon as it is written (TCP_NODELAY), in the worker
  processes of ``serve --workers N`` too.
- ``TakingTurnsLoop``: the worker processes of ``serve --workers N`` share the connections.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Sequence
from typing import Any, ClassVar

import h11
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

# What a loopback service is reached by (IPv6 literals are bracketed in a Host header).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# The longest a client may take to send a request's head (from its connection, or from the
# first byte of a later request on it), and its body (from the end of the head): a posted
# shape is at most 4 MiB.
HEAD_SECONDS = 20.0
BODY_SECONDS = 60.0
# How long a worker process waits before accepting again, per connection it holds, and at
# most (``TakingTurnsLoop``).
TURN_SECONDS = 0.0005
MAX_TURN_SECONDS = 0.01


class HeadAsGet:
    """HEAD answered as GET is, without the body (RFC 9110, 9.3.2)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def allowed_hosts(bound: str, given: Sequence[str] = ()) -> list[str]:
    """The ``Host`` names a service bound to the address ``bound`` answers for: the loopback
    names, the address itself (unless it is every interface's, 0.0.0.0 or ::), and those
    ``given`` (``--allowed-host``; ``*.example.org`` for its subdomains, ``*`` for any)."""
    names = list(LOOPBACK_NAMES)
    try:
        address = ipaddress.ip_address(bound)
    except ValueError:  # a name
        names.append(bound.lower())
    else:
        if not address.is_unspecified:
            names.append(f"[{address}]" if address.version == 6 else str(address))
    names += [name.lower() for name in given]
    return list(dict.fromkeys(names))


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Turn Nagle's algorithm off on ``transport``'s TCP socket. asyncio does so itself only
    for sockets whose protocol number is TCP's; the listening socket uvicorn makes for
    ``--workers N`` has 0 there, and so had every connection its workers accepted: uvicorn
    writes a response's head and body separately, and the body waited for the client's
    delayed acknowledgement of the head, 40 ms on Linux, on every request
    (docs/benchmarks.md)."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Deadlines:
    """What a client owes (a request's head, its body) and by when: a client slower than
    ``head_seconds`` for a head (from its connection, or from the first byte of a later
    request on it) or ``body_seconds`` for a body (from the end of the head) gets 408 and its
    connection is closed. Mixed into uvicorn's HTTP protocols, which call ``_owe``."""

    head_seconds: ClassVar[float] = HEAD_SECONDS
    body_seconds: ClassVar[float] = BODY_SECONDS
    _owed: tuple[str, asyncio.TimerHandle] | None = None  # (what, its deadline)
    # uvicorn's protocols have these:
    loop: asyncio.AbstractEventLoop
    transport: asyncio.Transport
    logger: logging.Logger
    cycle: Any

    def _owe(self, owed: str | None) -> None:
        """Start the deadline of what the client owes now (None: nothing), unless it runs."""
        if self._owed is not None and self._owed[0] == owed:
            return
        self._unwatch()
        if owed is not None:
            seconds = self.head_seconds if owed == "head" else self.body_seconds
            self._owed = (owed, self.loop.call_later(seconds, self._too_slow, owed, seconds))

    def _unwatch(self) -> None:
        if self._owed is not None:
            self._owed[1].cancel()
            self._owed = None

    def _too_slow(self, owed: str, seconds: float) -> None:
        self._owed = None
        if self.transport.is_closing():
            return
        self.logger.info("closed a connection whose request %s took over %g s", owed, seconds)
        if owed == "head" or not (self.cycle and self.cycle.response_started):
            text = f"the request's {owed} took more than {seconds:g} s to arrive".encode()
            self.transport.write(
                b"HTTP/1.1 408 Request Timeout\r\ncontent-type: text/plain; charset=utf-8\r\n"
                b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(text), text)
            )
        self.transport.close()


class BoundedH11Protocol(_Deadlines, H11Protocol):
    """uvicorn's h11 protocol (pure Python), with deadlines on a request's head and body
    (``_Deadlines``). Between requests, uvicorn's keep-alive timeout applies."""

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        no_delay(transport)
        super().connection_made(transport)
        self._watch(opened=True)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        super().connection_lost(exc)

    def _watch(self, opened: bool = False) -> None:
        state = self.conn.their_state
        if state is h11.IDLE and (opened or self.conn.trailing_data[0]):
            self._owe("head")
        elif state is h11.SEND_BODY:
            self._owe("body")
        else:  # nothing owed: the request is in, or the connection idles between requests
            self._owe(None)


class BoundedHttpToolsProtocol(_Deadlines, HttpToolsProtocol):
    """uvicorn's protocol on httptools (llhttp, in C: what ``serve`` uses), with deadlines on
    a request's head and body (``_Deadlines``). The parser's callbacks say what the client
    owes (``_owing``); the deadline is set once the data received has been parsed, so a
    request that arrives whole in one read (nearly all) starts no timer at all."""

    _owing: str | None = "head"

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        no_delay(transport)
        super().connection_made(transport)
        self._owe("head")

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._owe(self._owing)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._owing = "head"  # (from its first byte, on a kept-alive connection)

    def on_headers_complete(self) -> None:
        self._owing = "body"
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._owing = None
        super().on_message_complete()

    def connection_lost(self, exc: Exception | None) -> None:
        self._unwatch()
        super().connection_lost(exc)


class TakingTurnsLoop(asyncio.SelectorEventLoop):
    """asyncio's event loop, where a listening socket shared with other processes is shared
    fairly: the worker processes of ``serve --workers N`` all wait on one socket, and asyncio
    accepts every waiting connection at once, so the first worker awake took all of a
    client's kept-alive connections while the others idled (measured: 16 connections, one
    worker doing 97 % of the work). Here a worker accepts one connection, then stops
    accepting for ``TURN_SECONDS`` per connection it already holds: the worker holding fewest
    (and the one least busy, quicker to wake) takes the next."""

    def _accept_connection(self, protocol_factory, sock, sslcontext=None, server=None, *args):
        rest = args[1:]  # (the backlog, accepted at once by asyncio: one here)
        super()._accept_connection(protocol_factory, sock, sslcontext, server, 1, *rest)  # type: ignore[misc]
        held = getattr(server, "_active_count", 0)  # this worker's open connections
        if held and server is not None and server.is_serving():
            self._remove_reader(sock.fileno())  # type: ignore[attr-defined]
            self.call_later(
                min(held * TURN_SECONDS, MAX_TURN_SECONDS),
                self._resume_accepting,
                (protocol_factory, sock, sslcontext, server, *args),
            )

    def _resume_accepting(self, arguments: tuple) -> None:
        sock, server = arguments[1], arguments[3]
        if server.is_serving() and sock.fileno() != -1:
            self._add_reader(sock.fileno(), self._accept_connection, *arguments)  # type: ignore[attr-defined]
