"""The decision: one request view in, Allow or Deny out — independent of how Envoy asked.

`Decider.decide` runs authz's checks (docs/contract.md#authzs-denials) in order, cheapest
refusal first:

    0. query            → 400 invalid_request (an access token in the query or a fragment: a
                        credential leak is named as one, whatever else is wrong with the path)
       route            not a canonical route path, or a label that is unknown or disagrees with
                        the path → 403 forbidden (`surfaces.py`); no x-request-id → 400 bad_request
    1. reserved header  → 400 reserved_header
    2. hop header       → 508 loop_detected
    3. Authorization    → 401 missing_credential / token_invalid
    4. token            → 401 token_* / unknown_key, 503 keys_unavailable
    5. principal        → 403 forbidden / insufficient_scope (incl. an identity too large to sign)
    6. rate limit       → 429 rate_limited, 503 limiter_unavailable
    7. allow            → the signed x-orrery-principal assertion (+ trace link)

Nothing here knows about gRPC, HTTP or protobuf: each transport (`service.py` for gRPC,
`http_transport.py` for HTTP) turns what Envoy sent into a `CheckView`, calls it through
`checking.Checker`, and encodes the result its own way.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import quote

from authz import credentials
from authz.errors import Denial, Forbidden
from authz.limits import Limiter
from authz.principal import PrincipalMemo, RoleRules, SurfaceRules
from authz.settings import TokenRules
from authz.surfaces import surface_of
from authz.tokens import TokenVerifier
from contract import assertion
from contract.headers import TRACEPARENT_HEADER
from contract.identity import Kind, Principal, Surface
from contract.tracing import trace_link


@dataclass(frozen=True, slots=True)
class CheckView:
    """What the decision needs from a check: headers (lowercase names), the route's surface
    label (our Envoy sets one; Istio cannot) and the request path (query string included)."""

    headers: Mapping[str, str]
    surface: str | None
    path: str


@dataclass(frozen=True, slots=True)
class Allow:
    principal: Principal
    surface: Surface
    request_id: str
    assertion: str
    trace_link: str | None


@dataclass(frozen=True, slots=True)
class Deny:
    """A refusal, with what was known when it happened. `surface` is the resolved surface, or
    the route's label as given when it names no surface we know (the refusal's cause)."""

    denial: Denial
    surface: str
    request_id: str | None = None
    principal: Principal | None = None


class Decider:
    """Holds the long-lived parts: the key store via the verifier, the principals derived so far
    (`PrincipalMemo`, at most `memo_size` per surface), the limiter and the keys to sign with."""

    def __init__(
        self,
        rules: TokenRules,
        roles: RoleRules,
        verifier: TokenVerifier,
        limiter: Limiter,
        assertion_keys: assertion.AssertionKeys,
        *,
        memo_size: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._audiences: Mapping[Surface, str] = {
            "a2a": rules.audience,
            "approvals": rules.console_audience,
        }
        self._verifier = verifier
        surfaces = SurfaceRules(rules.audience, rules.console_audience, rules.console_clients)
        self._principals = PrincipalMemo(roles, surfaces, memo_size)
        self._limiter = limiter
        self._assertion_keys = assertion_keys
        self._clock = clock

    async def decide(self, view: CheckView) -> Allow | Deny:
        try:
            credentials.check_query(view.path)
            surface = surface_of(view.surface, view.path)
        except Denial as denial:
            return Deny(denial, view.surface or "")
        rid: str | None = None
        who: Principal | None = None
        try:
            headers = view.headers
            rid = credentials.request_id(headers)
            credentials.check_reserved(headers)
            token = credentials.bearer_token(headers)
            now = self._clock()
            verified = await self._verifier.verify(token, self._audiences[surface], now)
            who = self._principals.principal(token, verified.claims, surface)
            signed = assertion.sign(
                self._assertion_keys,
                who,
                surface=surface,
                request_id=rid,
                token_expires_at=verified.expires_at,
                now=int(now),
            )
            if len(signed) > assertion.MAX_ASSERTION_BYTES:
                raise Forbidden("the caller's identity is too large to assert")
            await self._limiter.check(limit_key(surface, who.kind, who.subject))
        except Denial as denial:
            return Deny(denial, surface, rid, who)
        return Allow(who, surface, rid, signed, trace_link(headers.get(TRACEPARENT_HEADER)))


@functools.lru_cache(maxsize=4096)
def limit_key(surface: Surface, kind: Kind, subject: str) -> str:
    """Budgets are per surface, kind and subject: `a2a:delegated:<sub>`, `a2a:service:<sub>`,
    `approvals:human:<sub>` (docs/contract.md#the-rate-limit-subject). Two agents delegated by
    one person share the person's budget; a service whose `sub` happens to equal a person's
    does not."""
    return f"{surface}:{kind}:{quote(subject, safe='')}"
