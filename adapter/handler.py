"""The a2a-sdk request handler plus the one thing Orrery adds to it: cancelling a task that waits
on a human approval withdraws that approval.

Without this, a task cancelled while input-required left its guarded action pending: the human
could still "approve" it and be told the agent continues, though a cancelled task never resumes.
Now the action becomes `withdrawn` in the confirmation store (shared between replicas when the
store is), a later decision is answered 409 `withdrawn`, and the gate never runs it.
"""

from __future__ import annotations

from typing import Any

from a2a.server.context import ServerCallContext
from a2a.server.request_handlers import DefaultRequestHandler
from a2a.types import a2a_pb2 as pb

from adapter.executor import pending_action_id
from adapter.principal import owner_of
from adapter.stores.protocols import ConfirmationStore, read_task


class RequestHandler(DefaultRequestHandler):
    """`DefaultRequestHandler` whose `CancelTask` also withdraws the action the task waited on."""

    def __init__(self, *, confirmations: ConfirmationStore, **options: Any) -> None:
        super().__init__(**options)
        self._confirmations = confirmations

    async def on_cancel_task(
        self, params: pb.CancelTaskRequest, context: ServerCallContext
    ) -> pb.Task | None:
        # The action id is in the waiting status, which the cancel replaces: read it first (an
        # owner-scoped read; the SDK refuses other owners' and terminal tasks right after).
        waiting = pending_action_id(await read_task(self.task_store, params.id, context))
        task: pb.Task | None = await super().on_cancel_task(params, context)
        if waiting is not None and task is not None and task.status.state == pb.TASK_STATE_CANCELED:
            await self._confirmations.withdraw(waiting, owner=owner_of(context))
        return task
