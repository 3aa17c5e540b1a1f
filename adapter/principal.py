"""Who is calling: the verified `x-orrery-principal` assertion, and nothing else.

authz signs an assertion per request after it checked the bearer token; Envoy injects it. The
adapter verifies it again (defence in depth: the adapter may be reached without Envoy by mistake)
against *this* request's `x-request-id` and *this* route's surface. No other header says anything
about identity: a client-sent `x-orrery-*` header can only fail the signature.

The verified principal becomes the a2a-sdk `ServerCallContext.user`, and its key is the owner of
every task the SDK stores (`owner_of`).
"""

from __future__ import annotations

import time

from a2a.auth.user import User
from a2a.server.context import ServerCallContext
from multidict import CIMultiDictProxy

from adapter.errors import Unauthenticated
from contract.assertion import Assertion, AssertionKeys, verify
from contract.errors import InvalidAssertion
from contract.headers import PRINCIPAL_HEADER, REQUEST_ID_HEADER
from contract.identity import Principal, Surface


class PrincipalUser(User):
    """The SDK's view of a verified principal: `user_name` is the principal key (the owner)."""

    __slots__ = ("_key", "principal")

    def __init__(self, principal: Principal) -> None:
        self.principal = principal
        self._key = principal.key  # computed once: stores ask for the owner on every call

    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def user_name(self) -> str:
        return self._key


def _single(headers: CIMultiDictProxy[str], name: str) -> str | None:
    values = headers.getall(name, [])
    if len(values) != 1:
        return None  # absent, or duplicated: never pick one of several
    return values[0]


def verify_assertion(
    keys: AssertionKeys, headers: CIMultiDictProxy[str], surface: Surface
) -> Assertion:
    """The request's verified assertion (its principal, and when the caller's bearer token
    expires), or `Unauthenticated` (401) with a stable reason."""
    assertion = _single(headers, PRINCIPAL_HEADER)
    request_id = _single(headers, REQUEST_ID_HEADER)
    try:
        return verify(keys, assertion, request_id=request_id, surface=surface, now=int(time.time()))
    except InvalidAssertion as exc:  # the contract's reason code becomes this refusal's
        raise Unauthenticated(exc.description, reason=exc.reason) from None


def verify_request(
    keys: AssertionKeys, headers: CIMultiDictProxy[str], surface: Surface
) -> Principal:
    """Return the request's principal or raise `Unauthenticated` (401) with a stable reason."""
    return verify_assertion(keys, headers, surface).principal


def owner_of(context: ServerCallContext) -> str:
    """The task owner for a call: the principal key. Fails closed for an unverified context."""
    user = context.user
    if not isinstance(user, PrincipalUser):
        # Every context the dispatcher builds carries a PrincipalUser; anything else is a bug
        # that must not fall back to the SDK's shared anonymous owner "".
        raise PermissionError("call context has no verified principal")
    return user.user_name


def principal_of(context: ServerCallContext) -> Principal:
    """The verified principal of a call (see `owner_of`)."""
    user = context.user
    if not isinstance(user, PrincipalUser):
        raise PermissionError("call context has no verified principal")
    return user.principal
