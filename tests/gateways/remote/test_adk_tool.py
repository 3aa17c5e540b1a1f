"""The remote-agent call as an ADK tool, run by ADK's real Runner inside the ADK gateway: the call
is a confirmation-guarded tool, so it becomes a pending L3 action, runs once after approval, and
the model gets the framed reply (or the reason) as the tool's result."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

pytest.importorskip("google.adk", reason="the adk extra is not installed")

from prometheus_client import CollectorRegistry

from adapter.gateway import Pending, Reply, Turn
from adapter.stores.memory import MemoryConfirmationStore
from contract.identity import Principal
from gateways.adk.gateway import AdkGateway
from gateways.adk.sessions import BoundedSessionService
from gateways.remote.adk_tool import TOOL_NAME
from gateways.remote.client import RemoteAgents
from gateways.remote.metrics import RemoteMetrics
from tests.gateways.remote.adk_agent import build_agent
from tests.gateways.remote.conftest import settings_for
from tests.gateways.remote.remotes import RemoteAgentServer

ALICE = Principal(
    kind="delegated", subject="alice", client="planner", agent="bot", role="admin", autonomy="L3"
)


@pytest.fixture
async def adk(remotes: RemoteAgentServer) -> AsyncIterator[AdkGateway]:
    remote = RemoteAgents(settings_for(remotes), RemoteMetrics(CollectorRegistry()))
    gateway = AdkGateway(
        build_agent(remote), BoundedSessionService(), MemoryConfirmationStore(), 900.0
    )
    yield gateway
    await gateway.aclose()


def turn(text: str, principal: Principal = ALICE, resume: str | None = None) -> Turn:
    return Turn("a2a-s1", principal, text, "t1", "m1", "c1", resume)


async def test_the_tool_needs_confirmation_and_runs_once_after_approval(
    adk: AdkGateway, remotes: RemoteAgentServer
) -> None:
    """Pending `call_remote_agent(agent, message)` → approved → the remote answers, once."""
    pending = await adk.run_in_session(turn("ask echo: how is checkout?"))
    assert isinstance(pending, Pending)
    assert pending.confirmation.tool == TOOL_NAME
    assert remotes.headers("/echo/a2a") == []
    action_id = pending.confirmation.action_id
    await adk.confirmations.decide(action_id, subject="alice", decision="approve")
    reply = await adk.run_in_session(turn("go ahead", resume=action_id))
    assert isinstance(reply, Reply)
    assert "<<<remote-reply\necho: how is checkout?\nremote-reply>>>" in reply.text
    assert len(remotes.headers("/echo/a2a")) == 1


async def test_a_failed_call_is_a_result_with_its_reason(adk: AdkGateway) -> None:
    """A data-part reply reaches the model as an error result with `reply_not_text`."""
    pending = await adk.run_in_session(turn("ask pictures: draw it"))
    assert isinstance(pending, Pending)
    await adk.confirmations.decide(
        pending.confirmation.action_id, subject="alice", decision="approve"
    )
    reply = await adk.run_in_session(turn("go", resume=pending.confirmation.action_id))
    assert isinstance(reply, Reply)
    assert reply.text == "failed: reply_not_text"


async def test_a_service_principal_gets_no_remote_call(
    adk: AdkGateway, remotes: RemoteAgentServer
) -> None:
    """The ADK gateway refuses a service principal's guarded call: nothing is sent."""
    service = Principal(
        kind="service", subject="svc", client="svc", agent="", role="admin", autonomy="L2"
    )
    reply = await adk.run_in_session(turn("ask echo: hi", service))
    assert isinstance(reply, Reply)
    assert reply.rejected
    assert remotes.recorder.seen == []
