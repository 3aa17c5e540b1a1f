"""A client's x-orrery-* headers never reach the adapter as identity or trace.

Envoy drops client copies of `x-orrery-principal` and `x-orrery-trace-link` before anything else
runs, and authz refuses any other `x-orrery-*`. The proofs come from the adapter's side: a forged
assertion that the adapter itself accepts when sent to it directly gets the caller nothing through
Envoy, and the adapter's log shows the identity and trace link authz vouched for.
"""

from __future__ import annotations

import time

import httpx
import pytest

from contract.assertion import AssertionKeys, sign
from contract.headers import PRINCIPAL_HEADER
from contract.identity import Principal
from tests.e2e.edge import JSONRPC_HEADERS, Edge, jsonrpc, message_params, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

FORGED_RID = "forged-request-id"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
FORGED_LINK = "00-11111111111111111111111111111111-2222222222222222-01"


def _forged_assertion(edge: Edge, principal: Principal) -> dict[str, str]:
    """A genuinely valid assertion for `principal` (the run's own assertion keys), bound to a
    request id the client picked."""
    now = int(time.time())
    value = sign(
        AssertionKeys.parse(edge.secrets.assertion_keys),
        principal,
        surface="a2a",
        request_id=FORGED_RID,
        token_expires_at=now + 3600,
        now=now,
    )
    return {PRINCIPAL_HEADER: value, "x-request-id": FORGED_RID}


async def _victims_task(edge: Edge) -> tuple[Principal, str]:
    subject, agent = unique("victim"), unique("agent")
    victim = Principal(
        kind="delegated",
        subject=subject,
        client="dev-agent-client",
        agent=agent,
        role="admin",
        autonomy="L3",
    )
    created = await edge.rpc(
        edge.token(subject=subject, agent=agent), "SendMessage", message_params("is search up?")
    )
    return victim, created.json()["result"]["task"]["id"]


async def test_a_forged_principal_gets_the_caller_nothing_through_envoy(edge: Edge) -> None:
    """The victim's assertion works on the adapter directly, but through Envoy the caller stays
    itself: TaskNotFound, and the adapter logged the caller's principal, not the victim's."""
    victim, task_id = await _victims_task(edge)
    forged = _forged_assertion(edge, victim)
    get_task = jsonrpc("GetTask", {"id": task_id})
    async with httpx.AsyncClient(timeout=60) as http:
        direct = await http.post(
            f"{edge.adapter_url}/a2a", json=get_task, headers={**JSONRPC_HEADERS, **forged}
        )
    assert direct.json()["result"]["id"] == task_id  # the forgery is a valid assertion

    attacker = unique("attacker")
    through_envoy = await edge.rpc(
        edge.token("service", client_id=attacker), "GetTask", {"id": task_id}, headers=forged
    )
    assert through_envoy.status_code == 200
    assert through_envoy.json()["error"]["code"] == -32001
    attacker_key = f"service:{attacker}::{attacker}"
    logged = await edge.event("adapter", "a2a_request", principal=attacker_key, method="GetTask")
    assert logged["outcome"] == "TASK_NOT_FOUND"
    assert logged["request_id"] != FORGED_RID  # Envoy's own request id, not the client's


async def test_a_forged_principal_without_a_token_is_refused_by_authz(edge: Edge) -> None:
    """Only the forged assertion: 401 missing_credential, and the adapter sees nothing."""
    victim, task_id = await _victims_task(edge)
    before = await edge.adapter_requests()
    response = await edge.rpc(
        None, "GetTask", {"id": task_id}, headers=_forged_assertion(edge, victim)
    )
    assert response.status_code == 401
    assert response.json()["error"] == "missing_credential"
    assert await edge.adapter_requests() == before


async def test_a_forged_trace_link_is_replaced_by_the_callers_traceparent(edge: Edge) -> None:
    """x-orrery-trace-link from a client is dropped; the adapter logs the traceparent authz
    moved there (a span link), and nothing when the client sent none."""
    subject = unique("user")
    key = f"delegated:dev-agent-client:dev-agent:{subject}"
    token = edge.token(subject=subject)
    with_parent = await edge.rpc(
        token,
        "ListTasks",
        {},
        headers={"x-orrery-trace-link": FORGED_LINK, "traceparent": TRACEPARENT},
    )
    without = await edge.rpc(
        token, "GetTask", {"id": "x"}, headers={"X-Orrery-Trace-Link": FORGED_LINK}
    )
    assert (with_parent.status_code, without.status_code) == (200, 200)
    listed = await edge.event("adapter", "a2a_request", principal=key, method="ListTasks")
    fetched = await edge.event("adapter", "a2a_request", principal=key, method="GetTask")
    assert listed["trace_link"] == TRACEPARENT
    assert fetched["trace_link"] is None
