"""PostgreSQL behind the whole adapter: restarts and two replicas on one database."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from tests.adapter.conftest import (
    delegated,
    fresh_schema,
    human,
    running,
    send,
    status_data,
    text_message,
)

pytestmark = pytest.mark.postgres

ALICE_BOT = delegated("bot", "alice")
BOB_BOT = delegated("bot", "bob")


@pytest.fixture
async def env(database_url: str) -> AsyncIterator[dict[str, str]]:
    async with fresh_schema(database_url) as schema:
        yield {"DATABASE_URL": database_url, "ORRERY_A2A_DB_SCHEMA": schema}


async def test_tasks_and_approvals_survive_a_restart(env: dict[str, str]) -> None:
    """Stop the adapter, start a new one: tasks, the pending approval and the gate still work."""
    async with running(env) as first, first.client(ALICE_BOT) as client:
        done = await send(client, text_message("how is payments?"))
        pending = await send(client, text_message("restart checkout"))
    action_id = status_data(pending)["action_id"]

    async with running(env) as second:
        async with second.client(ALICE_BOT) as client:
            assert (await client.get_task(pb.GetTaskRequest(id=done.id))).artifacts
            listed = await client.list_tasks(pb.ListTasksRequest())
            assert {t.id for t in listed.tasks} == {done.id, pending.id}
        async with second.http(human("alice"), "approvals") as http:
            decided = await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
        assert decided.status_code == 200
        async with second.client(ALICE_BOT) as client:
            resumed = await send(
                client, text_message("go", task_id=pending.id, context_id=pending.context_id)
            )
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
        action_id = status_data(pending)["action_id"]
        async with two.http(human("alice"), "approvals") as http:
            assert (
                await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
            ).status_code == 200
        async with two.client(ALICE_BOT) as client:
            resumed = await send(
                client, text_message("go", task_id=pending.id, context_id=pending.context_id)
            )
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


async def test_readiness_reports_the_database(env: dict[str, str]) -> None:
    """/readyz is ready with a reachable database."""
    async with running(env) as server, server.http(None) as http:
        body = (await http.get("/readyz")).json()
    assert body == {
        "status": "ready",
        "checks": {"tasks": "ok", "approvals": "ok", "limiter": "ok"},
    }
