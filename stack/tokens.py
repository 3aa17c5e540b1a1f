"""Dev tokens: what a real identity provider would issue to the three kinds of caller.

* `service` — a machine client on its own behalf: `sub` = `client_id`, role `operator` (L2).
* `delegated` — an agent acting for a person (RFC 8693 `act`): `sub` is the person, `act.sub` the
  agent, role `admin`, so the demo reaches guarded actions and their approvals.
* `human` — the person at the console, for the approvals surface (console audience, no `act`,
  from the console client `dev-console`, which `up` names in `ORRERY_CONSOLE_CLIENTS`).

The delegated and human defaults share the subject `dev-user`: the person who delegated is the
one who may approve (docs/contract.md#approvals).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from stack.keys import ALGORITHM, load_signing_key, public_jwk
from stack.state import StackState

TokenKind = Literal["service", "delegated", "human"]
TOKEN_KINDS: tuple[TokenKind, ...] = ("service", "delegated", "human")

DEV_SUBJECT = "dev-user"
DEV_AGENT = "dev-agent"
DEFAULT_CLIENTS: dict[str, str] = {
    "service": "dev-service",
    "delegated": "dev-agent-client",
    "human": "dev-console",
}
DEFAULT_ROLES: dict[str, tuple[str, ...]] = {
    "service": ("operator",),
    "delegated": ("admin",),
    "human": ("admin",),
}
DEFAULT_LIFETIME_SECONDS = 3600


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """Who the token is for; unset fields take the kind's dev defaults."""

    kind: TokenKind = "delegated"
    subject: str | None = None
    agent: str | None = None
    client_id: str | None = None
    roles: Sequence[str] = field(default_factory=tuple)
    lifetime_seconds: int = DEFAULT_LIFETIME_SECONDS


@dataclass(frozen=True, slots=True)
class Audiences:
    a2a: str
    console: str


def claims_for(
    request: TokenRequest, *, issuer: str, audiences: Audiences, now: int
) -> dict[str, Any]:
    client_id = request.client_id or DEFAULT_CLIENTS[request.kind]
    if request.kind == "service":
        subject = request.subject or client_id
    else:
        subject = request.subject or DEV_SUBJECT
    claims: dict[str, Any] = {
        "iss": issuer,
        "sub": subject,
        "aud": audiences.console if request.kind == "human" else audiences.a2a,
        "iat": now,
        "exp": now + request.lifetime_seconds,
        "jti": uuid.uuid4().hex,
        "client_id": client_id,
        "roles": list(request.roles or DEFAULT_ROLES[request.kind]),
    }
    if request.kind == "delegated":
        claims["act"] = {"sub": request.agent or DEV_AGENT}
    return claims


def sign(key: ec.EllipticCurvePrivateKey, claims: Mapping[str, Any]) -> str:
    """Sign `claims` as the run's issuer: ES256, the key's `kid`, RFC 9068 `typ: at+jwt`."""
    headers = {"kid": public_jwk(key)["kid"], "typ": "at+jwt"}
    return jwt.encode(dict(claims), key, algorithm=ALGORITHM, headers=headers)


def mint(
    key: ec.EllipticCurvePrivateKey,
    request: TokenRequest,
    *,
    issuer: str,
    audiences: Audiences,
    now: int,
) -> str:
    """An access token for `request`, signed with the run's issuer key."""
    return sign(key, claims_for(request, issuer=issuer, audiences=audiences, now=now))


def mint_for_stack(state: StackState, request: TokenRequest, *, now: int) -> str:
    """A token from the running stack's issuer (its key file and audiences in `state`)."""
    return mint(
        load_signing_key(Path(state.key_file)),
        request,
        issuer=state.issuer,
        audiences=Audiences(a2a=state.audience, console=state.console_audience),
        now=now,
    )
