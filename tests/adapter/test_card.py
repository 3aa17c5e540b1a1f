"""The public agent card: a valid, minimal A2A 1.0 card with validators, no 0.3 fields."""

from __future__ import annotations

from importlib import metadata
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import ParseDict

from tests.adapter.conftest import Server, running, settings_for

LEGACY_KEYS = {
    "url",
    "preferredTransport",
    "protocolVersion",
    "security",
    "supportsAuthenticatedExtendedCard",
    "additionalInterfaces",
}


async def fetch(server: Server, **headers: str) -> httpx.Response:
    async with httpx.AsyncClient(base_url=server.base) as http:
        return await http.get("/.well-known/agent-card.json", headers=headers)


async def test_card_is_public_and_parses_strictly_as_1_0(server: Server) -> None:
    """No assertion needed; every member is an A2A 1.0 AgentCard field (strict parse)."""
    response = await fetch(server)
    assert response.status_code == 200
    card = response.json()
    ParseDict(card, pb.AgentCard())  # raises on any unknown (e.g. 0.3) member
    assert not LEGACY_KEYS & set(card)


async def test_card_has_the_required_fields(server: Server) -> None:
    """Trap 1: name, description, version, capabilities, skills (with tags), interfaces, modes."""
    card: dict[str, Any] = (await fetch(server)).json()
    for field in (
        "name",
        "description",
        "version",
        "capabilities",
        "skills",
        "supportedInterfaces",
        "defaultInputModes",
        "defaultOutputModes",
    ):
        assert card[field], field
    assert all(skill["tags"] for skill in card["skills"])
    assert card["version"] == metadata.version("orrery-a2a-edge")  # one version, the package's
    assert card["supportedInterfaces"] == [
        {"url": server.base + "/a2a", "protocolBinding": binding, "protocolVersion": "1.0"}
        for binding in ("JSONRPC", "HTTP+JSON")
    ]
    assert card["capabilities"] == {
        "streaming": True,
        "pushNotifications": False,
        "extendedAgentCard": True,
    }


async def test_card_names_the_real_bearer_scheme(server: Server) -> None:
    """securitySchemes is the bearer scheme authz enforces; the requirements are its
    alternatives: a bearer token carrying one of the roles authz recognises."""
    card = (await fetch(server)).json()
    assert list(card["securitySchemes"]) == ["bearer"]
    scheme = card["securitySchemes"]["bearer"]["httpAuthSecurityScheme"]
    assert (scheme["scheme"], scheme["bearerFormat"]) == ("Bearer", "JWT")
    assert card["securityRequirements"] == [
        {"schemes": {"bearer": {"list": [role]}}} for role in ("viewer", "operator", "admin")
    ]


async def test_the_roles_are_the_configured_ones() -> None:
    """ORRERY_A2A_ROLE_AUTONOMY (read by authz too) decides which roles the card lists."""
    env = {"ORRERY_A2A_ROLE_AUTONOMY": "reader=L1,sre=L3"}
    async with running(env) as started:
        card = (await fetch(started)).json()
    assert card["securityRequirements"] == [
        {"schemes": {"bearer": {"list": ["reader"]}}},
        {"schemes": {"bearer": {"list": ["sre"]}}},
    ]


async def test_the_card_says_where_a_token_comes_from() -> None:
    """With an OpenID Connect discovery URL and an OAuth 2.0 token URL configured, the card
    names both providers and the scopes to request, before the bearer alternatives."""
    env = {
        "ORRERY_A2A_OIDC_DISCOVERY_URL": "https://idp.example/.well-known/openid-configuration",
        "ORRERY_A2A_OAUTH_TOKEN_URL": "https://idp.example/oauth2/token",
        "ORRERY_A2A_TOKEN_SCOPES": "orrery.a2a openid",
    }
    async with running(env) as started:
        card = (await fetch(started)).json()
    ParseDict(card, pb.AgentCard())
    schemes = card["securitySchemes"]
    assert schemes["oidc"]["openIdConnectSecurityScheme"]["openIdConnectUrl"] == (
        "https://idp.example/.well-known/openid-configuration"
    )
    flow = schemes["oauth2"]["oauth2SecurityScheme"]["flows"]["clientCredentials"]
    assert flow["tokenUrl"] == "https://idp.example/oauth2/token"
    assert sorted(flow["scopes"]) == ["openid", "orrery.a2a"]
    assert card["securityRequirements"][:2] == [
        {"schemes": {"oidc": {"list": ["orrery.a2a", "openid"]}}},
        {"schemes": {"oauth2": {"list": ["orrery.a2a", "openid"]}}},
    ]


@pytest.mark.parametrize(
    ("env", "problem"),
    [
        (
            {
                "ORRERY_A2A_OIDC_DISCOVERY_URL": "https://idp.example/.well-known/openid-configuration"
            },
            "ORRERY_A2A_TOKEN_SCOPES: name the scopes a client requests",
        ),
        (
            {
                "ORRERY_A2A_OAUTH_TOKEN_URL": "http://idp.example/token",
                "ORRERY_A2A_TOKEN_SCOPES": "a",
            },
            "ORRERY_A2A_OAUTH_TOKEN_URL: must be https outside loopback",
        ),
        (
            {"ORRERY_A2A_OIDC_DISCOVERY_URL": "idp.example", "ORRERY_A2A_TOKEN_SCOPES": "a"},
            "ORRERY_A2A_OIDC_DISCOVERY_URL: expected an absolute https URL",
        ),
        ({"ORRERY_A2A_TOKEN_SCOPES": 'bad"scope'}, "ORRERY_A2A_TOKEN_SCOPES: not OAuth scope"),
        ({"ORRERY_A2A_ROLE_AUTONOMY": "admin=L9"}, "ORRERY_A2A_ROLE_AUTONOMY: expected role="),
    ],
)
def test_a_token_source_clients_cannot_use_is_refused(env: dict[str, str], problem: str) -> None:
    """Bad card settings stop start-up with the variable named."""
    from runtime.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        settings_for("http://127.0.0.1:1", env)
    assert problem in str(refused.value)


async def test_public_card_has_no_specialists(server: Server) -> None:
    """The specialists are only in the authenticated extended card."""
    card = (await fetch(server)).json()
    assert [skill["id"] for skill in card["skills"]] == ["orrery"]


async def test_card_carries_validators(server: Server) -> None:
    """ETag and Cache-Control with max-age; If-None-Match gets 304."""
    response = await fetch(server)
    etag = response.headers["ETag"]
    assert "max-age=" in response.headers["Cache-Control"]
    again = await fetch(server, **{"If-None-Match": etag})
    assert again.status_code == 304 and again.headers["ETag"] == etag
    assert (await fetch(server, **{"If-None-Match": '"other"'})).status_code == 200


async def test_extended_card_needs_an_assertion(server: Server) -> None:
    """GetExtendedAgentCard without a principal is 401."""
    response = await server.rpc(None, "GetExtendedAgentCard", {})
    assert response.status_code == 401


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("http://orrery.example.com/a2a", "must be https outside loopback"),
        ("ftp://127.0.0.1/a2a", "expected an absolute http(s) URL"),
        ("127.0.0.1:8080/a2a", "expected an absolute http(s) URL"),
        ("https:///a2a", "expected an absolute http(s) URL"),
        ("https://orrery.example.com/a2a?x=1", "must not carry a query or fragment"),
        ("https://orrery.example.com/a2a#f", "must not carry a query or fragment"),
        ("https://orrery.example.com", "its path must be /a2a, got '/'"),
        ("https://orrery.example.com/edge/a2a", "its path must be /a2a, got '/edge/a2a'"),
        ("https://user:pw@orrery.example.com/a2a", "must not carry credentials"),
    ],
)
async def test_a_public_url_clients_cannot_use_is_refused(url: str, problem: str) -> None:
    """ORRERY_A2A_PUBLIC_URL must be an http(s) URL with a host, https outside loopback, path
    /a2a, no query, fragment or credentials: otherwise start-up fails naming the variable."""
    from runtime.errors import ConfigError

    with pytest.raises(ConfigError, match="ORRERY_A2A_PUBLIC_URL") as refused:
        settings_for("http://127.0.0.1:1", {"ORRERY_A2A_PUBLIC_URL": url})
    assert problem in str(refused.value)
    assert "pw@" not in str(refused.value)


@pytest.mark.parametrize(
    "url", ["https://orrery.example.com/a2a", "https://orrery.example.com:8443/a2a/"]
)
def test_an_https_public_url_at_a2a_is_accepted(url: str) -> None:
    """Any https origin with the path /a2a (or /a2a/) is a valid public URL."""
    assert settings_for("http://127.0.0.1:1", {"ORRERY_A2A_PUBLIC_URL": url}).public_url == url
