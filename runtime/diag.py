"""The diagnostics address: liveness, readiness and Prometheus metrics over HTTP, off the
request path.

authz and the adapter each serve, on an address of their own, what an orchestrator and a scraper
need, and nothing else:

    GET /healthz   200 {"status": "ok"}, or 503 when the process's event loop stopped turning
    GET /readyz    200 {"status": "ready", "checks": {…}}, or 503 {"status": "unavailable", …}
    GET /metrics   the Prometheus text exposition (format 0.0.4, which every Prometheus reads)

Any other path is 404, any other method 405. So the kubelet can probe with `httpGet` from
outside the pod's network namespace (never `exec`-ing a Python probe) and Prometheus can scrape,
while the request path (authz's Check port, the adapter's A2A socket) serves neither.

The server runs on threads of its own: a probe or a scrape never waits behind requests on the
event loop, and a wedged event loop cannot answer "alive" — `Heartbeat` is a timestamp the loop
refreshes every second, and liveness fails once it is `HEARTBEAT_STALE_SECONDS` old. Readiness and
metrics come from a `Diagnostics` object, called on a diagnostics thread: a process whose checks
live on its event loop bridges them with `on_loop`. Connections are bounded (`MAX_CONNECTIONS` at
once, the rest answered 503) and time out after `CONNECTION_TIMEOUT_SECONDS`; nothing is logged
per request.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from socketserver import TCPServer, ThreadingMixIn
from typing import Any, Protocol, TypeVar

from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4

from runtime.addresses import Address, address_family

HEALTHZ, READYZ, METRICS = "/healthz", "/readyz", "/metrics"
HEARTBEAT_INTERVAL_SECONDS = 1.0
HEARTBEAT_STALE_SECONDS = 10.0
MAX_CONNECTIONS = 16
CONNECTION_TIMEOUT_SECONDS = 5.0
BRIDGE_TIMEOUT_SECONDS = 3.0  # a kubelet probe's default timeout is 1 s; its retries cover us

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Readiness:
    """Ready or not, and each check's state (`ok`, or what is wrong) for the operator."""

    ready: bool
    checks: Mapping[str, str] = field(default_factory=dict)


class Diagnostics(Protocol):
    """What a process tells its diagnostics address. Both are called on a diagnostics thread."""

    def ready(self) -> Readiness: ...

    def metrics(self) -> bytes: ...


class Heartbeat:
    """Proof that an event loop still turns: `run()` on the loop, `alive()` from any thread."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._last = clock()

    async def run(self) -> None:
        while True:
            self._last = self._clock()
            await asyncio.sleep(HEARTBEAT_INTERVAL_SECONDS)

    def alive(self) -> bool:
        return self._clock() - self._last < HEARTBEAT_STALE_SECONDS


def on_loop(loop: asyncio.AbstractEventLoop, make: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine on `loop` from a diagnostics thread and wait for it (bounded)."""

    async def call() -> T:
        return await make()

    return asyncio.run_coroutine_threadsafe(call(), loop).result(BRIDGE_TIMEOUT_SECONDS)


class _Handler(BaseHTTPRequestHandler):
    server: DiagServer
    timeout = CONNECTION_TIMEOUT_SECONDS
    server_version = "orrery-diag"
    sys_version = ""

    def do_GET(self) -> None:
        path = self.path.partition("?")[0]
        if path == HEALTHZ:
            alive = self.server.alive()
            self._json(200 if alive else 503, {"status": "ok" if alive else "stalled"})
        elif path == READYZ:
            readiness = self.server.readiness()
            status = "ready" if readiness.ready else "unavailable"
            body = {"status": status, "checks": dict(readiness.checks)}
            self._json(200 if readiness.ready else 503, body)
        elif path == METRICS:
            self._send(200, self.server.diagnostics.metrics(), CONTENT_TYPE_PLAIN_0_0_4)
        else:
            self._json(404, {"error": "not_found"})

    def _refuse_method(self) -> None:
        self._json(405, {"error": "method_not_allowed"}, Allow="GET")

    # The stdlib dispatches on these names; every method but GET is refused the same way.
    do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = do_OPTIONS = _refuse_method  # noqa: N815

    def _json(self, status: int, body: Mapping[str, Any], **headers: str) -> None:
        self._send(status, json.dumps(body).encode(), "application/json", **headers)

    def _send(self, status: int, body: bytes, content_type: str, **headers: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        """Probes and scrapes are not worth a log line each."""


class DiagServer(ThreadingMixIn, TCPServer):
    """The diagnostics HTTP server on its own threads; `start()` binds and serves at once.
    (A `TCPServer`, not `http.server.HTTPServer`, whose bind looks the host's name up.)"""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(
        self, address: Address, diagnostics: Diagnostics, heartbeat: Heartbeat | None
    ) -> None:
        self.address_family = address_family(address[0])
        self.diagnostics = diagnostics
        self._heartbeat = heartbeat
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        super().__init__(address, _Handler)

    @classmethod
    def start(
        cls, address: Address, diagnostics: Diagnostics, heartbeat: Heartbeat | None = None
    ) -> DiagServer:
        """Bind `address` (port 0: any free port; `OSError` when taken) and serve."""
        server = cls(address, diagnostics, heartbeat)
        threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="diag",
            daemon=True,
        ).start()
        return server

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def alive(self) -> bool:
        return self._heartbeat is None or self._heartbeat.alive()

    def readiness(self) -> Readiness:
        """Not ready while not alive, or when a check cannot even be asked."""
        if not self.alive():
            return Readiness(False, {"event_loop": "stalled"})
        try:
            return self.diagnostics.ready()
        except Exception as exc:  # noqa: BLE001 - any failure to answer means "not ready"
            return Readiness(False, {"readiness": type(exc).__name__})

    def process_request(self, request: Any, client_address: Any) -> None:
        """One thread per connection, at most `MAX_CONNECTIONS` at once; beyond, close."""
        if not self._slots.acquire(blocking=False):
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def stop(self) -> None:
        self.shutdown()
        self.server_close()
