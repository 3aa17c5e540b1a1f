"""The approval flow end to end: dev tokens as `orrery-a2a` mints them, through Envoy.

An agent acting for a person proposes a guarded action; the task waits in input-required with the
action in a data part; only that person decides, on the approvals surface with a console token;
the agent's next message resumes the task and the gate consumes the approval exactly once.
"""

from __future__ import annotations

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import UnsupportedOperationError

from tests.adapter.conftest import reply_text, send, status_data, status_text, text_message
from tests.e2e.edge import Edge, bearer, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


class Delegation:
    """A person, one agent acting for them, and a pending guarded action of that agent's."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        self.user = unique("user")
        self.agent_token = edge.token(subject=self.user, agent=unique("agent"))
        self.human_token = edge.token("human", subject=self.user)

    async def propose(self) -> pb.Task:
        async with self.edge.client(self.agent_token) as client:
            task = await send(client, text_message("restart checkout"))
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        return task

    async def say(self, task: pb.Task, text: str) -> pb.Task:
        async with self.edge.client(self.agent_token) as client:
            return await send(client, text_message(text, task_id=task.id))

    async def show(self, action_id: str, token: str | None = None) -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as http:
            return await http.get(
                f"{self.edge.url}/approvals/{action_id}", headers=bearer(token or self.human_token)
            )


@pytest.fixture
def delegation(edge: Edge) -> Delegation:
    return Delegation(edge)


async def test_the_delegating_human_approves_and_the_resume_runs_it_once(
    edge: Edge, delegation: Delegation
) -> None:
    """input-required with the data part → the human approves at approve_url → the agent's next
    message runs the action; the approval is consumed and cannot be decided again."""
    task = await delegation.propose()
    action = status_data(task)
    assert set(action) == {"action_id", "tool", "args", "level", "expires_at", "approve_url"}
    assert (action["tool"], action["level"]) == ("restart_service", "L3")
    assert action["args"] == {"service": "checkout"}  # the exact action: what runs, once approved
    assert action["approve_url"] == f"{edge.url}/approvals/{action['action_id']}"

    async with httpx.AsyncClient(timeout=60) as http:
        decided = await http.post(
            action["approve_url"],
            json={"decision": "approve"},
            headers=bearer(delegation.human_token),
        )
    assert decided.status_code == 200
    assert decided.json()["status"] == "approved"

    resumed = await delegation.say(task, "go ahead")
    assert resumed.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(resumed) == f"Approved action {action['action_id']} carried out."
    assert (await delegation.show(action["action_id"])).json()["status"] == "consumed"
    again = await edge.decide(delegation.human_token, action["action_id"])
    assert (again.status_code, again.json()["status"]) == (409, "already_decided")
    with pytest.raises(UnsupportedOperationError):
        await delegation.say(task, "go ahead")  # the task is done: no second run


async def test_a_reply_on_the_task_is_not_an_approval(delegation: Delegation) -> None:
    """Messages saying "approve" or the action id leave the task waiting and the action pending."""
    task = await delegation.propose()
    action_id = status_data(task)["action_id"]
    for text in ("approve", f"I approve {action_id}", "yes"):
        replied = await delegation.say(task, text)
        assert replied.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert "Still waiting" in status_text(replied)
    assert (await delegation.show(action_id)).json()["status"] == "pending"


async def test_another_human_cannot_see_or_decide_the_action(
    edge: Edge, delegation: Delegation
) -> None:
    """Someone else's console token gets 404 not_found; the delegating human still decides."""
    task = await delegation.propose()
    action_id = status_data(task)["action_id"]
    stranger = edge.token("human", subject=unique("stranger"))
    refused = await edge.decide(stranger, action_id)
    assert (refused.status_code, refused.json()["status"]) == (404, "not_found")
    assert (await delegation.show(action_id, stranger)).status_code == 404
    assert (await edge.decide(delegation.human_token, action_id)).status_code == 200


async def test_the_agents_own_tokens_cannot_approve(edge: Edge, delegation: Delegation) -> None:
    """Its A2A token is refused (401, wrong audience) and so is a console token carrying its
    `act` (403); the adapter sees neither, and the action stays pending."""
    task = await delegation.propose()
    action_id = status_data(task)["action_id"]
    console_claims = edge.claims("human", subject=delegation.user)
    console_claims["act"] = {"sub": "dev-agent"}
    before = await edge.adapter_requests()
    a2a_token = await edge.decide(delegation.agent_token, action_id)
    acting_console = await edge.decide(edge.sign(console_claims), action_id)
    assert (a2a_token.status_code, a2a_token.json()["error"]) == (401, "token_invalid")
    assert (acting_console.status_code, acting_console.json()["error"]) == (403, "forbidden")
    assert await edge.adapter_requests() == before
    assert (await delegation.show(action_id)).json()["status"] == "pending"


async def test_a_denied_action_is_not_run_on_resume(edge: Edge, delegation: Delegation) -> None:
    """The human denies: the agent's resume is rejected and says nothing was done."""
    task = await delegation.propose()
    action_id = status_data(task)["action_id"]
    denied = await edge.decide(delegation.human_token, action_id, "deny")
    assert denied.json()["status"] == "denied"
    resumed = await delegation.say(task, "go ahead")
    assert resumed.status.state == pb.TASK_STATE_REJECTED
    assert status_text(resumed) == f"Action {action_id} was denied; nothing was done."


async def test_a_service_principal_never_reaches_approval(edge: Edge) -> None:
    """A service token (pinned to L2) asking for a guarded action is rejected outright."""
    async with edge.client(edge.token("service", client_id=unique("svc"))) as client:
        task = await send(client, text_message("restart checkout"))
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert "a service principal is limited to L2" in status_text(task)
    assert [part.WhichOneof("content") for part in task.status.message.parts] == ["text"]


async def test_console_audience_tokens_of_the_agent_cannot_approve(
    edge: Edge, delegation: Delegation
) -> None:
    """Console-audience tokens the IdP could issue to the agent's client (client credentials,
    impersonating the person) and a token for both audiences are 403 forbidden; the adapter sees
    none of them, and the action stays pending."""
    task = await delegation.propose()
    action_id = status_data(task)["action_id"]
    agent_client = edge.claims("human", subject="dev-agent-client", client_id="dev-agent-client")
    impersonating = edge.claims("human", subject=delegation.user, client_id="dev-agent-client")
    both_audiences = edge.claims("human", subject=delegation.user)
    both_audiences["aud"] = [both_audiences["aud"], "orrery-a2a"]
    before = await edge.adapter_requests()
    for claims in (agent_client, impersonating, both_audiences):
        refused = await edge.decide(edge.sign(claims), action_id)
        assert (refused.status_code, refused.json()["error"]) == (403, "forbidden"), claims
    assert await edge.adapter_requests() == before
    assert (await delegation.show(action_id)).json()["status"] == "pending"
