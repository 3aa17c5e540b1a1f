"""The caller memo: one entry per verified token and surface, derived once, bounded, no refusals."""

from __future__ import annotations

from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519

from authz.callers import CallerMemo
from authz.errors import Forbidden, InsufficientScope
from authz.jwks import VerificationKey
from authz.principal import RoleRules, SurfaceRules
from authz.tokens import VerifiedToken
from contract import assertion
from contract.assertion import AssertionKeys, new_keys_spec
from tests.authz.support import AUDIENCE, CONSOLE

RULES = RoleRules(claim="roles", autonomy=(("viewer", "L1"), ("operator", "L2"), ("admin", "L3")))
SURFACES = SurfaceRules(AUDIENCE, CONSOLE, frozenset({"console"}))
KEYS = AssertionKeys.parse(new_keys_spec("k1"))
SIGNING_KEY = VerificationKey(
    "kid", "Ed25519", None, ed25519.Ed25519PrivateKey.generate().public_key(), ()
)
EXPIRES_AT = 2_000_000_000


def verified(**overrides: Any) -> VerifiedToken:
    claims: dict[str, Any] = {"sub": "alice", "aud": AUDIENCE, "roles": ["admin"], **overrides}
    return VerifiedToken(claims, SIGNING_KEY, frozenset({AUDIENCE}), EXPIRES_AT, None, None)


# A token the memo must answer from memory: deriving it again would be refused.
UNDERIVABLE = verified(roles=["nobody"])


def memo(size: int) -> CallerMemo:
    return CallerMemo(RULES, SURFACES, KEYS, size)


def test_the_memo_answers_a_token_it_has_derived_from_memory() -> None:
    """A remembered token's caller comes back without deriving its claims again."""
    callers = memo(4)
    first = callers.caller("t1", verified(act={"sub": "agent"}), "a2a")
    assert callers.caller("t1", UNDERIVABLE, "a2a") is first


def test_a_caller_carries_what_each_check_reuses() -> None:
    """The principal, its rate-limit key, its logged key and a signer for its assertions."""
    caller = memo(4).caller("t1", verified(act={"sub": "agent"}), "a2a")
    assert caller.principal.key == "delegated::agent:alice"
    assert caller.limit_key == "a2a:delegated:alice"
    assert caller.logged_key == '"delegated::agent:alice"'
    signed = caller.signer.sign("req-1", 1_900_000_000)
    checked = assertion.verify(KEYS, signed, request_id="req-1", surface="a2a", now=1_900_000_000)
    assert (checked.principal, checked.token_expires_at) == (caller.principal, EXPIRES_AT)


def test_the_memo_keeps_each_surface_apart() -> None:
    """A token remembered on one surface is derived afresh (and may be refused) on the other."""
    callers = memo(4)
    callers.caller("t1", verified(act={"sub": "agent"}), "a2a")
    with pytest.raises(Forbidden):
        callers.caller("t1", verified(act={"sub": "agent"}), "approvals")


def test_the_memo_is_bounded_oldest_first() -> None:
    """Past its size the memo forgets its oldest token, never grows."""
    callers = memo(2)
    for token in ("t1", "t2", "t3"):
        callers.caller(token, verified(), "a2a")
    assert len(callers) == 2
    callers.caller("t3", UNDERIVABLE, "a2a")  # still remembered
    with pytest.raises(InsufficientScope):
        callers.caller("t1", UNDERIVABLE, "a2a")  # forgotten: derived again


def test_a_memo_of_size_zero_remembers_nothing() -> None:
    """With the token cache off (size 0), every Check derives its caller."""
    callers = memo(0)
    callers.caller("t1", verified(), "a2a")
    assert len(callers) == 0
    with pytest.raises(InsufficientScope):
        callers.caller("t1", UNDERIVABLE, "a2a")


def test_a_refusal_is_not_remembered() -> None:
    """A token whose claims were refused is derived again, not answered from memory."""
    callers = memo(4)
    with pytest.raises(InsufficientScope):
        callers.caller("t1", UNDERIVABLE, "a2a")
    assert len(callers) == 0
