"""The a2a-sdk request handler plus what Orrery adds to it.

* Cancelling a task that waits on a human approval withdraws that approval. Without this, a task
  cancelled while input-required left its guarded action pending: the human could still
  "approve" it and be told the agent continues, though a cancelled task never resumes. Now the
  action becomes `withdrawn` in the confirmation store (shared between replicas when the store
  is), a later decision is answered 409 `withdrawn`, and the gate never runs it.
* `SubscribeToTask` with shared stores (PostgreSQL) is the stored snapshot, then the task's
  events from the shared event log, until the task is terminal — on every replica, whichever runs
  the task's turns. The SDK taps its in-memory task on the replica that holds it and tails the
  log elsewhere, and ends the tail at an interrupted state: a subscriber on the replica where a
  task was parked never heard a resume that ran on another one, and no remote subscriber heard
  the end of a task that waited for input.
* A send of a message seen before (by `messageId`, `retries.py`) runs nothing: it is answered
  with the task of the first send, once that turn is over. A stream of it is that task's snapshot
  now (if its turn still runs), then the task once the turn is over.
* A first send that starts a task is refused when the task store has no room for it
  (`TaskStore.admit`: 429 `task_quota_exceeded`, 503 `task_store_full`, answered by the
  dispatcher as HTTP refusals); a retry is answered with its task whatever the quota.
* A blocking send that starts a task (no `taskId`, not `returnImmediately`) is run without the
  SDK's `ActiveTask` (`blocking.py`), at about half the CPU; cancelling and subscribing to its
  task while its turn runs are answered by that turn (a subscriber on this replica hears its
  events, then — if the task waits for input — follows the task as the SDK does).
* A message to a finished task is refused (-32004) before the SDK is asked to run it. The SDK
  would first build an `ActiveTask` for it — two event queues, each with a dispatcher task — and
  then abandon it when it finds the task terminal; the garbage collector reports each abandoned
  task as an asyncio error ("Task was destroyed but it is pending!"), so a client's mistake
  paged people.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

from a2a.server.cluster.event_stream import TaskEventStream
from a2a.server.cluster.task_store import VersionedTaskStore
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.server.request_handlers import DefaultRequestHandler, validate_request_params
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import (
    TaskNotCancelableError,
    TaskNotFoundError,
    UnsupportedOperationError,
)
from a2a.utils.input_mode_validator import validate_input_modes
from a2a.utils.task import apply_history_length, validate_history_length

from adapter.blocking import BlockingSends
from adapter.executor import pending_action_id
from adapter.principal import owner_of
from adapter.retries import Retries, refuse_terminal
from adapter.stores.protocols import INTERRUPTED, TERMINAL, ConfirmationStore, TaskStore, read_task


class RequestHandler(DefaultRequestHandler):
    """`DefaultRequestHandler` with the additions in the module docstring."""

    def __init__(
        self,
        *,
        confirmations: ConfirmationStore,
        retries: Retries,
        tasks: TaskStore,
        event_stream: TaskEventStream | None = None,
        **options: Any,
    ) -> None:
        super().__init__(event_stream=event_stream, **options)
        self._confirmations = confirmations
        self._tasks = tasks
        self._retries = retries
        self._shared_events = event_stream
        self._blocking = BlockingSends(self.agent_executor, self.task_store, event_stream)

    async def on_message_send(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task | pb.Message:
        wait = not params.configuration.return_immediately
        while (retry := await self._retries.admit(params.message, context)) is not None:
            task = await self._retries.answer(retry, context, wait=wait)
            if task is not None:
                return apply_history_length(task, params.configuration)
        try:
            await self._room_for(params.message, context)
            result: pb.Task | pb.Message
            if wait and not params.message.task_id:
                result = await self._send_blocking(params, context)
            else:
                result = await super().on_message_send(params, context)
        except Exception:
            await self._retries.first_failed(params.message, context)
            raise
        return result

    async def on_message_send_stream(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        shown = False
        while (retry := await self._retries.admit(params.message, context)) is not None:
            if not shown and (now := await self._retries.running(retry, context)) is not None:
                yield apply_history_length(now, params.configuration)  # the stream's first event
                shown = True
            task = await self._retries.answer(retry, context)
            if task is not None:
                yield apply_history_length(task, params.configuration)
                return
        try:
            await self._room_for(params.message, context)
            async with aclosing(super().on_message_send_stream(params, context)) as events:
                async for event in events:
                    yield event
        except Exception:
            await self._retries.first_failed(params.message, context)
            raise

    @validate_request_params
    async def _send_blocking(
        self, params: pb.SendMessageRequest, context: ServerCallContext
    ) -> pb.Task:
        """A blocking send that starts a task, run by `blocking.py` after the checks the SDK's
        `_setup_active_task` makes of such a send (push configs are off here)."""
        validate_history_length(params.configuration)
        if self._validate_input_modes:
            validate_input_modes(params.message, self._agent_card)
        request = await self._request_context_builder.build(
            params=params,
            task_id=None,
            context_id=params.message.context_id or None,
            task=None,
            context=context,
        )
        task = await self._blocking.send(request)
        return apply_history_length(task, params.configuration)

    async def _room_for(self, message: pb.Message, context: ServerCallContext) -> None:
        """A first send that starts a task needs room for it (the store's quotas): refused
        before anything runs, its claim given back (`first_failed`). A retry never gets here:
        it is answered with its first send's task whatever the quota."""
        if not message.task_id:
            await self._tasks.admit(owner_of(context))

    @validate_request_params
    async def on_subscribe_to_task(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        store = self.task_store
        if self._shared_events is None or not isinstance(store, VersionedTaskStore):
            async with aclosing(self._subscribe_here(params, context)) as local:
                async for event in local:
                    yield event
            return
        stored = await store.get(params.id, context)  # owner-scoped
        if stored is None:
            raise TaskNotFoundError
        refuse_terminal(stored.task)
        yield stored.task
        async with aclosing(self._shared_events.subscribe(params.id, after=stored.version)) as log:
            async for versioned in log:
                yield versioned.event
                if _ends_task(versioned.event):
                    return

    async def _subscribe_here(
        self, params: pb.SubscribeToTaskRequest, context: ServerCallContext
    ) -> AsyncGenerator[Event, None]:
        """One process (memory store): a task whose blocking send runs here is followed through
        that turn; if the turn leaves it waiting for input, the SDK follows it from there (its
        snapshot, already sent, left out). Any other task is the SDK's."""
        turn = self._blocking.running(params.id)
        stored = await read_task(self.task_store, params.id, context)  # owner-scoped
        if turn is None or stored is None:
            async with aclosing(super().on_subscribe_to_task(params, context)) as sdk:
                async for event in sdk:
                    yield event
            return
        refuse_terminal(stored)
        last: Event = stored
        async with aclosing(turn.follow()) as events:
            async for last in events:
                yield last
        if not isinstance(last, pb.Task | pb.TaskStatusUpdateEvent) or (
            last.status.state not in INTERRUPTED
        ):
            return
        # A follow-up may have run between the turn's end and the SDK's subscription (the
        # subscriber reads at its own pace): the SDK's snapshot, or the finished task, says how
        # far it got, and is left out only when it is what the subscriber last heard.
        async with aclosing(super().on_subscribe_to_task(params, context)) as sdk:
            try:
                snapshot = await anext(sdk)
            except UnsupportedOperationError:  # the SDK refuses a finished task: it is the end
                finished = await read_task(self.task_store, params.id, context)
                if finished is not None:
                    yield finished
                return
            if not isinstance(snapshot, pb.Task) or snapshot.status != last.status:
                yield snapshot
            async for event in sdk:
                yield event

    @validate_request_params
    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        # The action id is in the waiting status, which the cancel replaces: read it first (an
        # owner-scoped read; the SDK refuses other owners' and terminal tasks right after).
        current = await read_task(self.task_store, params.id, context)
        waiting = pending_action_id(current)
        task: pb.Task | None
        turn = self._blocking.running(params.id) if current is not None else None
        if current is not None and turn is not None:  # a blocking send's turn runs here
            if current.status.state in TERMINAL:
                raise TaskNotCancelableError
            task = await turn.cancel(context)
        else:
            task = await super().on_cancel_task(params, context)
        if waiting is not None and task is not None and task.status.state == pb.TASK_STATE_CANCELED:
            await self._confirmations.withdraw(waiting, owner=owner_of(context))
        return task

    async def aclose(self) -> None:
        """Stop the blocking sends' runs still going, then the SDK's active tasks."""
        await self._blocking.aclose()
        await super().aclose()


def _ends_task(event: Event) -> bool:
    if isinstance(event, pb.Message):
        return True
    return isinstance(event, pb.Task | pb.TaskStatusUpdateEvent) and (
        event.status.state in TERMINAL
    )
