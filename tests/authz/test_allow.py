"""What an allowed request carries upstream: the signed assertion, header hygiene, trace link."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from envoy.config.core.v3.base_pb2 import HeaderValueOption

from contract.assertion import AssertionKeys, new_keys_spec
from contract.errors import AssertionExpired, InvalidAssertion
from tests.authz.support import (
    Issuer,
    RunningAuthz,
    adapter_verify,
    base_env,
    ok_headers,
    running_authz,
)

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


async def test_ok_response_overwrites_and_removes_explicitly(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """Every header is set with append=false AND OVERWRITE_IF_EXISTS_OR_ADD; credentials go."""
    response = await authz.check({"traceparent": TRACEPARENT}, token=issuer.token())
    ok = response.ok_response
    assert [h.header.key for h in ok.headers] == ["x-orrery-principal", "x-orrery-trace-link"]
    for option in ok.headers:
        assert option.HasField("append")
        assert option.append.value is False
        assert option.append_action == HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    assert list(ok.headers_to_remove) == ["authorization", "traceparent", "tracestate"]


async def test_assertion_round_trip_through_the_service(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """The adapter's verify() accepts what Check produced, for that request id and surface."""
    exp = int(time.time()) + 300
    token = issuer.token(exp=exp)
    response = await authz.check(token=token, request_id="rid-42")
    result = adapter_verify(authz.settings.assertion_keys, response, request_id="rid-42")
    assert result.principal.key == "service:svc-reporter::svc-reporter"
    assert result.token_expires_at == exp
    assert token not in ok_headers(response)["x-orrery-principal"]


async def test_assertion_for_another_request_is_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """Replaying the header on another request (another x-request-id) fails at the adapter."""
    response = await authz.check(token=issuer.token(), request_id="rid-1")
    with pytest.raises(InvalidAssertion, match="another request"):
        adapter_verify(authz.settings.assertion_keys, response, request_id="rid-2")


async def test_assertion_for_another_surface_is_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """An a2a assertion does not open the approvals surface."""
    response = await authz.check(token=issuer.token())
    with pytest.raises(InvalidAssertion, match="surface"):
        adapter_verify(authz.settings.assertion_keys, response, surface="approvals")


async def test_assertion_expires_after_30_seconds(authz: RunningAuthz, issuer: Issuer) -> None:
    """The assertion is per request: 30 s (plus the adapter's small leeway) and it is gone."""
    response = await authz.check(token=issuer.token())
    with pytest.raises(AssertionExpired):
        adapter_verify(authz.settings.assertion_keys, response, later=40)


async def test_assertion_with_a_key_the_adapter_lacks_is_refused(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """An adapter configured with other keys refuses authz's assertion."""
    response = await authz.check(token=issuer.token())
    other = AssertionKeys.parse(new_keys_spec("a1"))  # same kid, different secret
    with pytest.raises(InvalidAssertion, match="signature"):
        adapter_verify(other, response)


async def test_assertion_key_rotation(issuer: Issuer, jwks_file: Path) -> None:
    """authz signs with the first key; an adapter holding old and new keys verifies both."""
    old_spec, new_spec = new_keys_spec("old"), new_keys_spec("new")
    adapter_keys = AssertionKeys.parse(f"{new_spec},{old_spec}")
    for spec, kid in ((old_spec, "old"), (f"{new_spec},{old_spec}", "new")):
        env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_ASSERTION_KEYS": spec}
        async with running_authz(env) as authz:
            response = await authz.check(token=issuer.token())
        assert authz.settings.assertion_keys.signing_kid == kid
        adapter_verify(adapter_keys, response)


async def test_valid_traceparent_becomes_a_trace_link(authz: RunningAuthz, issuer: Issuer) -> None:
    """The inbound traceparent moves to x-orrery-trace-link."""
    headers = ok_headers(await authz.check({"traceparent": TRACEPARENT}, token=issuer.token()))
    assert headers["x-orrery-trace-link"] == TRACEPARENT


async def test_without_a_link_any_trace_link_header_is_removed(
    authz: RunningAuthz, issuer: Issuer
) -> None:
    """No valid traceparent: the allow removes x-orrery-trace-link, so a proxy that did not strip
    a client's copy (Istio's sidecar) still never forwards one authz did not set."""
    response = await authz.check({"traceparent": "garbage"}, token=issuer.token())
    ok = response.ok_response
    assert [h.header.key for h in ok.headers] == ["x-orrery-principal"]
    assert "x-orrery-trace-link" in ok.headers_to_remove


async def test_invalid_traceparent_is_dropped(authz: RunningAuthz, issuer: Issuer) -> None:
    """A malformed traceparent is removed and not linked."""
    headers = ok_headers(await authz.check({"traceparent": "garbage"}, token=issuer.token()))
    assert "x-orrery-trace-link" not in headers
