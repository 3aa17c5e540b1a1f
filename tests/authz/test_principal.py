"""Principal derivation (docs/contract.md#kinds): the table, then the same rules through Check."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from authz.errors import Forbidden, InsufficientScope, InvalidToken
from authz.principal import RoleRules, SurfaceRules, derive
from contract.identity import Surface
from tests.authz.support import (
    AUDIENCE,
    CONSOLE,
    DROP,
    Issuer,
    RunningAuthz,
    adapter_verify,
    base_env,
    denied,
    running_authz,
)

RULES = RoleRules(claim="roles", autonomy=(("viewer", "L1"), ("operator", "L2"), ("admin", "L3")))
SURFACES = SurfaceRules(AUDIENCE, CONSOLE, frozenset({"console"}))


def claims(**overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"sub": "alice", "aud": AUDIENCE, "roles": ["admin"]}
    base.update(overrides)
    return {name: value for name, value in base.items() if value is not None}


@pytest.mark.parametrize(
    ("surface", "token_claims", "expected"),
    [
        pytest.param(
            "a2a",
            claims(sub="svc-1", client_id="svc-1", roles=["operator"]),
            ("service", "svc-1", "svc-1", "", "operator", "L2"),
            id="service",
        ),
        pytest.param(
            "a2a",
            claims(sub="svc-1", roles=["operator"]),
            ("service", "svc-1", "svc-1", "", "operator", "L2"),
            id="service-client-falls-back-to-sub",
        ),
        pytest.param(
            "a2a",
            claims(sub="svc-1", azp="svc-app", roles=["viewer"]),
            ("service", "svc-1", "svc-app", "", "viewer", "L1"),
            id="service-client-from-azp",
        ),
        pytest.param(
            "a2a",
            claims(sub="svc-1", client_id="svc-1", roles=["admin"]),
            ("service", "svc-1", "svc-1", "", "admin", "L2"),
            id="service-pinned-to-L2",
        ),
        pytest.param(
            "a2a",
            claims(client_id="ci", act={"sub": "triage-agent"}),
            ("delegated", "alice", "ci", "triage-agent", "admin", "L3"),
            id="delegated",
        ),
        pytest.param(
            "a2a",
            claims(act={"sub": "triage-agent"}),
            ("delegated", "alice", "", "triage-agent", "admin", "L3"),
            id="delegated-without-client",
        ),
        pytest.param(
            "a2a",
            claims(client_id="ci", act={"sub": "current", "act": {"sub": "prior"}}),
            ("delegated", "alice", "ci", "current", "admin", "L3"),
            id="nested-act-outermost-is-current",
        ),
        pytest.param(
            "a2a",
            claims(sub="svc-1", client_id="svc-1", roles=["operator"], may_act={"sub": "agent"}),
            ("service", "svc-1", "svc-1", "", "operator", "L2"),
            id="may_act-alone-never-delegates",
        ),
        pytest.param(
            "approvals",
            claims(client_id="console"),
            ("human", "alice", "console", "", "admin", "L3"),
            id="approvals-human",
        ),
        pytest.param(
            "a2a",
            claims(sub="svc-1", roles="viewer operator"),
            ("service", "svc-1", "svc-1", "", "operator", "L2"),
            id="space-separated-roles-highest-wins",
        ),
    ],
)
def test_principal_table(
    surface: Surface, token_claims: dict[str, Any], expected: tuple[str, ...]
) -> None:
    """Each kind of token becomes exactly one kind of principal."""
    who = derive(token_claims, surface, RULES, SURFACES)
    assert (who.kind, who.subject, who.client, who.agent, who.role, who.autonomy) == expected


@pytest.mark.parametrize(
    "act",
    [
        None,
        "triage-agent",
        [],
        {},
        {"sub": ""},
        {"sub": 7},
        {"client_id": "x"},
        {"sub": "a", "act": "b"},
        {"sub": "a", "act": {"sub": ""}},
        {"sub": "a", "act": None},
        {"sub": "agent\u0000"},
        {"sub": "a", "act": {"sub": "b\nc"}},
    ],
    ids=repr,
)
def test_malformed_act_is_refused_not_downgraded(act: Any) -> None:
    """A present but malformed act makes the token invalid — never a service token."""
    with pytest.raises(InvalidToken, match="token act is malformed"):
        derive(claims(act=act) | {"act": act}, "a2a", RULES, SURFACES)


def test_act_nesting_is_bounded() -> None:
    """A chain of prior actors deeper than the bound is refused."""
    act: dict[str, Any] = {"sub": "a0"}
    for depth in range(1, 12):
        act = {"sub": f"a{depth}", "act": act}
    with pytest.raises(InvalidToken):
        derive(claims(act=act) | {"act": act}, "a2a", RULES, SURFACES)


def test_delegated_token_is_refused_on_approvals() -> None:
    """Only the person decides approvals: a token with act is refused there."""
    with pytest.raises(Forbidden, match="delegated"):
        derive(claims(act={"sub": "agent"}), "approvals", RULES, SURFACES)


def test_no_recognised_role_is_insufficient_scope() -> None:
    """Unknown roles only → 403 insufficient_scope."""
    with pytest.raises(InsufficientScope):
        derive(claims(roles=["superuser"]), "a2a", RULES, SURFACES)


@pytest.mark.parametrize("roles", [7, [1, 2], {"admin": True}, ["admin", None]])
def test_malformed_role_claim_is_refused(roles: Any) -> None:
    """A role claim that is neither a string nor a list of strings is refused."""
    with pytest.raises(Forbidden, match="role claim"):
        derive(claims(roles=roles), "a2a", RULES, SURFACES)


def test_malformed_client_id_is_refused() -> None:
    """client_id must be a string when present."""
    with pytest.raises(InvalidToken, match="client_id"):
        derive(claims(client_id=["a"]), "a2a", RULES, SURFACES)


@pytest.mark.parametrize("name", ["client_id", "azp"])
def test_client_with_control_characters_is_refused(name: str) -> None:
    """A client id with a control character is not an identifier."""
    with pytest.raises(InvalidToken, match=name):
        derive(claims(**{name: "ci\u0000bot"}), "a2a", RULES, SURFACES)


@pytest.mark.parametrize(
    ("token_claims", "role"),
    [
        pytest.param(claims(roles=None, scope="openid operator"), "operator", id="claim-absent"),
        pytest.param(claims(roles=["viewer"], scope="admin"), "viewer", id="claim-present-wins"),
    ],
)
def test_scope_stands_in_for_an_absent_role_claim_when_configured(
    token_claims: dict[str, Any], role: str
) -> None:
    """With the fallback on, `scope` is read only when the role claim is absent."""
    rules = RoleRules(claim="roles", autonomy=RULES.autonomy, scope_fallback=True)
    assert derive(token_claims, "a2a", rules, SURFACES).role == role


def test_scope_is_no_role_without_the_fallback() -> None:
    """By default `scope` is never read for roles."""
    with pytest.raises(InsufficientScope):
        derive(claims(roles=None, scope="admin"), "a2a", RULES, SURFACES)


def test_custom_role_claim() -> None:
    """ORRERY_A2A_ROLE_CLAIM names a namespaced claim (dots are part of the name)."""
    rules = RoleRules(claim="https://orrery.dev/roles", autonomy=RULES.autonomy)
    who = derive(
        claims(roles=None, **{"https://orrery.dev/roles": ["viewer"]}), "a2a", rules, SURFACES
    )
    assert (who.role, who.autonomy) == ("viewer", "L1")


def test_two_agents_of_one_user_share_a_subject_not_a_key() -> None:
    """Same user, two agents: one rate-limit subject, two principal keys."""
    one = derive(claims(client_id="c", act={"sub": "agent-1"}), "a2a", RULES, SURFACES)
    two = derive(claims(client_id="c", act={"sub": "agent-2"}), "a2a", RULES, SURFACES)
    assert one.subject == two.subject
    assert one.key != two.key


# --- through the service: the assertion carries the derived principal ----------------------


async def test_delegated_principal_reaches_the_assertion(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """A delegated token's principal is what the adapter reads from the header."""
    token = issuer.token(sub="alice", client_id="ci", act={"sub": "triage"}, roles=["admin"])
    response = await authz.check(token=token, request_id="rid-7")
    result = adapter_verify(authz.settings.assertion_keys, response, request_id="rid-7")
    assert result.principal.kind == "delegated"
    assert result.principal.key == "delegated:ci:triage:alice"
    assert result.principal.autonomy == "L3"


async def test_human_principal_on_the_approvals_surface(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """A console-audience token without act is the human on the approvals surface."""
    token = issuer.token(sub="alice", aud=CONSOLE, client_id="console", roles=["admin"])
    response = await authz.check(token=token, surface="approvals")
    result = adapter_verify(authz.settings.assertion_keys, response, surface="approvals")
    assert result.principal.kind == "human"


async def test_malformed_act_is_401_through_the_service(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """The service answers a malformed act with 401 token_invalid (an invalid token)."""
    refusal = denied(await authz.check(token=issuer.token(act={"sub": ""})))
    assert (refusal.status, refusal.reason) == (401, "token_invalid")


async def test_a_requested_scope_grants_no_role_by_default(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """Without a roles claim, `scope=admin` (which a client may simply ask for) is no role: 403."""
    token = issuer.token(sub="alice", act={"sub": "agent"}, roles=DROP, scope="openid admin")
    refusal = denied(await authz.check(token=token))
    assert (refusal.status, refusal.reason) == (403, "insufficient_scope")


async def test_the_scope_fallback_is_opt_in(issuer: Issuer, jwks_file: Path) -> None:
    """ORRERY_A2A_ROLE_SCOPE_FALLBACK=true reads roles from scope when the roles claim is absent
    (an IdP that carries roles there and lets no client request them)."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_ROLE_SCOPE_FALLBACK": "true"}
    token = issuer.token(sub="alice", act={"sub": "agent"}, roles=DROP, scope="openid admin")
    async with running_authz(env) as authz:
        principal = adapter_verify(authz.settings.assertion_keys, await authz.check(token=token))
    assert (principal.principal.role, principal.principal.autonomy) == ("admin", "L3")


async def test_insufficient_scope_carries_the_rfc6750_challenge(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """403 insufficient_scope says so in WWW-Authenticate (RFC 6750 §3.1)."""
    refusal = denied(await authz.check(token=issuer.token(roles=["nobody"])))
    assert (refusal.status, refusal.reason) == (403, "insufficient_scope")
    assert 'error="insufficient_scope"' in refusal.headers["www-authenticate"]
