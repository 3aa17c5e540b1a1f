"""The A2A 1.0 JSON-RPC binding on aiohttp, dispatching to the a2a-sdk request handler.

The SDK's own dispatcher needs Starlette, so this is the same ~150 lines for aiohttp, in the order
a request is refused cheapest-first:

1. principal assertion for the `a2a` surface → 401 before anything else runs (even the body read);
2. body cap (Content-Length, then the bytes actually read) → 413, before parsing;
3. `Content-Type: application/json` → -32005; JSON → -32700; a single JSON-RPC 2.0 request object
   (no batches, `id` a string, integer or null) → -32600; a known method → -32601;
4. `A2A-Version` (header, or the `A2A-Version` query parameter): `1.0` (a patch part is ignored);
   absent or empty means 0.3, which this server does not speak → -32009;
5. lenient params (camelCase or snake_case, unknown fields ignored) → -32602 on a bad shape;
   push-notification methods → -32003 (push is off);
6. message rules (`messages.py`) and the per-principal in-flight cap (429 + `Retry-After`);
7. the SDK handler, with `ServerCallContext.user` = the verified principal.

Every JSON-RPC error is HTTP 200 with `error.data` = `[google.rpc.ErrorInfo]`. Streams send one
full JSON-RPC response per SSE event; errors before the first event are plain JSON; the stream
closes at a terminal or interrupted state; the SDK generator is always `aclose()`d (client gone,
server draining, or done). While a stream waits for its next event (a slow turn), a comment line
`: keep-alive` goes out every `ORRERY_A2A_SSE_KEEPALIVE`, so no proxy on the way (Envoy closes a
stream silent for 300 s) cuts it; SSE clients ignore comments. While the server shuts down, a
stream gets a grace period to finish, then a final event with the task's current state.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils import proto_utils
from a2a.utils.error_handlers import build_error_details
from a2a.utils.errors import (
    JSON_RPC_ERROR_CODE_MAP,
    A2AError,
    ContentTypeNotSupportedError,
    InternalError,
    InvalidParamsError,
    InvalidRequestError,
    JSONParseError,
    MethodNotFoundError,
    PushNotificationNotSupportedError,
    TaskNotFoundError,
    VersionNotSupportedError,
)
from aiohttp import web
from google.protobuf.json_format import MessageToDict, ParseDict, ParseError
from google.protobuf.message import Message as ProtoMessage

from adapter import tracing
from adapter.errors import BodyTooLarge, Refusal
from adapter.executor import SLOT_STATE
from adapter.limits import Limiter, Slot
from adapter.messages import check_message
from adapter.metrics import Metrics
from adapter.principal import PrincipalUser, verify_request
from adapter.responses import refusal_response
from authz import logs
from authz.assertion import AssertionKeys
from authz.principal import Principal

logger = logging.getLogger("adapter.a2a")

SUPPORTED_VERSION = (1, 0)
VERSION_HEADER = "A2A-Version"
STREAMING = frozenset({"SendStreamingMessage", "SubscribeToTask"})
TURNS = frozenset({"SendMessage", "SendStreamingMessage"})
PUSH_METHODS = frozenset(
    {
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    }
)
PARAMS: dict[str, type[ProtoMessage]] = {
    "SendMessage": pb.SendMessageRequest,
    "SendStreamingMessage": pb.SendMessageRequest,
    "GetTask": pb.GetTaskRequest,
    "ListTasks": pb.ListTasksRequest,
    "CancelTask": pb.CancelTaskRequest,
    "SubscribeToTask": pb.SubscribeToTaskRequest,
    "GetExtendedAgentCard": pb.GetExtendedAgentCardRequest,
    **dict.fromkeys(PUSH_METHODS, pb.GetTaskRequest),  # never parsed: answered -32003
}
_INTERRUPTED_OR_TERMINAL = frozenset(
    {
        pb.TASK_STATE_COMPLETED,
        pb.TASK_STATE_FAILED,
        pb.TASK_STATE_CANCELED,
        pb.TASK_STATE_REJECTED,
        pb.TASK_STATE_INPUT_REQUIRED,
        pb.TASK_STATE_AUTH_REQUIRED,
    }
)
_JSON = "application/json"
KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: keeps the connection busy, never an event


RpcId = str | int | None


def _dumps(value: Any) -> bytes:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def error_body(rpc_id: RpcId, error: A2AError) -> dict[str, Any]:
    """A JSON-RPC error response with the spec code and `[ErrorInfo]` data.

    `ErrorInfo.metadata` is `map<string, string>`; the SDK copies its field-validation list into
    it as well as into a `google.rpc.BadRequest` detail, so the list is dropped from the metadata
    (BadRequest keeps it) and any other non-string value is JSON-encoded.
    """
    details = build_error_details(error)
    info = details[0]
    info["metadata"] = {
        key: value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        for key, value in info["metadata"].items()
        if not (key == "errors" and len(details) > 1)
    }
    return {
        "jsonrpc": "2.0",
        "id": rpc_id,
        "error": {
            "code": JSON_RPC_ERROR_CODE_MAP.get(type(error), -32603),
            "message": error.message,
            "data": details,
        },
    }


def error_reason(error: A2AError) -> str:
    return str(build_error_details(error)[0]["reason"])


def _version(request: web.Request) -> tuple[int, int] | None:
    """`Major.Minor` from the header (or query parameter); None when it is absent or malformed."""
    value = request.headers.get(VERSION_HEADER) or request.query.get(VERSION_HEADER) or ""
    parts = value.strip().split(".")
    if len(parts) not in (2, 3) or not all(p.isdigit() and len(p) <= 4 for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def _check_version(request: web.Request) -> None:
    version = _version(request)
    if version != SUPPORTED_VERSION:
        raise VersionNotSupportedError(
            message="this server speaks A2A 1.0 only; send the header A2A-Version: 1.0"
        )


@dataclass(slots=True)
class Call:
    """One parsed JSON-RPC call on its way through the dispatcher."""

    rpc_id: RpcId
    method: str
    params: Any
    context: ServerCallContext


def _envelope(body: bytes) -> tuple[RpcId, str, Any]:
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):  # RecursionError: nesting deeper than the parser's stack
        raise JSONParseError() from None
    if isinstance(value, list):
        raise InvalidRequestError(message="batch requests are not supported")
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise InvalidRequestError(message="expected a JSON-RPC 2.0 request object")
    rpc_id = value.get("id")
    if isinstance(rpc_id, bool) or not isinstance(rpc_id, str | int | None):
        raise InvalidRequestError(message="id must be a string, an integer or null")
    method = value.get("method")
    if not isinstance(method, str) or not method:
        raise _WithId(rpc_id, InvalidRequestError(message="method is required"))
    return rpc_id, method, value.get("params", {})


class _WithId(Exception):
    """An A2A error that belongs to a request whose id is already known."""

    def __init__(self, rpc_id: RpcId, error: A2AError) -> None:
        super().__init__(error.message)
        self.rpc_id = rpc_id
        self.error = error


def _parse_params(method: str, raw: Any) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise InvalidParamsError(message="params must be an object")
    try:
        return ParseDict(raw, PARAMS[method](), ignore_unknown_fields=True)
    except (ParseError, RecursionError) as exc:
        raise InvalidParamsError(data={"parseError": str(exc)[:200]}) from None


def _result(method: str, value: Any) -> Any:
    if method == "SendMessage":
        key = "task" if isinstance(value, pb.Task) else "message"
        return {key: MessageToDict(value)}
    if method == "ListTasks":
        return {
            "tasks": [MessageToDict(task) for task in value.tasks],
            "nextPageToken": value.next_page_token,
            "pageSize": value.page_size,
            "totalSize": value.total_size,
        }
    if value is None:  # GetTask / CancelTask of a task that is not the caller's
        raise TaskNotFoundError()
    return MessageToDict(value)


class Drain:
    """Shutdown state shared by the streams: `expired` completes when their grace is over."""

    def __init__(self) -> None:
        self.expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def start(self, grace: float) -> None:
        def expire() -> None:
            if not self.expired.done():
                self.expired.set_result(None)

        asyncio.get_running_loop().call_later(grace, expire)


class Dispatcher:
    """`POST /a2a` and `/a2a/`."""

    def __init__(
        self,
        *,
        handler: DefaultRequestHandler,
        keys: AssertionKeys,
        limiter: Limiter,
        metrics: Metrics,
        max_body_bytes: int,
        drain: Drain,
        keepalive: float,
    ) -> None:
        self._handler = handler
        self._keys = keys
        self._limiter = limiter
        self._metrics = metrics
        self._max_body = max_body_bytes
        self._drain = drain
        self._keepalive = keepalive
        self._calls: dict[str, Callable[[Any, ServerCallContext], Any]] = {
            "SendMessage": handler.on_message_send,
            "GetTask": handler.on_get_task,
            "ListTasks": handler.on_list_tasks,
            "CancelTask": handler.on_cancel_task,
            "GetExtendedAgentCard": handler.on_get_extended_agent_card,
        }

    async def handle(self, request: web.Request) -> web.StreamResponse:
        started = time.perf_counter()
        method, outcome, principal = "unknown", "ok", None
        try:
            principal = verify_request(self._keys, request.headers, "a2a")
            call = await self._parse(request, principal)
            method = call.method
            response, outcome = await self._dispatch(request, call, principal)
        except Refusal as refusal:
            response, outcome = refusal_response(refusal), refusal.reason
        except _WithId as failed:
            response, outcome = self._error(failed.rpc_id, failed.error)
        except A2AError as error:
            response, outcome = self._error(None, error)
        seconds = time.perf_counter() - started
        if method not in PARAMS:
            method = "unknown"
        self._metrics.observe(method, outcome, seconds)
        tracing.annotate(
            f"A2A {method}",
            {
                "rpc.system": "jsonrpc",
                "rpc.method": method,
                "orrery.outcome": outcome,
                "orrery.principal.kind": principal.kind if principal else "none",
            },
        )
        logs.event(
            logger,
            "a2a_request",
            method=method,
            outcome=outcome,
            status=response.status,
            principal=principal.key if principal else None,
            request_id=request.headers.get("x-request-id"),
            trace_link=tracing.trace_link(request),
            duration_ms=round(seconds * 1000, 3),
        )
        return response

    def _error(self, rpc_id: RpcId, error: A2AError) -> tuple[web.Response, str]:
        return (
            web.Response(body=_dumps(error_body(rpc_id, error)), content_type=_JSON),
            error_reason(error),
        )

    async def _read_body(self, request: web.Request) -> bytes:
        if (request.content_length or 0) > self._max_body:
            raise _too_large(self._max_body)
        try:
            return await request.read()  # the app's client_max_size is the same cap
        except web.HTTPRequestEntityTooLarge:
            raise _too_large(self._max_body) from None

    async def _parse(self, request: web.Request, principal: Principal) -> Call:
        body = await self._read_body(request)
        if request.content_type != _JSON:
            raise ContentTypeNotSupportedError(message="send Content-Type: application/json")
        rpc_id, method, raw_params = _envelope(body)
        try:
            if method not in PARAMS:
                raise MethodNotFoundError()
            _check_version(request)
            if method in PUSH_METHODS:
                raise PushNotificationNotSupportedError()
            params = _parse_params(method, raw_params)
            if method in TURNS:
                check_message(params.message)
        except A2AError as error:
            raise _WithId(rpc_id, error) from None
        context = ServerCallContext(
            user=PrincipalUser(principal),
            state={"method": method, "request_id": rpc_id},
        )
        return Call(rpc_id, method, params, context)

    async def _dispatch(
        self, request: web.Request, call: Call, principal: Principal
    ) -> tuple[web.StreamResponse, str]:
        slot: Slot | None = None
        if call.method in TURNS:
            slot = await self._limiter.acquire(principal.key)
            call.context.state[SLOT_STATE] = slot
            self._metrics.in_flight.set(self._limiter.in_flight())
        try:
            if call.method in STREAMING:
                return await self._stream(request, call)
            try:
                value = await self._calls[call.method](call.params, call.context)
                body = {"jsonrpc": "2.0", "id": call.rpc_id, "result": _result(call.method, value)}
            except A2AError as error:
                return self._error(call.rpc_id, error)
            except Exception as exc:  # noqa: BLE001 - answered -32603, type logged
                return self._internal(call.rpc_id, exc)
            return web.Response(body=_dumps(body), content_type=_JSON), "ok"
        finally:
            if slot is not None and not slot.adopted:
                await slot.release()
            if slot is not None:
                self._metrics.in_flight.set(self._limiter.in_flight())

    def _internal(self, rpc_id: RpcId, exc: BaseException) -> tuple[web.Response, str]:
        # Never echo an exception message: it can carry request data or internals.
        logs.event(logger, "a2a_internal_error", logging.ERROR, error_type=type(exc).__name__)
        return self._error(rpc_id, InternalError())

    def _open_stream(self, call: Call) -> AsyncGenerator[Any, None]:
        if call.method == "SubscribeToTask":
            return self._handler.on_subscribe_to_task(call.params, call.context)  # type: ignore[no-any-return]
        return self._handler.on_message_send_stream(call.params, call.context)  # type: ignore[no-any-return]

    async def _stream(self, request: web.Request, call: Call) -> tuple[web.StreamResponse, str]:
        events = self._open_stream(call)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            first = None
        except A2AError as error:
            await events.aclose()
            return self._error(call.rpc_id, error)
        except Exception as exc:  # noqa: BLE001 - answered -32603, type logged
            await events.aclose()
            return self._internal(call.rpc_id, exc)
        response = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        outcome = "ok"
        try:
            await response.prepare(request)
            if isinstance(first, pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent):
                # A follow-up on an existing task: the SDK starts with the update, but a task
                # stream MUST begin with the Task (spec 3.1.2), so lead with its snapshot.
                await self._snapshot(response, call, first.task_id)
            if first is not None:
                outcome = await self._pump(response, call, events, first)
            await response.write_eof()
        except ConnectionResetError:
            outcome = "client_gone"
        finally:
            await events.aclose()
        return response, outcome

    async def _pump(
        self,
        response: web.StreamResponse,
        call: Call,
        events: AsyncGenerator[Any, None],
        first: Any,
    ) -> str:
        """Write events until the stream ends, an error, or the shutdown grace expires."""
        event: Any = first
        task_id = ""
        while True:
            task_id = (
                getattr(event, "id", "")
                if isinstance(event, pb.Task)
                else getattr(event, "task_id", task_id)
            )
            await self._write(
                response,
                {
                    "jsonrpc": "2.0",
                    "id": call.rpc_id,
                    "result": MessageToDict(proto_utils.to_stream_response(event)),
                },
            )
            if _ends_stream(event):
                return "ok"
            pending = asyncio.ensure_future(anext(events))
            if not await self._next_or_keep_alive(response, pending):
                await self._snapshot(response, call, task_id)
                return "drained"
            try:
                event = pending.result()
            except StopAsyncIteration:
                return "ok"
            except A2AError as error:
                await self._write(response, error_body(call.rpc_id, error), event="error")
                return error_reason(error)
            except Exception as exc:  # noqa: BLE001 - an error event, type logged
                logs.event(
                    logger, "a2a_internal_error", logging.ERROR, error_type=type(exc).__name__
                )
                await self._write(response, error_body(call.rpc_id, InternalError()), event="error")
                return "INTERNAL_ERROR"

    async def _next_or_keep_alive(
        self, response: web.StreamResponse, pending: asyncio.Future[Any]
    ) -> bool:
        """Wait for the stream's next event (`pending`), writing a keep-alive comment after each
        silent interval; False when the shutdown grace expired first.

        Unless it returns True, `pending` is cancelled and awaited before this returns or raises
        (client gone, handler cancelled), so the SDK generator is idle when it is `aclose()`d.
        """
        try:
            while True:
                done, _ = await asyncio.wait(
                    {pending, self._drain.expired},
                    timeout=self._keepalive,
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if pending in done:
                    return True
                if done:  # the shutdown grace is over
                    break
                await response.write(KEEPALIVE)
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await pending
        return False

    async def _snapshot(self, response: web.StreamResponse, call: Call, task_id: str) -> None:
        """Send the task as it stands now (a stream's first event, or its last at shutdown)."""
        try:
            task = await self._handler.on_get_task(pb.GetTaskRequest(id=task_id), call.context)
        except A2AError as error:
            await self._write(response, error_body(call.rpc_id, error), event="error")
            return
        await self._write(
            response, {"jsonrpc": "2.0", "id": call.rpc_id, "result": {"task": MessageToDict(task)}}
        )

    @staticmethod
    async def _write(response: web.StreamResponse, body: Any, *, event: str | None = None) -> None:
        prefix = f"event: {event}\n".encode() if event else b""
        await response.write(prefix + b"data: " + _dumps(body) + b"\n\n")


def _ends_stream(event: Any) -> bool:
    if isinstance(event, pb.Message):
        return True
    if isinstance(event, pb.Task | pb.TaskStatusUpdateEvent):
        return event.status.state in _INTERRUPTED_OR_TERMINAL
    return False


def _too_large(limit: int) -> Refusal:
    return BodyTooLarge(f"request body is over {limit} bytes")
