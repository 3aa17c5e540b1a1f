"""Container health probes against real servers: gRPC health and HTTP."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

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

    async def moved(_: web.Request) -> web.Response:
        raise web.HTTPFound("/readyz")

    app = web.Application()
    app.router.add_get("/readyz", ready)
    app.router.add_get("/down", not_ready)
    app.router.add_get("/moved", moved)
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


async def test_http_probe_follows_no_redirect(readyz: str) -> None:
    """A redirect, even to a healthy endpoint, is not a 200 from the endpoint probed."""
    assert await asyncio.to_thread(probe.http_ok, f"{readyz}/moved") == (
        False,
        f"{readyz}/moved: 302",
    )


@pytest.mark.parametrize(
    "url",
    [
        "https://127.0.0.1:8081/readyz",
        "127.0.0.1:8081/readyz",
        "http:///readyz",
        "http://127.0.0.1:readyz/readyz",
        "http://127.0.0.1:70000/readyz",
    ],
    ids=["https", "no scheme", "no host", "port not a number", "port out of range"],
)
def test_http_probe_refuses_what_is_not_a_plain_http_url(url: str) -> None:
    """Only http:// with a host is probed; anything else is unhealthy and says why."""
    assert probe.http_ok(url) == (False, f"{url}: not an http:// URL")


def test_probe_command_exit_codes(unused_tcp_port: int, capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m stack.probe` exits 1 and prints one line when unhealthy."""
    assert probe.main(["http", f"http://127.0.0.1:{unused_tcp_port}/readyz"]) == 1
    assert (
        capsys.readouterr().out
        == f"http://127.0.0.1:{unused_tcp_port}/readyz: ConnectionRefusedError\n"
    )


# Runs in a fresh interpreter: what a health check imports, after one HTTP probe.
IMPORTS_PROBE = """
import json
import sys

from stack import probe

probe.main(["http", sys.argv[1]])
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules} & {"grpc", "httpx", "yaml"})))
"""


@pytest.mark.slow
def test_an_http_check_imports_neither_grpc_nor_httpx(unused_tcp_port: int) -> None:
    """A check runs every few seconds in every container: `http` loads no gRPC, httpx or YAML."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORTS_PROBE, f"http://127.0.0.1:{unused_tcp_port}/readyz"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out.splitlines()[-1]) == []


def fake_proc(root: Path, *commands: list[str]) -> Path:
    """A /proc with one numbered directory per process, holding its NUL-separated cmdline."""
    for pid, argv in enumerate(commands, start=1):
        (root / str(pid)).mkdir()
        (root / str(pid) / "cmdline").write_bytes(b"\0".join(arg.encode() for arg in argv) + b"\0")
    (root / "self").mkdir()
    return root


@pytest.mark.parametrize(
    ("commands", "component"),
    [
        ([["/opt/orrery/bin/python", "-m", "authz", "--workers", "2"]], "authz"),
        (
            [["/sbin/docker-init", "--", "python", "-m", "adapter"], ["python", "-m", "adapter"]],
            "adapter",
        ),
        ([["sleep", "infinity"]], None),
        ([["orrery-a2a", "envoy-config", "--out", "/srv/envoy/envoy.yaml"]], None),
        ([["python", "-m", "stack.probe", "self"]], None),
    ],
)
def test_self_finds_the_component_this_container_runs(
    tmp_path: Path, commands: list[list[str]], component: str | None
) -> None:
    """`python -m authz|adapter` anywhere in the PID namespace names it; nothing else does."""
    assert probe.running_component(fake_proc(tmp_path, *commands)) == component


async def test_self_probes_authz_at_its_configured_address(
    tmp_path: Path, health_server: tuple[str, health.HealthServicer]
) -> None:
    """authz runs here: its gRPC health at ORRERY_A2A_AUTHZ_ADDR (0.0.0.0 probed on loopback)."""
    address, servicer = health_server
    await servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    proc = fake_proc(tmp_path, ["python", "-m", "authz"])
    port = address.rsplit(":", 1)[1]
    env = {"ORRERY_A2A_AUTHZ_ADDR": f"0.0.0.0:{port}"}
    assert await asyncio.to_thread(probe.self_healthy, env, proc) == (True, f"{address}: SERVING")


async def test_self_probes_the_adapters_readyz(tmp_path: Path, readyz: str) -> None:
    """The adapter runs here: GET /readyz at ORRERY_A2A_ADAPTER_ADDR."""
    proc = fake_proc(tmp_path, ["python", "-m", "adapter"])
    env = {"ORRERY_A2A_ADAPTER_ADDR": readyz.removeprefix("http://")}
    assert await asyncio.to_thread(probe.self_healthy, env, proc) == (True, f"{readyz}/readyz: 200")


async def test_self_probes_an_adapter_listening_on_every_ipv6_address(tmp_path: Path) -> None:
    """ORRERY_A2A_ADAPTER_ADDR=[::]:PORT: /readyz is asked on [::1], bracketed in the URL."""

    async def ready(_: web.Request) -> web.Response:
        return web.json_response({"status": "ready"})

    app = web.Application()
    app.router.add_get("/readyz", ready)
    async with serving(app, host="::1") as url:
        port = url.rsplit(":", 1)[1]
        proc = fake_proc(tmp_path, ["python", "-m", "adapter"])
        env = {"ORRERY_A2A_ADAPTER_ADDR": f"[::]:{port}"}
        assert await asyncio.to_thread(probe.self_healthy, env, proc) == (
            True,
            f"http://[::1]:{port}/readyz: 200",
        )


def test_self_defaults_to_the_components_default_address(
    tmp_path: Path, unused_tcp_port: int
) -> None:
    """No variable: the stack's default address (authz 127.0.0.1:9191) is probed."""
    proc = fake_proc(tmp_path, ["python", "-m", "authz"])
    healthy, line = probe.self_healthy({}, proc)
    assert not healthy
    assert line.startswith("127.0.0.1:9191: ")


def test_self_with_nothing_to_probe_is_healthy(tmp_path: Path) -> None:
    """The renderer or the pod's holder: no health endpoint, so healthy, and it says why."""
    assert probe.self_healthy({}, fake_proc(tmp_path, ["sleep", "infinity"])) == (
        True,
        "nothing to probe: neither authz nor the adapter runs here",
    )


def test_probe_command_needs_a_target_except_for_self(capsys: pytest.CaptureFixture[str]) -> None:
    """`grpc`/`http` without a target and `self` with one are usage errors (exit 2)."""
    for argv in (["grpc"], ["self", "127.0.0.1:1"]):
        with pytest.raises(SystemExit) as exited:
            probe.main(argv)
        assert exited.value.code == 2
    assert "grpc and http need a TARGET; self takes none" in capsys.readouterr().err
