"""The HTTP ext_authz transport: Envoy's `http_service` check → `CheckView` → `Checker` → answer.

The gRPC transport stays what a mesh speaks; this one exists because a Python HTTP/1.1 server on
a bare `asyncio.Protocol` costs a fraction of a gRPC server per call (docs/benchmarks.md). It is
served beside gRPC when ORRERY_A2A_AUTHZ_HTTP_ADDR is set, on the same `Checker`, so both give the
same answers (tests/e2e/test_transport_conformance.py holds them to it through real Envoy).

What Envoy's HTTP ext_authz client sends (envoy/envoy.yaml rendered with `authz_transport="http"`,
`stack.envoy_config`): one bodyless HTTP/1.1 request per check, on kept-alive connections, with
the original method, `CHECK_PREFIX` + the original path (query string included: the
`access_token` and fragment refusals read it), Host, and the headers `allowed_headers` names.
What it reads back:

- 200 is an allow. The headers `allowed_upstream_headers` names (x-orrery-principal,
  x-orrery-trace-link) are set on the upstream request, replacing any copy; the names listed in
  `x-envoy-auth-headers-to-remove` are removed from it — the same mutations as the gRPC answer.
- Another status below 500 is a denial: that status, the body and the headers
  `allowed_client_headers` names go to the client, as with gRPC's DeniedHttpResponse.
- A 5xx means "the authorization service failed" to Envoy: it answers its `status_on_error` (503,
  `edge_error`). A denial whose status is 5xx (503 `keys_unavailable` / `limiter_unavailable`, 508
  `loop_detected`) therefore travels under a carrier status (`CARRIERS`), which our Envoy's
  local-reply mappers turn back into the real one; only a bug is sent as 500.

`GET /healthz` (exactly; outside `CHECK_PREFIX`, so no check can reach it) answers 200 while
usable keys are loaded and no stop has begun, else 503: what gRPC health says on the gRPC port.

Fail closed: a request this module cannot read — malformed HTTP, a head over `MAX_HEAD_BYTES` or
`MAX_HEADERS` fields, any body, trailers (only the header section is what Envoy asks about), an
upgrade, a path outside `CHECK_PREFIX` — is answered 400 (never 200) and its connection closed.

A check carries the original method, so the check for a HEAD request is a HEAD: its answer has
no body (HTTP/1.1: a response to HEAD never has one), else the denial's body would be read as the
start of the next answer on the connection (`_HeadCheck`). What one peer may hold is bounded:
`max_connections` open at once (one more is closed at once, unread) and a connection with
nothing to answer for `idle_timeout` is closed (`HttpChecks._close_idle`; our Envoy closes its
idle connections to authz sooner, envoy/envoy.yaml).

The per-request path stays allocation-light: `httptools` (llhttp) calls back with bytes, the
headers become one dict, answers are pre-encoded bytes with the assertion spliced in, a denial's
bytes are built once per distinct denial, and a check decided without an await is answered
inside `data_received`, without a Task (`CheckConnection._drain`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import http
import os
import socket
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import httptools

from authz.checking import Checker, Pending
from authz.decision import Allow, CheckView, Deny
from authz.errors import Denial
from authz.responses import DENIAL_HEADERS, REMOVED_HEADERS, denial_body, denial_headers
from contract.headers import PRINCIPAL_HEADER, TRACE_LINK_HEADER
from contract.http_checks import CARRIERS
from contract.http_checks import CHECK_PREFIX as CHECK_PATH_PREFIX
from contract.http_checks import HEALTH_PATH as HEALTH_URL
from runtime.addresses import Address
from runtime.serving import cannot_listen

CHECK_PREFIX = CHECK_PATH_PREFIX.encode()  # Envoy's http_service.path_prefix
HEALTH_PATH = HEALTH_URL.encode()
MAX_HEAD_BYTES = 64 * 1024  # Envoy forwards at most its listener's 32 KiB of request headers
MAX_HEADERS = 100  # and at most 64 of them, plus its own few
MAX_QUEUED = 16  # checks waiting on one connection before it stops reading (Envoy never pipelines)
ADDRESS_VARIABLE = "ORRERY_A2A_AUTHZ_HTTP_ADDR"

_REMOVE = b"\r\nx-envoy-auth-headers-to-remove: "
_ALLOW_HEAD = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n" + PRINCIPAL_HEADER.encode() + b": "
_ALLOW_TAIL = _REMOVE + ",".join((*REMOVED_HEADERS, TRACE_LINK_HEADER)).encode() + b"\r\n\r\n"
_LINK = b"\r\n" + TRACE_LINK_HEADER.encode() + b": "
_LINK_TAIL = _REMOVE + ",".join(REMOVED_HEADERS).encode() + b"\r\n\r\n"


def _plain(status: int, body: bytes, *, close: bool = False) -> bytes:
    phrase = http.HTTPStatus(status).phrase
    connection = b"connection: close\r\n" if close else b""
    return (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\n".encode()
        + connection
        + b"\r\n"
        + body
    )


REFUSED = _plain(
    400,
    b'{"error":"bad_request","error_description":"not an ext_authz check request"}',
    close=True,
)
FAILED = _plain(500, b'{"error":"internal_error"}', close=True)
SERVING = _plain(200, b'{"status":"serving"}')
NOT_SERVING = _plain(503, b'{"status":"not_serving"}')


def allowed(assertion: str, trace_link: str | None) -> bytes:
    """200 with the assertion (and link) to set upstream and the headers to remove there.
    Both values are ASCII by construction (base64url, hex); anything else raises, failing
    closed."""
    if trace_link is None:
        return b"".join((_ALLOW_HEAD, assertion.encode("ascii"), _ALLOW_TAIL))
    return b"".join(
        (_ALLOW_HEAD, assertion.encode("ascii"), _LINK, trace_link.encode("ascii"), _LINK_TAIL)
    )


def denied(denial: Denial) -> bytes:
    return _denied(denial.status, denial.reason, denial.description, tuple(denial_headers(denial)))


@functools.lru_cache(maxsize=256)
def _denied(
    status: int, reason: str, description: str, extra: tuple[tuple[str, str], ...]
) -> bytes:
    """Fully determined by these values (descriptions are our literals): built once each."""
    body = denial_body(reason, description).encode()
    wire = CARRIERS.get(status, status)
    phrase = http.HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {wire} {phrase}"]
    lines += [f"{name}: {value}" for name, value in (*DENIAL_HEADERS, *extra)]
    lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def headers_only(answer: bytes) -> bytes:
    """`answer` as the answer to a HEAD check: its head, without the body."""
    return answer[: answer.index(b"\r\n\r\n") + 4]


def encode(result: Allow | Deny) -> bytes:
    if isinstance(result, Allow):
        return allowed(result.assertion, result.trace_link)
    return denied(result.denial)


class _Unreadable(Exception):
    """The request is not one this transport reads (raised inside parser callbacks)."""


@dataclass(slots=True)
class _HeadCheck:
    """A check for a HEAD request, queued: answered like any other, then without its body."""

    item: CheckView | Pending


Queued = CheckView | Pending | _HeadCheck | bytes


class HttpChecks:
    """The HTTP transport of one authz process: its listening server and open connections."""

    def __init__(
        self,
        checker: Checker,
        usable: Callable[[], bool],
        *,
        idle_timeout: float = 300.0,
        max_connections: int = 1024,
    ) -> None:
        self._checker = checker
        self._usable = usable
        self._server: asyncio.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None
        self.idle_timeout = idle_timeout
        self.max_connections = max_connections
        self.connections: set[CheckConnection] = set()
        self.stopping = False

    async def start(self, addr: Address, *, reuse_port: bool = False) -> int:
        """Listen on `addr` (`CannotListen` naming ORRERY_A2A_AUTHZ_HTTP_ADDR); the bound port."""
        loop = asyncio.get_running_loop()
        host, port = addr
        try:
            self._server = await loop.create_server(
                lambda: CheckConnection(self), host, port, reuse_port=reuse_port or None
            )
        except OSError as exc:
            # asyncio rewords the system's reason; name it the way the other addresses do.
            plain = OSError(exc.errno, os.strerror(exc.errno)) if exc.errno else exc
            raise cannot_listen(ADDRESS_VARIABLE, addr, plain) from None
        self._sweeper = loop.create_task(self._close_idle(), name="authz-http-idle")
        bound: int = self._server.sockets[0].getsockname()[1]
        return bound

    async def _close_idle(self) -> None:
        """Close connections with nothing to answer for `idle_timeout`, looking a few times per
        timeout (one timer for all, not one per connection and request)."""
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.idle_timeout / 4)
            since = loop.time() - self.idle_timeout
            for connection in list(self.connections):
                if connection.last_active < since and connection.idle():
                    connection.close()

    def health(self) -> bytes:
        return SERVING if self._usable() and not self.stopping else NOT_SERVING

    def begin(self, view: CheckView) -> bytes | Pending:
        """The answer to `view` if it is decided without an await, else the `Pending` check."""
        try:
            result = self._checker.begin(view)
            return result if isinstance(result, Pending) else encode(result)
        except Exception:  # noqa: BLE001 — logged by the Checker (check_failed); Envoy fails closed on a 500
            return FAILED

    async def finish(self, pending: Pending) -> bytes:
        try:
            return encode(await self._checker.finish(pending))
        except Exception:  # noqa: BLE001 — logged by the Checker (check_failed); Envoy fails closed on a 500
            return FAILED

    async def stop(self, grace: float) -> None:
        """Stop accepting, let checks in flight finish for up to `grace` seconds, close all."""
        self.stopping = True
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        busy = [c.task for c in self.connections if c.task is not None and not c.task.done()]
        if busy:
            await asyncio.wait(busy, timeout=grace)
        for connection in list(self.connections):
            connection.close()


class CheckConnection(asyncio.Protocol):
    """One connection from Envoy: parse requests as they arrive, answer them in order."""

    def __init__(self, checks: HttpChecks) -> None:
        self._checks = checks
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None
        self._url = b""
        self._headers: dict[str, str] = {}
        self._head_bytes = 0
        self._in_head = False
        self._queue: deque[Queued] = deque()
        self._paused = False
        self.task: asyncio.Task[None] | None = None
        self._loop = asyncio.get_running_loop()
        self.last_active = self._loop.time()

    # --- the connection -----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self._checks.connections) >= self._checks.max_connections:
            transport.close()  # over the cap: not read, not answered
            return
        self._transport = cast(asyncio.Transport, transport)  # a TCP server's: always one
        sock = transport.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._checks.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        self._checks.connections.discard(self)

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()

    def idle(self) -> bool:
        """Nothing queued or being answered: closing loses no check."""
        return not self._queue and (self.task is None or self.task.done())

    def data_received(self, data: bytes) -> None:
        if self._transport is None or self._transport.is_closing():
            return
        self.last_active = self._loop.time()
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, _Unreadable):
            self._refuse()

    def _refuse(self) -> None:
        """Answer 400 after whatever is queued, then close: nothing more is read."""
        if self._transport is not None:
            self._transport.pause_reading()
        self._queue.append(REFUSED)
        self._drain()

    # --- httptools callbacks ------------------------------------------------------------------

    def on_message_begin(self) -> None:
        self._url = b""
        self._headers = {}
        self._head_bytes = 0
        self._in_head = True

    def on_url(self, url: bytes) -> None:
        self._url += url
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise _Unreadable

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_bytes += len(name) + len(value)
        headers = self._headers
        if self._head_bytes > MAX_HEAD_BYTES or len(headers) >= MAX_HEADERS or not self._in_head:
            raise _Unreadable  # too much, or a trailer (llhttp reports those as headers too)
        key = _NAMES.get(name) or _header_name(name)
        text = value.decode("latin-1")
        # Repeated fields are joined with "," as in the gRPC CheckRequest's `headers` map.
        headers[key] = f"{headers[key]},{text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self._in_head = False
        if self._parser.should_upgrade():
            raise _Unreadable

    def on_body(self, body: bytes) -> None:
        raise _Unreadable  # Envoy sends no body (no with_request_body)

    def on_message_complete(self) -> None:
        url = self._url
        if url.startswith(CHECK_PREFIX + b"/"):
            path = url[len(CHECK_PREFIX) :].decode("utf-8", "surrogateescape")
            view = CheckView(headers=self._headers, surface=None, path=path)
            self._queue.append(_HeadCheck(view) if self._parser.get_method() == b"HEAD" else view)
        elif url == HEALTH_PATH and self._parser.get_method() == b"GET":
            self._queue.append(self._checks.health())
        else:
            raise _Unreadable
        if not self._parser.should_keep_alive():
            self._queue.append(b"")  # the marker: close once everything before it is written
        if len(self._queue) >= MAX_QUEUED and self._transport is not None:
            self._transport.pause_reading()
            self._paused = True
        self._drain()

    # --- answering ----------------------------------------------------------------------------

    def _drain(self) -> None:
        """Answer what is queued, in order. A check decided without an await (`Checker.begin`:
        a cached token, the in-process limiter) is answered right here, inside `data_received`,
        with no Task — a Task per check cost about as much as the transport's own parsing. The
        first check that needs an await, and everything queued behind it, is answered by one
        Task (code under the decision may need a current task — the Redis client's timeouts
        do); while it runs, new requests queue behind it."""
        if self.task is not None and not self.task.done():
            return
        queue = self._queue
        while queue:
            if self._closed():  # pipelined after a close: neither decided nor answered
                queue.clear()
                return
            answer = self._begin(queue[0])
            if not isinstance(answer, bytes):
                queue[0] = answer
                self.task = asyncio.get_running_loop().create_task(self._answer_queued())
                return
            queue.popleft()
            if not self._send(answer):
                return

    async def _answer_queued(self) -> None:
        queue = self._queue
        while queue and not self._closed():
            answer = await self._finish(self._begin(queue.popleft()))
            if not self._send(answer):
                return

    def _begin(self, item: Queued) -> bytes | Pending | _HeadCheck:
        """The answer to `item` if it is decided without an await, else what is still to do."""
        if isinstance(item, CheckView):
            return self._checks.begin(item)
        if isinstance(item, _HeadCheck):
            inner = item.item
            begun = self._checks.begin(inner) if isinstance(inner, CheckView) else inner
            return headers_only(begun) if isinstance(begun, bytes) else _HeadCheck(begun)
        return item

    async def _finish(self, item: bytes | Pending | _HeadCheck) -> bytes:
        if isinstance(item, Pending):
            return await self._checks.finish(item)
        if isinstance(item, _HeadCheck):
            return headers_only(await self._finish(self._begin(item.item)))
        return item

    def _closed(self) -> bool:
        return self._transport is None or self._transport.is_closing()

    def _send(self, answer: bytes) -> bool:
        """Write `answer`; False once the connection is closed (by the close marker `b""`, a
        refusal or a failure, or by the peer)."""
        transport = self._transport
        if transport is None:
            return False
        if not answer or answer is REFUSED or answer is FAILED:
            if answer:
                transport.write(answer)
            transport.close()
            self._queue.clear()
            return False
        transport.write(answer)
        self.last_active = self._loop.time()
        if self._paused and len(self._queue) < MAX_QUEUED:
            self._paused = False
            transport.resume_reading()
        return True


_NAMES: dict[bytes, str] = {}  # header names as sent → lowercase str, for the names seen first
MAX_KNOWN_NAMES = 256


def _header_name(raw: bytes) -> str:
    name = raw.decode("latin-1").lower()
    if len(_NAMES) < MAX_KNOWN_NAMES:
        _NAMES[raw] = name
    return name
