"""A blocking send's turn (`adapter/blocking.py`) when its run raises: the task is left FAILED,
as the a2a-sdk's consumer leaves it, and the sender gets the run's error."""

from __future__ import annotations

import pytest
from a2a.server.agent_execution import AgentExecutor, RequestContext
from a2a.server.context import ServerCallContext
from a2a.server.events import EventQueue
from a2a.types import a2a_pb2 as pb

from adapter.blocking import BlockingSends
from adapter.principal import PrincipalUser
from adapter.stores.memory import BoundedTaskStore
from tests.adapter.conftest import delegated, text_message


class Broken(Exception):
    """What the executor raises."""


class RaisingExecutor(AgentExecutor):
    """Raises, after making the task when `made_task` is set."""

    def __init__(self, *, made_task: bool) -> None:
        self._made_task = made_task

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        if self._made_task:
            assert context.task_id and context.context_id and context.message
            await event_queue.enqueue_event(
                pb.Task(
                    id=context.task_id,
                    context_id=context.context_id,
                    status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED),
                    history=[context.message],
                )
            )
        raise Broken

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        raise NotImplementedError


async def run_raising(*, made_task: bool) -> pb.Task | None:
    """Send through a raising executor (expecting its error); the task as stored after."""
    store = BoundedTaskStore()
    call = ServerCallContext(user=PrincipalUser(delegated()))
    request = RequestContext(
        call_context=call,
        request=text_message("how is checkout?"),
        task_id="task-1",
        context_id="context-1",
    )
    sends = BlockingSends(RaisingExecutor(made_task=made_task), store, None)
    with pytest.raises(Broken):
        await sends.send(request)
    assert sends.running("task-1") is None
    return await store.get("task-1", call)


async def test_a_run_that_raises_after_making_its_task_leaves_it_failed() -> None:
    """The task the run stored ends FAILED; the sender gets the run's error."""
    task = await run_raising(made_task=True)
    assert task is not None and task.status.state == pb.TASK_STATE_FAILED


async def test_a_run_that_raises_before_its_task_exists_leaves_one_failed() -> None:
    """No task was stored yet: one is made FAILED, holding the message that started it."""
    task = await run_raising(made_task=False)
    assert task is not None and task.status.state == pb.TASK_STATE_FAILED
    assert [message.parts[0].text for message in task.history] == ["how is checkout?"]
