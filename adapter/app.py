"""The aiohttp application: wiring settings → stores, limiter, gateway, SDK handler, routes.

Routes: `POST /a2a` and `/a2a/` (JSON-RPC), `/a2a/…` (HTTP+JSON: `/a2a/message:send`,
`/a2a/tasks/{id}`…; `rest.py`), `GET /.well-known/agent-card.json` (public card),
`GET /.well-known/jwks.json` (the keys that verify the cards' signatures),
`GET|POST /approvals/{action_id}` (approvals surface), `GET /healthz` (liveness), `GET /readyz`
(the stores answer), `GET /metrics` (Prometheus).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import a2a_pb2 as pb
from aiohttp import web
from opentelemetry import trace

from adapter.approvals import ApprovalsEndpoint
from adapter.card import JsonDocument, extended_card, public_card
from adapter.card_signing import JWKS_PATH, CardSigner
from adapter.dispatch import Dispatcher
from adapter.executor import GatewayExecutor, TaskContextBuilder
from adapter.gateway import AgentGateway, GatewayContext, close_gateway, load_gateway
from adapter.handler import RequestHandler
from adapter.jsonrpc import JsonRpcBinding
from adapter.limits import IN_FLIGHT, SUBSCRIPTIONS, Cap, Limiter, MemoryLimiter, RedisLimiter
from adapter.metrics import CONTENT_TYPE, Metrics
from adapter.outage import Outage
from adapter.recovery import Recovery
from adapter.rest import PREFIX, RestBinding
from adapter.retries import Retries
from adapter.settings import AdapterSettings
from adapter.stores import Stores, open_stores
from adapter.streams import Drain, Streams
from adapter.tracing import traced
from adapter.turns import Turns
from runtime import logs
from runtime.addresses import address_family
from runtime.diag import Readiness, on_loop
from runtime.errors import ConfigError

logger = logging.getLogger("adapter")

# A task parked in input-required keeps an SDK ActiveTask (two asyncio tasks) in memory; release it
# after this long, a follow-up recreates it from the store.
PARKED_TASK_RELEASE_SECONDS = 60.0
# How long a stop waits for the turns it ended to return (each ends its task FAILED first).
TURNS_STOP_SECONDS = 2.0
# How long a stop waits for the a2a-sdk to tear down its active tasks. `ActiveTask.aclose` has hung
# when another writer ended its task mid-turn; past this the stop goes on (the stores still close).
HANDLER_CLOSE_SECONDS = 5.0


def public_origin(public_url: str) -> str:
    """The origin of `ORRERY_A2A_PUBLIC_URL`: where the edge's other routes are for clients."""
    parts = urlsplit(public_url)
    return f"{parts.scheme}://{parts.netloc}"


def approvals_base_url(public_url: str) -> str:
    """Origin of `ORRERY_A2A_PUBLIC_URL` + `/approvals` (docs/contract.md#approvals)."""
    return public_origin(public_url) + "/approvals"


AGENT = web.AppKey("agent", DefaultRequestHandler)
GATEWAY = web.AppKey("gateway", AgentGateway)
METRICS = web.AppKey("metrics", Metrics)
RECOVERY = web.AppKey("recovery", Recovery)


async def make_app(
    settings: AdapterSettings,
    *,
    tracer_provider: trace.TracerProvider | None = None,
    clock: Callable[[], float] = time.time,
    gateway_env: Mapping[str, str] | None = None,
) -> web.Application:
    """Build the whole adapter; raises `ConfigError` when the settings cannot work together.

    The gateway builds its own settings from `gateway_env` (default: the process environment).

    Spans go to `tracer_provider`, or to the global one (a no-op unless an OpenTelemetry SDK was
    installed, e.g. by `opentelemetry-instrument`). Approvals expire by `clock` (a test moves it
    instead of sleeping)."""
    stores = await open_stores(settings, clock=clock)
    metrics = Metrics()
    env = dict(os.environ) if gateway_env is None else gateway_env
    limiters = _Limiters(
        _limiter(settings, settings.max_in_flight, IN_FLIGHT),
        _limiter(settings, settings.max_subscriptions, SUBSCRIPTIONS),
    )
    try:
        gateway = await load_gateway(
            settings.gateway,
            GatewayContext(stores.confirmations, settings.approval_ttl, env, metrics.registry),
        )
        try:
            _check_replicas(settings, gateway)
        except BaseException:
            await close_gateway(gateway)
            raise
    except BaseException:
        await limiters.close()
        await stores.close()
        raise
    return _assemble(
        settings,
        stores=stores,
        limiters=limiters,
        gateway=gateway,
        metrics=metrics,
        tracer=trace.get_tracer("adapter", tracer_provider=tracer_provider),
    )


@dataclass(frozen=True, slots=True)
class _Limiters:
    turns: Limiter
    subscriptions: Limiter

    async def close(self) -> None:
        try:
            await self.turns.close()
        finally:
            await self.subscriptions.close()


def _limiter(settings: AdapterSettings, limit: int, cap: Cap) -> Limiter:
    """Shared through Redis with `ORRERY_A2A_REDIS_URL`, else this process's own."""
    if settings.redis_url:
        return RedisLimiter(settings.redis_url, limit, cap)
    return MemoryLimiter(limit, cap)


def _check_replicas(settings: AdapterSettings, gateway: AgentGateway) -> None:
    if settings.multi_replica and not gateway.confirmations.shared:
        raise ConfigError(
            ["ORRERY_A2A_GATEWAY: its confirmation store is not shared between replicas"]
        )


def _assemble(
    settings: AdapterSettings,
    *,
    stores: Stores,
    limiters: _Limiters,
    gateway: AgentGateway,
    metrics: Metrics,
    tracer: trace.Tracer,
) -> web.Application:
    signer = CardSigner(settings.card_signing_keys, public_origin(settings.public_url) + JWKS_PATH)
    card = signer.sign(public_card(settings.public_url, settings.card_auth))

    async def live_extended_card(base: pb.AgentCard, context: ServerCallContext) -> pb.AgentCard:
        return signer.sign(extended_card(base, await gateway.inventory()))

    outage = Outage(stores.outage_errors, metrics)
    turns = Turns(limiters.turns, metrics)
    recovery = Recovery(
        stores.tasks, stores.sdk_tasks, outage, metrics, turn_deadline=settings.turn_deadline
    )
    executor = GatewayExecutor(
        gateway,
        approvals_base_url(settings.public_url),
        deadline=settings.turn_deadline,
        stopping=turns.stopping,
        metrics=metrics,
    )
    handler = RequestHandler(
        confirmations=gateway.confirmations,
        retries=Retries(stores.claims, stores.sdk_tasks),
        tasks=stores.tasks,
        agent_executor=recovery.executor(turns.executor(executor)),
        task_store=stores.sdk_tasks,
        agent_card=card,
        request_context_builder=TaskContextBuilder(stores.sdk_tasks),
        extended_agent_card=card,
        extended_card_modifier=live_extended_card,
        validate_input_modes=True,
        event_stream=stores.events,
        interrupted_task_timeout=PARKED_TASK_RELEASE_SECONDS,
    )

    async def stop_turns() -> None:
        await turns.stop(TURNS_STOP_SECONDS)

    drain = Drain(before_end=stop_turns)
    streams = Streams(handler, drain=drain, keepalive=settings.sse_keepalive, outage=outage)
    jsonrpc, rest = (
        Dispatcher(
            binding=binding,
            handler=handler,
            keys=settings.assertion_keys,
            max_body_bytes=settings.max_body_bytes,
            turns=turns,
            subscriptions=limiters.subscriptions,
            streams=streams,
            metrics=metrics,
            outage=outage,
        )
        for binding in (JsonRpcBinding(), RestBinding())
    )
    approvals = ApprovalsEndpoint(settings.assertion_keys, gateway.confirmations, metrics, outage)
    probes = Probes(stores, limiters, metrics, outage)

    app = web.Application(client_max_size=settings.max_body_bytes)
    app[AGENT] = handler
    app[GATEWAY] = gateway
    app[METRICS] = metrics
    app[PROBES] = probes
    app[RECOVERY] = recovery
    a2a = traced(tracer, "A2A", jsonrpc.handle)
    app.router.add_post("/a2a", a2a)
    app.router.add_post("/a2a/", a2a)
    app.router.add_route("*", PREFIX + "/{operation:.+}", traced(tracer, "A2A", rest.handle))
    app.router.add_get("/.well-known/agent-card.json", JsonDocument.card(card).handle)
    app.router.add_get(JWKS_PATH, JsonDocument.of(signer.jwks).handle)
    app.router.add_post("/approvals/{action_id}", traced(tracer, "approvals", approvals.decide))
    app.router.add_get("/approvals/{action_id}", traced(tracer, "approvals", approvals.show))
    if settings.diag_addr is None:
        app.router.add_get("/healthz", probes.healthz)
        app.router.add_get("/readyz", probes.readyz)
        app.router.add_get("/metrics", probes.metrics)

    async def on_startup(_: web.Application) -> None:
        recovery.start()  # its first sweep now: this replica may be the one that crashed

    async def on_shutdown(_: web.Application) -> None:
        probes.stopping = True
        drain.start(settings.shutdown_grace)

    async def on_cleanup(_: web.Application) -> None:
        # Turns still running (none after a full drain) end their tasks while the store is open.
        await stop_turns()
        await drain.close()
        await recovery.close()
        await _close_handler(handler)
        await close_gateway(gateway)
        await limiters.close()
        await stores.close()

    app.on_startup.append(on_startup)
    app.on_shutdown.append(on_shutdown)
    app.on_cleanup.append(on_cleanup)
    return app


async def _close_handler(handler: RequestHandler) -> None:
    """The handler's teardown (its blocking sends' runs, then the SDK's active tasks), given
    `HANDLER_CLOSE_SECONDS` at most: a stop must not wait on the SDK forever."""
    try:
        async with asyncio.timeout(HANDLER_CLOSE_SECONDS):
            await handler.aclose()
    except TimeoutError:
        logs.event(logger, "handler_close_timeout", logging.WARNING, seconds=HANDLER_CLOSE_SECONDS)


class Probes:
    """Liveness, readiness and metrics of the adapter, served on the A2A socket
    (`/healthz`, `/readyz`, `/metrics`) or, with `ORRERY_A2A_ADAPTER_DIAG_ADDR`, only on the
    diagnostics address (`runtime.diag`), so probes and scrapes never share the A2A socket.

    Ready means the task store and the approval store answer, and no stop has begun (a draining
    adapter leaves the load balancer's rotation first). The shared limiter (Redis) is reported
    (`limiter: unavailable`) but does not make the adapter unready: only turns and subscriptions
    need it (they are refused 503 `limiter_unavailable` meanwhile), while reads, cancels and
    approvals work without it — and every replica shares the one Redis, so taking replicas out
    for it would take those out too. A store that does not answer is one `store_unavailable`
    incident (`outage.py`), not a log line per probe."""

    def __init__(
        self, stores: Stores, limiters: _Limiters, metrics: Metrics, outage: Outage
    ) -> None:
        self._stores = stores
        self._limiters = limiters
        self._metrics = metrics
        self._outage = outage
        self.stopping = False

    async def readiness(self) -> Readiness:
        if self.stopping:  # at once, whatever the stores say: a balancer must not wait for them
            return Readiness(False, {"serving": "stopping"})
        checks: dict[str, str] = {}
        mark = self._outage.mark()
        for name, ping in (
            ("tasks", self._stores.tasks.ping),
            ("approvals", self._stores.confirmations.ping),
        ):
            checks[name] = await self._check(name, ping)
        if checks["tasks"] == "ok":
            self._outage.answered(mark)
        checks["serving"] = "ok"
        ready = all(value == "ok" for value in checks.values())
        # the subscriptions' limiter is the same Redis
        checks["limiter"] = await self._check("limiter", self._limiters.turns.ping)
        return Readiness(ready, checks)

    async def _check(self, name: str, ping: Callable[[], Awaitable[None]]) -> str:
        try:
            await ping()
        except Exception as exc:  # noqa: BLE001 - any failure means "unavailable"
            if self._outage.caused(exc):
                self._outage.failed(exc)
            else:
                logs.event(
                    logger, "not_ready", logging.WARNING, check=name, error_type=type(exc).__name__
                )
            return "unavailable"
        return "ok"

    async def render(self) -> bytes:
        """The Prometheus text, with the gauges read at scrape time refreshed first."""
        for gauge, read in (
            (self._metrics.tasks_stored, self._stores.tasks.count),
            (self._metrics.approvals_pending, self._stores.confirmations.pending),
        ):
            try:
                gauge.set(await read())
            except Exception as exc:  # noqa: BLE001 - keep serving the other metrics
                logs.event(
                    logger,
                    "metrics_store_unavailable",
                    logging.WARNING,
                    error_type=type(exc).__name__,
                )
        self._metrics.in_flight.set(self._limiters.turns.in_flight())
        self._metrics.subscriptions.set(self._limiters.subscriptions.in_flight())
        return self._metrics.render()

    async def healthz(self, _: web.Request) -> web.StreamResponse:
        return web.json_response({"status": "ok"})

    async def readyz(self, _: web.Request) -> web.StreamResponse:
        readiness = await self.readiness()
        return web.json_response(
            {
                "status": "ready" if readiness.ready else "unavailable",
                "checks": dict(readiness.checks),
            },
            status=200 if readiness.ready else 503,
        )

    async def metrics(self, _: web.Request) -> web.StreamResponse:
        return web.Response(body=await self.render(), headers={"Content-Type": CONTENT_TYPE})


class LoopDiagnostics:
    """`runtime.diag.Diagnostics` for the diagnostics thread: each answer is computed on the
    adapter's event loop (the stores are asyncio clients), waited for with a bound."""

    def __init__(self, probes: Probes, loop: asyncio.AbstractEventLoop) -> None:
        self._probes = probes
        self._loop = loop

    def ready(self) -> Readiness:
        return on_loop(self._loop, self._probes.readiness)

    def metrics(self) -> bytes:
        return on_loop(self._loop, self._probes.render)


PROBES = web.AppKey("probes", Probes)


async def start(
    app: web.Application, sock: socket.socket, *, shutdown_timeout: float
) -> web.AppRunner:
    """Serve `app` on an already bound socket (so a caller on port 0 knows the port first).

    Handlers are cancelled when their client disconnects, so a stream's SDK generator is closed.
    """
    runner = web.AppRunner(
        app, handler_cancellation=True, shutdown_timeout=shutdown_timeout, access_log=None
    )
    await runner.setup()
    await web.SockSite(runner, sock).start()
    return runner


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port)."""
    return socket.create_server((host, port), family=address_family(host), reuse_port=False)
