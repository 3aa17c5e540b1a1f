"""Outbound calls end to end: two edges, remote agents on the a2a-sdk's own server, real Envoy.

Edge A runs the demo gateway with an allowlist of remote agents (`tests/gateways/remote/remotes.py`,
each on loopback, so `ORRERY_A2A_REMOTE_ALLOW_NETWORKS=127.0.0.0/8`) and of edge B, a second
whole edge. A delegated agent at A asks a remote agent; the delegating person approves; the
resume makes the call. The hop header is proven both ways it can be met: A's call to edge B is
refused by B's authz (508 `loop_detected`) before B runs anything, and a remote agent that calls
back into A with this project's tool is refused by A's authz, so nothing loops.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from gateways.remote.settings import RemoteSettings
from tests.adapter.conftest import reply_text, send, status_data, status_text, text_message
from tests.e2e.edge import Edge, bearer, running_edge, unique
from tests.gateways.remote.conftest import env_for
from tests.gateways.remote.remotes import RemoteAgentServer, remote_agents
from tests.metrics import metric

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CARD_PATH = "/.well-known/agent-card.json"


@dataclass
class Edges:
    a: Edge
    b: Edge
    remotes: RemoteAgentServer


@pytest.fixture(scope="module")
def edges(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edges]:
    root = tmp_path_factory.mktemp("outbound")
    with remote_agents(root) as remotes, running_edge(root / "b") as edge_b:
        # A valid token for B's audience: what refuses A's call at B is the hop, nothing else.
        token_b = root / "edge-b.token"
        token_b.write_text(edge_b.token("service"), encoding="utf-8")
        env = env_for(remotes)
        env["ORRERY_A2A_REMOTE_AGENTS"] += f",orrery-b={edge_b.url}{CARD_PATH}"
        env["ORRERY_A2A_REMOTE_ORRERY_B_TOKEN_FILE"] = str(token_b)
        with running_edge(root / "a", env) as edge_a:
            token_a = root / "edge-a.token"
            token_a.write_text(edge_a.token(subject=unique("boomerang")), encoding="utf-8")
            remotes.call_back_to(
                RemoteSettings.from_env(
                    {
                        "ORRERY_A2A_REMOTE_AGENTS": f"origin={edge_a.url}{CARD_PATH}",
                        "ORRERY_A2A_REMOTE_ORIGIN_TOKEN_FILE": str(token_a),
                        "ORRERY_A2A_REMOTE_ALLOW_NETWORKS": "127.0.0.0/8",
                    }
                )
            )
            yield Edges(edge_a, edge_b, remotes)


@pytest.fixture(scope="module")
def adk_edge(edges: Edges, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Edge]:
    """An edge on the ADK gateway whose agent delegates with the remote-agent tool
    (`tests/gateways/remote/adk_agent.py`), the same remote agents allowlisted."""
    env = {
        **env_for(edges.remotes),
        "ORRERY_A2A_GATEWAY": "gateways.adk:create",
        "ORRERY_A2A_ADK_AGENT": "tests.gateways.remote.adk_agent:root_agent",
    }
    with running_edge(tmp_path_factory.mktemp("outbound-adk"), env) as edge:
        yield edge


class Person:
    """A person at edge A and the agent acting for them."""

    def __init__(self, edge: Edge) -> None:
        self.edge = edge
        user = unique("user")
        self.agent_token = edge.token(subject=user, agent=unique("agent"))
        self.human_token = edge.token("human", subject=user)

    async def say(self, text: str, task: pb.Task | None = None) -> pb.Task:
        async with self.edge.client(self.agent_token) as client:
            return await send(client, text_message(text, task_id=task.id if task else ""))

    async def delegate(self, text: str) -> pb.Task:
        """Ask, approve as the person, resume: the task as the resume ends it."""
        task = await self.say(text)
        assert task.status.state == pb.TASK_STATE_INPUT_REQUIRED, status_text(task)
        action = status_data(task)
        assert action["tool"] == "call_remote_agent"
        async with httpx.AsyncClient(timeout=60) as http:
            decided = await http.post(
                action["approve_url"],
                json={"decision": "approve"},
                headers=bearer(self.human_token),
            )
        assert decided.json()["status"] == "approved"
        return await self.say("go ahead", task)


async def remote_calls(edge: Edge, agent: str, outcome: str) -> float:
    url = f"{edge.adapter_url}/metrics"
    return await metric(url, "orrery_a2a_remote_calls_total", agent=agent, outcome=outcome)


async def loop_refusals(edge: Edge) -> float:
    url = f"http://{edge.component('authz').details['diag']}/metrics"
    return await metric(url, "orrery_authz_decisions_total", reason="loop_detected")


async def test_an_approved_delegation_returns_the_remote_reply(edges: Edges) -> None:
    """input-required → the person approves → the resume calls the remote agent once, with the
    hop header, and the task completes with its reply framed as untrusted tool output."""
    before = await remote_calls(edges.a, "echo", "ok")
    task = await Person(edges.a).delegate("ask echo: how is checkout?")
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert "<<<remote-reply\necho: how is checkout?\nremote-reply>>>" in reply_text(task)
    calls = edges.remotes.headers("/echo/a2a")
    assert calls
    assert all(headers["x-orrery-hop"] == "1" for headers in calls)
    # No token is configured for echo: it gets none, never the caller's.
    assert all("authorization" not in headers for headers in calls)
    assert await remote_calls(edges.a, "echo", "ok") == before + 1


async def test_a_call_to_another_orrery_edge_is_refused_at_its_hop(edges: Edges) -> None:
    """Edge B's authz answers A's call 508 `loop_detected`; B's adapter runs nothing."""
    refused_before = await loop_refusals(edges.b)
    requests_before = await edges.b.adapter_requests()
    task = await Person(edges.a).delegate("ask orrery-b: how is checkout?")
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert "(remote_refused)" in status_text(task)
    assert "HTTP 508 (loop_detected)" in status_text(task)
    assert await loop_refusals(edges.b) == refused_before + 1
    assert await edges.b.adapter_requests() == requests_before


async def test_a_remote_that_calls_back_into_the_first_edge_is_refused_and_nothing_loops(
    edges: Edges,
) -> None:
    """The boomerang agent calls A back with the hop header: A's authz refuses it (508), A runs
    exactly the one delegation, and the boomerang's answer says what happened."""
    refused_before = await loop_refusals(edges.a)
    requests_before = await edges.a.adapter_requests()
    task = await Person(edges.a).delegate("ask boomerang: hello again")
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert "callback refused: remote_refused loop_detected" in reply_text(task)
    assert await loop_refusals(edges.a) == refused_before + 1
    # The person's three requests (ask, decide, resume) and nothing from the boomerang.
    assert await edges.a.adapter_requests() == requests_before + 3


@pytest.mark.parametrize(
    ("agent", "reason"),
    [
        ("moved", "redirect_refused"),
        ("pictures", "reply_not_text"),
        ("chatty", "reply_too_long"),
        ("huge", "too_large"),
    ],
)
async def test_a_misbehaving_remote_is_refused_with_its_reason(
    edges: Edges, agent: str, reason: str
) -> None:
    """A card URL that redirects, a data part, text over the message limit, a body over the cap:
    the task ends rejected with the reason code, and the metric counts it."""
    before = await remote_calls(edges.a, agent, reason)
    task = await Person(edges.a).delegate(f"ask {agent}: anything")
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert f"({reason})" in status_text(task)
    assert await remote_calls(edges.a, agent, reason) == before + 1


async def test_an_agent_off_the_allowlist_is_refused_without_an_approval(edges: Edges) -> None:
    """No approval is asked and nothing is sent for a name the operator did not list."""
    task = await Person(edges.a).say("ask stranger: hi")
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert status_text(task).startswith("Refused (not_allowlisted): 'stranger'")


async def test_a_service_principal_cannot_delegate(edges: Edges) -> None:
    """A service principal (no person to approve) is refused at once."""
    async with edges.a.client(edges.a.token("service")) as client:
        task = await send(client, text_message("ask echo: hi"))
    assert task.status.state == pb.TASK_STATE_REJECTED
    assert "service principal" in status_text(task)


async def test_an_adk_agent_delegates_through_the_same_guarded_action(
    adk_edge: Edge, edges: Edges
) -> None:
    """Behind the ADK gateway the tool's confirmation becomes the same input-required action;
    after approval the remote's framed reply is the task's reply, sent once."""
    before = len(edges.remotes.headers("/echo/a2a"))
    task = await Person(adk_edge).delegate("ask echo: how is search?")
    assert task.status.state == pb.TASK_STATE_COMPLETED, status_text(task)
    assert "<<<remote-reply\necho: how is search?\nremote-reply>>>" in reply_text(task)
    assert len(edges.remotes.headers("/echo/a2a")) == before + 1
