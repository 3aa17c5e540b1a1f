"""Who is calling: the principal, its unambiguous key, and how authz derives it.

The contract is docs/contract.md#principals.

A principal is the *whole* identity of a caller: its kind, the OAuth client it uses, the agent
acting (for a delegated call) and the subject (the delegating user, or the client itself for a
service). Everything that scopes data — task ownership, conversation ids, in-flight caps — keys on
`Principal.key`, so two agents delegated by one user never share a task, while they do share the
subject's rate limit.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeGuard
from urllib.parse import quote

from authz.errors import Forbidden, InsufficientScope

Kind = Literal["delegated", "service", "human"]
Autonomy = Literal["L1", "L2", "L3"]
Surface = Literal["a2a", "approvals"]

KINDS: frozenset[str] = frozenset({"delegated", "service", "human"})
AUTONOMY_LEVELS: tuple[Autonomy, ...] = ("L1", "L2", "L3")
SURFACES: frozenset[str] = frozenset({"a2a", "approvals"})


# C0 controls, DEL and C1 controls: never part of a real identifier, and NUL cannot even be stored
# in PostgreSQL text, where the adapter keeps task owners and approval subjects.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def is_identifier(value: object) -> TypeGuard[str]:
    """A non-empty string without control characters: what an identity claim must be."""
    return isinstance(value, str) and bool(value) and _CONTROL.search(value) is None


@functools.lru_cache(maxsize=4096)  # hot on both sides (every Check, every adapter request)
def principal_key(kind: str, client: str, agent: str, subject: str) -> str:
    """Join the four identity components so that no two distinct tuples give one key.

    A plain `kind:client:agent:subject` join is ambiguous (client `cx:` + subject `y` vs client
    `cx` + subject `:y`). Percent-encoding every byte outside RFC 3986 unreserved — `:` and `%`
    included — makes `:` occur only as the separator, so the join is injective.
    """
    return ":".join(quote(part, safe="") for part in (kind, client, agent, subject))


@dataclass(frozen=True, slots=True)
class Principal:
    """A verified caller. `agent` is the acting agent (`act.sub`) or "" when none."""

    kind: Kind
    subject: str
    client: str
    agent: str
    role: str
    autonomy: Autonomy

    @property
    def key(self) -> str:
        return principal_key(self.kind, self.client, self.agent, self.subject)


# --- Deriving a principal from verified token claims (authz only) --------------------------------

# Prior actors nest inside `act` (RFC 8693 §4.1); real chains are short, and the bound keeps a
# hostile token from making us walk a deep structure.
MAX_ACT_DEPTH = 8
SERVICE_MAX_AUTONOMY: Autonomy = "L2"


@dataclass(frozen=True, slots=True)
class RoleRules:
    """Which claim carries roles, and the autonomy each recognised role grants (in order)."""

    claim: str
    autonomy: tuple[tuple[str, Autonomy], ...]


def derive(claims: Mapping[str, Any], surface: Surface, rules: RoleRules) -> Principal:
    """Turn the claims of a verified token into the caller's principal, or raise a 403 `Denial`.

    * A2A surface: a verified RFC 8693 `act` makes the caller *delegated* (`act.sub` is the acting
      agent, the outermost `act` the current one; `sub` the delegating user); without `act` it is a
      *service* (`sub` is the client). A malformed `act` is refused, never read as "no `act`",
      which would quietly turn a delegated caller into a service. `may_act` is only a permission
      to delegate and never makes a principal delegated.
    * Approvals surface: the token (console audience) must not carry `act`; the caller is the
      *human* who delegated.
    """
    subject = claims["sub"]  # the token verifier guarantees a non-empty string
    client = _optional_str(claims, "client_id") or _optional_str(claims, "azp")
    kind: Kind
    agent = ""
    if surface == "approvals":
        if "act" in claims:
            raise Forbidden("a delegated token cannot act on the approvals surface")
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


def _optional_str(claims: Mapping[str, Any], name: str) -> str:
    value = claims.get(name)
    if value is None or value == "":
        return ""
    if not is_identifier(value):
        raise Forbidden(f"{name} claim is malformed")
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
    raise Forbidden("act claim is malformed")


def _role(claims: Mapping[str, Any], rules: RoleRules) -> tuple[str, Autonomy]:
    """The recognised role with the highest autonomy (the first listed wins a tie)."""
    name = rules.claim if rules.claim in claims else "scope"
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
