"""The a2a-sdk `AgentExecutor` that drives the gateway: one task is one turn.

For each message the executor derives the session id from the verified principal and the
`contextId`, calls `AgentGateway.run_in_session` and publishes only the outcome:

* a `Reply` → the reply text as the task's one artifact (`reply`), then `TASK_STATE_COMPLETED`
  (or `TASK_STATE_REJECTED` with the text as the status message when the gateway refused);
* a `Pending` guarded action → `TASK_STATE_INPUT_REQUIRED` with a status message holding a text
  part and the data part `{action_id, tool, args, level, expires_at, approve_url}` (args redacted
  here again, whatever the gateway did);
* a guarded action the approval store refuses to record (`ApprovalRefused`: the proposing
  principal's quota of live approvals, or a full memory store) → `TASK_STATE_REJECTED` with the
  refusal's text and `metadata` `{reason, limit}` (`approval_quota_exceeded`,
  `approval_store_full`);
* a gateway that raises → `TASK_STATE_FAILED` with a fixed status message: a failed turn is a task
  result (spec 3.2.2: a blocking send answers the task in its terminal state), so the caller
  learns which task failed; the exception is logged by its type only (its message can carry
  internals) and never leaves the server.
* a gateway call past `ORRERY_A2A_TURN_DEADLINE`, or still running when the adapter's shutdown
  grace is over → cancelled, and `TASK_STATE_FAILED` with the reason (`endings.py`), so the turn's
  in-flight slot is freed and no task is left `TASK_STATE_SUBMITTED`.

A follow-up message on an input-required task resumes the turn: the action id comes from the
*stored* task status (server data), never from the message, and the message text — whatever it
says — is not a decision. Intermediate gateway events never leave the server.

`TaskContextBuilder` fixes an a2a-sdk gap
(docs/a2a-notes.md#a-follow-up-naming-only-taskid-gets-a-new-contextid): a follow-up that names
only `taskId` gets the task's `contextId` (the SDK would invent a new one and then fail the turn
with -32602). It also gives a new task the id its first message was claimed for (`retries.py`),
so a retry of that message finds it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from a2a.server.agent_execution import AgentExecutor, RequestContext, RequestContextBuilder
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError, UnsupportedOperationError
from google.protobuf import struct_pb2, timestamp_pb2

from adapter.endings import Reason, agent_message, failed_event, stamped
from adapter.errors import ApprovalRefused
from adapter.gateway import AgentGateway, Pending, Reply, Turn, redact
from adapter.messages import check_message
from adapter.metrics import Metrics
from adapter.principal import principal_of
from adapter.retries import new_task_id
from adapter.sessions import session_id
from adapter.stores.protocols import TERMINAL, SdkTaskStore, read_task
from runtime import logs

logger = logging.getLogger("adapter.executor")


def _data_part(value: dict[str, Any]) -> pb.Part:
    data = struct_pb2.Value()
    data.struct_value.update(value)
    return pb.Part(data=data, media_type="application/json")


def _refused(task_id: str, context_id: str, refused: ApprovalRefused) -> pb.TaskStatusUpdateEvent:
    """`TASK_STATE_REJECTED` (spec: the agent will not proceed) with the refusal's text, and its
    reason code and limit as the message's `metadata`, so a client can tell a quota from the
    agent's own refusal."""
    message = agent_message(task_id, context_id, [pb.Part(text=refused.description)])
    message.metadata.update({"reason": refused.reason, "limit": refused.limit})
    return pb.TaskStatusUpdateEvent(
        task_id=task_id, context_id=context_id, status=stamped(pb.TASK_STATE_REJECTED, message)
    )


def pending_action_id(task: pb.Task | None) -> str | None:
    """The action a stored input-required task waits on (from its status data part)."""
    if task is None or task.status.state != pb.TASK_STATE_INPUT_REQUIRED:
        return None
    for part in task.status.message.parts:
        if part.WhichOneof("content") == "data":
            fields = part.data.struct_value.fields
            if "action_id" in fields and fields["action_id"].WhichOneof("kind") == "string_value":
                return str(fields["action_id"].string_value)
    return None


DEFAULT_TURN_DEADLINE = 120.0  # seconds (`ORRERY_A2A_TURN_DEADLINE`)


class GatewayExecutor(AgentExecutor):
    """Runs one turn through the gateway and publishes its final outcome only.

    The gateway call is bounded: past `deadline` seconds, or once `stopping` is set (the
    adapter's shutdown grace is over), it is cancelled and the task ends FAILED
    (`endings.py`) — the run returns, so its in-flight slot is freed and its subscribers hear the
    end."""

    def __init__(
        self,
        gateway: AgentGateway,
        approvals_base_url: str,
        *,
        deadline: float = DEFAULT_TURN_DEADLINE,
        stopping: asyncio.Event | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self._gateway = gateway
        self._approvals_base_url = approvals_base_url.rstrip("/")
        self._deadline = deadline
        self._stopping = stopping or asyncio.Event()
        self._metrics = metrics

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        message = context.message
        task_id, context_id = context.task_id, context.context_id
        if message is None or not task_id or not context_id:
            raise InvalidParamsError(message="a turn needs a message")
        text = check_message(message)  # also checked before the task exists; defence in depth
        principal = principal_of(context.call_context)
        task = context.current_task
        if task is None:
            await event_queue.enqueue_event(
                pb.Task(
                    id=task_id,
                    context_id=context_id,
                    status=stamped(pb.TASK_STATE_SUBMITTED),
                    history=[message],
                )
            )
        elif task.status.state in TERMINAL:
            # Another replica may have finished it while this one kept it parked.
            raise UnsupportedOperationError(message=f"Task {task_id} is in a terminal state")
        turn = Turn(
            session_id=session_id(principal.key, context_id),
            principal=principal,
            text=text,
            task_id=task_id,
            message_id=message.message_id,
            context_id=context_id,
            resume_action_id=pending_action_id(task),
        )
        try:
            outcome = await self._run(turn)
        except ApprovalRefused as refused:  # a quota: the turn is refused, not failed
            logs.event(
                logger, "approval_refused", logging.WARNING, task_id=task_id, reason=refused.reason
            )
            await event_queue.enqueue_event(_refused(task_id, context_id, refused))
            return
        except _Cut as cut:
            logs.event(logger, "turn_ended", logging.WARNING, task_id=task_id, reason=cut.reason)
            await self._end(event_queue, task_id, context_id, cut.reason)
            return
        except Exception as exc:  # noqa: BLE001 - any gateway failure fails the task, never the server
            logs.event(
                logger,
                "gateway_failed",
                logging.ERROR,
                task_id=task_id,
                error_type=type(exc).__name__,
            )
            await self._end(event_queue, task_id, context_id, "gateway_failed")
            return
        for event in self._events(outcome, task_id, context_id):
            await event_queue.enqueue_event(event)

    async def _run(self, turn: Turn) -> Reply | Pending:
        """The gateway's outcome, or `_Cut` at the deadline or when the adapter stops."""
        if self._stopping.is_set():
            raise _Cut("adapter_stopped")
        run = asyncio.ensure_future(self._gateway.run_in_session(turn))
        stop = asyncio.ensure_future(self._stopping.wait())
        try:
            await asyncio.wait({run, stop}, timeout=self._deadline, return_when="FIRST_COMPLETED")
            if run.done():
                return run.result()
            raise _Cut("adapter_stopped" if stop.done() else "turn_deadline")
        finally:
            # Cancel what is left and wait for it without taking its outcome: a cancellation of
            # this run itself (the SDK's cancel, a teardown) still propagates.
            left = {waiting for waiting in (run, stop) if not waiting.done()}
            for waiting in left:
                waiting.cancel()
            if left:
                await asyncio.wait(left)

    async def _end(
        self, event_queue: EventQueue, task_id: str, context_id: str, reason: Reason
    ) -> None:
        if self._metrics is not None:
            self._metrics.turns_ended.labels(reason).inc()
        await event_queue.enqueue_event(failed_event(task_id, context_id, reason))

    def _events(
        self, outcome: Reply | Pending, task_id: str, context_id: str
    ) -> list[pb.TaskStatusUpdateEvent | pb.TaskArtifactUpdateEvent]:
        if isinstance(outcome, Pending):
            entry = outcome.confirmation
            data = {
                "action_id": entry.action_id,
                "tool": entry.tool,
                "args": redact(dict(entry.args)),
                "level": entry.level,
                "expires_at": timestamp_pb2.Timestamp(seconds=int(entry.expires_at)).ToJsonString(),
                "approve_url": f"{self._approvals_base_url}/{entry.action_id}",
            }
            parts = [pb.Part(text=outcome.summary), _data_part(data)]
            status = stamped(
                pb.TASK_STATE_INPUT_REQUIRED, agent_message(task_id, context_id, parts)
            )
            return [pb.TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)]
        if outcome.rejected:
            message = agent_message(task_id, context_id, [pb.Part(text=outcome.text)])
            status = stamped(pb.TASK_STATE_REJECTED, message)
            return [pb.TaskStatusUpdateEvent(task_id=task_id, context_id=context_id, status=status)]
        artifact = pb.Artifact(
            artifact_id=uuid.uuid4().hex, name="reply", parts=[pb.Part(text=outcome.text)]
        )
        return [
            pb.TaskArtifactUpdateEvent(task_id=task_id, context_id=context_id, artifact=artifact),
            pb.TaskStatusUpdateEvent(
                task_id=task_id, context_id=context_id, status=stamped(pb.TASK_STATE_COMPLETED)
            ),
        ]

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        task_id, context_id = context.task_id, context.context_id
        if task_id and context_id:
            await event_queue.enqueue_event(
                pb.TaskStatusUpdateEvent(
                    task_id=task_id, context_id=context_id, status=stamped(pb.TASK_STATE_CANCELED)
                )
            )


class _Cut(Exception):
    """The turn was cut short (not by the gateway): the task ends FAILED for `reason`."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason


class TaskContextBuilder(RequestContextBuilder):
    """Builds the turn's `RequestContext`: `contextId` inferred from the task (spec §3.4.3), a new
    task's id the one its message was claimed for."""

    def __init__(self, task_store: SdkTaskStore) -> None:
        self._task_store = task_store

    async def build(
        self,
        context: ServerCallContext,
        params: pb.SendMessageRequest | None = None,
        task_id: str | None = None,
        context_id: str | None = None,
        task: pb.Task | None = None,
    ) -> RequestContext:
        if task_id and not context_id:
            stored = await read_task(self._task_store, task_id, context)  # owner-scoped
            if stored is not None:
                context_id = stored.context_id
        if not task_id:
            task_id = new_task_id(context)
        return RequestContext(
            call_context=context,
            request=params,
            task_id=task_id,
            context_id=context_id,
            task=task,
        )
