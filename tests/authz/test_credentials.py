"""Request-level refusals through the real gRPC service, in contract order, before any crypto."""

from __future__ import annotations

import pytest
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest

from tests.authz.support import Issuer, RunningAuthz, denied, ok_headers
from tests.query_credentials import ACCEPTED, FRAGMENTS, REFUSED


@pytest.mark.parametrize("name", ["x-orrery-principal", "x-orrery-trace-link", "x-orrery-anything"])
async def test_reserved_header_is_refused_400(
    authz: RunningAuthz, issuer: Issuer, name: str
) -> None:
    """A client-sent x-orrery-* header (other than the hop) is 400 reserved_header."""
    refusal = denied(await authz.check({name: "forged"}, token=issuer.token()))
    assert (refusal.status, refusal.reason) == (400, "reserved_header")


async def test_hop_header_is_refused_508(authz: RunningAuthz, issuer: Issuer) -> None:
    """A call from Orrery itself (x-orrery-hop) is 508 loop_detected."""
    refusal = denied(await authz.check({"x-orrery-hop": "1"}, token=issuer.token()))
    assert (refusal.status, refusal.reason) == (508, "loop_detected")


async def test_reserved_header_is_checked_before_the_hop(authz: RunningAuthz) -> None:
    """With both, the reserved header wins (step 1 before step 2)."""
    refusal = denied(await authz.check({"x-orrery-hop": "1", "x-orrery-principal": "x"}))
    assert refusal.reason == "reserved_header"


async def test_hop_is_checked_before_credentials(authz: RunningAuthz) -> None:
    """No token at all still gets 508 when the hop header is there."""
    assert denied(await authz.check({"x-orrery-hop": "1"})).status == 508


async def test_missing_authorization_is_401_with_realm_challenge(authz: RunningAuthz) -> None:
    """No credential: 401 missing_credential and the RFC 6750 §3 challenge without an error."""
    refusal = denied(await authz.check())
    assert (refusal.status, refusal.reason) == (401, "missing_credential")
    assert refusal.headers["www-authenticate"] == 'Bearer realm="orrery-a2a"'
    assert refusal.headers["content-type"] == "application/json"


async def test_two_authorization_headers_are_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """Envoy joins repeated headers with a comma; two bearer tokens are refused."""
    token = issuer.token()
    refusal = denied(await authz.check({"authorization": f"Bearer {token},Bearer {token}"}))
    assert (refusal.status, refusal.reason) == (401, "missing_credential")
    assert "more than one" in refusal.description


async def test_two_authorization_headers_in_raw_header_map_are_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """With encode_raw_headers Envoy sends one entry per value; two are still refused."""
    request = CheckRequest()
    request.attributes.request.http.path = "/a2a"
    entries = request.attributes.request.http.header_map.headers
    for name, value in [
        ("x-request-id", "req-1"),
        ("authorization", f"Bearer {issuer.token()}"),
        ("Authorization", f"Bearer {issuer.token()}"),
    ]:
        entries.add(key=name, raw_value=value.encode())
    refusal = denied(await authz.stub.Check(request, timeout=30))
    assert refusal.reason == "missing_credential"


async def test_raw_header_map_is_read(authz: RunningAuthz, issuer: Issuer) -> None:
    """A single bearer token in header_map (encode_raw_headers) is accepted."""
    request = CheckRequest()
    request.attributes.request.http.path = "/a2a"
    entries = request.attributes.request.http.header_map.headers
    entries.add(key="x-request-id", raw_value=b"req-1")
    entries.add(key="authorization", raw_value=f"Bearer {issuer.token()}".encode())
    assert "x-orrery-principal" in ok_headers(await authz.stub.Check(request, timeout=30))


@pytest.mark.parametrize(
    "value",
    [
        "Basic dXNlcjpwYXNz",
        "Token abc.def.ghi",
        "Bearer",
        "Bearer ",
        "bearer",
        "MAC abc",
        "Bearerabc.d.e",
    ],
)
async def test_non_bearer_schemes_are_refused(authz: RunningAuthz, value: str) -> None:
    """Only the Bearer scheme carries a credential here."""
    refusal = denied(await authz.check({"authorization": value}))
    assert (refusal.status, refusal.reason) == (401, "missing_credential")


@pytest.mark.parametrize("scheme", ["bearer", "BEARER", "BeArEr"])
async def test_bearer_scheme_is_case_insensitive(
    authz: RunningAuthz, issuer: Issuer, scheme: str
) -> None:
    """RFC 7235: the auth-scheme is case-insensitive."""
    response = await authz.check({"authorization": f"{scheme} {issuer.token()}"})
    assert "x-orrery-principal" in ok_headers(response)


async def test_oversize_token_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """A token over 8 KiB is refused before it is parsed."""
    token = issuer.token(padding="x" * 9000)
    refusal = denied(await authz.check(token=token))
    assert (refusal.status, refusal.reason) == (401, "token_invalid")
    assert refusal.description == "token is too large"
    assert "invalid_token" in refusal.headers["www-authenticate"]


@pytest.mark.parametrize(
    "token",
    ["abc.def", "a.b.c.d", "abc.d+f.ghi", "abc.def.gh=", "abc..ghi", "ab c.def.ghi", "é.b.c"],
)
async def test_non_base64url_tokens_are_refused(authz: RunningAuthz, token: str) -> None:
    """Only base64url characters and exactly two dots make a token."""
    refusal = denied(await authz.check({"authorization": f"Bearer {token}"}))
    assert (refusal.status, refusal.reason) == (401, "token_invalid")


async def test_missing_request_id_is_refused_400(authz: RunningAuthz, issuer: Issuer) -> None:
    """Without Envoy's x-request-id nothing is signed (400 bad_request)."""
    refusal = denied(await authz.check(token=issuer.token(), request_id=None))
    assert (refusal.status, refusal.reason) == (400, "bad_request")


async def test_unprintable_request_id_is_refused(authz: RunningAuthz, issuer: Issuer) -> None:
    """A request id that could smuggle structure into logs or the assertion is refused."""
    refusal = denied(await authz.check(token=issuer.token(), request_id="a\nb"))
    assert refusal.reason == "bad_request"


async def test_unknown_surface_is_refused_403(authz: RunningAuthz, issuer: Issuer) -> None:
    """A route labelled with a surface we do not know is 403 forbidden."""
    refusal = denied(await authz.check(token=issuer.token(), surface="admin"))
    assert (refusal.status, refusal.reason) == (403, "forbidden")


async def test_unlabelled_route_is_the_a2a_surface(authz: RunningAuthz, issuer: Issuer) -> None:
    """No surface label means a2a, the most restrictive surface."""
    response = await authz.check(token=issuer.token())
    assert "x-orrery-principal" in ok_headers(response)


async def test_denial_never_echoes_the_token(authz: RunningAuthz, issuer: Issuer) -> None:
    """Neither the body nor the headers of a denial contain the presented token."""
    token = issuer.token(exp=1)
    response = await authz.check(token=token)
    raw = response.SerializeToString()
    assert token.encode() not in raw
    assert token.split(".")[1].encode() not in raw


QUERY_CHALLENGE = (
    'Bearer realm="orrery-a2a", error="invalid_request", '
    'error_description="an access token is accepted only in the Authorization header"'
)


@pytest.mark.parametrize(
    "suffix",
    [*(f"?{query}" for query in REFUSED.values()), *FRAGMENTS.values()],
    ids=[*REFUSED.keys(), *FRAGMENTS.keys()],
)
async def test_an_access_token_in_the_query_is_refused_400(
    authz: RunningAuthz, issuer: Issuer, suffix: str
) -> None:
    """RFC 6750 §2 + §3.1: a token in the query (any spelling), even beside a valid bearer
    header, is 400 invalid_request with its challenge — behind any proxy, not only our Envoy."""
    refusal = denied(await authz.check(token=issuer.token(), path=f"/a2a{suffix}"))
    assert (refusal.status, refusal.reason) == (400, "invalid_request")
    assert refusal.headers["www-authenticate"] == QUERY_CHALLENGE


@pytest.mark.parametrize("query", ACCEPTED.values(), ids=ACCEPTED.keys())
async def test_a_query_without_a_token_is_allowed(
    authz: RunningAuthz, issuer: Issuer, query: str
) -> None:
    """Look-alikes of the parameter name are no credential."""
    assert ok_headers(await authz.check(token=issuer.token(), path=f"/a2a?{query}"))


async def test_the_query_is_checked_before_the_bearer(authz: RunningAuthz) -> None:
    """No Authorization header at all: still invalid_request, not missing_credential."""
    refusal = denied(await authz.check(path="/a2a?access_token=x"))
    assert refusal.reason == "invalid_request"
