"""The A2A 1.0 bindings on aiohttp, calling the a2a-sdk handler: JSON-RPC (`POST /a2a`, `/a2a/`;
`jsonrpc.py`) and HTTP+JSON (`/a2a/message:send`, `/a2a/tasks/…`; `rest.py`).

The SDK's own dispatchers need Starlette, so this is the same for aiohttp, one dispatcher per
binding, in the order a request is refused cheapest-first:

1. principal assertion for the `a2a` surface → 401 before anything else runs (even the body read);
2. body cap (Content-Length, then the bytes actually read) → 413, before parsing;
3. to 5. the binding reads the call (`bindings.Binding.read`): for JSON-RPC,
   `Content-Type: application/json` → -32005; UTF-8 JSON → -32700; a single JSON-RPC 2.0 request
   object (no batches, `id` a string, integer or null) → -32600; a notification (no `id`) → HTTP
   204 without a body, nothing run; a known method → -32601; `A2A-Version` (header, or the
   `A2A-Version` query parameter): `1.0` (a patch part is ignored); absent or empty means 0.3,
   which this server does not speak → -32009; lenient params (camelCase or snake_case, unknown
   fields ignored) → -32602 on a bad shape; push-notification methods → -32003 (push is off).
   HTTP+JSON refuses the same things in its own shapes (`rest.py`);
6. message rules (`messages.py`); for a turn or a stream, a caller's bearer token past its `exp`
   (the assertion's `tok_exp`) → 401 `token_expired`; the per-principal caps (429 +
   `Retry-After`): turns in flight for `SendMessage` / `SendStreamingMessage`, open streams for
   `SubscribeToTask`; for a first send that starts a task, room for it in the task store (429
   `task_quota_exceeded`, 503 `task_store_full`, raised by the handler: `handler.py`);
7. the SDK handler, with `ServerCallContext.user` = the verified principal.

The cap is `turns.py`'s, and the streaming methods are answered as SSE by `streams.py`. Every
A2A error is the binding's (JSON-RPC: HTTP 200 with `error.data` = `[google.rpc.ErrorInfo]`;
HTTP+JSON: the mapped HTTP status with a `google.rpc.Status` body); an unexpected exception is an
internal error with a fixed message and its type logged — except a task store that cannot be
reached, which is HTTP 503 `store_unavailable` with `Retry-After` (`outage.py`). Each request
ends in one `a2a_request` log event (naming its binding), one metrics observation and the span's
attributes, all with the same outcome.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.utils.errors import A2AError, InternalError
from aiohttp import web

from adapter import tracing
from adapter.bindings import Binding
from adapter.envelope import (
    JSON,
    PARAMS,
    STREAMING,
    TURNS,
    Notification,
    Request,
    RpcError,
    RpcId,
    answering,
    dumps,
    error_reason,
)
from adapter.errors import BodyTooLarge, Refusal, TokenExpired
from adapter.limits import Limiter
from adapter.messages import check_message
from adapter.metrics import Metrics
from adapter.outage import Outage
from adapter.principal import PrincipalUser, verify_assertion
from adapter.streams import Streams, log_internal_error
from adapter.turns import Turns
from contract.assertion import AssertionKeys
from contract.headers import REQUEST_ID_HEADER
from contract.identity import Principal
from runtime import logs

logger = logging.getLogger("adapter.a2a")

Answer = tuple[web.StreamResponse, str]  # the response and its outcome for logs and metrics
# The unary methods that read or write the task store: their success ends a store outage.
STORED = TURNS | {"GetTask", "ListTasks", "CancelTask"}


@dataclass(frozen=True, slots=True)
class _Call:
    """A parsed request, and the SDK context it runs in (the verified principal as its user)."""

    request: Request
    context: ServerCallContext
    principal: Principal
    token_expires_at: int  # the caller's bearer token's `exp`: no stream outlives it


class Dispatcher:
    """Refuses what it must in the module docstring's order, then answers through the SDK."""

    def __init__(
        self,
        *,
        binding: Binding,
        handler: DefaultRequestHandler,
        keys: AssertionKeys,
        max_body_bytes: int,
        turns: Turns,
        subscriptions: Limiter,
        streams: Streams,
        metrics: Metrics,
        outage: Outage,
    ) -> None:
        self._binding = binding
        self._keys = keys
        self._max_body = max_body_bytes
        self._turns = turns
        self._subscriptions = subscriptions
        self._streams = streams
        self._metrics = metrics
        self._outage = outage
        self._unary: dict[str, Callable[[Any, ServerCallContext], Awaitable[Any]]] = {
            "SendMessage": handler.on_message_send,
            "GetTask": handler.on_get_task,
            "ListTasks": handler.on_list_tasks,
            "CancelTask": handler.on_cancel_task,
            "GetExtendedAgentCard": handler.on_get_extended_agent_card,
        }

    async def handle(self, http: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        method, principal = "unknown", None
        try:
            assertion = verify_assertion(self._keys, http.headers, "a2a")
            principal = assertion.principal
            call = await self._parse(http, principal, assertion.token_expires_at)
            method = call.request.method
            response, outcome = await self._serve(http, call)
        except Refusal as refusal:
            response, outcome = self._binding.refusal(refusal), refusal.reason
        except Notification as notification:  # no reply, nothing run (envelope.py)
            method, response, outcome = (
                notification.method,
                web.Response(status=204),
                "notification",
            )
        except RpcError as failed:
            response, outcome = self._error(failed.rpc_id, failed.error)
        except A2AError as error:
            response, outcome = self._error(None, error)
        self._record(
            http,
            method=method,
            outcome=outcome,
            status=response.status,
            principal=principal,
            started=started,
        )
        return response

    async def _parse(self, http: web.Request, principal: Principal, token_expires_at: int) -> _Call:
        request = self._binding.read(http, await self._read_body(http))
        if request.method in TURNS:
            with answering(request.rpc_id):
                check_message(request.params.message)
        context = ServerCallContext(
            user=PrincipalUser(principal),
            state={"method": request.method, "request_id": request.rpc_id},
        )
        return _Call(request, context, principal, token_expires_at)

    async def _read_body(self, http: web.Request) -> bytes:
        if (http.content_length or 0) > self._max_body:
            raise _too_large(self._max_body)
        try:
            return await http.read()  # the app's client_max_size is the same cap
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(self._max_body) from None

    async def _serve(self, http: web.Request, call: _Call) -> Answer:
        method = call.request.method
        if (method in TURNS or method in STREAMING) and time.time() >= call.token_expires_at:
            raise TokenExpired("the bearer token has expired; no turn or stream starts on it")
        if method in TURNS:
            async with self._turns.admitted(call.principal.key, call.context):  # 429 / 503
                return await self._answer(http, call)
        if method == "SubscribeToTask":
            slot = await self._subscriptions.acquire(call.principal.key)  # 429 / 503
            self._metrics.subscriptions.set(self._subscriptions.in_flight())
            try:
                return await self._answer(http, call)
            finally:
                await slot.release()
                self._metrics.subscriptions.set(self._subscriptions.in_flight())
        return await self._answer(http, call)

    async def _answer(self, http: web.Request, call: _Call) -> Answer:
        """The SDK's answer; an error before anything was sent is a JSON-RPC error body."""
        request = call.request
        if request.method not in STREAMING:
            return await self._answer_unary(call)
        try:
            stream = await self._streams.open(
                request, call.context, call.token_expires_at, self._binding
            )
        except Refusal:
            raise  # the handler's HTTP-level refusal (no room for a new task): handle() answers
        except Exception as exc:  # noqa: BLE001 - see _failed
            return self._failed(request.rpc_id, exc)
        return await stream.serve(http)  # from here on, errors are events of the stream

    async def _answer_unary(self, call: _Call) -> Answer:
        request = call.request
        mark = self._outage.mark()
        try:
            value = await self._unary[request.method](request.params, call.context)
            status, body = self._binding.answer(request, value)
        except Refusal:
            raise  # the handler's HTTP-level refusal (no room for a new task): handle() answers
        except Exception as exc:  # noqa: BLE001 - see _failed
            return self._failed(request.rpc_id, exc)
        if request.method in STORED:
            self._outage.answered(mark)
        return web.Response(body=dumps(body), status=status, content_type=JSON), "ok"

    def _failed(self, rpc_id: RpcId, exc: Exception) -> Answer:
        """An A2A error's own answer; a store that cannot be reached is a 503 (raised as the
        refusal); anything else unexpected is -32603, its type logged (never its message: it
        can carry request data or internals)."""
        if (not isinstance(exc, A2AError) or isinstance(exc, InternalError)) and (
            self._outage.caused(exc)
        ):
            raise self._outage.failed(exc) from None
        if isinstance(exc, A2AError):
            return self._error(rpc_id, exc)
        log_internal_error(exc)
        return self._error(rpc_id, InternalError())

    def _error(self, rpc_id: RpcId, error: A2AError) -> Answer:
        status, body = self._binding.error(rpc_id, error)
        return web.Response(body=dumps(body), status=status, content_type=JSON), error_reason(error)

    def _record(
        self,
        http: web.Request,
        *,
        method: str,
        outcome: str,
        status: int,
        principal: Principal | None,
        started: float,
    ) -> None:
        """The request's one metrics observation, span annotation and `a2a_request` log event."""
        seconds = time.perf_counter() - started
        if method not in PARAMS:
            method = "unknown"
        self._metrics.observe(method, outcome, seconds)
        tracing.annotate(
            f"A2A {method}",
            {
                "rpc.system": self._binding.name,
                "rpc.method": method,
                "orrery.outcome": outcome,
                "orrery.principal.kind": principal.kind if principal else "none",
            },
        )
        logs.event(
            logger,
            "a2a_request",
            binding=self._binding.name,
            method=method,
            outcome=outcome,
            status=status,
            principal=principal.key if principal else None,
            request_id=http.headers.get(REQUEST_ID_HEADER),
            trace_link=tracing.trace_link(http),
            duration_ms=round(seconds * 1000, 3),
        )


def _too_large(limit: int) -> Refusal:
    return BodyTooLarge(f"request body is over {limit} bytes")
