"""The agent cards through Envoy: the public one anonymously, the extended one with a token."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import InvalidSignaturesError, create_signature_verifier
from google.protobuf.json_format import MessageToDict, ParseDict
from joserfc.jwk import JWKRegistry

from tests.adapter.test_card_signing import independently_verified, protected, sdk_verify
from tests.e2e.edge import Edge, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CARD_PATH = "/.well-known/agent-card.json"


async def test_the_public_card_is_a_valid_a2a_1_0_card_for_anyone(edge: Edge) -> None:
    """No token: 200, a card that parses strictly as AgentCard 1.0, naming Envoy's /a2a for
    JSON-RPC first, then for HTTP+JSON."""
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.get(f"{edge.url}{CARD_PATH}")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    card = ParseDict(response.json(), pb.AgentCard())  # unknown (0.3) keys would fail here
    assert [
        (interface.url, interface.protocol_binding, interface.protocol_version)
        for interface in card.supported_interfaces
    ] == [(f"{edge.url}/a2a", "JSONRPC", "1.0"), (f"{edge.url}/a2a", "HTTP+JSON", "1.0")]
    scheme = card.security_schemes["bearer"].http_auth_security_scheme
    assert (scheme.scheme, scheme.bearer_format) == ("Bearer", "JWT")
    assert [dict(r.schemes) for r in card.security_requirements] == [
        {"bearer": pb.StringList(list=[role])} for role in ("viewer", "operator", "admin")
    ]
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


async def test_the_cards_are_signed_and_verify_through_the_jku_envoy_serves(edge: Edge) -> None:
    """The local stack signs with its per-run key. A client that knows nothing but the edge's
    URL fetches the card, follows the signature's `jku` (routed by Envoy without a token) and
    verifies the card with independent JCS/JWS code and with the a2a-sdk's verifier; the
    extended card verifies with the same keys."""
    async with httpx.AsyncClient(timeout=60) as http:
        card = (await http.get(f"{edge.url}{CARD_PATH}")).json()
        (signature,) = card["signatures"]
        jku = protected(signature)["jku"]
        assert jku == f"{edge.url}/.well-known/jwks.json"
        keys = await http.get(jku)
    assert keys.status_code == 200
    assert keys.headers["cache-control"] == "public, max-age=300"
    jwks = keys.json()
    assert independently_verified(card, jwks) == [protected(signature)["kid"]]
    sdk_verify(card, jwks)
    async with edge.client(edge.token("service", client_id=unique("svc"))) as client:
        extended = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert independently_verified(MessageToDict(extended), jwks) == [protected(signature)["kid"]]


async def test_the_sdk_client_refuses_a_card_signed_by_another_key(edge: Edge) -> None:
    """`create_from_url(..., signature_verifier=…)` through Envoy accepts the card with the
    edge's published keys and refuses it when the client trusts another key under that kid."""
    async with httpx.AsyncClient(timeout=60) as http:
        jwks = (await http.get(f"{edge.url}/.well-known/jwks.json")).json()
        (published,) = jwks["keys"]
        other = JWKRegistry.generate_key("EC", "P-256").as_dict(private=False)
        for trusted, accepted in ((published, True), ({**other, "kid": published["kid"]}, False)):

            def key_provider(
                kid: str | None, jku: str | None, jwk: dict[str, Any] = trusted
            ) -> jwt.PyJWK:
                return jwt.PyJWK(jwk)

            factory = ClientFactory(ClientConfig(httpx_client=http))
            verifier = create_signature_verifier(key_provider, ["ES256"])
            if accepted:
                client = await factory.create_from_url(edge.url, signature_verifier=verifier)
                await client.close()
            else:
                with pytest.raises(InvalidSignaturesError):
                    await factory.create_from_url(edge.url, signature_verifier=verifier)


class PortForward:
    """A TCP forwarder on a loopback port of its own (what `kubectl port-forward` or a proxy in
    front of the edge looks like to a client); counts the connections it carried."""

    def __init__(self) -> None:
        self.target = 0
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._carry, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _carry(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            sink.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()


async def test_up_honours_a_public_url_set_by_the_user(tmp_path: Path) -> None:
    """ORRERY_A2A_PUBLIC_URL set before `up` (a port forward in front of Envoy) is what the card
    advertises — not replaced by Envoy's own URL — and the a2a-sdk client, following the card,
    reaches the agent through the forward."""
    forward = PortForward()
    port = await forward.start()
    public_url = f"http://127.0.0.1:{port}/a2a"
    try:
        edge = await asyncio.to_thread(Edge, tmp_path, {"ORRERY_A2A_PUBLIC_URL": public_url})
        try:
            forward.target = int(edge.url.rsplit(":", 1)[1])
            async with httpx.AsyncClient(timeout=60) as http:
                card = (await http.get(f"{edge.url}{CARD_PATH}")).json()
            assert card["supportedInterfaces"][0]["url"] == public_url
            async with edge.client(edge.token("service", client_id=unique("fwd"))) as client:
                events = [
                    event
                    async for event in client.send_message(
                        pb.SendMessageRequest(
                            message=pb.Message(
                                role=pb.ROLE_USER, message_id="m1", parts=[pb.Part(text="hi")]
                            )
                        )
                    )
                ]
            assert events[-1].task.status.state == pb.TASK_STATE_COMPLETED
            assert forward.connections >= 1
        finally:
            await asyncio.to_thread(edge.close)
    finally:
        await forward.close()
