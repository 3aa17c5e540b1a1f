"""Agent cards: the public minimal A2A 1.0 card and the authenticated extended card.

The public card (`/.well-known/agent-card.json`, no principal needed) says only what a client needs
to connect: name, description, one JSON-RPC 1.0 interface at `ORRERY_A2A_PUBLIC_URL`, the real
bearer security scheme and requirement, capabilities (streaming yes, push no, extended card yes)
and one generic skill (the spec requires at least one). The specialists are in the extended card
(`GetExtendedAgentCard`), rebuilt from the gateway's live inventory on every call so it can't
drift.

Serialized with `MessageToDict` only: the SDK's `agent_card_to_dict` merges 0.3 fields that a strict
1.0 validator rejects. Served with a strong `ETag` and `Cache-Control`; `If-None-Match` → 304.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from a2a.types import a2a_pb2 as pb
from aiohttp import web
from google.protobuf.json_format import MessageToDict

from adapter.gateway import Specialist
from runtime.version import version

NAME = "Orrery"
DESCRIPTION = (
    "Orrery investigates production services and proposes changes; guarded changes run only "
    "after the delegating person approves them."
)
SECURITY_SCHEME = "bearer"
INPUT_MODES = ("text/plain",)
OUTPUT_MODES = ("text/plain", "application/json")
CACHE_CONTROL = "public, max-age=300"


def public_card(public_url: str) -> pb.AgentCard:
    """The minimal 1.0 card (see the module docstring)."""
    return pb.AgentCard(
        name=NAME,
        description=DESCRIPTION,
        version=version(),
        supported_interfaces=[
            pb.AgentInterface(url=public_url, protocol_binding="JSONRPC", protocol_version="1.0")
        ],
        capabilities=pb.AgentCapabilities(
            streaming=True, push_notifications=False, extended_agent_card=True
        ),
        security_schemes={
            SECURITY_SCHEME: pb.SecurityScheme(
                http_auth_security_scheme=pb.HTTPAuthSecurityScheme(
                    scheme="Bearer",
                    bearer_format="JWT",
                    description="OAuth 2.0 access token (RFC 9068 JWT) for the A2A audience",
                )
            )
        },
        security_requirements=[pb.SecurityRequirement(schemes={SECURITY_SCHEME: pb.StringList()})],
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


class PublicCardEndpoint:
    """Serves the precomputed public card bytes with validators."""

    def __init__(self, card: pb.AgentCard) -> None:
        self._body = json.dumps(MessageToDict(card), sort_keys=True, separators=(",", ":")).encode()
        self._etag = '"' + hashlib.sha256(self._body).hexdigest()[:32] + '"'

    async def handle(self, request: web.Request) -> web.StreamResponse:
        headers = {"ETag": self._etag, "Cache-Control": CACHE_CONTROL}
        if_none_match = request.headers.get("If-None-Match", "")
        if self._etag in (tag.strip().removeprefix("W/") for tag in if_none_match.split(",")):
            return web.Response(status=304, headers=headers)
        return web.Response(body=self._body, content_type="application/json", headers=headers)
