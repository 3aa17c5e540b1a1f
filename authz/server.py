"""Assembling and running one authz process: gRPC Check + health, diagnostics, graceful stop.

`serve()` wires the request path (key store → verifier → decider → `Checker`) to a grpc.aio
server — and, when ORRERY_A2A_AUTHZ_HTTP_ADDR is set, to the HTTP ext_authz transport too
(`http_transport.py`: the same `Checker`, its own `/healthz`) — keeps the gRPC health status
(`grpc.health.v1`, service "" and
`envoy.service.auth.v3.Authorization`) equal to "usable keys are loaded", and on stop: reports
NOT_SERVING, lets in-flight Checks finish (`SHUTDOWN_GRACE`), then closes the background tasks.
The diagnostics address (`runtime.diag`: `/healthz`, `/readyz`, `/metrics`) says the same thing
over HTTP: ready while usable keys are loaded and no stop has begun.

`--workers N` (see `__main__`) runs N of these in separate processes on one port with
SO_REUSEPORT; a single process refuses to share its port, so two instances started by mistake
on one address fail loudly instead of splitting traffic.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from prometheus_client import CollectorRegistry, generate_latest

from authz.admission import Admission
from authz.checking import Checker
from authz.decision import Decider
from authz.http_transport import HttpChecks
from authz.jwks import KeyStore, source_for
from authz.limits import Limiter
from authz.metrics import Metrics
from authz.service import SERVICE_NAME, AuthorizationService
from authz.settings import AuthzSettings
from authz.tokens import TokenVerifier
from runtime import logs
from runtime.addresses import address_family, format_address
from runtime.diag import DiagServer, Heartbeat, Readiness
from runtime.metrics import describe_process
from runtime.serving import CannotListen, cannot_listen

AUTHZ_SERVICE = SERVICE_NAME
SHUTDOWN_GRACE_SECONDS = 5.0
MAX_MESSAGE_BYTES = 1024 * 1024

# Start and stop events are what supervisors and tests wait for: always logged, whatever
# ORRERY_A2A_LOG_LEVEL says (it governs the per-decision and JWKS/limiter events).
process_logger = logging.getLogger("authz.process")


def configure_logging(level: str) -> None:
    logs.configure(level)
    process_logger.setLevel(logging.INFO)


@dataclass(frozen=True, slots=True)
class Bound:
    """Where this process actually listens (the ports the OS chose for port 0)."""

    grpc: str
    diag: str | None
    keys_usable: bool
    http: str | None = None


def grpc_options(*, reuse_port: bool) -> list[tuple[str, int]]:
    return [
        ("grpc.so_reuseport", 1 if reuse_port else 0),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # Envoy keeps its gRPC connections for a long time; ageing them out lets new workers and
        # replicas get a share of the traffic after scaling.
        ("grpc.max_connection_age_ms", 10 * 60 * 1000),
        ("grpc.max_connection_age_grace_ms", 30 * 1000),
    ]


def probe_bind(addr: tuple[str, int]) -> None:
    """Bind and release `addr` once before gRPC does: a taken port then fails here, with the
    system's reason and nothing else on stderr (gRPC's C core prints a non-JSON line of its own
    when its bind fails). A worker sharing the port by SO_REUSEPORT skips this."""
    host, port = addr
    with socket.socket(address_family(host), socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as gRPC binds
        try:
            probe.bind((host, port))
        except OSError as exc:
            raise cannot_listen("ORRERY_A2A_AUTHZ_ADDR", addr, exc) from None


class RegistryDiagnostics:
    """authz's answers on its diagnostics address: ready while `usable()` and not stopping, and
    the Prometheus text of `registry` (one process's, or the workers' merged one)."""

    def __init__(self, registry: CollectorRegistry, usable: Callable[[], bool]) -> None:
        self._registry = registry
        self._usable = usable
        self.stopping = False

    def ready(self) -> Readiness:
        keys = "ok" if self._usable() else "unusable"
        stopping = "stopping" if self.stopping else "ok"
        return Readiness(keys == "ok" and not self.stopping, {"keys": keys, "serving": stopping})

    def metrics(self) -> bytes:
        return generate_latest(self._registry)


def start_diag(
    addr: tuple[str, int], diagnostics: RegistryDiagnostics, heartbeat: Heartbeat | None = None
) -> DiagServer:
    """The diagnostics server on `addr` (`CannotListen` naming ORRERY_A2A_AUTHZ_DIAG_ADDR)."""
    try:
        return DiagServer.start(addr, diagnostics, heartbeat)
    except OSError as exc:
        raise cannot_listen("ORRERY_A2A_AUTHZ_DIAG_ADDR", addr, exc) from None


async def _start_http(
    checks: HttpChecks, addr: tuple[str, int] | None, *, reuse_port: bool
) -> str | None:
    """The HTTP transport on `addr` when one is configured; the address it bound."""
    if addr is None:
        return None
    return format_address((addr[0], await checks.start(addr, reuse_port=reuse_port)))


def stop_on_signals(stop: asyncio.Event) -> None:
    """SIGTERM (orchestrators) and SIGINT (Ctrl-C) both mean: stop gracefully."""
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)


async def run(
    settings: AuthzSettings,
    on_ready: Callable[[Bound], None],
    *,
    reuse_port: bool = False,
    serve_diag: bool = True,
) -> None:
    """`serve` until SIGTERM or SIGINT: the body of `python -m authz` and of each worker."""
    stop = asyncio.Event()
    stop_on_signals(stop)
    await serve(settings, stop, on_ready, reuse_port=reuse_port, serve_diag=serve_diag)


def grpc_server(
    addr: tuple[str, int],
    checker: Checker,
    health_servicer: health.aio.HealthServicer,
    *,
    reuse_port: bool,
) -> tuple[grpc.aio.Server, int]:
    """Check and health on a grpc.aio server bound to `addr`; the server and its port."""
    server = grpc.aio.server(options=grpc_options(reuse_port=reuse_port))
    AuthorizationService(checker).add_to(server)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if not reuse_port:
        probe_bind(addr)
    try:
        return server, server.add_insecure_port(format_address(addr))
    except RuntimeError as exc:  # grpc reports a failed bind this way, without the errno
        raise CannotListen(
            "ORRERY_A2A_AUTHZ_ADDR", addr, "address in use or not available"
        ) from exc


def build_decider(
    settings: AuthzSettings, metrics: Metrics, keys: KeyStore, limiter: Limiter
) -> Decider:
    verifier = TokenVerifier(
        settings.tokens,
        keys,
        cache_size=settings.token_cache_size,
        on_cache=metrics.cache_lookup,
        on_remembered_refusal=metrics.token_refusals_remembered.inc,
    )
    return Decider(
        settings.tokens,
        settings.roles,
        verifier,
        limiter,
        settings.assertion_keys,
        admission=Admission(settings.admission),
        memo_size=settings.token_cache_size,
    )


async def serve(
    settings: AuthzSettings,
    stop: asyncio.Event,
    on_ready: Callable[[Bound], None],
    *,
    reuse_port: bool = False,
    serve_diag: bool = True,
    clock: Callable[[], float] = time.monotonic,
) -> None:
    """Run until `stop` is set; raise `OSError` when the gRPC, HTTP or diagnostics address
    cannot be bound. A worker (`serve_diag=False`) leaves diagnostics to its parent. `clock` times
    the key refresh cooldowns and the local rate limits (a test moves it instead of sleeping)."""
    metrics = Metrics(redis=settings.limits.redis_url is not None)
    health_servicer = health.aio.HealthServicer()

    async def on_usable(usable: bool) -> None:
        serving = health_pb2.HealthCheckResponse
        status = serving.SERVING if usable else serving.NOT_SERVING
        metrics.jwks_usable.set(1 if usable else 0)
        for name in ("", AUTHZ_SERVICE):
            await health_servicer.set(name, status)

    await on_usable(False)
    keys = KeyStore(
        settings.jwks,
        source_for(settings.jwks),
        on_refresh=metrics.jwks_loaded,
        on_usable=on_usable,
        clock=clock,
    )
    limiter = Limiter(
        settings.limits,
        on_evict=metrics.ratelimit_evictions.inc,
        on_redis=metrics.redis_state,
        clock=clock,
    )
    checker = Checker(build_decider(settings, metrics, keys, limiter), metrics)
    server, port = grpc_server(settings.addr, checker, health_servicer, reuse_port=reuse_port)
    host = settings.addr[0]
    diagnostics = RegistryDiagnostics(metrics.registry, keys.usable)
    heartbeat = Heartbeat()
    beating = asyncio.create_task(heartbeat.run())
    diag_server = None
    http_checks = HttpChecks(
        checker,
        keys.usable,
        idle_timeout=settings.http_idle_timeout,
        max_connections=settings.http_max_connections,
    )
    try:
        await server.start()
        http_addr = await _start_http(http_checks, settings.http_addr, reuse_port=reuse_port)
        await keys.start()
        diag_addr = None
        if serve_diag:
            describe_process(metrics.registry)
            diag_server = start_diag(settings.diag_addr, diagnostics, heartbeat)
            diag_addr = format_address((settings.diag_addr[0], diag_server.port))
        on_ready(Bound(format_address((host, port)), diag_addr, keys.usable(), http_addr))
        await stop.wait()
        diagnostics.stopping = True
        await health_servicer.enter_graceful_shutdown()
        await asyncio.gather(
            server.stop(SHUTDOWN_GRACE_SECONDS), http_checks.stop(SHUTDOWN_GRACE_SECONDS)
        )
    finally:
        await http_checks.stop(0)
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await server.stop(None)
        await keys.close()
        await limiter.close()
        if diag_server is not None:
            await asyncio.to_thread(diag_server.stop)
