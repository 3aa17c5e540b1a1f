"""Container health probes against real servers: gRPC health and HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest
from aiohttp import web
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from stack import probe
from tests.stack.conftest import serving


@pytest.fixture
async def health_server() -> AsyncIterator[tuple[str, health.HealthServicer]]:
    server = grpc.aio.server()
    servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield f"127.0.0.1:{port}", servicer
    finally:
        await server.stop(grace=None)


async def test_grpc_probe_is_healthy_only_when_serving(
    health_server: tuple[str, health.HealthServicer],
) -> None:
    """SERVING → healthy; NOT_SERVING → not (what authz reports without usable keys)."""
    address, servicer = health_server
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert await asyncio.to_thread(probe.grpc_serving, address) == (True, f"{address}: SERVING")
    await servicer.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert await asyncio.to_thread(probe.grpc_serving, address) == (
        False,
        f"{address}: NOT_SERVING",
    )


def test_grpc_probe_of_a_closed_port_is_unhealthy(unused_tcp_port: int) -> None:
    """Nothing listening: unhealthy with the gRPC status name."""
    healthy, line = probe.grpc_serving(f"127.0.0.1:{unused_tcp_port}", timeout=2.0)
    assert not healthy
    assert line.endswith("UNAVAILABLE")


@pytest.fixture
async def readyz() -> AsyncIterator[str]:
    async def ready(_: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    async def not_ready(_: web.Request) -> web.Response:
        return web.json_response({"status": "database unreachable"}, status=503)

    app = web.Application()
    app.router.add_get("/readyz", ready)
    app.router.add_get("/down", not_ready)
    async with serving(app) as url:
        yield url


async def test_http_probe_is_healthy_only_on_200(readyz: str) -> None:
    """200 → healthy; 503 → not."""
    assert await asyncio.to_thread(probe.http_ok, f"{readyz}/readyz") == (
        True,
        f"{readyz}/readyz: 200",
    )
    assert await asyncio.to_thread(probe.http_ok, f"{readyz}/down") == (
        False,
        f"{readyz}/down: 503",
    )


def test_probe_command_exit_codes(unused_tcp_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m stack.probe` exits 1 and prints one line when unhealthy."""
    assert probe.main(["http", f"http://127.0.0.1:{unused_tcp_port}/readyz"]) == 1
    assert capsys.readouterr().out == f"http://127.0.0.1:{unused_tcp_port}/readyz: ConnectError\n"
