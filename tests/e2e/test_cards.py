"""The agent cards through Envoy: the public one anonymously, the extended one with a token."""

from __future__ import annotations

import httpx
import pytest
from a2a.client import A2ACardResolver
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseDict

from tests.e2e.edge import Edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CARD_PATH = "/.well-known/agent-card.json"


async def test_the_public_card_is_a_valid_a2a_1_0_card_for_anyone(edge: Edge) -> None:
    """No token: 200, a card that parses strictly as AgentCard 1.0, naming Envoy's /a2a."""
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.get(f"{edge.url}{CARD_PATH}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    card = ParseDict(response.json(), pb.AgentCard())  # unknown (0.3) keys would fail here
    (interface,) = card.supported_interfaces
    assert (interface.url, interface.protocol_binding, interface.protocol_version) == (
        f"{edge.url}/a2a",
        "JSONRPC",
        "1.0",
    )
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert (scheme.scheme, scheme.bearer_format) == ("Bearer", "JWT")
    assert [dict(r.schemes) for r in card.security_requirements] == [{"bearer": pb.StringList()}]
    capabilities = card.capabilities
    assert capabilities.streaming and capabilities.extended_agent_card
    assert not capabilities.push_notifications


async def test_the_sdk_resolves_the_public_card_through_envoy(edge: Edge) -> None:
    """The a2a-sdk's own card resolver reads it from the well-known path."""
    async with httpx.AsyncClient(timeout=60) as http:
        card = await A2ACardResolver(http, edge.url).get_agent_card()
    assert card.supported_interfaces[0].url == f"{edge.url}/a2a"


async def test_the_public_card_is_cacheable_and_revalidates_with_304(edge: Edge) -> None:
    """ETag and Cache-Control on 200; If-None-Match with that ETag gets 304 and no body."""
    async with httpx.AsyncClient(timeout=60) as http:
        first = await http.get(f"{edge.url}{CARD_PATH}")
        again = await http.get(
            f"{edge.url}{CARD_PATH}", headers={"If-None-Match": first.headers["etag"]}
        )
    assert first.headers["cache-control"] == "public, max-age=300"
    assert again.status_code == 304
    assert again.content == b""
    assert again.headers["etag"] == first.headers["etag"]


async def test_the_extended_card_needs_a_token(edge: Edge) -> None:
    """GetExtendedAgentCard without a token is authz's 401; nothing reaches the adapter."""
    before = await edge.adapter_requests()
    response = await edge.rpc(None, "GetExtendedAgentCard", {})
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="orrery-a2a"'
    assert await edge.adapter_requests() == before


async def test_the_extended_card_lists_each_specialist_for_a_caller(edge: Edge) -> None:
    """With a token, the a2a-sdk client gets one skill per enabled specialist."""
    async with edge.client(edge.token("service", client_id=unique("svc"))) as client:
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert [skill.id for skill in card.skills] == ["investigator", "change-planner"]
    assert card.supported_interfaces[0].url == f"{edge.url}/a2a"
