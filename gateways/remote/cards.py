"""A remote agent's card: fetched once through the guarded transport, validated, verified, pinned.

The card decides where the call goes, so it is held to the rules this edge applies to its own
(`adapter/card_signing.py`): an A2A 1.0 card with a JSON-RPC interface, on the card URL's own
origin (a card cannot send the call elsewhere). A signed card is verified like ours: each
signature's protected header names `alg` (ES256/384/512, EdDSA or RS256 only), `typ` `JOSE`, a
`kid` that is the RFC 7638 thumbprint of the key and a `jku` on the card's origin; the payload is
the card without `signatures`, canonicalised with JCS, and the a2a-sdk's verifier checks it. A
card with signatures none of which verify is refused; with `_CARD_KEYS` set, a card not signed
by one of those keys is refused too. The first card that passes is pinned for the process: later
calls use it and never re-fetch, so a card changed (or a DNS answer moved) after the first call
cannot redirect delegations.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import Callable, Mapping
from typing import Any

import httpx
import jwt
from a2a.types import a2a_pb2 as pb
from a2a.utils.signing import SignatureVerificationError, create_signature_verifier
from google.protobuf.json_format import ParseDict, ParseError

from contract.jose import jwk_thumbprint
from gateways.remote.errors import RemoteAgentError
from gateways.remote.settings import RemoteAgent, RemoteSettings
from gateways.remote.transport import GuardedTransport, origin_of

ALGORITHMS = ("ES256", "ES384", "ES512", "EdDSA", "RS256")
JOSE_TYPE = "JOSE"
JSONRPC = "JSONRPC"
PROTOCOL_VERSION = "1.0"


class CardPins:
    """The pinned card of each remote agent (fetched at its first call)."""

    def __init__(self, settings: RemoteSettings) -> None:
        self._settings = settings
        self._pinned: dict[str, pb.AgentCard] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def card(self, agent: RemoteAgent) -> pb.AgentCard:
        """The agent's pinned card, fetched and checked on first use (a failure pins nothing)."""
        pinned = self._pinned.get(agent.name)
        if pinned is not None:
            return pinned
        async with self._locks.setdefault(agent.name, asyncio.Lock()):
            if agent.name not in self._pinned:
                self._pinned[agent.name] = await self._fetch(agent)
        return self._pinned[agent.name]

    async def _fetch(self, agent: RemoteAgent) -> pb.AgentCard:
        transport = GuardedTransport(agent.card_url, self._settings)
        async with httpx.AsyncClient(
            transport=transport, follow_redirects=False, timeout=self._settings.timeout
        ) as http:
            document = await _get_json(http, agent.card_url, "card")
            card = parse_card(document, agent)
            if card.signatures:
                verified = await verify_signatures(http, card, document, agent)
            else:
                verified = set()
            if agent.card_keys and not verified & agent.card_keys:
                raise RemoteAgentError(
                    "card_signature_invalid",
                    f"the card of {agent.name!r} is not signed by a key pinned for it",
                )
        return jsonrpc_only(card)


async def _get_json(http: httpx.AsyncClient, url: str, what: str) -> Any:
    try:
        response = await http.get(url, headers={"Accept": "application/json"})
        return response.json()
    except RemoteAgentError as exc:
        if exc.reason == "remote_refused":
            raise RemoteAgentError(
                "card_unavailable", f"the {what} could not be fetched: {exc.description}"
            ) from None
        raise
    except httpx.TimeoutException:
        raise RemoteAgentError("timeout", f"the {what} was not served in time") from None
    except httpx.HTTPError:
        raise RemoteAgentError("card_unavailable", f"the {what} could not be fetched") from None
    except ValueError:
        raise RemoteAgentError("card_invalid", f"the {what} is not JSON") from None


def parse_card(document: Any, agent: RemoteAgent) -> pb.AgentCard:
    """The card as the a2a-sdk reads it, every interface kept (a signature covers them all),
    once it names a JSON-RPC 1.0 interface on the card's own origin."""
    if not isinstance(document, dict):
        raise RemoteAgentError("card_invalid", "the card is not a JSON object")
    try:
        card: pb.AgentCard = ParseDict(document, pb.AgentCard(), ignore_unknown_fields=True)
    except ParseError:
        raise RemoteAgentError("card_invalid", "the card is not an A2A 1.0 agent card") from None
    interfaces = [
        interface
        for interface in card.supported_interfaces
        if interface.protocol_binding == JSONRPC and interface.protocol_version == PROTOCOL_VERSION
    ]
    if not card.name or not interfaces:
        raise RemoteAgentError(
            "card_invalid", "the card names no JSON-RPC interface of protocol version 1.0"
        )
    if any(origin_of(item.url) != origin_of(agent.card_url) for item in interfaces):
        raise RemoteAgentError(
            "insecure_url", "the card's JSON-RPC interface is on another origin than the card"
        )
    return card


def jsonrpc_only(card: pb.AgentCard) -> pb.AgentCard:
    """The card with only its JSON-RPC 1.0 interfaces, so the client cannot pick a binding we did
    not check. Applied after verification: a signature covers every interface it was made over."""
    narrowed = pb.AgentCard()
    narrowed.CopyFrom(card)
    del narrowed.supported_interfaces[:]
    narrowed.supported_interfaces.extend(
        interface
        for interface in card.supported_interfaces
        if interface.protocol_binding == JSONRPC and interface.protocol_version == PROTOCOL_VERSION
    )
    return narrowed


def _protected(signature: Mapping[str, Any]) -> dict[str, Any]:
    text = str(signature.get("protected", ""))
    try:
        header = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except ValueError:
        return {}
    return header if isinstance(header, dict) else {}


async def verify_signatures(
    http: httpx.AsyncClient, card: pb.AgentCard, document: Mapping[str, Any], agent: RemoteAgent
) -> set[str]:
    """The `kid` of every signature that verifies; `card_signature_invalid` when none does."""
    keys: dict[str, dict[str, Any]] = {}
    headers = [_protected(signature) for signature in document.get("signatures", [])]
    for jku in sorted({str(h["jku"]) for h in headers if isinstance(h.get("jku"), str)}):
        if origin_of(jku) != origin_of(agent.card_url):
            continue  # a key set elsewhere is never fetched: that signature cannot verify
        jwks = await _get_json(http, jku, "card's key set")
        for jwk in jwks.get("keys", []) if isinstance(jwks, dict) else []:
            if isinstance(jwk, dict) and jwk.get("kid") == _thumbprint(jwk):
                keys[str(jwk["kid"])] = jwk
    verified: set[str] = set()
    for header, signature in zip(headers, card.signatures, strict=True):
        kid = str(header.get("kid", ""))
        jwk = keys.get(kid)
        if jwk is None or header.get("typ") != JOSE_TYPE:
            continue
        alg = header.get("alg")
        if alg not in ALGORITHMS or jwk.get("alg", alg) != alg:
            continue
        single = pb.AgentCard()
        single.CopyFrom(card)
        del single.signatures[:]
        single.signatures.append(signature)
        try:
            create_signature_verifier(_key_provider(jwk), [alg])(single)
        except (SignatureVerificationError, jwt.PyJWTError):
            continue
        verified.add(kid)
    if not verified:
        raise RemoteAgentError(
            "card_signature_invalid", f"no signature on the card of {agent.name!r} verifies"
        )
    return verified


def _key_provider(jwk: dict[str, Any]) -> Callable[[str | None, str | None], jwt.PyJWK]:
    """The SDK verifier's key lookup, answered with the one key already chosen by `kid`."""

    def provide(kid: str | None, jku: str | None) -> jwt.PyJWK:
        return jwt.PyJWK(jwk)

    return provide


def _thumbprint(jwk: Mapping[str, Any]) -> str | None:
    try:
        return jwk_thumbprint(dict(jwk))
    except (KeyError, TypeError, ValueError):
        return None
