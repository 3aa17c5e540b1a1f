"""Owner-scoped tasks and conversations, through the real SDK client.

Two pairs are checked in every method: principals of two different users, and two agents delegated
by the *same* user (they share a subject but never a principal key).
"""

from __future__ import annotations

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from contract.identity import Principal
from tests.adapter.conftest import Server, delegated, send, service, text_message

PAIRS = {
    "two users": (delegated("bot", "alice"), delegated("bot", "bob")),
    "two agents of one user": (delegated("bot-1", "alice"), delegated("bot-2", "alice")),
    "service and delegated": (service("svc"), delegated("svc", "svc")),
}


@pytest.fixture(params=list(PAIRS), ids=list(PAIRS))
def pair(request: pytest.FixtureRequest) -> tuple[Principal, Principal]:
    return PAIRS[request.param]


async def owners_task(server: Server, owner: Principal, text: str = "how is search?") -> pb.Task:
    async with server.client(owner) as client:
        return await send(client, text_message(text))


async def test_get_task_of_another_owner_is_not_found(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """GetTask of someone else's task is -32001, like a missing one."""
    owner, other = pair
    task = await owners_task(server, owner)
    async with server.client(other) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id=task.id))
    async with server.client(owner) as client:
        assert (await client.get_task(pb.GetTaskRequest(id=task.id))).id == task.id


async def test_cancel_task_of_another_owner_is_not_found(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """CancelTask of someone else's (cancelable) task is -32001 and changes nothing."""
    owner, other = pair
    task = await owners_task(server, owner, "restart checkout")
    async with server.client(other) as client:
        with pytest.raises(TaskNotFoundError):
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
    async with server.client(owner) as client:
        stored = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert stored.status.state in (pb.TASK_STATE_INPUT_REQUIRED, pb.TASK_STATE_REJECTED)


async def test_subscribe_to_task_of_another_owner_is_not_found(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """SubscribeToTask of someone else's task is -32001."""
    owner, other = pair
    task = await owners_task(server, owner, "restart checkout")
    async with server.client(other, streaming=True) as client:
        with pytest.raises(TaskNotFoundError):
            async for _ in client.subscribe(pb.SubscribeToTaskRequest(id=task.id)):
                pass


async def test_message_to_task_of_another_owner_is_not_found(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """SendMessage naming someone else's taskId is -32001; their gateway never runs for it."""
    owner, other = pair
    task = await owners_task(server, owner, "restart checkout")
    turns_before = len(server.gateway.turns)
    for streaming in (False, True):
        async with server.client(other, streaming=streaming) as client:
            with pytest.raises(TaskNotFoundError):
                await send(client, text_message("approve", task_id=task.id))
    assert len(server.gateway.turns) == turns_before


async def test_list_tasks_shows_only_own_tasks_and_totals(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """ListTasks counts and returns the caller's tasks only, even filtered by a foreign context."""
    owner, other = pair
    mine = [await owners_task(server, owner) for _ in range(3)]
    async with server.client(other) as client:
        listed = await client.list_tasks(pb.ListTasksRequest())
        assert listed.total_size == 0 and not listed.tasks and listed.next_page_token == ""
        filtered = await client.list_tasks(pb.ListTasksRequest(context_id=mine[0].context_id))
        assert filtered.total_size == 0
    async with server.client(owner) as client:
        assert (await client.list_tasks(pb.ListTasksRequest())).total_size == 3


async def test_page_token_of_another_owner_reveals_nothing(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """A page token minted for one owner only positions within the other owner's own tasks."""
    owner, other = pair
    for _ in range(3):
        await owners_task(server, owner)
    theirs = await owners_task(server, other)
    async with server.client(owner) as client:
        page = await client.list_tasks(pb.ListTasksRequest(page_size=1))
    async with server.client(other) as client:
        replayed = await client.list_tasks(
            pb.ListTasksRequest(page_size=10, page_token=page.next_page_token)
        )
    assert {task.id for task in replayed.tasks} <= {theirs.id}
    assert replayed.total_size == 1


async def test_foreign_context_id_reaches_only_the_callers_conversation(
    server: Server, pair: tuple[Principal, Principal]
) -> None:
    """Sending someone else's contextId lands in the caller's own session, never theirs."""
    owner, other = pair
    task = await owners_task(server, owner)
    async with server.client(other) as client:
        hijack = await send(client, text_message("how is search?", context_id=task.context_id))
    async with server.client(owner) as client:
        await send(client, text_message("and payments?", context_id=task.context_id))
    sessions = [turn.session_id for turn in server.gateway.turns]
    assert sessions[0] == sessions[2]  # the owner's two turns share one conversation
    assert sessions[1] != sessions[0]  # the other caller got a conversation of its own
    assert all(s.startswith("a2a-") and len(s) == 4 + 64 for s in sessions)
    assert server.gateway.turns[1].principal == other
    async with server.client(owner) as client:
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=task.context_id))
    assert hijack.id not in {t.id for t in listed.tasks}
