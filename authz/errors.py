"""The one error tree of `authz`.

Every refusal is a `Denial`: an HTTP status, a stable machine-readable reason code and a short
description that is safe to show a caller. The same reason code is used in the denied response
body, the decision log event and the `reason` label of the metrics, so an operator can go from a
client's error to a log line to a dashboard without translation.

A description never contains the credential, a claim value chosen by the caller, or an exception
message from a library (those can echo input). Subclasses fix `status` and `reason`; callers only
choose the description, from a small reviewed set of literals.
"""

from __future__ import annotations

from typing import ClassVar


class Denial(Exception):
    """A request refused for a reason the caller may be told about."""

    status: ClassVar[int] = 403
    reason: ClassVar[str] = "forbidden"

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description


class BadRequest(Denial):
    """The request is malformed in a way no credential can fix."""

    status = 400
    reason = "bad_request"


class ReservedHeader(BadRequest):
    """The client sent a header in our reserved `x-orrery-` namespace."""

    reason = "reserved_header"


class InvalidRequest(BadRequest):
    """RFC 6750 §3.1 `invalid_request`: a token presented another way than the `Authorization`
    header (an `access_token` in the query), which §2 forbids beside it and §2.3 makes leak."""

    reason = "invalid_request"


class LoopDetected(Denial):
    """The request came from Orrery itself (it carries the hop header)."""

    status = 508
    reason = "loop_detected"


class Unauthenticated(Denial):
    """401: the caller must present (another) credential."""

    status = 401
    reason = "unauthenticated"


class MissingCredential(Unauthenticated):
    """No usable `Authorization: Bearer` header (RFC 6750 §3: no error code in the challenge)."""

    reason = "missing_credential"


class InvalidToken(Unauthenticated):
    """The bearer token was presented but is not acceptable (RFC 6750 `invalid_token`)."""

    reason = "token_invalid"


class BadSignature(InvalidToken):
    """The signature does not verify under the key published for the token's `kid`."""


class TokenExpired(InvalidToken):
    reason = "token_expired"


class TokenNotYetValid(InvalidToken):
    reason = "token_not_yet_valid"


class UnknownSigningKey(InvalidToken):
    """The token names a `kid` our key set does not hold (after the allowed refetch)."""

    reason = "unknown_key"


class Forbidden(Denial):
    """403: the caller is known but may not do this."""

    status = 403
    reason = "forbidden"


class InsufficientScope(Forbidden):
    """The token lacks the role/scope this surface needs (RFC 6750 `insufficient_scope`)."""

    reason = "insufficient_scope"


class Throttled(Denial):
    """A refusal of work authz will not do now, saying when to retry (`Retry-After`, whole
    seconds): a subject's spent budget, or a signature check past its bounds (`admission.py`)."""

    def __init__(self, description: str, *, retry_after: int):
        super().__init__(description)
        self.retry_after = retry_after


class RateLimited(Throttled):
    """429: the subject spent its budget; `retry_after` is whole seconds until it may retry."""

    status = 429
    reason = "rate_limited"

    def __init__(self, description: str, *, retry_after: int, policy: str, remaining: int = 0):
        super().__init__(description, retry_after=retry_after)
        self.policy = policy
        self.remaining = remaining


class NewTokensLimited(Throttled):
    """429: this client address has had its share of signature checks for now."""

    status = 429
    reason = "new_token_rate_limited"


class VerificationBusy(Throttled):
    """503: this process is checking as many signatures a second as it may; tokens it verified
    before are still served."""

    status = 503
    reason = "verification_busy"


class Unavailable(Denial):
    """503: authz cannot decide safely right now (no usable keys, limiter down); fail closed."""

    status = 503
    reason = "unavailable"


class KeysUnavailable(Unavailable):
    reason = "keys_unavailable"


class LimiterUnavailable(Unavailable):
    reason = "limiter_unavailable"
