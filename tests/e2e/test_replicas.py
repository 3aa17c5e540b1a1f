"""Replicas behind one Envoy: `orrery-a2a up --replicas 2` on PostgreSQL and Redis.

Envoy balances each request over two authz and two adapter processes (round robin), so a
principal's requests land on both; what they share must come from the shared stores.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from tests.adapter.conftest import send, status_data, text_message
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e, pytest.mark.redis, pytest.mark.postgres]

REPLICAS = ("1", "2")


async def _served_by(edge: Edge, component: str, event: str, principal: str) -> set[str]:
    """Which replicas of `component` logged `event` for `principal` (waiting for both, a while:
    the logs are copied from the processes as they come)."""
    deadline = time.monotonic() + 30
    while True:
        served = {
            number
            for number in REPLICAS
            for record in edge.events(f"{component}-{number}", event)
            if record.get("principal") == principal
        }
        if served == set(REPLICAS) or time.monotonic() > deadline:
            return served
        await asyncio.sleep(0.05)


async def test_a_task_lives_on_whichever_replica_serves_the_request(replicated_edge: Edge) -> None:
    """Propose, approve, resume and read a task through Envoy: every step works, and both
    adapters served this principal's requests (the task and approval are in PostgreSQL)."""
    edge = replicated_edge
    user, agent = unique("user"), unique("agent")
    token = edge.token(subject=user, agent=agent)
    async with edge.client(token) as client:
        task = await send(client, text_message("restart checkout"))
        action_id = status_data(task)["action_id"]
        assert (await edge.decide(edge.token("human", subject=user), action_id)).status_code == 200
        resumed = await send(client, text_message("go ahead", task_id=task.id))
        reads = [await client.get_task(pb.GetTaskRequest(id=task.id)) for _ in range(6)]
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    assert {read.status.state for read in reads} == {pb.TASK_STATE_COMPLETED}
    principal = f"delegated:dev-agent-client:{agent}:{user}"
    assert await _served_by(edge, "adapter", "a2a_request", principal) == set(REPLICAS)


async def test_both_authz_replicas_spend_one_shared_budget(replicated_edge: Edge) -> None:
    """The per-subject limit is one budget in Redis: together the two authz replicas allow no
    more than one budget (60 + refill), not one each."""
    edge = replicated_edge
    user = unique("user")
    headers = {**JSONRPC_HEADERS, **bearer(edge.token(subject=user))}
    allowed, started = 0, time.monotonic()
    async with httpx.AsyncClient(timeout=60) as http:
        while (
            await http.post(
                f"{edge.url}/a2a", json=jsonrpc("GetTask", {"id": "x"}), headers=headers
            )
        ).status_code != 429:
            allowed += 1
            assert allowed < 1000
    elapsed = time.monotonic() - started
    assert allowed <= 60 + elapsed + 1  # one budget refills one a second; two would allow ~120
    principal = f"delegated:dev-agent-client:dev-agent:{user}"
    assert await _served_by(edge, "authz", "decision", principal) == set(REPLICAS)


async def test_a_non_ascii_person_approves_on_the_shared_stores(replicated_edge: Edge) -> None:
    """A subject outside ASCII is stored, decided and resumed like any other (no 500s)."""
    edge = replicated_edge
    user, agent = unique("j\u00f6ran"), unique("agent")
    async with edge.client(edge.token(subject=user, agent=agent)) as client:
        task = await send(client, text_message("restart checkout"))
        action_id = status_data(task)["action_id"]
        assert (await edge.decide(edge.token("human", subject=user), action_id)).status_code == 200
        resumed = await send(client, text_message("go ahead", task_id=task.id))
    assert resumed.status.state == pb.TASK_STATE_COMPLETED


async def test_a_cancelled_task_withdraws_its_action_on_every_replica(
    replicated_edge: Edge,
) -> None:
    """Cancel on whichever adapter Envoy picks: the approval is withdrawn in the shared store, so
    the person is told nothing will run, by whichever adapter answers them."""
    edge = replicated_edge
    user = unique("user")
    token = edge.token(subject=user, agent=unique("agent"))
    async with edge.client(token) as client:
        tasks = [await send(client, text_message("restart checkout")) for _ in REPLICAS]
        for task in tasks:
            await client.cancel_task(pb.CancelTaskRequest(id=task.id))
    human = edge.token("human", subject=user)
    for task in tasks:
        decided = await edge.decide(human, status_data(task)["action_id"])
        assert (decided.status_code, decided.json()["status"]) == (409, "withdrawn")


async def test_a_nul_in_the_subject_is_refused_before_the_stores(replicated_edge: Edge) -> None:
    """A token whose sub holds NUL is a 401 at authz; it never reaches PostgreSQL."""
    token = replicated_edge.token(subject="x\u0000y")
    async with httpx.AsyncClient(timeout=60) as http:
        answer = await http.post(
            f"{replicated_edge.url}/a2a",
            headers={**JSONRPC_HEADERS, **bearer(token)},
            json=jsonrpc(
                "SendMessage",
                {
                    "message": {
                        "role": "ROLE_USER",
                        "messageId": "m",
                        "parts": [{"text": "restart checkout"}],
                    }
                },
            ),
        )
    assert (answer.status_code, answer.json()["error"]) == (401, "token_invalid")
