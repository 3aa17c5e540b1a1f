"""A client's x-orrery-* headers are refused at the edge, on every route; none reaches the adapter.

The namespace is ours (docs/contract.md#headers): a client-sent `x-orrery-*` other than the hop
header is 400 `reserved_header` from Envoy itself, before the rate limiter, authz or any route
runs — the public card included, which has no authz — in any spelling: any case, repeated, a
comma list of values. Nothing is forwarded, and the attempt is in Envoy's access log with its
request id and reason. A forged assertion that the adapter itself would accept when sent to it
directly therefore gets the caller nothing through Envoy.
"""

from __future__ import annotations

import time

import httpx
import pytest

from contract.assertion import AssertionKeys, sign
from contract.headers import PRINCIPAL_HEADER
from contract.identity import Principal
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, message_params, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

FORGED_RID = "forged-request-id"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
FORGED_LINK = "00-11111111111111111111111111111111-2222222222222222-01"
CARD_PATH = "/.well-known/agent-card.json"

# Every spelling of a client copy: (name, value) pairs sent as they are, repeats included.
SPELLINGS: dict[str, list[tuple[str, str]]] = {
    "principal": [("x-orrery-principal", "forged")],
    "principal, mixed case": [("X-Orrery-Principal", "forged")],
    "trace link, upper case": [("X-ORRERY-TRACE-LINK", FORGED_LINK)],
    "an unknown name": [("x-orrery-role", "admin")],
    "the bare prefix": [("x-orrery-", "1")],
    "repeated": [("x-orrery-principal", "a"), ("x-orrery-principal", "b")],
    "a comma list": [("x-orrery-principal", "a, b,c")],
    "beside the hop header": [("x-orrery-hop", "1"), ("x-orrery-principal", "forged")],
}


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


async def _send(edge: Edge, route: str, extra: list[tuple[str, str]]) -> tuple[httpx.Response, int]:
    """`extra` on `route` with everything else right (a valid token where one is needed); the
    response and how many requests Envoy sent to the adapter meanwhile."""
    before = await edge.envoy_counter("cluster.adapter.upstream_rq_total")
    async with httpx.AsyncClient(timeout=60) as http:
        if route == "card":
            response = await http.get(f"{edge.url}{CARD_PATH}", headers=extra)
        elif route == "a2a":
            response = await http.post(
                f"{edge.url}/a2a",
                json=jsonrpc("ListTasks", {}),
                headers=[
                    *JSONRPC_HEADERS.items(),
                    *bearer(edge.token(subject=unique("user"))).items(),
                    *extra,
                ],
            )
        else:
            token = edge.token("human", subject=unique("user"))
            response = await http.post(
                f"{edge.url}/approvals/{unique('action')}",
                json={"decision": "approve"},
                headers=[*bearer(token).items(), *extra],
            )
    forwarded = await edge.envoy_counter("cluster.adapter.upstream_rq_total") - before
    return response, forwarded


@pytest.mark.parametrize("route", ["card", "a2a", "approvals"])
@pytest.mark.parametrize("spelling", SPELLINGS.values(), ids=SPELLINGS.keys())
async def test_a_client_copy_is_refused_400_reserved_header_on_every_route(
    edge: Edge, route: str, spelling: list[tuple[str, str]]
) -> None:
    """400 reserved_header as JSON with a request id from Envoy (authz is not asked), nothing
    forwarded, the attempt in Envoy's access log."""
    response, forwarded = await _send(edge, route, spelling)
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {
        "error": "reserved_header",
        "error_description": "x-orrery- headers are reserved for the edge",
    }
    assert forwarded == 0
    request_id = response.headers["x-request-id"]
    logged = await edge.access(request_id)
    assert (logged["status"], logged["reason"]) == (400, "reserved_header")
    assert not [e for e in edge.events("authz", "decision") if e["request_id"] == request_id]


async def test_the_hop_header_alone_is_not_a_reserved_header(edge: Edge) -> None:
    """x-orrery-hop is refused by authz as a loop (508) on /a2a; the public card still answers."""
    response, forwarded = await _send(edge, "a2a", [("x-orrery-hop", "1")])
    assert (response.status_code, response.json()["error"]) == (508, "loop_detected")
    assert forwarded == 0
    card, _ = await _send(edge, "card", [("X-Orrery-Hop", "1")])
    assert card.status_code == 200


async def test_a_forged_principal_never_reaches_the_adapter(edge: Edge) -> None:
    """The victim's assertion works on the adapter directly, but through Envoy it is refused
    before anything runs: the adapter never sees it, nor a request from the caller."""
    victim, task_id = await _victims_task(edge)
    forged = _forged_assertion(edge, victim)
    get_task = jsonrpc("GetTask", {"id": task_id})
    async with httpx.AsyncClient(timeout=60) as http:
        direct = await http.post(
            f"{edge.adapter_url}/a2a", json=get_task, headers={**JSONRPC_HEADERS, **forged}
        )
    assert direct.json()["result"]["id"] == task_id  # the forgery is a valid assertion

    before = await edge.adapter_requests()
    attacker = unique("attacker")
    for token in (edge.token("service", client_id=attacker), None):
        through_envoy = await edge.rpc(token, "GetTask", {"id": task_id}, headers=forged)
        assert through_envoy.status_code == 400
        assert through_envoy.json()["error"] == "reserved_header"
        assert through_envoy.headers["x-request-id"] != FORGED_RID  # Envoy's own id
    assert await edge.adapter_requests() == before


async def test_the_adapter_links_the_traceparent_authz_moved(edge: Edge) -> None:
    """The trace link the adapter logs is the caller's traceparent, moved there by authz; a
    request without one has none."""
    subject = unique("user")
    key = f"delegated:dev-agent-client:dev-agent:{subject}"
    token = edge.token(subject=subject)
    with_parent = await edge.rpc(token, "ListTasks", {}, headers={"traceparent": TRACEPARENT})
    without = await edge.rpc(token, "GetTask", {"id": "x"})
    assert (with_parent.status_code, without.status_code) == (200, 200)
    listed = await edge.event("adapter", "a2a_request", principal=key, method="ListTasks")
    fetched = await edge.event("adapter", "a2a_request", principal=key, method="GetTask")
    assert listed["trace_link"] == TRACEPARENT
    assert fetched["trace_link"] is None
