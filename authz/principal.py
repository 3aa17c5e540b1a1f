"""How authz derives the caller's principal from a verified token's claims, and remembers it.

The principal itself — its kinds, its key, what each surface admits — is part of the wire contract
(`contract.identity`, docs/contract.md#principals); which claims make which principal is authz's
own rule, written out here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from authz.errors import Forbidden, InsufficientScope, InvalidToken
from contract.identity import AUTONOMY_LEVELS, Autonomy, Kind, Principal, Surface, is_identifier

# Prior actors nest inside `act` (RFC 8693 §4.1); real chains are short, and the bound keeps a
# hostile token from making us walk a deep structure.
MAX_ACT_DEPTH = 8
SERVICE_MAX_AUTONOMY: Autonomy = "L2"


@dataclass(frozen=True, slots=True)
class RoleRules:
    """Which claim carries roles, the autonomy each recognised role grants (in order), and
    whether `scope` stands in for an absent role claim.

    The fallback is off unless configured: at most identity providers a client *requests* its
    scopes, so reading roles from `scope` would let any client ask for `admin`.
    """

    claim: str
    autonomy: tuple[tuple[str, Autonomy], ...]
    scope_fallback: bool = False


@dataclass(frozen=True, slots=True)
class SurfaceRules:
    """What keeps the callers of the two surfaces apart: each surface's token audience, and the
    OAuth clients through which a person decides approvals (`ORRERY_CONSOLE_CLIENTS`)."""

    audience: str
    console_audience: str
    console_clients: frozenset[str]


def derive(
    claims: Mapping[str, Any], surface: Surface, rules: RoleRules, surfaces: SurfaceRules
) -> Principal:
    """Turn the claims of a verified token into the caller's principal, or raise a `Denial`:
    401 `token_invalid` when an identity claim is not an identifier — a token whose claims cannot
    name anyone is an invalid token, whichever claim it is (docs/contract.md#identifiers) — else
    403 when the caller named may not use this surface.

    * Either surface: a token whose `aud` names both audiences is refused — it is for one kind
      of caller or the other, never both (docs/contract.md#who-is-a-human).
    * A2A surface: a verified RFC 8693 `act` makes the caller *delegated* (`act.sub` is the acting
      agent, the outermost `act` the current one; `sub` the delegating user); without `act` it is a
      *service* (`sub` is the client). A malformed `act` is refused, never read as "no `act`",
      which would quietly turn a delegated caller into a service. `may_act` is only a permission
      to delegate and never makes a principal delegated.
    * Approvals surface: the caller is the *human* who delegated, only if the token was issued to
      a console client for a person (`_check_human`).
    """
    subject = claims["sub"]  # the token verifier guarantees an identifier
    # Both are checked: an unused azp beside client_id must be an identifier all the same.
    client_id, azp = _optional_str(claims, "client_id"), _optional_str(claims, "azp")
    client = client_id or azp
    aud = claims["aud"]  # the verifier guarantees a string or a list of strings
    audiences = {aud} if isinstance(aud, str) else set(aud)
    if surfaces.audience in audiences and surfaces.console_audience in audiences:
        raise Forbidden("the token is for both the A2A and the console audience")
    kind: Kind
    agent = ""
    if surface == "approvals":
        _check_human(claims, subject, (client_id, azp), surfaces.console_clients)
        kind = "human"
    elif "act" in claims:
        agent = _acting_agent(claims["act"])
        kind = "delegated"
    else:
        kind = "service"
        client = client or subject
    role, autonomy = _role(claims, rules)
    if kind == "service" and _level(autonomy) > _level(SERVICE_MAX_AUTONOMY):
        autonomy = SERVICE_MAX_AUTONOMY
    return Principal(
        kind=kind, subject=subject, client=client, agent=agent, role=role, autonomy=autonomy
    )


def _check_human(
    claims: Mapping[str, Any],
    subject: str,
    clients: tuple[str, str],
    console_clients: frozenset[str],
) -> None:
    """A console-audience token is a person's only when a console client got it for a person.

    The audience alone is not enough: an identity provider may issue the console audience to
    an agent's client (client credentials, token exchange, impersonation), and that agent could
    then approve its own guarded action. So: no `act` (an agent never decides); every client the
    token names (`client_id`, `azp`; at least one) is a configured console client; and `sub` is
    not a client's own id (a client-credentials token names the client as its subject).
    """
    if "act" in claims:
        raise Forbidden("a delegated token cannot act on the approvals surface")
    named = [client for client in clients if client]
    if not named or not console_clients.issuperset(named):
        raise Forbidden("the token was not issued to a console client")
    if subject in named or subject in console_clients:
        raise Forbidden("a client's own token is not a person's")


def _optional_str(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None or value == "":
        return ""
    if not is_identifier(value):
        raise InvalidToken(f"token {name} is malformed")
    return value


def _acting_agent(act: Any) -> str:
    """The current actor's `sub`; every nested (prior) actor must be well-formed too."""
    actors: list[str] = []
    current = act
    while isinstance(current, dict) and len(actors) < MAX_ACT_DEPTH:
        sub = current.get("sub")
        if not is_identifier(sub):
            break
        actors.append(sub)
        if "act" not in current:
            return actors[0]
        current = current["act"]
    raise InvalidToken("token act is malformed")


def _role(claims: Mapping[str, Any], rules: RoleRules) -> tuple[str, Autonomy]:
    """The recognised role with the highest autonomy (the first listed wins a tie)."""
    name = "scope" if rules.scope_fallback and rules.claim not in claims else rules.claim
    raw = claims.get(name)
    if raw is None:
        granted: set[str] = set()
    elif isinstance(raw, str):
        granted = set(raw.split())
    elif isinstance(raw, list) and all(isinstance(item, str) for item in raw):
        granted = set(raw)
    else:
        raise Forbidden("role claim is malformed")
    best: tuple[str, Autonomy] | None = None
    for role, autonomy in rules.autonomy:
        if role in granted and (best is None or _level(autonomy) > _level(best[1])):
            best = (role, autonomy)
    if best is None:
        raise InsufficientScope("the token grants no recognised role")
    return best


def _level(autonomy: Autonomy) -> int:
    return AUTONOMY_LEVELS.index(autonomy)
