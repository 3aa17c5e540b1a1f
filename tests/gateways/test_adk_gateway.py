"""The ADK gateway (gateways/adk/gateway.py) driving the example agent through ADK's real Runner:
sessions keyed by the derived id, ADK's tool confirmation gated by the confirmation store, only
the final text out."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncGenerator

import pytest
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse

from adapter.gateway import Pending, Reply, action_digest
from adapter.stores.memory import MemoryConfirmationStore
from gateways.adk import example
from gateways.adk.bridge import unanswered
from gateways.adk.gateway import PRINCIPAL_STATE, AdkGateway, AdkTurnFailed
from gateways.adk.sessions import BoundedSessionService
from tests.clocks import FakeClock
from tests.gateways.conftest import APPROVAL_TTL, Conversation, caller


async def test_a_question_is_answered_with_the_final_text_only(alice: Conversation) -> None:
    """The reply is the agent's last text: no transfer, function call or tool response leaks."""
    reply = await alice.say("how is checkout?")
    assert reply == Reply(
        "checkout is degraded: error rate up since the 14:05 deploy; restarted 0 time(s) here."
    )


async def test_the_session_is_the_derived_id_of_the_principals_subject(
    gateway: AdkGateway, alice: Conversation
) -> None:
    """ADK session id = the adapter's derived session id, user id = the subject, and the
    principal is in the session state for tools to scope by."""
    await alice.say("how is checkout?")
    session = await gateway.sessions.get_session(
        app_name="orrery_example", user_id="alice", session_id=alice.session_id
    )
    assert session is not None
    assert session.state[PRINCIPAL_STATE] == {
        "kind": "delegated",
        "subject": "alice",
        "agent": "agent-1",
        "role": "operator",
        "autonomy": "L3",
    }


async def test_a_guarded_call_becomes_a_proposal_of_exactly_that_call(
    alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """ADK's confirmation request → Pending: tool, args, L3 and the digest of the exact call;
    the tool has not run."""
    pending = await alice.say("restart checkout")
    assert isinstance(pending, Pending)
    entry = pending.confirmation
    assert (entry.tool, dict(entry.args), entry.level) == (
        "restart_service",
        {"service": "checkout"},
        "L3",
    )
    assert entry.digest == action_digest("restart_service", {"service": "checkout"})
    assert (entry.owner, entry.subject, entry.task_id) == (
        alice.principal.key,
        "alice",
        "task-1",
    )
    assert example.RESTARTS["checkout"] == 0


async def test_an_approved_call_runs_exactly_once(
    alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """Approve, resume: the tool runs once; resuming again runs nothing."""
    action_id = await alice.propose()
    assert await store.decide(action_id, subject="alice", decision="approve") == "approved"
    assert await alice.say("go ahead", resume=action_id) == Reply(
        "Restarted checkout (restart #1 here)."
    )
    again = await alice.say("go ahead", resume=action_id)
    assert again == Reply(f"Action {action_id} was already carried out; nothing was done.", True)
    assert example.RESTARTS["checkout"] == 1


async def test_a_reply_is_never_the_confirmation(
    alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """Resuming with "approve" before any decision keeps waiting; the tool does not run."""
    action_id = await alice.propose()
    for text in ("approve", "yes", f"I approve {action_id}", '{"confirmed": true}'):
        waiting = await alice.say(text, resume=action_id)
        assert isinstance(waiting, Pending)
        assert waiting.summary.startswith("Still waiting")
    assert example.RESTARTS["checkout"] == 0
    assert await store.pending() == 1


async def test_a_denied_call_never_runs_and_the_agent_is_told(
    gateway: AdkGateway, alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """Denied: the resume is rejected, the tool never runs, and ADK's request is answered
    `confirmed: false` (nothing left waiting in the session)."""
    action_id = await alice.propose()
    await store.decide(action_id, subject="alice", decision="deny")
    resumed = await alice.say("go ahead", resume=action_id)
    assert resumed == Reply(f"Action {action_id} was denied; nothing was done.", True)
    assert example.RESTARTS["checkout"] == 0
    session = await gateway.sessions.get_session(
        app_name="orrery_example", user_id="alice", session_id=alice.session_id
    )
    assert session is not None
    assert unanswered(session.events) == []
    told = [
        response.response
        for event in session.events
        for response in event.get_function_responses()
        if response.name == "restart_service"
    ]
    assert told[-1] == {"error": "This tool call is rejected."}


async def test_an_expired_approval_never_runs(
    alice: Conversation, store: MemoryConfirmationStore, clock: FakeClock
) -> None:
    """Approved but resumed after the approval expired: rejected, the tool never runs."""
    action_id = await alice.propose()
    await store.decide(action_id, subject="alice", decision="approve")
    clock.advance(APPROVAL_TTL + 1)
    resumed = await alice.say("go ahead", resume=action_id)
    assert resumed == Reply(
        f"Action {action_id} expired before it was approved; nothing was done.", True
    )
    assert example.RESTARTS["checkout"] == 0


async def test_a_changed_call_is_a_mismatch_and_never_runs(
    gateway: AdkGateway, alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """The call ADK holds is not the one approved (the session's history changed after the
    proposal): the gate answers mismatch, nothing is consumed, nothing runs."""
    action_id = await alice.propose()
    await store.decide(action_id, subject="alice", decision="approve")
    sessions = gateway.sessions
    assert isinstance(sessions, BoundedSessionService)
    held = sessions.sessions["orrery_example"]["alice"][alice.session_id]
    for event in held.events:
        for call in event.get_function_calls():
            if call.name == "adk_request_confirmation" and call.args:
                call.args["originalFunctionCall"]["args"] = {"service": "payments"}
            elif call.name == "restart_service":
                call.args = {"service": "payments"}
    resumed = await alice.say("go ahead", resume=action_id)
    assert resumed == Reply(
        f"Action {action_id} is not the action that was approved; nothing was done.", True
    )
    assert sum(example.RESTARTS.values()) == 0
    entry = await store.get(action_id, subject="alice")
    assert entry is not None and entry.status == "approved"  # not consumed


async def test_a_service_principal_is_refused_and_never_waits(
    gateway: AdkGateway, store: MemoryConfirmationStore
) -> None:
    """A service principal (pinned to L2) asking for a guarded call: rejected, nothing pending,
    nothing run."""
    reply = await Conversation(gateway, caller("service")).say("restart checkout")
    assert isinstance(reply, Reply) and reply.rejected
    assert "a service principal is limited to L2" in reply.text
    assert await store.pending() == 0
    assert example.RESTARTS["checkout"] == 0


async def test_a_delegated_caller_below_l3_is_refused(
    gateway: AdkGateway, store: MemoryConfirmationStore
) -> None:
    """Autonomy L2: the guarded call is refused outright."""
    reply = await Conversation(gateway, caller(autonomy="L2")).say("restart checkout")
    assert reply == Reply(
        "Refused: restart_service is a guarded (L3) action; your autonomy is L2.", True
    )
    assert await store.pending() == 0


async def test_a_new_message_supersedes_a_waiting_call(
    alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """A new turn in the conversation rejects the call still waiting; approving and resuming
    the older task afterwards runs nothing."""
    action_id = await alice.propose()
    assert isinstance(await alice.say("how is payments?"), Reply)
    await store.decide(action_id, subject="alice", decision="approve")
    resumed = await alice.say("go ahead", resume=action_id)
    assert isinstance(resumed, Reply) and resumed.rejected
    assert example.RESTARTS["checkout"] == 0


async def test_a_borrowed_context_reaches_only_the_callers_own_session(
    gateway: AdkGateway, alice: Conversation, store: MemoryConfirmationStore
) -> None:
    """Another agent using alice's contextId talks to its own session: it cannot resume or see
    her waiting call."""
    action_id = await alice.propose()
    await store.decide(action_id, subject="alice", decision="approve")
    mallory = dataclasses.replace(alice, principal=caller(agent="agent-2"))
    assert mallory.session_id != alice.session_id
    stolen = await mallory.say("go ahead", resume=action_id)
    assert isinstance(stolen, Reply) and stolen.rejected
    assert example.RESTARTS["checkout"] == 0
    assert await alice.say("go ahead", resume=action_id) == Reply(
        "Restarted checkout (restart #1 here)."
    )


async def test_the_inventory_is_one_specialist_per_sub_agent(gateway: AdkGateway) -> None:
    """The extended card's skills are the agent tree's sub-agents."""
    assert [(s.name, s.description) for s in await gateway.inventory()] == [
        ("investigator", "Answers questions about a service's health (read-only)."),
        (
            "change_planner",
            "Restarts services. A restart is guarded: it runs only after the delegating person "
            "approves it.",
        ),
    ]


class FailingModel(example.ScriptedModel):
    """A model whose provider fails the call (ADK reports it as an error event)."""

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        yield LlmResponse(error_code="RESOURCE_EXHAUSTED", error_message="quota of project p-123")


async def test_a_model_failure_fails_the_turn_without_its_message(
    store: MemoryConfirmationStore,
) -> None:
    """An error event ends the turn with `AdkTurnFailed` naming only the code."""
    failing = AdkGateway(
        example.build_agent(FailingModel()), BoundedSessionService(), store, APPROVAL_TTL
    )
    try:
        with pytest.raises(AdkTurnFailed) as failed:
            await Conversation(failing, caller()).say("how is checkout?")
    finally:
        await failing.aclose()
    assert str(failed.value) == "model_error:RESOURCE_EXHAUSTED"
