"""runtime.diag: the diagnostics address both processes serve (probes and scrapes)."""

from __future__ import annotations

import asyncio
import http.client
import json
import socket
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from runtime import diag
from runtime.diag import DiagServer, Heartbeat, Readiness, on_loop
from tests.waiting import eventually_sync


class Fixed:
    """A `Diagnostics` whose answers a test sets."""

    def __init__(self) -> None:
        self.readiness = Readiness(True, {"store": "ok"})
        self.failure: Exception | None = None

    def ready(self) -> Readiness:
        if self.failure is not None:
            raise self.failure
        return self.readiness

    def metrics(self) -> bytes:
        return b"# TYPE x gauge\nx 1.0\n"


@pytest.fixture
def answers() -> Fixed:
    return Fixed()


@pytest.fixture
def server(answers: Fixed) -> Iterator[DiagServer]:
    started = DiagServer.start(("127.0.0.1", 0), answers)
    try:
        yield started
    finally:
        started.stop()


def call(server: DiagServer, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(f"http://127.0.0.1:{server.port}{path}", method=method)
    try:
        # S310: an http URL to the test's own loopback server
        with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


def test_healthz_readyz_and_metrics(server: DiagServer) -> None:
    """200 ok, 200 ready with the checks, and the Prometheus text with its content type."""
    assert call(server, "/healthz")[::2] == (200, b'{"status": "ok"}')
    status, _, body = call(server, "/readyz")
    assert (status, json.loads(body)) == (200, {"status": "ready", "checks": {"store": "ok"}})
    status, headers, body = call(server, "/metrics")
    assert (status, body) == (200, b"# TYPE x gauge\nx 1.0\n")
    assert headers["Content-Type"].startswith("text/plain; version=0.0.4")
    assert headers["Cache-Control"] == "no-store"


def test_not_ready_is_503_naming_the_failing_check(server: DiagServer, answers: Fixed) -> None:
    """Readiness false: 503 with the checks, so the operator sees what is down."""
    answers.readiness = Readiness(False, {"store": "unavailable"})
    status, _, body = call(server, "/readyz")
    assert (status, json.loads(body)["checks"]) == (503, {"store": "unavailable"})


def test_a_readiness_check_that_fails_to_answer_is_not_ready(
    server: DiagServer, answers: Fixed
) -> None:
    """An exception while asking is 503 by its type only (never its message)."""
    answers.failure = TimeoutError("secret detail")
    status, _, body = call(server, "/readyz")
    assert status == 503
    assert json.loads(body)["checks"] == {"readiness": "TimeoutError"}
    assert b"secret detail" not in body


@pytest.mark.parametrize("path", ["/", "/readyz/", "/metrics/x", "/HEALTHZ", "/healthz/../metrics"])
def test_other_paths_are_404(server: DiagServer, path: str) -> None:
    """Only the three exact paths exist."""
    assert call(server, path)[0] == 404


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "HEAD"])
def test_other_methods_are_405(server: DiagServer, method: str) -> None:
    """GET only: nothing here changes state."""
    status, headers, _ = call(server, "/readyz", method)
    assert (status, headers["Allow"]) == (405, "GET")


def test_a_stalled_event_loop_is_neither_alive_nor_ready(answers: Fixed) -> None:
    """The heartbeat is older than the stale limit: /healthz and /readyz both 503."""
    now = [100.0]
    heartbeat = Heartbeat(clock=lambda: now[0])
    server = DiagServer.start(("127.0.0.1", 0), answers, heartbeat)
    try:
        assert call(server, "/healthz")[0] == 200
        now[0] += diag.HEARTBEAT_STALE_SECONDS
        assert call(server, "/healthz")[::2] == (503, b'{"status": "stalled"}')
        status, _, body = call(server, "/readyz")
        assert (status, json.loads(body)["checks"]) == (503, {"event_loop": "stalled"})
    finally:
        server.stop()


async def test_the_heartbeat_follows_a_running_loop() -> None:
    """`run()` on the loop keeps `alive()` true."""
    heartbeat = Heartbeat()
    task = asyncio.create_task(heartbeat.run())
    await asyncio.sleep(0)
    assert heartbeat.alive()
    task.cancel()


async def test_on_loop_runs_a_check_on_the_event_loop() -> None:
    """A diagnostics thread asks a coroutine on the loop and gets its result."""
    loop = asyncio.get_running_loop()

    async def answer() -> str:
        return "from the loop"

    assert await asyncio.to_thread(on_loop, loop, answer) == "from the loop"


def test_connections_are_bounded(server: DiagServer) -> None:
    """Beyond MAX_CONNECTIONS open at once, a new connection is closed unanswered."""
    idle = [
        socket.create_connection(("127.0.0.1", server.port)) for _ in range(diag.MAX_CONNECTIONS)
    ]
    try:
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as extra:
            extra.sendall(b"GET /healthz HTTP/1.0\r\n\r\n")
            assert extra.recv(100) == b""
    finally:
        for connection in idle:
            connection.close()

    def answers() -> bool:
        # A closed connection's slot is free once its thread has seen the close, not before.
        try:
            return call(server, "/healthz")[0] == 200
        except (OSError, http.client.HTTPException):
            return False

    eventually_sync(answers)


def test_a_taken_address_is_an_oserror(server: DiagServer, answers: Fixed) -> None:
    """Binding where something listens fails loudly."""
    with pytest.raises(OSError):
        DiagServer.start(("127.0.0.1", server.port), answers)
