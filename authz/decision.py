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
    4. token            → 401 token_* / unknown_key, 503 keys_unavailable; just before its
                          signature is checked, 429 new_token_rate_limited / 503
                          verification_busy (`admission.py`: a token not verified yet pays)
    5. principal        → 401 token_invalid (an identity claim that names nobody, or too large to
                          sign), 403 forbidden / insufficient_scope
    6. rate limit       → 429 rate_limited, 503 limiter_unavailable
    7. allow            → the signed x-orrery-principal assertion (+ trace link)

Nothing here knows about gRPC, HTTP or protobuf: each transport (`service.py` for gRPC,
`http_transport.py` for HTTP) turns what Envoy sent into a `CheckView`, calls it through
`checking.Checker`, and encodes the result its own way.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from authz import credentials
from authz.admission import Admission, client_of
from authz.callers import Caller, CallerMemo
from authz.errors import Denial, InvalidToken
from authz.limits import Limiter
from authz.principal import RoleRules, SurfaceRules
from authz.settings import TokenRules
from authz.surfaces import surface_of
from authz.tokens import TokenVerifier
from contract import assertion
from contract.headers import TRACEPARENT_HEADER
from contract.identity import Principal, Surface
from contract.tracing import trace_link

# The records of a Check are built several times per Check and never changed after; they are
# not `frozen`, whose `__init__` (object.__setattr__ per field) costs five times a plain one.


@dataclass(slots=True)
class CheckView:
    """What the decision needs from a check: headers (lowercase names), the route's surface
    label (our Envoy sets one; Istio cannot), the request path (query string included) and, when
    the transport has one, the client's address as the proxy saw it — asked for only when a
    signature is to be checked (`admission.client_of`)."""

    headers: Mapping[str, str]
    surface: str | None
    path: str
    peer: Callable[[], str] | None = None


@dataclass(slots=True)
class Allow:
    caller: Caller
    surface: Surface
    request_id: str
    assertion: str
    trace_link: str | None

    @property
    def principal(self) -> Principal:
        return self.caller.principal


@dataclass(slots=True)
class Deny:
    """A refusal, with what was known when it happened. `surface` is the resolved surface, or
    the route's label as given when it names no surface we know (the refusal's cause)."""

    denial: Denial
    surface: str
    request_id: str | None = None
    principal: Principal | None = None


@dataclass(slots=True)
class Unsettled:
    """A Check `Decider.decide_now` could not finish without an await (a token not in the
    verified-token cache, or a limiter in Redis): what it had found, for `Decider.settle`."""

    headers: Mapping[str, str]
    surface: Surface
    request_id: str
    token: str
    now: float
    caller: Caller | None
    peer: Callable[[], str] | None = None


class Decider:
    """Holds the long-lived parts: the key store via the verifier, the callers derived so far
    (`CallerMemo`, at most `memo_size` per surface), the limiter, the signature-check budgets
    (`Admission`) and the keys to sign with.

    `decide_now` runs the checks in order as far as it can without an await — all the way for a
    cached token and the in-process limiter, the common case — so a transport can answer such a
    Check without a task or a coroutine (each costs microseconds, docs/benchmarks.md); it hands
    back an `Unsettled` Check for `settle` to finish otherwise. `decide` is the two together.
    """

    def __init__(
        self,
        rules: TokenRules,
        roles: RoleRules,
        verifier: TokenVerifier,
        limiter: Limiter,
        assertion_keys: assertion.AssertionKeys,
        *,
        admission: Admission,
        memo_size: int,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._audiences: Mapping[Surface, str] = {
            "a2a": rules.audience,
            "approvals": rules.console_audience,
        }
        self._verifier = verifier
        surfaces = SurfaceRules(rules.audience, rules.console_audience, rules.console_clients)
        self._callers = CallerMemo(roles, surfaces, assertion_keys, memo_size)
        self._limiter = limiter
        self._admission = admission
        self._clock = clock

    async def decide(self, view: CheckView) -> Allow | Deny:
        result = self.decide_now(view)
        if isinstance(result, Unsettled):
            return await self.settle(result)
        return result

    def decide_now(self, view: CheckView) -> Allow | Deny | Unsettled:
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
            verified = self._verifier.cached(token, self._audiences[surface], now)
            if verified is None:
                return Unsettled(headers, surface, rid, token, now, None, view.peer)
            caller = self._callers.caller(token, verified, surface)
            who = caller.principal
            if not self._limiter.in_process:
                return Unsettled(headers, surface, rid, token, now, caller)
            signed = _signed(caller, rid, now)
            self._limiter.take_now(caller.limit_key)
        except Denial as denial:
            return Deny(denial, surface, rid, who)
        return Allow(caller, surface, rid, signed, trace_link(headers.get(TRACEPARENT_HEADER)))

    async def settle(self, check: Unsettled) -> Allow | Deny:
        """Finish what `decide_now` began: verify the token (unless cached; its signature check
        paid from the client's and the process's budgets), then the same steps as there,
        awaiting the limiter when it is in Redis."""
        who: Principal | None = None
        try:
            caller = check.caller
            if caller is None:
                audience = self._audiences[check.surface]
                verified = await self._verifier.verify(
                    check.token, audience, check.now, admit=lambda: self._admit(check)
                )
                caller = self._callers.caller(check.token, verified, check.surface)
            who = caller.principal
            signed = _signed(caller, check.request_id, check.now)
            await self._limiter.check(caller.limit_key)
        except Denial as denial:
            return Deny(denial, check.surface, check.request_id, who)
        link = trace_link(check.headers.get(TRACEPARENT_HEADER))
        return Allow(caller, check.surface, check.request_id, signed, link)

    def _admit(self, check: Unsettled) -> None:
        self._admission.admit(client_of(check.headers, check.peer))


def _signed(caller: Caller, request_id: str, now: float) -> str:
    """The caller's assertion for this request, or 401 `token_invalid` when the token's identity
    is too large to assert: like a malformed identity claim, its claims cannot name anyone (the
    request's own part, its id, is at most 128 bytes, which the bound allows for)."""
    signed = caller.signer.sign(request_id, int(now))
    if len(signed) > assertion.MAX_ASSERTION_BYTES:
        raise InvalidToken("token identity claims are too large")
    return signed
