"""Every authz refusal (docs/contract.md#authzs-denials) through the real Envoy, authz and adapter.

Each refusal is answered in front of the adapter with its status, its stable reason code and the
headers the contract names (RFC 6750 challenges, IETF RateLimit fields); the adapter's own request
counter proves it never saw the request.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

from stack.keys import new_signing_key
from stack.tokens import sign
from tests.base64url import respell
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

GET_TASK = jsonrpc("GetTask", {"id": "no-such-task"})
REALM = 'Bearer realm="orrery-a2a"'


def _challenge(error: str, description: str) -> str:
    return f'{REALM}, error="{error}", error_description="{description}"'


def _bad_signature(edge: Edge) -> str:
    """A token whose signature belongs to another token of the same issuer."""
    header, payload, _ = edge.token(subject=unique("user")).split(".")
    other_signature = edge.token(subject=unique("user")).split(".")[2]
    return f"{header}.{payload}.{other_signature}"


def _respelled_signature(edge: Edge) -> str:
    """A valid token whose signature is written with an unused bit set (same bytes)."""
    header, payload, signature = edge.token(subject=unique("user")).split(".")
    return f"{header}.{payload}.{respell(signature)}"


def _expired(edge: Edge) -> str:
    claims = edge.claims(subject=unique("user"))
    claims["iat"] -= 7200
    claims["exp"] = claims["iat"] + 3600  # an hour ago: far past the 60 s leeway
    return edge.sign(claims)


def _malformed_act(edge: Edge) -> str:
    claims = edge.claims(subject=unique("user"))
    claims["act"] = "agent-as-a-string"  # RFC 8693: an object with `sub`
    return edge.sign(claims)


def _with_claims(edge: Edge, **claims: object) -> str:
    """A delegated dev token of a fresh user with `claims` replaced (None: left out), signed by
    the issuer."""
    token_claims = {**edge.claims(subject=unique("user")), **claims}
    return edge.sign({name: value for name, value in token_claims.items() if value is not None})


@dataclass(frozen=True)
class Refusal:
    status: int
    reason: str
    headers: Callable[[Edge], dict[str, str]]
    challenge: str | None = None  # the exact WWW-Authenticate, when the contract names one
    extra: dict[str, str] = field(default_factory=dict)


REFUSALS = {
    "reserved header": Refusal(
        400,
        "reserved_header",
        lambda edge: {**bearer(edge.token(subject=unique("user"))), "X-Orrery-Role": "admin"},
    ),
    "hop header": Refusal(
        508,
        "loop_detected",
        lambda edge: {**bearer(edge.token(subject=unique("user"))), "x-orrery-hop": "1"},
    ),
    "no token": Refusal(401, "missing_credential", lambda edge: {}, challenge=REALM),
    "not a bearer token": Refusal(
        401,
        "missing_credential",
        lambda edge: {"Authorization": "Basic ZGV2OmRldg=="},
        challenge=REALM,
    ),
    "bad signature": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_bad_signature(edge)),
        challenge=_challenge("invalid_token", "token signature is invalid"),
    ),
    "second spelling of a signature": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_respelled_signature(edge)),
        challenge=_challenge("invalid_token", "token signature is malformed"),
    ),
    "expired token": Refusal(
        401,
        "token_expired",
        lambda edge: bearer(_expired(edge)),
        challenge=_challenge("invalid_token", "token has expired"),
    ),
    "console token on /a2a": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(edge.token("human", subject=unique("user"))),
        challenge=_challenge("invalid_token", "token audience is not accepted"),
    ),
    "key not in the JWKS": Refusal(
        401,
        "unknown_key",
        lambda edge: bearer(sign(new_signing_key(), edge.claims(subject=unique("user")))),
    ),
    "no recognised role": Refusal(
        403,
        "insufficient_scope",
        lambda edge: bearer(edge.token(subject=unique("user"), roles=("intern",))),
        challenge=_challenge("insufficient_scope", "the token grants no recognised role"),
    ),
    "a requested admin scope, no roles": Refusal(
        403,
        "insufficient_scope",
        lambda edge: bearer(_with_claims(edge, roles=None, scope="openid admin")),
        challenge=_challenge("insufficient_scope", "the token grants no recognised role"),
    ),
    "malformed act": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_malformed_act(edge)),
        challenge=_challenge("invalid_token", "token act is malformed"),
    ),
    "blank subject": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_with_claims(edge, sub="\u3000\u00a0")),
        challenge=_challenge("invalid_token", "token sub is missing, empty or malformed"),
    ),
    "lone surrogate in the subject": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_with_claims(edge, sub="\ud800")),
        challenge=_challenge("invalid_token", "token sub is missing, empty or malformed"),
    ),
    "lone surrogate in the acting agent": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_with_claims(edge, act={"sub": "\udfff"})),
        challenge=_challenge("invalid_token", "token act is malformed"),
    ),
    "bidi override in the client": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_with_claims(edge, client_id="tneilc\u202e")),
        challenge=_challenge("invalid_token", "token client_id is malformed"),
    ),
    "unassigned ignorable between blanks in the subject": Refusal(
        401,
        "token_invalid",
        lambda edge: bearer(_with_claims(edge, sub=" \u2065 ")),
        challenge=_challenge("invalid_token", "token sub is missing, empty or malformed"),
    ),
}


@pytest.mark.parametrize("case", REFUSALS.values(), ids=REFUSALS.keys())
async def test_a_refusal_is_answered_in_front_of_the_adapter(edge: Edge, case: Refusal) -> None:
    """Status, reason body and no-store from authz via Envoy; the adapter's counter stays put."""
    before = await edge.adapter_requests()
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{edge.url}/a2a", json=GET_TASK, headers={**JSONRPC_HEADERS, **case.headers(edge)}
        )
    assert response.status_code == case.status, response.text
    body = response.json()
    assert body["error"] == case.reason
    assert isinstance(body["error_description"], str) and body["error_description"]
    assert response.headers["content-type"] == "application/json"
    assert response.headers["cache-control"] == "no-store"
    assert await edge.adapter_requests() == before


@pytest.mark.parametrize(
    "case", [c for c in REFUSALS.values() if c.status == 401], ids=lambda c: c.reason
)
async def test_a_401_carries_the_rfc_6750_challenge(edge: Edge, case: Refusal) -> None:
    """No credential: the bare realm; a bad one: error="invalid_token" and a description."""
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{edge.url}/a2a", json=GET_TASK, headers={**JSONRPC_HEADERS, **case.headers(edge)}
        )
    challenge = response.headers["www-authenticate"]
    if case.challenge is not None:
        assert challenge == case.challenge
    else:
        assert challenge.startswith(f'{REALM}, error="invalid_token", error_description="')
    assert challenge.count("Bearer") == 1


async def test_insufficient_scope_carries_its_challenge(edge: Edge) -> None:
    """403 insufficient_scope: WWW-Authenticate with error="insufficient_scope" (RFC 6750)."""
    case = REFUSALS["no recognised role"]
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{edge.url}/a2a", json=GET_TASK, headers={**JSONRPC_HEADERS, **case.headers(edge)}
        )
    assert response.status_code == 403
    assert response.headers["www-authenticate"] == case.challenge


async def test_a_denial_never_echoes_the_token(edge: Edge) -> None:
    """A refused token appears in no response header or body."""
    token = _expired(edge)
    response = await edge.rpc(token, "GetTask", {"id": "x"})
    assert response.status_code == 401
    assert token not in response.text
    assert not [value for value in response.headers.values() if token in value]
    assert token.split(".")[1] not in json.dumps(dict(response.headers)) + response.text


async def _exhaust(http: httpx.AsyncClient, edge: Edge, token: str) -> tuple[int, httpx.Response]:
    """Spend `token`'s subject budget: (requests allowed, the first 429)."""
    headers = {**JSONRPC_HEADERS, **bearer(token)}
    for allowed in range(1000):
        response = await http.post(f"{edge.url}/a2a", json=GET_TASK, headers=headers)
        if response.status_code == 429:
            return allowed, response
        assert response.status_code == 200, response.text
    raise AssertionError("no 429 after 1000 requests")


async def test_a_spent_budget_is_a_429_with_retry_after_and_ratelimit_fields(edge: Edge) -> None:
    """Past the default 60/minute: 429 rate_limited, Retry-After, RateLimit-Policy, RateLimit."""
    async with httpx.AsyncClient(timeout=60) as http:
        allowed, refused = await _exhaust(http, edge, edge.token(subject=unique("user")))
    assert allowed >= 60  # the whole burst, plus whatever refilled meanwhile
    assert refused.json()["error"] == "rate_limited"
    retry_after = refused.headers["retry-after"]
    assert retry_after.isdigit() and int(retry_after) >= 1
    assert refused.headers["ratelimit-policy"] == '"subject";q=60;w=60'
    assert refused.headers["ratelimit"] == f'"subject";r=0;t={retry_after}'


async def test_the_budget_belongs_to_the_subject_and_the_surface(edge: Edge) -> None:
    """Two agents of one user share it; another user and that user's approvals do not."""
    user = unique("user")
    async with httpx.AsyncClient(timeout=60) as http:
        await _exhaust(http, edge, edge.token(subject=user, agent="agent-a"))
        spent = time.monotonic()
        second_agent, _ = await _exhaust(http, edge, edge.token(subject=user, agent="agent-b"))
        refilled = time.monotonic() - spent
        other_user = await edge.rpc(edge.token(subject=unique("user")), "GetTask", {"id": "x"})
    approvals = await edge.decide(edge.token("human", subject=user), "no-such-action")
    assert second_agent <= 1 + refilled  # only what refilled (one a second), not a budget of 60
    assert other_user.status_code == 200
    assert approvals.status_code == 404  # reached the adapter: not_found, not rate_limited
    assert approvals.json()["status"] == "not_found"


async def test_a_service_named_like_a_user_has_a_budget_of_its_own(edge: Edge) -> None:
    """A client-credentials token whose sub equals a person's is not limited by that person's
    spent budget (nor could it spend it)."""
    user = unique("user")
    async with httpx.AsyncClient(timeout=60) as http:
        await _exhaust(http, edge, edge.token(subject=user))
    service = await edge.rpc(
        edge.token("service", subject=user, client_id=user), "GetTask", {"id": "x"}
    )
    assert service.status_code == 200, service.text


async def test_a_repeated_forgery_is_refused_from_memory(edge: Edge) -> None:
    """The same badly signed token three times through Envoy: three 401s, and authz answers the
    last two from its memory of refusals instead of checking the signature again."""
    remembered = "orrery_authz_token_refusals_remembered_total"
    token = _bad_signature(edge)
    before = await edge.authz_metric(remembered)
    for _ in range(3):
        response = await edge.rpc(token, "GetTask", {"id": "x"})
        assert (response.status_code, response.json()["error"]) == (401, "token_invalid")
    assert await edge.authz_metric(remembered) == before + 2
