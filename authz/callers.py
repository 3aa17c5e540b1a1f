"""What authz remembers about a caller whose token it has verified: one entry per token and surface.

A caller sends the same bearer token on every request, and everything a cached Check needs
besides the request's own id and time follows from that token and the surface: the principal,
its rate-limit key, the fixed part of every assertion it will be given (`assertion.Signer`) and
its key as the decision log writes it. Deriving those once per token instead of once per Check
is most of what makes a cached Check cheap (docs/benchmarks.md, "Where a cached Check's time
goes").

Sound only behind the verifier: a token's claims are fixed by its bytes and the role rules and
keys by the process, and the decider asks only after the verifier accepted the token for this
Check, so an expired or revoked token never reaches its entry. Bounded like the token cache: at
most `size` tokens per surface, oldest first out; size 0 remembers nothing. A refusal is never
remembered (deriving raises it again next time).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring
from urllib.parse import quote

from authz.principal import RoleRules, SurfaceRules, derive
from authz.tokens import VerifiedToken
from contract import assertion
from contract.identity import Kind, Principal, Surface


@dataclass(frozen=True, slots=True)
class Caller:
    """A verified token's principal on one surface, and what each of its Checks reuses."""

    principal: Principal
    limit_key: str
    signer: assertion.Signer
    logged_key: str  # the principal's key as a JSON string, for the decision log line


class CallerMemo:
    """Callers already derived, by surface and bearer token."""

    def __init__(
        self,
        rules: RoleRules,
        surfaces: SurfaceRules,
        keys: assertion.AssertionKeys,
        size: int,
    ) -> None:
        self._rules = rules
        self._surfaces = surfaces
        self._keys = keys
        self._size = size
        self._entries: Mapping[Surface, dict[str, Caller]] = {"a2a": {}, "approvals": {}}

    def caller(self, token: str, verified: VerifiedToken, surface: Surface) -> Caller:
        """The caller behind the verified `token` on `surface`, or a 403 `Denial`."""
        entries = self._entries[surface]
        found = entries.get(token)
        if found is None:
            found = self._derive(verified, surface)
            if self._size > 0:
                if len(entries) >= self._size:
                    del entries[next(iter(entries))]
                entries[token] = found
        return found

    def _derive(self, verified: VerifiedToken, surface: Surface) -> Caller:
        who = derive(verified.claims, surface, self._rules, self._surfaces)
        return Caller(
            principal=who,
            limit_key=limit_key(surface, who.kind, who.subject),
            signer=assertion.Signer(
                self._keys, who, surface=surface, token_expires_at=verified.expires_at
            ),
            logged_key=encode_basestring(who.key),
        )

    def __len__(self) -> int:
        """How many callers are remembered, over both surfaces."""
        return sum(len(entries) for entries in self._entries.values())


@functools.lru_cache(maxsize=4096)
def limit_key(surface: Surface, kind: Kind, subject: str) -> str:
    """Budgets are per surface, kind and subject: `a2a:delegated:<sub>`, `a2a:service:<sub>`,
    `approvals:human:<sub>` (docs/contract.md#the-rate-limit-subject). Two agents delegated by
    one person share the person's budget; a service whose `sub` happens to equal a person's
    does not."""
    return f"{surface}:{kind}:{quote(subject, safe='')}"
