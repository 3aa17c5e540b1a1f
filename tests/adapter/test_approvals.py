"""Human approvals of guarded actions, including every abuse case docs/adapter.md names."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError, UnsupportedOperationError

from adapter.app import GATEWAY
from adapter.errors import GatewayLoadError
from adapter.gateway import REDACTED, AgentGateway, GatewayContext, load_gateway, redact
from adapter.stores.memory import MemoryConfirmationStore
from contract.identity import Principal
from tests.adapter.conftest import (
    FAKE_GATEWAY,
    PROPOSAL,
    Server,
    delegated,
    human,
    running,
    send,
    service,
    status_data,
    status_text,
    text_message,
)
from tests.adapter.fakes import ReplanningGateway
from tests.clocks import FakeClock

AGENT = delegated("deploy-bot", "alice")


async def propose(server: Server, agent: Principal = AGENT) -> tuple[pb.Task, dict[str, Any]]:
    async with server.client(agent) as client:
        task = await send(client, text_message("please restart checkout"))
    assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
    return task, status_data(task)


async def decide(
    server: Server,
    action_id: str,
    decision: str = "approve",
    principal: Principal | None = None,
    **kwargs: Any,
) -> httpx.Response:
    async with server.http(principal or human("alice"), "approvals") as http:
        return await http.post(f"/approvals/{action_id}", json={"decision": decision}, **kwargs)


async def resume(
    server: Server, task: pb.Task, text: str = "continue", agent: Principal = AGENT
) -> pb.Task:
    async with server.client(agent) as client:
        return await send(client, text_message(text, task_id=task.id, context_id=task.context_id))


async def test_input_required_carries_text_and_the_action(server: Server) -> None:
    """The status has a text part and {action_id, tool, args, level, expires_at, approve_url}."""
    task, data = await propose(server)
    assert "approval" in status_text(task)
    assert set(data) == {"action_id", "tool", "args", "level", "expires_at", "approve_url"}
    assert data["tool"] == "restart_service" and data["level"] == "L3"
    assert data["args"]["service"] == "checkout"
    assert data["approve_url"] == f"{server.base}/approvals/{data['action_id']}"
    assert data["expires_at"].endswith("Z")


async def test_approved_action_runs_once_on_resume(server: Server) -> None:
    """The delegating human approves; any message resumes; the action runs once."""
    task, data = await propose(server)
    response = await decide(server, data["action_id"])
    assert response.status_code == 200
    assert response.json() == {
        "action_id": data["action_id"],
        "status": "approved",
        "message": "approved; the agent continues the task to carry it out, once",
    }
    done = await resume(server, task)
    assert done.status.state == pb.TASK_STATE_COMPLETED
    assert "carried out" in done.artifacts[0].parts[0].text


async def test_an_action_changed_after_its_approval_does_not_run() -> None:
    """The approval binds the exact action the person saw: a gateway that, at the resume, wants
    to run the same tool with other args gets no approval for it. Nothing runs, the task is
    rejected, and the approval is not used up."""
    async with running({"ORRERY_A2A_GATEWAY": "tests.adapter.fakes:create_replanning"}) as server:
        gateway = server.app[GATEWAY]
        assert isinstance(gateway, ReplanningGateway)
        task, data = await propose(server)
        assert data["args"] == {"service": "checkout"}  # what the person is shown
        assert (await decide(server, data["action_id"])).status_code == 200
        resumed = await resume(server, task)
        assert resumed.status.state == pb.TASK_STATE_REJECTED
        assert gateway.ran == []
        async with server.http(human("alice"), "approvals") as http:
            shown = (await http.get(f"/approvals/{data['action_id']}")).json()
        assert shown["status"] == "approved"


async def test_reply_on_the_task_is_never_a_decision(server: Server) -> None:
    """Whatever the agent replies on the task, the action stays pending."""
    task, data = await propose(server)
    for text in ["approve", "yes, approved", "I approve action " + data["action_id"], "APPROVE"]:
        again = await resume(server, task, text)
        assert again.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert status_data(again)["action_id"] == data["action_id"]
    async with server.http(human("alice"), "approvals") as http:
        shown = (await http.get(f"/approvals/{data['action_id']}")).json()
    assert shown["status"] == "pending"


async def test_agent_cannot_approve_its_own_action(server: Server) -> None:
    """The agent's own assertion (a2a surface, or a forged approvals one) is 401 at /approvals."""
    _, data = await propose(server)
    async with server.http(AGENT, "a2a") as http:
        as_agent = await http.post(f"/approvals/{data['action_id']}", json={"decision": "approve"})
    assert as_agent.status_code == 401
    async with server.http(AGENT, "approvals") as http:
        kind_mismatch = await http.post(
            f"/approvals/{data['action_id']}", json={"decision": "approve"}
        )
    assert kind_mismatch.status_code == 401


async def test_another_human_cannot_decide(server: Server) -> None:
    """Bob cannot decide Alice's action: 404 as if it did not exist, and it stays pending."""
    task, data = await propose(server)
    response = await decide(server, data["action_id"], principal=human("bob"))
    assert response.status_code == 404
    assert response.json()["status"] == "not_found"
    assert (await resume(server, task)).status.state == pb.TASK_STATE_INPUT_REQUIRED


async def test_non_ascii_subject_decides_their_own_action(server: Server) -> None:
    """A delegating human whose subject is not ASCII approves like anyone else (no 500)."""
    agent = delegated("deploy-bot", "j\u00f6ran")
    task, data = await propose(server, agent)
    response = await decide(server, data["action_id"], principal=human("j\u00f6ran"))
    assert response.status_code == 200
    assert (await resume(server, task, agent=agent)).status.state == pb.TASK_STATE_COMPLETED


async def test_unknown_action_is_404(server: Server) -> None:
    """An unknown or malformed action id is 404."""
    for action_id in ["A" * 24, "bad..id"]:
        assert (await decide(server, action_id)).status_code == 404


async def test_second_decision_is_409(server: Server) -> None:
    """Replaying a decision (or changing it) is refused: 409 already_decided."""
    _, data = await propose(server)
    assert (await decide(server, data["action_id"])).status_code == 200
    for decision in ("approve", "deny"):
        again = await decide(server, data["action_id"], decision)
        assert again.status_code == 409
        assert again.json()["status"] == "already_decided"


async def test_approval_is_consumed_once(server: Server) -> None:
    """After the approved action ran, the task is finished: replaying the resume is -32004."""
    task, data = await propose(server)
    await decide(server, data["action_id"])
    await resume(server, task)
    with pytest.raises(UnsupportedOperationError):
        await resume(server, task)
    assert (await decide(server, data["action_id"])).status_code == 409


async def test_other_agent_of_the_same_user_cannot_use_the_approval(server: Server) -> None:
    """An approval belongs to the proposing agent's task; another agent cannot reach it."""
    task, data = await propose(server)
    await decide(server, data["action_id"])
    with pytest.raises(TaskNotFoundError):
        await resume(server, task, agent=delegated("other-bot", "alice"))
    assert (await resume(server, task)).status.state == pb.TASK_STATE_COMPLETED


async def test_denied_action_never_runs(server: Server) -> None:
    """Deny answers 200 denied; the resumed turn is rejected and nothing runs."""
    task, data = await propose(server)
    response = await decide(server, data["action_id"], "deny")
    assert response.status_code == 200 and response.json()["status"] == "denied"
    done = await resume(server, task)
    assert done.status.state == pb.TASK_STATE_REJECTED
    assert "denied" in status_text(done)


async def cancel(server: Server, task: pb.Task, agent: Principal = AGENT) -> pb.Task:
    async with server.client(agent) as client:
        return await client.cancel_task(pb.CancelTaskRequest(id=task.id))


async def test_cancelling_the_task_withdraws_its_pending_action(server: Server) -> None:
    """After CancelTask the human is told the action was withdrawn, not that the agent goes on."""
    task, data = await propose(server)
    assert (await cancel(server, task)).status.state == pb.TASK_STATE_CANCELED
    response = await decide(server, data["action_id"])
    assert response.status_code == 409
    assert response.json() == {
        "action_id": data["action_id"],
        "status": "withdrawn",
        "message": "the task waiting on this action was cancelled; nothing will run",
    }


async def test_cancelling_after_approval_withdraws_the_approval(server: Server) -> None:
    """An approval not yet used dies with its task: it is withdrawn, never consumed."""
    task, data = await propose(server)
    assert (await decide(server, data["action_id"])).status_code == 200
    await cancel(server, task)
    async with server.http(human("alice"), "approvals") as http:
        shown = await http.get(f"/approvals/{data['action_id']}")
    assert shown.json()["status"] == "withdrawn"


async def test_another_agents_cancel_withdraws_nothing(server: Server) -> None:
    """A cancel refused as not found (another owner's task) leaves the action decidable."""
    task, data = await propose(server)
    with pytest.raises(TaskNotFoundError):
        await cancel(server, task, agent=delegated("other-bot", "alice"))
    assert (await decide(server, data["action_id"])).json()["status"] == "approved"


async def test_expired_action_cannot_be_approved_or_run() -> None:
    """After the TTL the decision is 410 expired and the resumed turn does nothing."""
    clock = FakeClock(time.time())
    async with running({"ORRERY_A2A_APPROVAL_TTL": "1s"}, clock=clock) as server:
        task, data = await propose(server)
        clock.advance(1.2)
        response = await decide(server, data["action_id"])
        assert response.status_code == 410 and response.json()["status"] == "expired"
        done = await resume(server, task)
        assert done.status.state == pb.TASK_STATE_REJECTED
        assert "expired" in status_text(done)


async def test_service_principal_never_reaches_approval(server: Server) -> None:
    """A service principal (pinned to L2) gets guarded actions refused outright."""
    async with server.client(service()) as client:
        task = await send(client, text_message("restart checkout"))
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert all(p.WhichOneof("content") == "text" for p in task.status.message.parts)
    store = server.gateway.confirmations
    assert isinstance(store, MemoryConfirmationStore)
    assert store._entries == {}


async def test_delegated_below_l3_is_refused(server: Server) -> None:
    """An operator-level (L2) agent cannot propose a guarded action either."""
    async with server.client(delegated("ops-bot", "alice", "L2")) as client:
        task = await send(client, text_message("restart checkout"))
    assert task.status.state == pb.TASK_STATE_REJECTED


@pytest.mark.parametrize(
    "body",
    [{"decision": "yes"}, {"decision": "approve", "extra": 1}, [], {"Decision": "approve"}],
)
async def test_bad_decision_body_is_400(server: Server, body: object) -> None:
    """Only {"decision": "approve" | "deny"} is a decision."""
    _, data = await propose(server)
    async with server.http(human("alice"), "approvals") as http:
        response = await http.post(f"/approvals/{data['action_id']}", json=body)
    assert response.status_code == 400 and response.json()["status"] == "bad_request"


async def test_deeply_nested_decision_body_is_400(server: Server) -> None:
    """A body nested past the JSON parser's limit is a 400, not a server error."""
    _, data = await propose(server)
    async with server.http(human("alice"), "approvals") as http:
        response = await http.post(
            f"/approvals/{data['action_id']}",
            content=b"[" * 1000,
            headers={"Content-Type": "application/json"},
        )
    assert response.status_code == 400


async def test_a_decision_body_that_is_not_utf8_is_400(server: Server) -> None:
    """The decision is JSON, so UTF-8 (RFC 8259 §8.1): a UTF-16 body is not read as one."""
    _, data = await propose(server)
    async with server.http(human("alice"), "approvals") as http:
        response = await http.post(
            f"/approvals/{data['action_id']}",
            content=b"\xff\xfe" + '{"decision": "approve"}'.encode("utf-16-le"),
            headers={"Content-Type": "application/json"},
        )
    assert (response.status_code, response.json()["status"]) == (400, "bad_request")


async def test_decision_needs_an_assertion(server: Server) -> None:
    """No assertion at all: 401 with the Bearer challenge."""
    _, data = await propose(server)
    async with httpx.AsyncClient(base_url=server.base) as http:
        response = await http.post(f"/approvals/{data['action_id']}", json={"decision": "approve"})
    assert response.status_code == 401
    assert "WWW-Authenticate" in response.headers


async def test_human_can_see_what_they_approve(server: Server) -> None:
    """GET shows the pending action to its human, and 404 to anyone else."""
    _, data = await propose(server)
    async with server.http(human("alice"), "approvals") as http:
        shown = await http.get(f"/approvals/{data['action_id']}")
    assert shown.json()["tool"] == "restart_service" and shown.json()["status"] == "pending"
    async with server.http(human("bob"), "approvals") as http:
        assert (await http.get(f"/approvals/{data['action_id']}")).status_code == 404


def test_redaction_hides_secrets() -> None:
    """Secret-named args and credential-looking values are redacted; long text is cut."""
    redacted = redact(
        {
            "service": "checkout",
            "api_key": "abc",
            "auth": {"user": "u", "pw": "p"},
            "note": "Bearer eyJhbGciOi.xyz.abc",
            "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln",
            "text": "x" * 500,
            "obj": object(),
        }
    )
    assert redacted["service"] == "checkout"
    assert redacted["api_key"] == redacted["auth"] == redacted["note"] == REDACTED
    assert redacted["jwt"] == redacted["obj"] == REDACTED
    assert len(redacted["text"]) == 201


async def test_memory_store_gate_is_bound_to_the_owner() -> None:
    """consume() by another owner finds nothing; the owner consumes exactly once."""
    now = [1000.0]
    store = MemoryConfirmationStore(clock=lambda: now[0])
    entry = await store.propose(PROPOSAL)
    assert await store.decide(entry.action_id, subject="alice", decision="approve") == "approved"
    assert await store.consume(entry.action_id, owner="k2", digest=PROPOSAL.digest) == "not_found"
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "approved"
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "consumed"


async def test_memory_store_approval_expires_before_consumption() -> None:
    """An approval not consumed before expires_at is expired, not runnable."""
    now = [1000.0]
    store = MemoryConfirmationStore(clock=lambda: now[0])
    entry = await store.propose(PROPOSAL)
    await store.decide(entry.action_id, subject="alice", decision="approve")
    now[0] += 61
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "expired"
    assert time.time() > 0


async def test_a_gateway_whose_store_cannot_withdraw_is_refused_at_load() -> None:
    """A confirmation store missing a member fails start-up, not a CancelTask half-way."""
    context = GatewayContext(MemoryConfirmationStore(), approval_ttl=60)
    with pytest.raises(GatewayLoadError, match="withdraw"):
        await load_gateway("tests.adapter.fakes:create_with_an_old_store", context)
    assert isinstance(await load_gateway(FAKE_GATEWAY, context), AgentGateway)
