"""PostgreSQL behind the whole adapter: restarts and two replicas on one database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from tests.adapter.conftest import (
    Server,
    delegated,
    followed,
    fresh_schema,
    human,
    running,
    send,
    status_data,
    text_message,
)
from tests.metrics import metric
from tests.waiting import eventually

pytestmark = pytest.mark.postgres

ALICE_BOT = delegated("bot", "alice")
BOB_BOT = delegated("bot", "bob")


@pytest.fixture
async def env(database_url: str) -> AsyncIterator[dict[str, str]]:
    async with fresh_schema(database_url) as schema:
        yield {"DATABASE_URL": database_url, "ORRERY_A2A_DB_SCHEMA": schema}


async def subscribed(
    server: Server, task_id: str, attached: asyncio.Event
) -> list[pb.StreamResponse]:
    async with server.client(ALICE_BOT, streaming=True) as client:
        return await followed(client, task_id, attached)


async def approve_and_resume(server: Server, pending: pb.Task) -> pb.Task:
    """Alice approves the action `pending` waits on, then her agent resumes it on `server`."""
    action_id = status_data(pending)["action_id"]
    async with server.http(human("alice"), "approvals") as http:
        decided = await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
    assert decided.status_code == 200
    async with server.client(ALICE_BOT) as client:
        return await send(
            client, text_message("go", task_id=pending.id, context_id=pending.context_id)
        )


async def test_tasks_and_approvals_survive_a_restart(env: dict[str, str]) -> None:
    """Stop the adapter, start a new one: tasks, the pending approval and the gate still work."""
    async with running(env) as first, first.client(ALICE_BOT) as client:
        done = await send(client, text_message("how is payments?"))
        pending = await send(client, text_message("restart checkout"))

    async with running(env) as second:
        async with second.client(ALICE_BOT) as client:
            assert (await client.get_task(pb.GetTaskRequest(id=done.id))).artifacts
            listed = await client.list_tasks(pb.ListTasksRequest())
            assert {t.id for t in listed.tasks} == {done.id, pending.id}
        resumed = await approve_and_resume(second, pending)
        assert resumed.status.state == pb.TASK_STATE_COMPLETED


async def test_two_replicas_share_tasks_with_the_same_isolation(env: dict[str, str]) -> None:
    """A task made on one replica is the owner's on the other, and nobody else's."""
    async with running(env) as one, running(env) as two:
        async with one.client(ALICE_BOT) as client:
            pending = await send(client, text_message("restart checkout"))
        async with two.client(ALICE_BOT) as client:
            seen = await client.get_task(pb.GetTaskRequest(id=pending.id))
            assert seen.status.state == pb.TASK_STATE_INPUT_REQUIRED
            assert (await client.list_tasks(pb.ListTasksRequest())).total_size == 1
        async with two.client(BOB_BOT) as client:
            with pytest.raises(TaskNotFoundError):
                await client.get_task(pb.GetTaskRequest(id=pending.id))
            assert (await client.list_tasks(pb.ListTasksRequest())).total_size == 0
        resumed = await approve_and_resume(two, pending)
        assert resumed.status.state == pb.TASK_STATE_COMPLETED
        async with one.client(ALICE_BOT) as client:
            final = await client.get_task(pb.GetTaskRequest(id=pending.id))
        assert final.status.state == pb.TASK_STATE_COMPLETED
        async with one.client(ALICE_BOT) as client:
            # Replica one still has the task parked from before; it must see the new state.
            with pytest.raises(UnsupportedOperationError):
                await send(client, text_message("again", task_id=pending.id))
            final = await client.get_task(pb.GetTaskRequest(id=pending.id))
        assert final.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribe_on_another_replica_follows_the_running_turn(
    env: dict[str, str],
) -> None:
    """SubscribeToTask on replica two streams a turn running on replica one, to its end."""
    async with running(env) as one, running(env) as two:
        one.gateway.hold = asyncio.Event()
        async with one.client(ALICE_BOT) as client:
            config = pb.SendMessageConfiguration(return_immediately=True)
            request = text_message("how is search?")
            request.configuration.CopyFrom(config)
            started = await send(client, request)
        await one.gateway.started.wait()
        async with two.client(ALICE_BOT, streaming=True) as client:
            events = client.subscribe(pb.SubscribeToTaskRequest(id=started.id))
            first = await anext(events)
            assert first.task.status.state == pb.TASK_STATE_SUBMITTED
            one.gateway.hold.set()
            rest = [event async for event in events]
        kinds = [event.WhichOneof("payload") for event in rest]
        assert kinds == ["artifact_update", "status_update"]
        assert rest[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_subscribers_on_every_replica_hear_a_waiting_task_end(env: dict[str, str]) -> None:
    """A task parked input-required on replica one, subscribed to on both replicas (twice on
    each), approved and resumed on replica two: every subscriber hears the completion, and all
    hear the same events in the same order."""
    async with running(env) as one, running(env) as two:
        async with one.client(ALICE_BOT) as client:
            pending = await send(client, text_message("restart checkout"))
        attached = [asyncio.Event() for _ in range(4)]
        subscribers = [
            asyncio.create_task(subscribed(replica, pending.id, ready))
            for replica, ready in zip((one, one, two, two), attached, strict=True)
        ]
        await asyncio.gather(*(ready.wait() for ready in attached))
        resumed = await approve_and_resume(two, pending)
        assert resumed.status.state == pb.TASK_STATE_COMPLETED
        streams = await asyncio.wait_for(asyncio.gather(*subscribers), timeout=30)
    for events in streams:
        assert events[0].task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
        assert events == streams[0]


async def test_cancel_on_another_replica_stops_the_running_turn(env: dict[str, str]) -> None:
    """CancelTask on replica two cancels a turn running on replica one; it stays cancelled."""
    async with running(env) as one, running(env) as two:
        one.gateway.hold = asyncio.Event()
        async with one.client(ALICE_BOT) as client:
            request = text_message("how is search?")
            request.configuration.return_immediately = True
            started = await send(client, request)
        await one.gateway.started.wait()
        async with two.client(ALICE_BOT) as client:
            cancelled = await client.cancel_task(pb.CancelTaskRequest(id=started.id))
        assert cancelled.status.state == pb.TASK_STATE_CANCELED
        one.gateway.hold.set()  # the turn on replica one notices the cancel at its next write

        async def turn_ended() -> bool:
            return await metric(f"{one.base}/metrics", "orrery_a2a_turns_in_flight") == 0

        await eventually(turn_ended)
        async with one.client(ALICE_BOT) as client:
            final = await client.get_task(pb.GetTaskRequest(id=started.id))
        assert final.status.state == pb.TASK_STATE_CANCELED
        assert not final.artifacts


async def test_readiness_reports_the_database(env: dict[str, str]) -> None:
    """/readyz is ready with a reachable database."""
    async with running(env) as server, server.http(None) as http:
        body = (await http.get("/readyz")).json()
    assert body == {
        "status": "ready",
        "checks": {"tasks": "ok", "approvals": "ok", "limiter": "ok", "serving": "ok"},
    }
