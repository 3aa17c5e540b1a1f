"""Who is a human on the approvals surface (docs/contract.md#who-is-a-human), through the real
service: more than the console audience — a console client, one audience, a person's subject.

An agent that could present a console-audience token a person's way could approve its own
guarded action. Each forgery below is a token the identity provider could plausibly issue (to an
agent's client, by client credentials or impersonation, or for both audiences), correctly signed.
"""

from __future__ import annotations

from typing import Any, TypedDict

import pytest

from tests.authz.support import (
    AUDIENCE,
    CONSOLE,
    CONSOLE_CLIENT,
    DROP,
    Issuer,
    RunningAuthz,
    adapter_verify,
    denied,
)


class Route(TypedDict):
    """Where a Check comes from: Envoy's route label and the request path."""

    surface: str
    path: str


APPROVALS: Route = {"surface": "approvals", "path": "/approvals/an-action-id"}


def person(**overrides: Any) -> dict[str, Any]:
    """Claims of the person at the console, as the console's client would get them."""
    claims: dict[str, Any] = {
        "sub": "alice",
        "aud": CONSOLE,
        "client_id": CONSOLE_CLIENT,
        "roles": ["admin"],
        **overrides,
    }
    return claims


async def test_the_person_at_a_console_client_is_a_human(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """The control: a console client's token for a person is the human."""
    response = await authz.check(token=issuer.token(**person()), **APPROVALS)
    principal = adapter_verify(authz.settings.assertion_keys, response, surface="approvals")
    assert (principal.principal.kind, principal.principal.subject) == ("human", "alice")


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param(person(client_id=DROP, azp=CONSOLE_CLIENT), id="azp-only"),
        pytest.param(person(azp=CONSOLE_CLIENT), id="client_id-and-azp-agree"),
    ],
)
async def test_the_console_client_may_be_named_by_azp(
    authz: RunningAuthz, issuer: Issuer, claims: dict[str, Any]
) -> None:
    """`azp` names the client as well as `client_id` does."""
    response = await authz.check(token=issuer.token(**claims), **APPROVALS)
    adapter_verify(authz.settings.assertion_keys, response, surface="approvals")


FORGERIES = {
    "agent client, client credentials": person(sub="agent-client", client_id="agent-client"),
    "agent client, impersonating the person": person(client_id="agent-client"),
    "agent client named by azp": person(client_id=DROP, azp="agent-client"),
    "azp contradicts client_id": person(azp="agent-client"),
    "no client at all": person(client_id=DROP),
    "empty client": person(client_id=""),
    "console client, client credentials": person(sub=CONSOLE_CLIENT),
    "console client, sub equals azp": person(
        client_id=DROP, azp=CONSOLE_CLIENT, sub=CONSOLE_CLIENT
    ),
    "both audiences": person(aud=[CONSOLE, AUDIENCE]),
    "both audiences, a2a first": person(aud=[AUDIENCE, CONSOLE]),
}


@pytest.mark.parametrize("claims", FORGERIES.values(), ids=FORGERIES.keys())
async def test_a_console_audience_is_not_enough_to_be_a_human(
    authz: RunningAuthz, issuer: Issuer, claims: dict[str, Any]
) -> None:
    """403 forbidden: not a console client's token for a person, for the console alone."""
    refusal = denied(await authz.check(token=issuer.token(**claims), **APPROVALS))
    assert (refusal.status, refusal.reason) == (403, "forbidden")


@pytest.mark.parametrize(
    "claims",
    [
        pytest.param({"aud": [AUDIENCE, CONSOLE]}, id="service"),
        pytest.param({"aud": [AUDIENCE, CONSOLE], "act": {"sub": "agent"}}, id="delegated"),
    ],
)
async def test_a_token_for_both_audiences_is_refused_on_a2a_too(
    authz: RunningAuthz, issuer: Issuer, claims: dict[str, Any]
) -> None:
    """A token naming the console audience is a console token: never a machine's on /a2a."""
    refusal = denied(await authz.check(token=issuer.token(**claims)))
    assert (refusal.status, refusal.reason) == (403, "forbidden")


@pytest.mark.parametrize(("role", "autonomy"), [("viewer", "L1"), ("operator", "L2")])
async def test_any_recognised_role_makes_the_person_a_human(
    authz: RunningAuthz, issuer: Issuer, role: str, autonomy: str
) -> None:
    """The person's own role and autonomy are not compared with the action's level
    (docs/contract.md#approvals): any recognised role is enough; the assertion says which."""
    response = await authz.check(token=issuer.token(**person(roles=[role])), **APPROVALS)
    principal = adapter_verify(authz.settings.assertion_keys, response, surface="approvals")
    assert (principal.principal.kind, principal.principal.autonomy) == ("human", autonomy)


async def test_a_person_without_a_recognised_role_is_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """No recognised role: 403 insufficient_scope, on the approvals surface as on a2a."""
    refusal = denied(await authz.check(token=issuer.token(**person(roles=["intern"])), **APPROVALS))
    assert (refusal.status, refusal.reason) == (403, "insufficient_scope")
