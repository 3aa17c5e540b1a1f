"""The SSE answers of `SendStreamingMessage` and `SubscribeToTask`.

An error before the first event is raised to the dispatcher (`Streams.open`), which answers it as
plain JSON. After it (`OpenStream.serve`), the answer is `text/event-stream`: one `StreamResponse`
per `data:` event in the binding's shape (JSON-RPC: a full JSON-RPC response; HTTP+JSON: the
`StreamResponse` itself), the Task first (a follow-up's stream leads with the task's snapshot,
spec 3.1.2); a mid-stream error is an `event: error`. A turn's stream (`SendStreamingMessage`)
ends with the turn, at a terminal or interrupted state; a subscription (`SubscribeToTask`)
follows the task to its end (spec 3.1.6): it stays open while the task waits for input, so its
subscribers hear the resumed turn.
While the stream waits for its next event (a slow turn), a comment `: keep-alive` goes out every
`ORRERY_A2A_SSE_KEEPALIVE`, so no proxy on the way (Envoy closes a stream silent for 300 s) cuts
it; SSE clients ignore comments. While the server shuts down (`Drain`), a stream gets a grace
period to finish, then a final event with the task's current state. No stream outlives the
caller's bearer token: at its `exp` (the assertion's `tok_exp`) the stream ends with a final
`event: error` (`TOKEN_EXPIRED`, domain `orrery-a2a`), and the caller subscribes again with a
fresh token. The SDK generator is always `aclose()`d: client gone, drained, token expired, or
done.

The turn a stream watches is not the stream's: it runs on after the client goes or the stream is
drained, and its in-flight slot is held for as long as it runs (`turns.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, Literal

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import A2AError, InternalError
from aiohttp import web

from adapter.bindings import Binding
from adapter.envelope import Request, RpcId, dumps, error_reason, stream_result, task_result
from adapter.outage import Outage
from adapter.stores.protocols import INTERRUPTED, TERMINAL
from runtime import logs

logger = logging.getLogger("adapter.a2a")

KEEPALIVE = b": keep-alive\n\n"  # an SSE comment: keeps the connection busy, never an event
HEADERS = {
    "Content-Type": "text/event-stream",
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",
}
# The states that end a stream, by method (see the module docstring).
_ENDS = {
    "SendStreamingMessage": TERMINAL | INTERRUPTED,
    "SubscribeToTask": TERMINAL,
}

Events = AsyncGenerator[Any, None]
Waited = Literal["event", "drained", "token_expired"]


# Once the grace is over, how long a stream still waits for its task's last event (the turns were
# just ended, `before_end`) before it sends the task's snapshot instead.
LAST_EVENT_WAIT = 1.0


class Drain:
    """Shutdown state shared by the streams: `expired` completes when their grace is over, after
    `before_end` (ending the turns still running, so the streams' last events tell their end)."""

    def __init__(self, before_end: Callable[[], Awaitable[None]] | None = None) -> None:
        self.expired: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._before_end = before_end
        self._ending: asyncio.Task[None] | None = None

    def start(self, grace: float) -> None:
        async def end() -> None:
            await asyncio.sleep(grace)
            try:
                if self._before_end is not None:
                    await self._before_end()
            finally:
                if not self.expired.done():
                    self.expired.set_result(None)

        if self._ending is None:
            self._ending = asyncio.get_running_loop().create_task(end(), name="drain")

    async def close(self) -> None:
        """The server is gone: stop waiting for the grace."""
        if self._ending is not None:
            self._ending.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ending
        if not self.expired.done():
            self.expired.set_result(None)


def log_internal_error(exc: BaseException) -> None:
    """Log an unexpected exception by its type only: its message can carry request data."""
    logs.event(logger, "a2a_internal_error", logging.ERROR, error_type=type(exc).__name__)


class Streams:
    """Opens the SDK's event stream of a streaming call; the `OpenStream` then serves it as SSE."""

    def __init__(
        self, handler: DefaultRequestHandler, *, drain: Drain, keepalive: float, outage: Outage
    ) -> None:
        self.handler = handler
        self.drain = drain
        self.keepalive = keepalive
        self.outage = outage

    async def open(
        self, call: Request, context: ServerCallContext, token_expires_at: float, binding: Binding
    ) -> OpenStream:
        """The call's stream at its first event; raises the A2A error (or unexpected exception)
        that came before it, which the dispatcher answers as plain JSON. The stream ends at
        `token_expires_at` (epoch seconds) at the latest; its events are in `binding`'s shape."""
        if call.method == "SubscribeToTask":
            events: Events = self.handler.on_subscribe_to_task(call.params, context)
        else:
            events = self.handler.on_message_send_stream(call.params, context)
        try:
            first = await anext(events)
        except StopAsyncIteration:
            first = None
        except BaseException:
            await events.aclose()
            raise
        return OpenStream(
            self, call, context, events, first, deadline=token_expires_at, binding=binding
        )


class OpenStream:
    """One stream past its first event: everything from here on is written as SSE."""

    def __init__(
        self,
        streams: Streams,
        call: Request,
        context: ServerCallContext,
        events: Events,
        first: Any,
        *,
        deadline: float,
        binding: Binding,
    ) -> None:
        self._streams = streams
        self._binding = binding
        self._deadline = deadline
        self._rpc_id: RpcId = call.rpc_id
        self._ends_at = _ENDS[call.method]
        self._context = context
        self._events = events
        self._first = first
        self._response = web.StreamResponse(headers=HEADERS)

    async def serve(self, http: web.Request) -> tuple[web.StreamResponse, str]:
        """The SSE response and its outcome ("ok", "client_gone", "drained", "token_expired" or
        an error reason)."""
        outcome = "ok"
        try:
            await self._response.prepare(http)
            if self._first is not None:
                outcome = await self._pump(self._first)
            await self._response.write_eof()
        except ConnectionResetError:
            outcome = "client_gone"
        finally:
            await self._events.aclose()
        return self._response, outcome

    async def _pump(self, event: Any) -> str:
        """Write events until the stream ends, an error, or the shutdown grace expires."""
        if isinstance(event, pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent):
            # A follow-up on an existing task: the SDK starts with the update, but a task
            # stream MUST begin with the Task (spec 3.1.2), so lead with its snapshot.
            await self._snapshot(event.task_id)
        task_id = ""
        while True:
            task_id = event.id if isinstance(event, pb.Task) else getattr(event, "task_id", task_id)
            await self._write(self._binding.event(self._rpc_id, stream_result(event)))
            if _ends_stream(event, self._ends_at):
                return "ok"
            pending = asyncio.ensure_future(anext(self._events))
            waited = await self._next_or_keep_alive(pending)
            if waited == "drained":
                await self._snapshot(task_id)
                return waited
            if waited == "token_expired":
                message = "the caller's bearer token expired; subscribe again with a new token"
                _, body = self._binding.edge_error(self._rpc_id, "TOKEN_EXPIRED", message, {}, 401)
                await self._write(body, event="error")
                return waited
            try:
                event = pending.result()
            except StopAsyncIteration:
                return "ok"
            except Exception as exc:  # noqa: BLE001 - an error event, see _error
                return await self._error(exc)

    async def _next_or_keep_alive(self, pending: asyncio.Future[Any]) -> Waited:
        """Wait for the stream's next event (`pending`), writing a keep-alive comment after each
        silent interval: "event" once it is there, "drained" when the shutdown grace expired
        first, "token_expired" when the caller's token did.

        Unless it returns "event", `pending` is cancelled and awaited before this returns or
        raises (client gone, handler cancelled), so the SDK generator is idle when it is
        `aclose()`d.
        """
        waited: Waited = "token_expired"
        try:
            while (remaining := self._deadline - time.time()) > 0:
                done, _ = await asyncio.wait(
                    {pending, self._streams.drain.expired},
                    timeout=min(self._streams.keepalive, remaining),
                    return_when=asyncio.FIRST_COMPLETED,
                )
                if pending in done:
                    return "event"
                if done:  # the shutdown grace is over: the task's last event, or its snapshot
                    done, _ = await asyncio.wait({pending}, timeout=LAST_EVENT_WAIT)
                    if pending in done:
                        return "event"
                    waited = "drained"
                    break
                if time.time() < self._deadline:
                    await self._response.write(KEEPALIVE)
        finally:
            if not pending.done():
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration):
                    await pending
        return waited

    async def _snapshot(self, task_id: str) -> None:
        """Send the task as it stands now (a stream's first event, or its last at shutdown)."""
        try:
            task = await self._streams.handler.on_get_task(
                pb.GetTaskRequest(id=task_id), self._context
            )
        except A2AError as error:
            await self._fail(error)
            return
        await self._write(self._binding.event(self._rpc_id, task_result(task)))

    async def _error(self, exc: Exception) -> str:
        """End the stream with an error event: the A2A error, a store outage's retryable
        `STORE_UNAVAILABLE`, or -32603 for anything else (its type logged)."""
        internal = not isinstance(exc, A2AError) or isinstance(exc, InternalError)
        if internal and self._streams.outage.caused(exc):
            return await self._store_unavailable(exc)
        if isinstance(exc, A2AError):
            return await self._fail(exc)
        log_internal_error(exc)
        return await self._fail(InternalError())

    async def _store_unavailable(self, exc: BaseException) -> str:
        """The store went away mid-stream: a retryable `STORE_UNAVAILABLE` error event
        (`outage.py`); the caller reads or subscribes again."""
        refusal = self._streams.outage.failed(exc)
        metadata = {"retry_after": str(refusal.retry_after)}
        _, body = self._binding.edge_error(
            self._rpc_id, "STORE_UNAVAILABLE", refusal.description, metadata, refusal.status
        )
        await self._write(body, event="error")
        return refusal.reason

    async def _fail(self, error: A2AError) -> str:
        """Send `error` as an `error` event; its reason is the stream's outcome."""
        _, body = self._binding.error(self._rpc_id, error)
        await self._write(body, event="error")
        return error_reason(error)

    async def _write(self, body: Any, *, event: str | None = None) -> None:
        prefix = f"event: {event}\n".encode() if event else b""
        await self._response.write(prefix + b"data: " + dumps(body) + b"\n\n")


def _ends_stream(event: Any, states: frozenset[int]) -> bool:
    """A Message ends any stream (a message-only answer); a task ends it at one of `states`."""
    if isinstance(event, pb.Message):
        return True
    if isinstance(event, pb.Task | pb.TaskStatusUpdateEvent):
        return event.status.state in states
    return False
