"""An access token in the query string is refused at the edge and never reaches a log.

RFC 6750 §2: a client must not present a token by more than one method, and §2.3's query method
leaks tokens into logs, histories and referrers. So any request whose query names `access_token`
— in any case, percent-encoded, repeated, after `;` — is 400 `invalid_request` with the RFC 6750
§3.1 challenge from Envoy, on every route, even beside a valid `Authorization` header. Nothing is
forwarded, and neither Envoy's access log nor authz's decisions nor the adapter's events hold the
token (docs/contract.md#bearer-tokens).
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, unique
from tests.query_credentials import ACCEPTED, FRAGMENTS, REFUSED, SECRET

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CHALLENGE = (
    'Bearer realm="orrery-a2a", error="invalid_request", '
    'error_description="an access token is accepted only in the Authorization header"'
)
ROUTES = {
    "card": ("GET", "/.well-known/agent-card.json"),
    "a2a": ("POST", "/a2a"),
    "approvals": ("POST", "/approvals/some-action"),
}


async def _send(edge: Edge, route: str, query: str) -> httpx.Response:
    """`route` with `?query` and a valid bearer header of the route's kind."""
    method, path = ROUTES[route]
    token = edge.token("human" if route == "approvals" else "delegated", subject=unique("user"))
    body = jsonrpc("ListTasks", {}) if route == "a2a" else {"decision": "approve"}
    return await _send_raw(
        edge,
        f"{path}?{query}",
        method=method,
        json=None if method == "GET" else body,
        headers={**JSONRPC_HEADERS, **bearer(token)},
    )


@pytest.mark.parametrize("route", ROUTES)
@pytest.mark.parametrize("query", REFUSED.values(), ids=REFUSED.keys())
async def test_a_token_in_the_query_is_refused_400_invalid_request(
    edge: Edge, route: str, query: str
) -> None:
    """400 invalid_request, the RFC 6750 challenge, a request id; authz is not asked and nothing
    is forwarded."""
    before = await edge.envoy_counter("cluster.adapter.upstream_rq_total")
    response = await _send(edge, route, query)
    assert response.status_code == 400, response.text
    assert response.json() == {
        "error": "invalid_request",
        "error_description": "an access token is accepted only in the Authorization header",
    }
    assert response.headers["www-authenticate"] == CHALLENGE
    assert response.headers["cache-control"] == "no-store"
    assert await edge.envoy_counter("cluster.adapter.upstream_rq_total") == before
    request_id = response.headers["x-request-id"]
    logged = await edge.access(request_id)
    assert (logged["status"], logged["reason"]) == (400, "invalid_request")
    assert not [e for e in edge.events("authz", "decision") if e["request_id"] == request_id]


@pytest.mark.parametrize("query", ACCEPTED.values(), ids=ACCEPTED.keys())
async def test_a_query_without_a_token_is_served(edge: Edge, query: str) -> None:
    """Look-alikes (the name as a value, longer names, double escapes) pass the rule."""
    response = await _send(edge, "a2a", query)
    assert response.status_code == 200, response.text
    assert "result" in response.json()


@pytest.mark.parametrize("suffix", FRAGMENTS.values(), ids=FRAGMENTS.keys())
async def test_a_fragment_is_refused_and_not_logged(edge: Edge, suffix: str) -> None:
    """A request target with a fragment is a 400 JSON answer from Envoy (no route runs), and the
    access log never records what follows the `#`."""
    before = await edge.envoy_counter("cluster.adapter.upstream_rq_total")
    response = await _send_raw(edge, f"/a2a{suffix}", json=jsonrpc("ListTasks", {}))
    assert response.status_code == 400
    assert response.json()["error"] == "bad_path"
    assert await edge.envoy_counter("cluster.adapter.upstream_rq_total") == before
    logged = await edge.access(response.headers["x-request-id"])
    assert logged["path"] in ("/a2a", "-")  # never what follows the `#`
    assert SECRET not in json.dumps(logged)


async def _send_raw(
    edge: Edge,
    target: str,
    *,
    method: str = "POST",
    json: object = None,
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """One request with its target byte for byte as given: an HTTP client would re-encode the
    query and drop a fragment."""
    async with httpx.AsyncClient(timeout=60) as http:
        request = http.build_request(method, edge.url, json=json, headers=headers)
        request.extensions["target"] = target.encode()
        return await http.send(request)


async def test_no_log_line_holds_a_token_from_a_query(edge: Edge) -> None:
    """After every refused spelling on every route, and the fragments, no line of Envoy's,
    authz's or the adapter's log contains the token."""
    responses = [await _send(edge, route, query) for route in ROUTES for query in REFUSED.values()]
    responses += [
        await _send_raw(edge, f"/a2a{suffix}", json=jsonrpc("ListTasks", {}))
        for suffix in FRAGMENTS.values()
    ]
    for response in responses:
        await edge.access(response.headers["x-request-id"])  # Envoy has written every line
    for component in ("envoy", "authz", "adapter"):
        text = edge.log(component).read_text(encoding="utf-8")
        assert SECRET not in text, component
