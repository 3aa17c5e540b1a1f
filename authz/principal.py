"""Who is calling: the principal (ADR-006) and its unambiguous key.

A principal is the *whole* identity of a caller: its kind, the OAuth client it uses, the agent
acting (for a delegated call) and the subject (the delegating user, or the client itself for a
service). Everything that scopes data — task ownership, conversation ids, in-flight caps — keys on
`Principal.key`, so two agents delegated by one user never share a task, while they do share the
subject's rate limit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal
from urllib.parse import quote

Kind = Literal["delegated", "service", "human"]
Autonomy = Literal["L1", "L2", "L3"]
Surface = Literal["a2a", "approvals"]

KINDS: frozenset[str] = frozenset({"delegated", "service", "human"})
AUTONOMY_LEVELS: tuple[Autonomy, ...] = ("L1", "L2", "L3")
SURFACES: frozenset[str] = frozenset({"a2a", "approvals"})


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
