"""Agent cards: the public minimal A2A 1.0 card and the authenticated extended card.

The public card (`/.well-known/agent-card.json`, no principal needed) says only what a client needs
to connect: name, description, two 1.0 interfaces at `ORRERY_A2A_PUBLIC_URL` — JSON-RPC first (the
preferred one), then HTTP+JSON (its paths below that URL: `adapter/rest.py`) — how to get
in (`security`), capabilities (streaming yes, push no, extended card yes) and one generic skill
(the spec requires at least one). The specialists are in the extended card
(`GetExtendedAgentCard`), rebuilt from the gateway's live inventory on every call so it can't
drift. With `ORRERY_A2A_CARD_SIGNING_KEYS` both are signed (`adapter.card_signing`).

How to get in, so a client needs no other document: the `bearer` scheme (an RFC 9068 JWT) with
one requirement per role authz recognises (OpenAPI lets a non-OAuth scheme list role names; a
token without any of them is refused 403 `insufficient_scope`), and, when configured, the
identity provider a token comes from — an OpenID Connect discovery URL (`oidc`) or an OAuth 2.0
client-credentials token URL (`oauth2`) — with the scopes to request.

Serialized with `MessageToDict` only: the SDK's `agent_card_to_dict` merges 0.3 fields that a strict
1.0 validator rejects. Served with an `ETag` and `Cache-Control`; `If-None-Match` → 304.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from a2a.types import a2a_pb2 as pb
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from adapter.card_signing import card_etag, etag
from adapter.gateway import Specialist
from adapter.settings import CardAuth
from runtime.version import version

NAME = "Orrery"
DESCRIPTION = (
    "Orrery investigates production services and proposes changes; guarded changes run only "
    "after the delegating person approves them."
)
BEARER = "bearer"
OIDC = "oidc"
OAUTH2 = "oauth2"
INPUT_MODES = ("text/plain",)
OUTPUT_MODES = ("text/plain", "application/json")
CACHE_CONTROL = "public, max-age=300"
BINDINGS = ("JSONRPC", "HTTP+JSON")  # the card's interfaces, in the order clients prefer them


def security(
    auth: CardAuth,
) -> tuple[dict[str, pb.SecurityScheme], list[pb.SecurityRequirement]]:
    """The card's schemes and requirements (alternatives: any one suffices); see the module
    docstring. No list or map in them is ever empty (adapter/card_signing.py)."""
    scopes = list(auth.scopes)
    schemes = {
        BEARER: pb.SecurityScheme(
            http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                scheme="Bearer",
                bearer_format="JWT",
                description="An OAuth 2.0 access token (RFC 9068 JWT) for this agent's audience,"
                " carrying one of the roles its requirements list",
            )
        )
    }
    requirements = []
    if auth.oidc_discovery_url:
        schemes[OIDC] = pb.SecurityScheme(
            open_id_connect_security_scheme=pb.OpenIdConnectSecurityScheme(
                open_id_connect_url=auth.oidc_discovery_url,
                description="The identity provider that issues the bearer tokens",
            )
        )
        requirements.append(pb.SecurityRequirement(schemes={OIDC: pb.StringList(list=scopes)}))
    if auth.oauth_token_url:
        flow = pb.ClientCredentialsOAuthFlow(
            token_url=auth.oauth_token_url,
            scopes=dict.fromkeys(scopes, "requested for a token for this agent"),
        )
        schemes[OAUTH2] = pb.SecurityScheme(
            oauth2_security_scheme=pb.OAuth2SecurityScheme(
                flows=pb.OAuthFlows(client_credentials=flow),
                description="Where a client gets a bearer token (client credentials)",
            )
        )
        requirements.append(pb.SecurityRequirement(schemes={OAUTH2: pb.StringList(list=scopes)}))
    requirements += [
        pb.SecurityRequirement(schemes={BEARER: pb.StringList(list=[role])}) for role in auth.roles
    ]
    return schemes, requirements


def public_card(public_url: str, auth: CardAuth) -> pb.AgentCard:
    """The minimal 1.0 card (see the module docstring)."""
    schemes, requirements = security(auth)
    return pb.AgentCard(
        name=NAME,
        description=DESCRIPTION,
        version=version(),
        supported_interfaces=[
            pb.AgentInterface(url=public_url, protocol_binding=binding, protocol_version="1.0")
            for binding in BINDINGS
        ],
        capabilities=pb.AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=True
        ),
        security_schemes=schemes,
        security_requirements=requirements,
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=[
            pb.AgentSkill(
                id="orrery",
                name="Ask Orrery",
                description="Ask about service health or propose a change, in plain text.",
                tags=["operations"],
            )
        ],
    )


def extended_card(public: pb.AgentCard, specialists: Sequence[Specialist]) -> pb.AgentCard:
    """The public card with one skill per enabled specialist, from the live inventory."""
    card = pb.AgentCard()
    card.CopyFrom(public)
    del card.signatures[:]  # they cover the public card; the caller signs this one anew
    del card.skills[:]
    for specialist in specialists:
        if specialist.enabled:
            card.skills.append(
                pb.AgentSkill(
                    id=specialist.name,
                    name=specialist.name,
                    description=f"{specialist.description} Use for: {specialist.routing_hint}.",
                    tags=[specialist.name, "operations"],
                    examples=list(specialist.examples),
                )
            )
    if not card.skills:
        card.skills.extend(public.skills)
    return card


class JsonDocument:
    """A JSON document served as precomputed bytes with validators: the public card and the
    card keys (JWKS). `If-None-Match` compares weakly (RFC 9110 §13.1.2)."""

    def __init__(self, body: bytes, etag: str) -> None:
        self._body = body
        self._etag = etag
        self._opaque = etag.removeprefix("W/")

    @classmethod
    def card(cls, card: pb.AgentCard) -> JsonDocument:
        return cls(_compact(MessageToDict(card)), card_etag(card))

    @classmethod
    def of(cls, document: dict[str, Any]) -> JsonDocument:
        body = _compact(document)
        return cls(body, etag(body))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        headers = {"ETag": self._etag, "Cache-Control": CACHE_CONTROL}
        if_none_match = request.headers.get("If-None-Match", "")
        if self._opaque in (tag.strip().removeprefix("W/") for tag in if_none_match.split(",")):
            return web.Response(status=304, headers=headers)
        return web.Response(body=self._body, content_type="application/json", headers=headers)


def _compact(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()
