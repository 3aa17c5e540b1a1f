"""The real a2a-sdk client end to end, streaming and not, through every A2A method."""

from __future__ import annotations

import asyncio

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import PushNotificationNotSupportedError

from tests.adapter.conftest import (
    Server,
    delegated,
    human,
    reply_text,
    send,
    status_data,
    text_message,
)

AGENT = delegated("ops-bot", "carol")


@pytest.fixture(params=[False, True], ids=["blocking", "streaming"])
def streaming(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


async def test_question_gets_the_final_reply_only(server: Server, streaming: bool) -> None:
    """A question completes with the reply as the one artifact, and the message in history."""
    async with server.client(AGENT, streaming=streaming) as client:
        task = await send(client, text_message("How is checkout doing?"))
        stored = await client.get_task(pb.GetTaskRequest(id=task.id))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(task).startswith("checkout is degraded")
    assert [a.name for a in stored.artifacts] == ["reply"]
    assert [m.role for m in stored.history] == [pb.ROLE_USER]


async def test_approval_round_trip(server: Server, streaming: bool) -> None:
    """Propose, the human approves out of band, any message resumes, the action runs."""
    async with server.client(AGENT, streaming=streaming) as client:
        pending = await send(client, text_message("rollback payments"))
        assert pending.status.state == pb.TASK_STATE_INPUT_REQUIRED
        action_id = status_data(pending)["action_id"]
        async with server.http(human("carol"), "approvals") as http:
            assert (
                await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
            ).status_code == 200
        done = await send(
            client, text_message("ok", task_id=pending.id, context_id=pending.context_id)
        )
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert action_id in reply_text(done)


async def test_list_cancel_and_subscribe(server: Server) -> None:
    """ListTasks, CancelTask and SubscribeToTask through the client: a subscription to the waiting
    task stays open until the cancel ends the task."""
    async with server.client(AGENT, streaming=True) as client:
        pending = await send(client, text_message("scale search"))
        attached = asyncio.Event()

        async def subscribed() -> list[pb.StreamResponse]:
            events = []
            async for event in client.subscribe(pb.SubscribeToTaskRequest(id=pending.id)):
                events.append(event)
                attached.set()
            return events

        subscription = asyncio.create_task(subscribed())
        await attached.wait()
        listed = await client.list_tasks(pb.ListTasksRequest())
        assert [t.id for t in listed.tasks] == [pending.id]
        cancelled = await client.cancel_task(pb.CancelTaskRequest(id=pending.id))
        assert cancelled.status.state == pb.TASK_STATE_CANCELED
        events = await asyncio.wait_for(subscription, timeout=30)
    assert events[0].task.id == pending.id
    assert events[-1].status_update.status.state == pb.TASK_STATE_CANCELED


async def test_extended_card_through_the_client(server: Server) -> None:
    """GetExtendedAgentCard returns the specialists as skills."""
    async with server.client(AGENT) as client:
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert [skill.id for skill in card.skills] == ["investigator", "change-planner"]
    assert "restart" in card.skills[1].description


async def test_push_config_through_the_client(server: Server) -> None:
    """The client sees push as unsupported (-32003)."""
    async with server.client(AGENT) as client:
        with pytest.raises(PushNotificationNotSupportedError):
            await client.create_task_push_notification_config(
                pb.TaskPushNotificationConfig(task_id="t", url="https://example.com/hook")
            )
