"""Identity claims (docs/contract.md#kinds): blank, invisible and unencodable values are refused
like empty ones, through the real service — never crashing the Check.

`sub`, `client_id`, `azp`, `act.sub` and every nested `act.sub` name who is calling; they reach
the signed assertion, the principal key, the rate-limit key (and Redis) and the decision log.
A value made only of (Unicode) whitespace or invisible fillers names nobody, a format character
(zero-width, bidi override, BOM) makes two identities look alike, a line separator splits a log
line, and a lone UTF-16 surrogate (valid JSON: `"\\ud800"`) cannot be encoded as UTF-8 at all.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
import redis

from authz.limits import REDIS_PREFIX
from runtime import logs
from tests.authz.support import (
    DROP,
    Issuer,
    RunningAuthz,
    adapter_verify,
    base_env,
    denied,
    ok_headers,
    running_authz,
)

BLANK = {
    "space": " ",
    "no-break space": "\u00a0",
    "en quad": "\u2000",
    "em space": "\u2003",
    "hair space": "\u200a",
    "ideographic space": "\u3000",
    "ogham space": "\u1680",
    "narrow no-break space": "\u202f",
    "mixed blanks": " \u00a0\u2003 ",
    "hangul filler": "\u3164",
    "braille blank": "\u2800",
    "variation selector alone": "\ufe0f",
}
INVISIBLE = {
    "zero-width space": "\u200b",
    "zero-width space inside": "dev\u200b-user",
    "zero-width joiner": "a\u200db",
    "right-to-left override": "resu\u202e",
    "byte order mark": "\ufeffalice",
    "word joiner": "ali\u2060ce",
    "soft hyphen": "al\u00adice",
    "line separator": "alice\u2028bob",
    "paragraph separator": "\u2029",
    # Unassigned, but default-ignorable: any reader that knows a later Unicode (or none) shows
    # nothing for them (Unicode §5.21), so they hide like format characters.
    "unassigned ignorable between blanks": " \u2065 ",
    "unassigned ignorable inside": "ali\u2065ce",
    "unassigned specials": "alice\ufff0\ufff8",
    "unassigned tag": "alice\U000e0000",
    "unassigned tag block": "\U000e0fff",
}
SURROGATE = {
    "lone high surrogate": "\ud800",
    "lone low surrogate": "\udfff",
    "surrogate after text": "alice\ud83d",
    "reversed pair": "\ude00\ud83d",
}
REFUSED = {**BLANK, **INVISIBLE, **SURROGATE}
# Real identifiers: letters of any script, an astral character (a proper surrogate *pair* in
# the JSON), inner spaces.
ACCEPTED = {
    "ascii": "alice",
    "latin": "ünïcödé",
    "cjk": "山田",
    "emoji pair": "\U0001f600",
    "inner space": "Alice Smith",
}


def _claims_with(where: str, value: str) -> dict[str, Any]:
    """Overrides putting `value` in identity claim `where` of an otherwise valid token."""
    if where == "sub":
        return {"sub": value}
    if where == "client_id":
        return {"client_id": value}
    if where == "azp":
        return {"client_id": DROP, "azp": value}
    if where == "azp beside client_id":
        return {"azp": value}
    if where == "act.sub":
        return {"sub": "alice", "act": {"sub": value}, "roles": ["admin"]}
    return {"sub": "alice", "act": {"sub": "agent", "act": {"sub": value}}, "roles": ["admin"]}


WHERE = ["sub", "client_id", "azp", "azp beside client_id", "act.sub", "nested act.sub"]


def _expected(where: str) -> tuple[int, str, str]:
    """One rule for every identity claim (docs/contract.md#identifiers): a token whose
    claims cannot name anyone is an invalid token."""
    if where == "sub":
        return 401, "token_invalid", "token sub is missing, empty or malformed"
    if where.startswith("azp"):
        return 401, "token_invalid", "token azp is malformed"
    if where == "client_id":
        return 401, "token_invalid", "token client_id is malformed"
    return 401, "token_invalid", "token act is malformed"


@pytest.mark.parametrize("value", REFUSED.values(), ids=REFUSED.keys())
@pytest.mark.parametrize("where", WHERE)
async def test_a_blank_invisible_or_unencodable_identity_is_refused(
    authz: RunningAuthz, issuer: Issuer, where: str, value: str, caplog: pytest.LogCaptureFixture
) -> None:
    """401 token_invalid with RFC 6750's `invalid_token` naming the claim, never a failed
    Check."""
    with caplog.at_level(logging.INFO):
        refusal = denied(await authz.check(token=issuer.token(**_claims_with(where, value))))
    assert (refusal.status, refusal.reason, refusal.description) == _expected(where)
    assert 'error="invalid_token"' in refusal.headers["www-authenticate"]
    assert not [record for record in caplog.records if record.getMessage() == "check_failed"]


@pytest.mark.parametrize("where", WHERE)
async def test_an_oversize_identity_claim_is_an_invalid_token(
    authz: RunningAuthz, issuer: Issuer, where: str
) -> None:
    """A 4 KiB identity claim is refused like a malformed one, whichever claim it is: 401
    token_invalid (the token's claims cannot name anyone), not a 403."""
    token = issuer.token(**_claims_with(where, "a" * 4096))
    refusal = denied(await authz.check(token=token))
    assert (refusal.status, refusal.reason, refusal.description) == _expected(where)
    assert 'error="invalid_token"' in refusal.headers["www-authenticate"]


async def test_identity_claims_too_large_together_are_an_invalid_token(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """Claims each within the size of an identifier, which escaped in the principal key do not
    fit one assertion together: the same 401 token_invalid, not a 403."""
    quoted = '"' * 200
    token = issuer.token(sub=quoted, client_id=quoted, act={"sub": quoted}, roles=["admin"])
    refusal = denied(await authz.check(token=token))
    assert (refusal.status, refusal.reason) == (401, "token_invalid")
    assert refusal.description == "token identity claims are too large"
    assert 'error="invalid_token"' in refusal.headers["www-authenticate"]


@pytest.mark.parametrize("where", WHERE)
async def test_an_identity_claim_of_the_largest_size_is_accepted(
    authz: RunningAuthz, issuer: Issuer, where: str
) -> None:
    """256 UTF-8 bytes (an e-mail address is at most 254) is an identifier."""
    response = await authz.check(token=issuer.token(**_claims_with(where, "é" * 128)))
    assert "x-orrery-principal" in ok_headers(response)


# Where an accepted value shows up in the principal (None: accepted, but not what is named).
SHOWN_AS = {
    "sub": "subject",
    "client_id": "client",
    "azp": "client",
    "azp beside client_id": None,
    "act.sub": "agent",
    "nested act.sub": None,
}


@pytest.mark.parametrize("value", ACCEPTED.values(), ids=ACCEPTED.keys())
@pytest.mark.parametrize("where", WHERE)
async def test_identifiers_of_any_script_are_accepted(
    authz: RunningAuthz, issuer: Issuer, where: str, value: str
) -> None:
    """Letters of any script, astral characters and inner spaces are identifiers."""
    response = await authz.check(token=issuer.token(**_claims_with(where, value)))
    principal = adapter_verify(authz.settings.assertion_keys, response).principal
    field = SHOWN_AS[where]
    if field is not None:
        assert getattr(principal, field) == value


@pytest.mark.parametrize("value", SURROGATE.values(), ids=SURROGATE.keys())
async def test_a_surrogate_identity_never_reaches_redis_or_the_log(
    redis_url: str,
    jwks_file: Path,
    issuer: Issuer,
    value: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """With the shared limiter on, a surrogate sub is refused before the limiter key is made;
    every decision line is encodable UTF-8."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_REDIS_URL": redis_url,
        "ORRERY_A2A_RATE_LIMIT": "3/minute",  # the allowed subject's key lives 20 s
    }
    async with running_authz(env) as authz:
        with caplog.at_level(logging.INFO):
            refusal = denied(await authz.check(token=issuer.token(sub=value)))
            allowed = await authz.check(token=issuer.token(sub="\U0001f600"))
    assert (refusal.status, refusal.reason) == (401, "token_invalid")
    assert "x-orrery-principal" in ok_headers(allowed)
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        keys = [str(key) for key in client.keys(REDIS_PREFIX + "*")]
    finally:
        client.close()
    assert len(keys) == 1 and keys[0].endswith("%F0%9F%98%80")
    lines = [logs.JsonFormatter().format(record) for record in caplog.records]
    assert [json.loads(line)["event"] for line in lines] == ["decision", "decision"]
    for line in lines:
        line.encode()  # the JSON line as written: valid UTF-8 (a lone surrogate would raise)


@pytest.mark.parametrize(
    ("overrides", "header", "expected"),
    [
        pytest.param({"roles": ["operator", "\ud800"]}, None, None, id="role-list"),
        pytest.param({"aud": ["orrery-a2a", "\udfff"]}, None, None, id="extra-audience"),
        pytest.param({"jti": "\ud800"}, None, None, id="jti"),
        pytest.param({"iss": "\ud800"}, None, (401, "token_invalid"), id="issuer"),
        pytest.param({}, {"kid": "\ud800"}, (401, "unknown_key"), id="kid"),
        pytest.param({}, {"typ": "\ud800"}, (401, "token_invalid"), id="typ"),
    ],
)
async def test_a_surrogate_anywhere_else_never_crashes_the_check(
    authz: RunningAuthz,
    issuer: Issuer,
    overrides: dict[str, Any],
    header: dict[str, Any] | None,
    expected: tuple[int, str] | None,
) -> None:
    """Claims and header members that are never encoded are compared or ignored, not crashed on."""
    response = await authz.check(token=issuer.token(header=header, **overrides))
    if expected is None:
        assert "x-orrery-principal" in ok_headers(response)
    else:
        refusal = denied(response)
        assert (refusal.status, refusal.reason) == expected
