"""A component that is down: Envoy fails closed, with a clean 503, and nothing slips through.

Each test gets an edge of its own (it kills one of its processes), started like the others.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.edge import Edge, message_params, running_edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


@pytest.fixture
def doomed_edge(tmp_path: Path) -> Iterator[Edge]:
    """A fresh edge a test may break."""
    with running_edge(tmp_path) as started:
        yield started


async def test_authz_down_is_a_503_and_the_adapter_sees_nothing(doomed_edge: Edge) -> None:
    """With authz gone, a valid token on /a2a and /approvals gets Envoy's 503 (JSON, Retry-After,
    a request id) and the adapter's counter stays put; the public card (no authz) is served."""
    edge = doomed_edge
    agent, human = edge.token(subject=unique("user")), edge.token("human", subject=unique("user"))
    edge.kill("authz")
    before = await edge.adapter_requests()
    send = await edge.rpc(agent, "SendMessage", message_params("how is checkout?"))
    decide = await edge.decide(human, "some-action")
    for response in (send, decide):
        assert response.status_code == 503
        assert response.headers["content-type"] == "application/json"
        assert response.json() == {
            "error": "authz_unavailable",
            "error_description": "the authorization service is unavailable; try again later",
        }
        assert response.headers["retry-after"] == "5"
        assert (await edge.access(response.headers["x-request-id"]))["status"] == 503
    assert await edge.adapter_requests() == before
    async with httpx.AsyncClient(timeout=60) as http:
        card = await http.get(f"{edge.url}/.well-known/agent-card.json")
    assert card.status_code == 200


async def test_adapter_down_is_a_clean_503_from_envoy(doomed_edge: Edge) -> None:
    """With the adapter gone, an authorized request gets Envoy's own 503: JSON with a reason and
    Retry-After, no Envoy internals."""
    edge = doomed_edge
    token = edge.token(subject=unique("user"))
    edge.kill("adapter")
    response = await edge.rpc(token, "SendMessage", message_params("how is checkout?"))
    assert response.status_code == 503
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert response.json() == {
        "error": "upstream_unavailable",
        "error_description": "the A2A service is unavailable; try again later",
    }
    assert response.headers["retry-after"] == "5"
    await edge.event("authz", "decision", decision="allow", path="/a2a")
