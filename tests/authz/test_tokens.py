"""docs/contract.md#bearer-tokens, one named test per rule, through the real gRPC service.

Every forged token here is signed by a real key from the issuer's JWKS where that matters, so a
refusal proves the rule — not merely a bad signature.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from authz.errors import InvalidToken, TokenExpired, UnknownSigningKey
from authz.jwks import FileSource, KeyStore, parse_jwks
from authz.settings import JwksSettings, TokenRules
from authz.tokens import TokenVerifier
from contract.jose import b64url_decode, b64url_encode
from tests.authz.support import (
    AUDIENCE,
    CONSOLE,
    DROP,
    ISSUER,
    Issuer,
    RunningAuthz,
    SigningKey,
    base_env,
    denied,
    ok_headers,
    running_authz,
)
from tests.base64url import respell, with_spare_bits


async def refused(authz: RunningAuthz, token: str, reason: str = "token_invalid") -> str:
    """Check `token`; assert a 401 with `reason` and an RFC 6750 invalid_token challenge."""
    refusal = denied(await authz.check(token=token))
    assert (refusal.status, refusal.reason) == (401, reason), refusal
    challenge = refusal.headers["www-authenticate"]
    assert challenge.startswith('Bearer realm="orrery-a2a", error="invalid_token"')
    assert f'error_description="{refusal.description}"' in challenge
    return refusal.description


async def accepted(authz: RunningAuthz, token: str, surface: str | None = None) -> None:
    assert "x-orrery-principal" in ok_headers(await authz.check(token=token, surface=surface))


# --- algorithms ------------------------------------------------------------------------------


@pytest.mark.parametrize("index", [0, 1, 2, 3], ids=["ES256", "RS256", "PS256", "EdDSA"])
async def test_each_default_algorithm_is_accepted(
    authz: RunningAuthz, issuer: Issuer, index: int
) -> None:
    """RS256, PS256, ES256 and EdDSA tokens from the JWKS verify."""
    await accepted(authz, issuer.token(key=issuer.keys[index]))


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "nOnE"])
async def test_alg_none_in_any_casing_is_refused(
    authz: RunningAuthz, issuer: Issuer, alg: str
) -> None:
    """An unsigned token is refused whatever the casing of "none"."""
    unsigned = issuer.token(header={"alg": alg}, signature=b"")  # "header.payload."
    assert await refused(authz, unsigned) == "token is not a compact JWS"
    with_junk_signature = issuer.token(header={"alg": alg}, signature=b"x")
    assert await refused(authz, with_junk_signature) == "token algorithm is not allowed"


@pytest.mark.parametrize("alg", ["HS256", "HS384", "HS512"])
async def test_hmac_algorithms_are_refused(authz: RunningAuthz, issuer: Issuer, alg: str) -> None:
    """HMAC is never accepted, even with a plausible signature."""
    token = issuer.token(header={"alg": alg}, signature=b"\x00" * 32)
    assert await refused(authz, token) == "token algorithm is not allowed"


@pytest.mark.parametrize("index", [0, 1], ids=["ES256-key", "RS256-key"])
async def test_public_key_used_as_hmac_secret_is_refused(
    authz: RunningAuthz, issuer: Issuer, index: int
) -> None:
    """The key-confusion forgery (HS256 keyed with the published public key) fails."""
    key = issuer.keys[index]
    for secret in (key.public_pem(), json.dumps(key.jwk()).encode()):
        token = issuer.hmac_token(secret)
        assert await refused(authz, token) == "token algorithm is not allowed"


async def test_algorithm_outside_the_configured_list_is_refused(
    issuer: Issuer, jwks_file: Path
) -> None:
    """With ORRERY_A2A_JWT_ALGORITHMS=ES256 an RS256 token from the same JWKS is refused."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_JWT_ALGORITHMS": "ES256"}
    async with running_authz(env) as authz:
        await accepted(authz, issuer.token(key=issuer.keys[0]))
        assert await refused(authz, issuer.token(key=issuer.keys[1])) == (
            "token algorithm is not allowed"
        )


# --- header ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("jwk", {"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}),
        ("jku", "https://attacker.example/jwks.json"),
        ("x5u", "https://attacker.example/cert.pem"),
        ("x5c", ["MIIB"]),
        ("crit", ["exp"]),
    ],
)
async def test_key_reference_and_crit_headers_are_refused(
    authz: RunningAuthz, issuer: Issuer, name: str, value: Any
) -> None:
    """jwk/jku/x5u/x5c/crit in the header are refused even on a validly signed token."""
    token = issuer.token(header={name: value})
    assert await refused(authz, token) == (
        "token header carries a key reference or critical extension"
    )


@pytest.mark.parametrize("b64", [False, True, 0, "false"])
async def test_a_b64_header_is_refused(authz: RunningAuthz, issuer: Issuer, b64: Any) -> None:
    """RFC 7797 `b64` changes what is signed; we never take it, whatever its value (PyJWT
    refuses `false` without `crit`; the differential test found ours accepting it)."""
    token = issuer.token(header={"b64": b64})
    assert await refused(authz, token) == "token header carries an unsupported parameter"


async def test_unknown_kid_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """A kid that is not in the JWKS is 401 unknown_key."""
    stranger = SigningKey.generate("ES256", kid="not-published")
    await refused(authz, issuer.token(key=stranger), reason="unknown_key")


async def test_missing_kid_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """Keys are chosen by kid only; a token without one is refused."""
    assert await refused(authz, issuer.token(header={"kid": DROP})) == "token header has no kid"


@pytest.mark.parametrize(
    ("alg", "index"),
    [("ES256", 1), ("RS256", 0), ("EdDSA", 0), ("ES256", 3), ("PS256", 3)],
    ids=["ES256-on-RSA", "RS256-on-EC", "EdDSA-on-EC", "ES256-on-OKP", "PS256-on-OKP"],
)
async def test_wrong_key_type_for_alg_is_refused(
    authz: RunningAuthz, issuer: Issuer, alg: str, index: int
) -> None:
    """The key chosen by kid must be of the algorithm's type."""
    token = issuer.token(key=issuer.keys[index], header={"alg": alg})
    assert await refused(authz, token) == "token algorithm does not match its key"


async def test_key_restricted_to_another_alg_is_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """An RSA key published with alg PS256 does not verify an RS256 token."""
    ps_key = issuer.keys[2]  # published with "alg": "PS256"
    token = issuer.token(key=ps_key, header={"alg": "RS256"})
    assert await refused(authz, token) == "token algorithm does not match its key"


@pytest.mark.parametrize("typ", ["JWT", "jwt", "at+jwt", "AT+JWT", "application/at+jwt", DROP])
async def test_accepted_typ_values(authz: RunningAuthz, issuer: Issuer, typ: Any) -> None:
    """typ absent, JWT or at+jwt (RFC 9068) — media types compare case-insensitively."""
    await accepted(authz, issuer.token(header={"typ": typ}))


@pytest.mark.parametrize("typ", ["JOSE", "dpop+jwt", "secevent+jwt", "", 1])
async def test_bad_typ_is_refused(authz: RunningAuthz, issuer: Issuer, typ: Any) -> None:
    """Any other typ (an ID token's cousins, a DPoP proof, …) is refused."""
    assert await refused(authz, issuer.token(header={"typ": typ})) == "token typ is not accepted"


async def test_duplicate_member_in_header_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """A header naming alg twice is refused, whichever value a parser would keep."""
    key = issuer.key
    raw = f'{{"alg":"ES256","kid":"{key.kid}","alg":"none"}}'
    assert await refused(authz, issuer.token(raw_header=raw)) == "token header is not a JSON object"


async def test_duplicate_member_in_payload_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """A correctly signed payload with sub twice is refused."""
    raw = json.dumps(issuer.claims())[:-1] + ', "sub": "admin"}'
    token = issuer.token(raw_payload=raw)
    assert await refused(authz, token) == "token payload is not a JSON object"


async def test_deeply_nested_header_is_refused_not_crashed(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """JSON nested past the parser's recursion limit is a clean 401, not a gRPC error."""
    token = issuer.token(raw_header="[" * 2500 + "]" * 2500)
    assert await refused(authz, token) == "token header is not a JSON object"


async def test_tampered_payload_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """Changing the payload after signing breaks the signature."""
    head, _, sig = issuer.token().split(".")
    body = b64url_encode(json.dumps(issuer.claims(sub="someone-else")).encode())
    assert await refused(authz, f"{head}.{body}.{sig}") == "token signature is invalid"


async def test_truncated_signature_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """An ES256 signature of the wrong length is refused, not padded."""
    head, body, signature = issuer.token().split(".")
    short = b64url_encode(b64url_decode(signature)[:-3])
    assert await refused(authz, f"{head}.{body}.{short}") == "token signature is invalid"


def _respelled(issuer: Issuer, segment: str) -> str:
    """A token from the issuer, signed over a second spelling of its `segment` (`header` or
    `payload`), or with its `signature` respelled."""
    key = issuer.key
    header = with_spare_bits(json.dumps({"alg": key.alg, "kid": key.kid, "typ": "JWT"}))
    payload = with_spare_bits(json.dumps(issuer.claims()))
    head, body = b64url_encode(header.encode()), b64url_encode(payload.encode())
    if segment == "header":
        head = respell(head)
    elif segment == "payload":
        body = respell(body)
    signature = b64url_encode(key.sign(f"{head}.{body}".encode()))
    if segment == "signature":
        signature = respell(signature)
    return f"{head}.{body}.{signature}"


async def test_canonical_spellings_are_accepted(authz: RunningAuthz, issuer: Issuer) -> None:
    """The control for the test below: the same construction, canonical, verifies."""
    await accepted(authz, _respelled(issuer, "none"))


@pytest.mark.parametrize(
    ("segment", "description"),
    [
        ("header", "token header is not a JSON object"),
        ("payload", "token payload is not a JSON object"),
        ("signature", "token signature is malformed"),
    ],
)
async def test_non_canonical_base64url_is_refused(
    authz: RunningAuthz, issuer: Issuer, segment: str, description: str
) -> None:
    """A segment whose last character has unused bits set is a second spelling of the same
    bytes: refused, so one token has one spelling (its cache key, anyone's deny-list key)."""
    assert await refused(authz, _respelled(issuer, segment)) == description


# --- claims ----------------------------------------------------------------------------------


async def test_expired_token_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """exp more than the 60 s leeway in the past is 401 token_expired."""
    now = int(time.time())
    await refused(authz, issuer.token(iat=now - 600, exp=now - 61), reason="token_expired")


async def test_token_within_leeway_is_accepted(authz: RunningAuthz, issuer: Issuer) -> None:
    """exp a few seconds ago is still inside the 60 s leeway."""
    now = int(time.time())
    await accepted(authz, issuer.token(iat=now - 600, exp=now - 5))


async def test_not_yet_valid_token_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """nbf beyond the leeway in the future is 401 token_not_yet_valid."""
    now = int(time.time())
    await refused(authz, issuer.token(nbf=now + 300), reason="token_not_yet_valid")


async def test_token_issued_in_the_future_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """iat beyond the leeway in the future is refused."""
    now = int(time.time())
    await refused(authz, issuer.token(iat=now + 300, exp=now + 900), reason="token_not_yet_valid")


async def test_too_long_lived_token_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """exp - iat over ORRERY_A2A_JWT_MAX_LIFETIME (24 h) is refused."""
    now = int(time.time())
    token = issuer.token(iat=now, exp=now + 24 * 3600 + 1)
    assert await refused(authz, token) == "token lifetime exceeds the maximum"


async def test_long_lived_token_without_iat_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """Without iat the remaining lifetime is capped instead."""
    token = issuer.token(iat=DROP, exp=int(time.time()) + 30 * 24 * 3600)
    assert await refused(authz, token) == "token lifetime exceeds the maximum"


async def test_max_lifetime_is_configurable(issuer: Issuer, jwks_file: Path) -> None:
    """ORRERY_A2A_JWT_MAX_LIFETIME=5m refuses a 10-minute token."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_JWT_MAX_LIFETIME": "5m"}
    async with running_authz(env) as authz:
        assert await refused(authz, issuer.token()) == "token lifetime exceeds the maximum"


async def test_wrong_issuer_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """iss must equal ORRERY_A2A_JWT_ISSUER exactly."""
    for iss in ("https://evil.test", ISSUER + "/", DROP, ["https://issuer.test"]):
        assert await refused(authz, issuer.token(iss=iss)) == "token issuer is not accepted"


@pytest.mark.parametrize("aud", [DROP, None, "", [], [None], 7])
async def test_missing_or_malformed_audience_is_refused(
    authz: RunningAuthz, issuer: Issuer, aud: Any
) -> None:
    """aud must be a non-empty string or list of strings."""
    assert await refused(authz, issuer.token(aud=aud)) == "token audience is missing or malformed"


@pytest.mark.parametrize("aud", ["someone-else", ["a", "b"], CONSOLE])
async def test_wrong_audience_is_refused(authz: RunningAuthz, issuer: Issuer, aud: Any) -> None:
    """An audience list that does not contain ORRERY_A2A_JWT_AUDIENCE is refused."""
    assert await refused(authz, issuer.token(aud=aud)) == "token audience is not accepted"


async def test_audience_list_containing_ours_is_accepted(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """aud may be a list that contains the configured audience."""
    await accepted(authz, issuer.token(aud=["other", AUDIENCE]))


@pytest.mark.parametrize("exp", ["1900000000", 1.9e9, True, None, DROP, [1900000000]])
async def test_string_or_non_integer_exp_is_refused(
    authz: RunningAuthz, issuer: Issuer, exp: Any
) -> None:
    """exp is required and must be a JSON integer (not a string, float, bool or null)."""
    assert await refused(authz, issuer.token(exp=exp)) == "token exp is missing or not an integer"


@pytest.mark.parametrize("name", ["iat", "nbf"])
async def test_non_integer_iat_and_nbf_are_refused(
    authz: RunningAuthz, issuer: Issuer, name: str
) -> None:
    """iat/nbf are optional, but when present they must be integers."""
    token = issuer.token(issuer.claims(**{name: str(int(time.time()))}))
    assert await refused(authz, token) == f"token {name} is missing or not an integer"


@pytest.mark.parametrize("sub", ["", DROP, None, 42, ["a"]])
async def test_empty_or_missing_sub_is_refused(
    authz: RunningAuthz, issuer: Issuer, sub: Any
) -> None:
    """sub must be a non-empty string."""
    assert await refused(authz, issuer.token(sub=sub)) == "token sub is missing, empty or malformed"


@pytest.mark.parametrize("sub", ["x\u0000y", "alice\n", "a\u007fb", "a\u0085b"])
async def test_sub_with_control_characters_is_refused(
    authz: RunningAuthz, issuer: Issuer, sub: str
) -> None:
    """A sub with a control character (NUL cannot even be stored) is not an identifier."""
    assert await refused(authz, issuer.token(sub=sub)) == "token sub is missing, empty or malformed"


@pytest.mark.parametrize("jti", [1, None, ["id"], {"id": "x"}, True])
async def test_a_jti_that_is_not_a_string_is_refused(
    authz: RunningAuthz, issuer: Issuer, jti: Any
) -> None:
    """RFC 7519 §4.1.7: jti is a string when present (found by the differential test: PyJWT
    refuses these, ours accepted them)."""
    assert await refused(authz, issuer.token(jti=jti)) == "token jti is not a string"


async def test_nan_in_payload_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """Python's json accepts NaN; a JWT parser must not."""
    raw = json.dumps(issuer.claims())[:-1] + ', "x": NaN}'
    assert await refused(authz, issuer.token(raw_payload=raw)) == (
        "token payload is not a JSON object"
    )


async def test_console_token_is_refused_on_a2a(authz: RunningAuthz, issuer: Issuer) -> None:
    """A token for the console audience is not a machine token."""
    assert await refused(authz, issuer.token(aud=CONSOLE)) == "token audience is not accepted"


async def test_a2a_token_is_refused_on_approvals(authz: RunningAuthz, issuer: Issuer) -> None:
    """The approvals surface requires the console audience."""
    refusal = denied(await authz.check(token=issuer.token(), surface="approvals"))
    assert (refusal.status, refusal.description) == (401, "token audience is not accepted")


# --- the verified-token cache (unit level, with an explicit clock) ---------------------------


def rules() -> TokenRules:
    return TokenRules(
        issuer=ISSUER,
        audience=AUDIENCE,
        console_audience=CONSOLE,
        algorithms=frozenset({"ES256", "RS256", "PS256", "EdDSA"}),
        max_lifetime=86400,
    )


async def loaded_store(issuer: Issuer, tmp_path: Path) -> KeyStore:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(issuer.jwks()))
    settings = JwksSettings(url=None, file=path, refresh=60, cooldown=0, stale=3600, timeout=1)
    store = KeyStore(settings, FileSource(path))
    await store.refresh()
    return store


async def test_cache_hit_rechecks_expiry(issuer: Issuer, tmp_path: Path) -> None:
    """A cached token is refused once its exp (plus leeway) has passed."""
    hits: list[bool] = []
    verifier = TokenVerifier(
        rules(), await loaded_store(issuer, tmp_path), cache_size=10, on_cache=hits.append
    )
    now = int(time.time())
    token = issuer.token(iat=now, exp=now + 100)
    await verifier.verify(token, AUDIENCE, now)
    await verifier.verify(token, AUDIENCE, now + 1)
    assert hits == [False, True]
    with pytest.raises(TokenExpired):
        await verifier.verify(token, AUDIENCE, now + 161)


async def test_cache_hit_rechecks_the_audience(issuer: Issuer, tmp_path: Path) -> None:
    """A token cached for one surface is still refused on the other."""
    verifier = TokenVerifier(rules(), await loaded_store(issuer, tmp_path), cache_size=10)
    token = issuer.token()
    now = time.time()
    await verifier.verify(token, AUDIENCE, now)
    with pytest.raises(InvalidToken, match="audience"):
        await verifier.verify(token, CONSOLE, now)


async def test_cache_entry_is_dropped_when_its_key_leaves_the_jwks(
    issuer: Issuer, tmp_path: Path
) -> None:
    """After a rotation that removes the key, the cached token no longer verifies."""
    store = await loaded_store(issuer, tmp_path)
    verifier = TokenVerifier(rules(), store, cache_size=10)
    token = issuer.token()
    await verifier.verify(token, AUDIENCE, time.time())
    store.current = parse_jwks(json.dumps(Issuer(issuer.keys[1:]).jwks()).encode())[0]
    with pytest.raises(UnknownSigningKey):
        await verifier.verify(token, AUDIENCE, time.time())


async def test_cache_is_bounded(issuer: Issuer, tmp_path: Path) -> None:
    """The cache never holds more than its size; the oldest entries go first."""
    hits: list[bool] = []
    verifier = TokenVerifier(
        rules(), await loaded_store(issuer, tmp_path), cache_size=3, on_cache=hits.append
    )
    tokens = [issuer.token(sub=f"s{i}") for i in range(5)]
    now = time.time()
    for token in tokens:
        await verifier.verify(token, AUDIENCE, now)
    await verifier.verify(tokens[-1], AUDIENCE, now)
    await verifier.verify(tokens[0], AUDIENCE, now)
    assert hits == [False] * 5 + [True, False]
    assert len(verifier) == 3
