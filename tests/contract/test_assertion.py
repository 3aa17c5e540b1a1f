"""The principal assertion codec: what authz signs is exactly what the adapter accepts."""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from typing import Any

import pytest

from contract import assertion
from contract.assertion import AssertionKeys, new_keys_spec, sign, verify
from contract.errors import AssertionExpired, InvalidAssertion
from contract.identity import Principal, principal_key
from contract.jose import b64url_decode, b64url_encode
from tests.base64url import respell, with_spare_bits

NOW = 1_800_000_000


def new_keys(*kids: str) -> AssertionKeys:
    return AssertionKeys.parse(new_keys_spec(*kids))


KEYS = new_keys("k1")
DELEGATED = Principal(
    kind="delegated",
    subject="alice",
    client="ci-bot",
    agent="triage-agent",
    role="operator",
    autonomy="L3",
)
SERVICE = Principal(
    kind="service", subject="svc-1", client="svc-1", agent="", role="operator", autonomy="L2"
)
HUMAN = Principal(
    kind="human", subject="alice", client="console", agent="", role="operator", autonomy="L3"
)


def mint(
    principal: Principal = DELEGATED,
    *,
    keys: AssertionKeys = KEYS,
    surface: Any = "a2a",
    rid: str = "req-1",
    now: int = NOW,
) -> str:
    return sign(
        keys, principal, surface=surface, request_id=rid, token_expires_at=NOW + 600, now=now
    )


def forge(
    claims: dict[str, Any], header: dict[str, Any] | None = None, secret: bytes | None = None
) -> str:
    """Sign arbitrary claims with k1's real secret, to test the claim checks behind the MAC."""
    head = b64url_encode(json.dumps(header or {"alg": "HS256", "kid": "k1", "typ": "JWT"}).encode())
    body = b64url_encode(json.dumps(claims).encode())
    key = secret if secret is not None else KEYS.keys[0][1]
    mac = hmac.new(key, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64url_encode(mac)}"


def claims_of(token: str) -> dict[str, Any]:
    payload = token.split(".")[1]
    decoded: dict[str, Any] = json.loads(b64url_decode(payload))
    return decoded


def test_round_trip_returns_the_signed_principal() -> None:
    """A freshly signed assertion verifies to the same principal, surface and request."""
    result = verify(KEYS, mint(), request_id="req-1", surface="a2a", now=NOW + 1)
    assert result.principal == DELEGATED
    assert (result.surface, result.request_id, result.token_expires_at) == (
        "a2a",
        "req-1",
        NOW + 600,
    )
    assert result.expires_at - result.issued_at == assertion.LIFETIME_SECONDS


@pytest.mark.parametrize("extra", [0, 1, 2])
@pytest.mark.parametrize("rid", ["r", "req-12", "0f8e6c1a-4d2b-4e9f-9a3c-5b7d1e2f3a4b"])
def test_one_signer_signs_what_encoding_the_whole_payload_would(extra: int, rid: str) -> None:
    """Whichever base64 group the fixed claims end in, a caller's `Signer` gives the bytes of
    encoding and MACing the whole assertion at once, for each request in turn."""
    who = Principal("service", "s" * (5 + extra), "svc", "", "operator", "L2")
    signer = assertion.Signer(KEYS, who, surface="a2a", token_expires_at=NOW + 600)
    for now in (NOW, NOW + 1):
        signed = signer.sign(rid, now)
        head, payload, _ = signed.split(".")
        mac = hmac.new(KEYS.keys[0][1], f"{head}.{payload}".encode(), hashlib.sha256)
        assert signed == f"{head}.{payload}.{b64url_encode(mac.digest())}"
        assert b64url_encode(b64url_decode(payload)) == payload
        checked = verify(KEYS, signed, request_id=rid, surface="a2a", now=now)
        assert (checked.principal, checked.issued_at) == (who, now)


def test_claims_match_the_design_table() -> None:
    """The payload carries exactly the claims docs/contract.md#the-principal-assertion lists."""
    claims = claims_of(mint())
    assert set(claims) == {
        "iss",
        "aud",
        "iat",
        "exp",
        "rid",
        "surface",
        "kind",
        "sub",
        "client",
        "agent",
        "key",
        "role",
        "autonomy",
        "tok_exp",
    }
    assert claims["iss"] == "orrery-authz"
    assert claims["aud"] == "orrery-a2a-adapter"
    assert claims["key"] == "delegated:ci-bot:triage-agent:alice"


def test_header_names_the_signing_kid() -> None:
    """The protected header is HS256 with the first key's kid."""
    head = mint().split(".")[0]
    header = json.loads(b64url_decode(head))
    assert header == {"alg": "HS256", "kid": "k1", "typ": "JWT"}


def test_absent_assertion_is_refused() -> None:
    """No header at all is a 401, not an anonymous caller."""
    with pytest.raises(InvalidAssertion):
        verify(KEYS, None, request_id="req-1", surface="a2a", now=NOW)


def test_wrong_key_is_refused() -> None:
    """An assertion signed with a key the verifier does not hold is refused."""
    other = AssertionKeys(((KEYS.keys[0][0], secrets.token_bytes(32)),))
    with pytest.raises(InvalidAssertion, match="signature"):
        verify(other, mint(), request_id="req-1", surface="a2a", now=NOW)


def test_unknown_kid_is_refused() -> None:
    """A kid outside the configured set is refused before any MAC is computed."""
    with pytest.raises(InvalidAssertion, match="unknown key"):
        verify(KEYS, mint(keys=new_keys("k9")), request_id="req-1", surface="a2a", now=NOW)


def test_tampered_payload_is_refused() -> None:
    """Changing one claim after signing breaks the signature."""
    head, _, sig = mint().split(".")
    claims = claims_of(mint())
    claims["autonomy"] = "L3"
    claims["kind"] = "human"
    tampered = f"{head}.{b64url_encode(json.dumps(claims).encode())}.{sig}"
    with pytest.raises(InvalidAssertion, match="signature"):
        verify(KEYS, tampered, request_id="req-1", surface="a2a", now=NOW)


def test_respelled_signature_is_refused() -> None:
    """The HMAC written with an unused bit set decodes to the same bytes: still refused."""
    head, body, sig = mint().split(".")
    with pytest.raises(InvalidAssertion, match="malformed"):
        verify(KEYS, f"{head}.{body}.{respell(sig)}", request_id="req-1", surface="a2a", now=NOW)


def _signed(header: str, payload: str, respelled: int | None) -> str:
    """An assertion over these JSON texts with k1's MAC, segment `respelled` spelled twice."""
    parts = [b64url_encode(header.encode()), b64url_encode(payload.encode())]
    if respelled is not None:
        parts[respelled] = respell(parts[respelled])
    mac = hmac.new(KEYS.keys[0][1], ".".join(parts).encode(), hashlib.sha256).digest()
    return ".".join([*parts, b64url_encode(mac)])


@pytest.mark.parametrize("segment", [0, 1], ids=["header", "payload"])
def test_respelled_header_or_payload_is_refused(segment: int) -> None:
    """A header or payload spelled non-canonically is refused even under a valid MAC."""
    header = with_spare_bits(json.dumps({"alg": "HS256", "kid": "k1", "typ": "JWT"}))
    payload = with_spare_bits(json.dumps(claims_of(mint())))
    verify(KEYS, _signed(header, payload, None), request_id="req-1", surface="a2a", now=NOW)
    with pytest.raises(InvalidAssertion, match="malformed"):
        verify(KEYS, _signed(header, payload, segment), request_id="req-1", surface="a2a", now=NOW)


def test_expired_assertion_is_refused() -> None:
    """An assertion past exp (plus the small leeway) is refused as expired."""
    late = NOW + assertion.LIFETIME_SECONDS + assertion.CLOCK_LEEWAY_SECONDS
    with pytest.raises(AssertionExpired):
        verify(KEYS, mint(), request_id="req-1", surface="a2a", now=late)


def test_future_assertion_is_refused() -> None:
    """An assertion issued beyond the leeway in the future is refused."""
    with pytest.raises(InvalidAssertion, match="future"):
        verify(KEYS, mint(now=NOW + 60), request_id="req-1", surface="a2a", now=NOW)


def test_wrong_request_id_is_refused() -> None:
    """An assertion replayed on another request (another x-request-id) is refused."""
    with pytest.raises(InvalidAssertion, match="another request"):
        verify(KEYS, mint(rid="req-1"), request_id="req-2", surface="a2a", now=NOW)


def test_missing_request_id_is_refused() -> None:
    """Without an x-request-id to bind to, no assertion is accepted."""
    with pytest.raises(InvalidAssertion, match="another request"):
        verify(KEYS, mint(), request_id=None, surface="a2a", now=NOW)


def test_wrong_surface_is_refused() -> None:
    """An a2a assertion is no good on the approvals surface."""
    with pytest.raises(InvalidAssertion, match="surface"):
        verify(KEYS, mint(), request_id="req-1", surface="approvals", now=NOW)


def test_human_is_refused_on_the_a2a_surface() -> None:
    """A human principal never appears on the machine surface, even if signed."""
    with pytest.raises(InvalidAssertion, match="kind"):
        verify(KEYS, mint(HUMAN, surface="a2a"), request_id="req-1", surface="a2a", now=NOW)


def test_machine_is_refused_on_the_approvals_surface() -> None:
    """Only a human decides approvals."""
    token = mint(SERVICE, surface="approvals")
    with pytest.raises(InvalidAssertion, match="kind"):
        verify(KEYS, token, request_id="req-1", surface="approvals", now=NOW)


def test_wrong_audience_is_refused() -> None:
    """A correctly signed token for another audience is refused."""
    claims = claims_of(mint())
    claims["aud"] = "someone-else"
    with pytest.raises(InvalidAssertion, match="not for this adapter"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


def test_key_that_differs_from_claims_is_refused() -> None:
    """A key claim that is not recomputable from the claims is refused."""
    claims = claims_of(mint())
    claims["key"] = principal_key("delegated", "ci-bot", "other-agent", "alice")
    with pytest.raises(InvalidAssertion, match="key does not match"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


def test_extra_claim_is_refused() -> None:
    """The claim set is closed: an unexpected claim is refused."""
    claims = claims_of(mint())
    claims["admin"] = True
    with pytest.raises(InvalidAssertion, match="claims"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


def test_overlong_lifetime_is_refused() -> None:
    """A signed assertion that claims more than 30 s of life is refused."""
    claims = claims_of(mint())
    claims["exp"] = claims["iat"] + 3600
    with pytest.raises(InvalidAssertion, match="lifetime"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


def test_boolean_time_is_refused() -> None:
    """`true` is not an integer time even though Python says bool is an int."""
    claims = claims_of(mint())
    claims["tok_exp"] = True
    with pytest.raises(InvalidAssertion, match="tok_exp"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


def test_delegated_without_agent_is_refused() -> None:
    """A delegated principal must name its acting agent."""
    claims = claims_of(mint())
    claims["agent"] = ""
    claims["key"] = principal_key("delegated", "ci-bot", "", "alice")
    with pytest.raises(InvalidAssertion, match="agent"):
        verify(KEYS, forge(claims), request_id="req-1", surface="a2a", now=NOW)


@pytest.mark.parametrize("alg", ["none", "None", "NONE", "HS512", "RS256", "hs256"])
def test_other_algorithms_are_refused(alg: str) -> None:
    """Only HS256 is accepted, whatever the header asks for."""
    token = forge(claims_of(mint()), header={"alg": alg, "kid": "k1"})
    with pytest.raises(InvalidAssertion, match="header"):
        verify(KEYS, token, request_id="req-1", surface="a2a", now=NOW)


def test_extra_header_parameter_is_refused() -> None:
    """Header parameters beyond alg/kid/typ (jwk, crit, …) are refused."""
    token = forge(claims_of(mint()), header={"alg": "HS256", "kid": "k1", "crit": ["x"]})
    with pytest.raises(InvalidAssertion, match="header"):
        verify(KEYS, token, request_id="req-1", surface="a2a", now=NOW)


def test_duplicate_json_members_are_refused() -> None:
    """A payload with a member twice is refused (no parser-differential games)."""
    head = b64url_encode(json.dumps({"alg": "HS256", "kid": "k1"}).encode())
    raw = json.dumps(claims_of(mint()))[:-1] + ', "kind": "service"}'
    body = b64url_encode(raw.encode())
    mac = hmac.new(KEYS.keys[0][1], f"{head}.{body}".encode(), hashlib.sha256).digest()
    with pytest.raises(InvalidAssertion, match="malformed"):
        verify(
            KEYS, f"{head}.{body}.{b64url_encode(mac)}", request_id="req-1", surface="a2a", now=NOW
        )


@pytest.mark.parametrize("value", ["a.b", "a.b.c.d", "a.b.c d", "x" * 5000, "ä.b.c", "..."])
def test_malformed_values_are_refused(value: str) -> None:
    """Anything that is not one compact JWS of bounded size is refused."""
    with pytest.raises(InvalidAssertion):
        verify(KEYS, value, request_id="req-1", surface="a2a", now=NOW)


def test_rotation_second_key_still_verifies() -> None:
    """During rotation an assertion signed by the old key verifies with the new key list."""
    old = new_keys("old")
    rotated = AssertionKeys(new_keys("new").keys + old.keys)
    token = mint(keys=old)
    assert verify(rotated, token, request_id="req-1", surface="a2a", now=NOW).principal == DELEGATED
    head = claims_of(mint(keys=rotated))
    assert head["kind"] == "delegated"
    assert rotated.signing_kid == "new"


def test_human_round_trip_on_approvals() -> None:
    """A human assertion for the approvals surface verifies there."""
    token = mint(HUMAN, surface="approvals")
    assert verify(KEYS, token, request_id="req-1", surface="approvals", now=NOW).principal == HUMAN


@pytest.mark.parametrize(
    ("spec", "problem"),
    [
        ("", "no keys"),
        ("k1", "expected kid=base64url-secret"),
        ("k1=" + b64url_encode(b"short"), "at least 32 bytes"),
        ("k1=not*base64", "not base64url"),
        ("k1=" + b64url_encode(bytes(32)) + ",k1=" + b64url_encode(bytes(32)), "listed twice"),
        ("bad kid=" + b64url_encode(bytes(32)), "expected kid"),
    ],
)
def test_key_spec_errors_name_the_problem(spec: str, problem: str) -> None:
    """A bad ORRERY_A2A_ASSERTION_KEYS says what is wrong without echoing a secret."""
    with pytest.raises(ValueError, match=problem):
        AssertionKeys.parse(spec)


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(b64url_encode(b"s" * 32) + "=", id="no kid, padded secret"),
        pytest.param(b64url_encode(b"s" * 32) + "==", id="no kid, doubly padded"),
        pytest.param(b64url_encode(b"s" * 30) + "=bad*", id="secret before an equals sign"),
        pytest.param(
            "k1=" + b64url_encode(b"s" * 32) + "," + b64url_encode(b"s" * 32) + "=",
            id="second entry without kid",
        ),
        pytest.param(
            b64url_encode(b"s" * 32)
            + "="
            + b64url_encode(b"t" * 32)
            + ","
            + b64url_encode(b"s" * 32)
            + "="
            + b64url_encode(b"t" * 32),
            id="secret as kid, listed twice",
        ),
    ],
)
def test_a_malformed_key_entry_never_echoes_key_material(spec: str) -> None:
    """Whatever is wrong with an entry, the error names its position, not any part of it: an
    entry without `kid=` puts the secret where the kid would be."""
    with pytest.raises(ValueError, match=r"^entry \d+: ") as raised:
        AssertionKeys.parse(spec)
    message = str(raised.value)
    for secret in (b64url_encode(b"s" * 32), b64url_encode(b"s" * 30), b64url_encode(b"t" * 32)):
        assert secret[:8] not in message


def test_keys_repr_hides_secrets() -> None:
    """Printing the key set shows kids only."""
    keys = AssertionKeys.parse("k1=" + b64url_encode(b"s" * 32))
    assert "c3Nz" not in repr(keys)
    assert b"s" * 32 not in repr(keys).encode()
    assert "k1" in repr(keys)


def test_principal_key_is_unambiguous() -> None:
    """Separators inside components cannot make two identities share a key."""
    assert principal_key("service", "cx:", "", "y") != principal_key("service", "cx", "", ":y")
    assert principal_key("service", "a%3A", "", "b") != principal_key("service", "a:", "", "b")
    assert principal_key("delegated", "c", "a", "s") == "delegated:c:a:s"


def test_request_id_with_json_metacharacters_round_trips() -> None:
    """Quotes and backslashes in a request id are escaped, not able to forge members."""
    rid = 'a"b\\c","kind":"human'
    token = mint(rid=rid)
    assert claims_of(token)["rid"] == rid
    assert claims_of(token)["kind"] == "delegated"
    assert verify(KEYS, token, request_id=rid, surface="a2a", now=NOW).request_id == rid


def test_non_integer_time_cannot_be_signed() -> None:
    """Times are formatted as integers; a float is a programming error, not a claim."""
    with pytest.raises(ValueError):
        # on purpose: the wrong type is what this test passes
        sign(KEYS, DELEGATED, surface="a2a", request_id="r", token_expires_at=1, now=1.5)  # type: ignore[arg-type]


def test_non_ascii_kid_is_refused_cleanly() -> None:
    """A crafted non-ASCII kid is an unknown key (a 401), never a TypeError (a 500)."""
    token = forge(claims_of(mint()), header={"alg": "HS256", "kid": "k\u00e9"})
    with pytest.raises(InvalidAssertion, match="unknown key"):
        verify(KEYS, token, request_id="req-1", surface="a2a", now=NOW)


def test_non_ascii_request_id_is_refused_cleanly() -> None:
    """A non-ASCII x-request-id that differs from rid is another request, not a crash."""
    with pytest.raises(InvalidAssertion, match="another request"):
        verify(KEYS, mint(), request_id="r\u00e9q-1", surface="a2a", now=NOW)


def test_new_keys_spec_gives_one_fresh_key_per_kid() -> None:
    """`new_keys_spec` is a valid key list: the kids in order, distinct 32-byte secrets."""
    keys = AssertionKeys.parse(new_keys_spec("new", "old"))
    assert [kid for kid, _ in keys.keys] == ["new", "old"]
    assert keys.signing_kid == "new"
    assert len({secret for _, secret in keys.keys}) == 2
    assert all(len(secret) == assertion.MIN_SECRET_BYTES for _, secret in keys.keys)
    assert (
        AssertionKeys.parse(new_keys_spec("new")).keys
        != AssertionKeys.parse(new_keys_spec("new")).keys
    )


def test_an_expired_assertion_is_still_an_invalid_one() -> None:
    """Callers that catch `InvalidAssertion` also catch expiry, with its own reason code."""
    with pytest.raises(InvalidAssertion) as caught:
        verify(KEYS, mint(now=NOW - 3600), request_id="req-1", surface="a2a", now=NOW)
    assert isinstance(caught.value, AssertionExpired)
    assert (caught.value.reason, InvalidAssertion.reason) == (
        "assertion_expired",
        "assertion_invalid",
    )
