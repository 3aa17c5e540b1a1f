"""The ADK gateway behind the whole edge: real Envoy, authz and adapter processes serving the
example ADK agent (`orrery-a2a up --adk-agent gateways.adk.example:root_agent`), its scripted
model running inside the adapter through ADK's real Runner.

The example's `restart_service` is a `FunctionTool(require_confirmation=True)`; its health tool
says how often this adapter process restarted a service: the counter the "exactly once" checks
read, through the edge like any client.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import UnsupportedOperationError

from tests.adapter.conftest import reply_text, send, status_data, status_text, text_message
from tests.e2e.conftest import ADK_GATEWAY_ENV, running_replicated_edge
from tests.e2e.edge import (
    JSONRPC_HEADERS,
    Edge,
    bearer,
    jsonrpc,
    message_params,
    unique,
)

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


@pytest.fixture(scope="module")
def adk_replicated_edge(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """Two authz and two adapters serving the example ADK agent, sessions, tasks and approvals
    in PostgreSQL (schemas of their own), limits in Redis."""
    directory = tmp_path_factory.mktemp("adk-replicated-edge")
    with running_replicated_edge(directory, ADK_GATEWAY_ENV, schema_suffixes=("_adk",)) as started:
        yield started


class Person:
    """A person, one agent acting for them, and their console token."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.user = unique("user")
        self.agent_token = edge.token(subject=self.user, agent=unique("agent"))
        self.human_token = edge.token("human", subject=self.user)

    async def say(self, text: str, *, task_id: str = "", context_id: str = "") -> pb.Task:
        async with self.edge.client(self.agent_token) as client:
            return await send(client, text_message(text, task_id=task_id, context_id=context_id))

    async def approve(self, task: pb.Task) -> None:
        decided = await self.edge.decide(self.human_token, status_data(task)["action_id"])
        assert (decided.status_code, decided.json()["status"]) == (200, "approved")


async def test_an_approved_restart_runs_exactly_once(adk_edge: Edge) -> None:
    """ask → input-required → the delegating person approves → resume → the tool ran once;
    resuming again or replaying the approval runs nothing."""
    person = Person(adk_edge)
    task = await person.say("restart inventory")
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    action = status_data(task)
    assert (action["tool"], action["args"], action["level"]) == (
        "restart_service",
        {"service": "inventory"},
        "L3",
    )
    assert action["approve_url"] == f"{adk_edge.url}/approvals/{action['action_id']}"
    before = await person.say("go ahead", task_id=task.id)  # no decision yet: still waiting
    assert before.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert "Still waiting" in status_text(before)

    await person.approve(task)
    resumed = await person.say("go ahead", task_id=task.id)
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(resumed) == "Restarted inventory (restart #1 here)."

    with pytest.raises(UnsupportedOperationError):
        await person.say("go ahead", task_id=task.id)  # the task is done: no second run
    replay = await adk_edge.decide(person.human_token, action["action_id"])
    assert (replay.status_code, replay.json()["status"]) == (409, "already_decided")
    health = await person.say("how is inventory?")
    assert (
        reply_text(health) == "inventory is down: crash-looping on start; restarted 1 time(s) here."
    )


async def test_only_the_final_text_leaves(adk_edge: Edge) -> None:
    """A question routed coordinator → investigator → tool → answer: one text part, the answer."""
    task = await Person(adk_edge).say("how is payments?")
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(task) == "payments is healthy: steady; restarted 0 time(s) here."
    assert [
        part.WhichOneof("content") for artifact in task.artifacts for part in artifact.parts
    ] == ["text"]


async def test_a_service_principal_is_refused_a_guarded_call(adk_edge: Edge) -> None:
    """A service token (pinned to L2) asking for the restart: rejected, never input-required."""
    async with adk_edge.client(adk_edge.token("service", client_id=unique("svc"))) as client:
        task = await send(client, text_message("restart search"))
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert "a service principal is limited to L2" in status_text(task)


async def test_a_borrowed_context_reaches_only_the_callers_own_session(adk_edge: Edge) -> None:
    """Someone else writing in alice's contextId talks to their own ADK session: alice's waiting
    restart is untouched (a message in her session would have superseded it) and still runs once
    she approves."""
    alice, mallory = Person(adk_edge), Person(adk_edge)
    task = await alice.say("restart search")
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    borrowed = await mallory.say("restart search", context_id=task.context_id)
    assert borrowed.status.state == pb.TASK_STATE_INPUT_REQUIRED  # mallory's own proposal
    assert status_data(borrowed)["action_id"] != status_data(task)["action_id"]
    await alice.approve(task)
    resumed = await alice.say("go ahead", task_id=task.id)
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(resumed) == "Restarted search (restart #1 here)."


async def test_the_extended_card_lists_the_sub_agents(adk_edge: Edge) -> None:
    """The extended card's skills are the example's sub-agents."""
    async with adk_edge.client(adk_edge.token()) as client:
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert [skill.id for skill in card.skills] == ["investigator", "change_planner"]


async def _replica_of(edge: Edge, event: str, action_id: str) -> str:
    """Which adapter replica logged the ADK gateway's `event` for the action."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for name in ("adapter-1", "adapter-2"):
            if any(e.get("action_id") == action_id for e in edge.events(name, event)):
                return name
        await asyncio.sleep(0.05)
    raise AssertionError(f"no replica logged {event} for {action_id}")


@pytest.mark.redis
@pytest.mark.postgres
async def test_replicas_share_a_pending_approval(adk_replicated_edge: Edge) -> None:
    """Proposed on one adapter, resumed on the other: the resuming replica finds the ADK session
    and the approval in PostgreSQL and the restart runs once. Every request goes over one
    connection, so one Envoy worker serves them all and its round robin alternates strictly
    (each connection of its own could land on either worker, each with its own round robin);
    the second flow shifts the next request by one, so one of the two crosses over whatever the
    balancer's phase. Every flow completes, and at least one crossed replicas."""
    edge = adk_replicated_edge
    crossed = []
    async with httpx.AsyncClient(timeout=60) as http:

        async def rpc(token: str, method: str, params: Any) -> Any:
            headers = {**JSONRPC_HEADERS, **bearer(token)}
            sent = await http.post(f"{edge.url}/a2a", json=jsonrpc(method, params), headers=headers)
            return sent.json()

        for detour in (0, 1):
            user = unique("user")
            agent = edge.token(subject=user, agent=unique("agent"))
            task = (await rpc(agent, "SendMessage", message_params("restart payments")))["result"][
                "task"
            ]
            action_id = task["status"]["message"]["parts"][1]["data"]["action_id"]
            decided = await http.post(
                f"{edge.url}/approvals/{action_id}",
                json={"decision": "approve"},
                headers=bearer(edge.token("human", subject=user)),
            )
            assert decided.status_code == 200
            for _ in range(detour):
                await rpc(agent, "GetTask", {"id": task["id"]})
            on_task = {"taskId": task["id"], "contextId": task["contextId"]}
            done = (await rpc(agent, "SendMessage", message_params("go", **on_task)))["result"][
                "task"
            ]
            assert done["status"]["state"] == "TASK_STATE_COMPLETED"
            (reply,) = [
                part["text"] for artifact in done["artifacts"] for part in artifact["parts"]
            ]
            assert reply.startswith("Restarted payments (restart #")
            again = await rpc(agent, "SendMessage", message_params("go", **on_task))
            assert "error" in again  # the task is done: no second run
            proposer = await _replica_of(edge, "adk_proposed", action_id)
            crossed.append(proposer != await _replica_of(edge, "adk_gate", action_id))
    assert any(crossed), "every resume ran on the replica that proposed: nothing was shared"
