"""Task isolation between principals, with real tokens through Envoy and authz.

Two pairs: agents of two different users, and two agents delegated by the *same* user (one
subject, two principal keys). Another owner's task is indistinguishable from a missing one.
"""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from tests.adapter.conftest import send, text_message
from tests.e2e.edge import Edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

PAIRS = ["two users", "two agents of one user"]


def _pair(edge: Edge, pair: str) -> tuple[str, str]:
    user = unique("user")
    other_user = unique("user") if pair == "two users" else user
    return (
        edge.token(subject=user, agent=unique("agent")),
        edge.token(subject=other_user, agent=unique("agent")),
    )


@pytest.mark.parametrize("pair", PAIRS)
async def test_another_principal_cannot_read_or_touch_a_task(edge: Edge, pair: str) -> None:
    """GetTask, CancelTask, SubscribeToTask and a message on the task: all TaskNotFound."""
    owner, other = _pair(edge, pair)
    async with edge.client(owner) as client:
        task = await send(client, text_message("restart checkout"))
    async with edge.client(other) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
        with pytest.raises(TaskNotFoundError):
            await send(client, text_message("go ahead", task_id=task.id))
    async with edge.client(other, streaming=True) as client:
        with pytest.raises(TaskNotFoundError):
            async for _ in client.subscribe(pb.SubscribeToTaskRequest(id=task.id)):
                pass
    async with edge.client(owner) as client:
        unchanged = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert unchanged.status.state == pb.TASK_STATE_INPUT_REQUIRED


@pytest.mark.parametrize("pair", PAIRS)
async def test_list_tasks_shows_only_the_callers_own(edge: Edge, pair: str) -> None:
    """Each principal's ListTasks holds its own tasks only, and counts only those."""
    owner, other = _pair(edge, pair)
    async with edge.client(owner) as client:
        owners = await send(client, text_message("is search up?"))
    async with edge.client(other) as client:
        others = await send(client, text_message("is search up?"))
        listed = await client.list_tasks(pb.ListTasksRequest())
    assert [task.id for task in listed.tasks] == [others.id]
    assert listed.total_size == 1
    assert owners.id != others.id


async def test_another_principals_context_id_starts_a_conversation_of_ones_own(
    edge: Edge,
) -> None:
    """Reusing someone's contextId is allowed and reaches only the caller's own tasks."""
    owner, other = _pair(edge, "two agents of one user")
    async with edge.client(owner) as client:
        owners = await send(client, text_message("restart checkout"))
    async with edge.client(other) as client:
        others = await send(client, text_message("how is search?", context_id=owners.context_id))
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=owners.context_id))
    assert others.context_id == owners.context_id
    assert others.id != owners.id
    assert others.status.state == pb.TASK_STATE_COMPLETED
    assert [task.id for task in listed.tasks] == [others.id]
