"""What a token not verified yet may cost (docs/authz.md#what-a-token-not-verified-yet-may-cost): a
signature check, paid from its client address's budget and then from the process's, through the
real service. A cached valid token and a remembered refusal never pay."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from authz.admission import client_of
from tests.authz.support import Issuer, RunningAuthz, base_env, denied, ok_headers, running_authz

ADDRESS = "x-envoy-external-address"


def forged(issuer: Issuer) -> str:
    """A token under a published kid with a random signature: a signature check each, since
    every one is new (no refusal is remembered for it)."""
    return issuer.token(jti=secrets.token_hex(8), signature=secrets.token_bytes(64))


@pytest.fixture
async def per_client(jwks_file: Path) -> AsyncIterator[RunningAuthz]:
    """Three signature checks a minute per client address; the process's budget is ample."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_CLIENT_VERIFY_LIMIT": "3/minute"}
    async with running_authz(env) as running:
        yield running


@pytest.fixture
async def per_process(jwks_file: Path) -> AsyncIterator[RunningAuthz]:
    """Three signature checks a minute in the process; each address's budget is ample."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_VERIFY_LIMIT": "3/minute"}
    async with running_authz(env) as running:
        yield running


async def test_a_flood_from_one_address_is_refused_before_its_signatures_are_checked(
    per_client: RunningAuthz, issuer: Issuer
) -> None:
    """Past its budget an address's new tokens are 429 new_token_rate_limited with Retry-After,
    forged or not, while another address is still verified."""
    flooder = {ADDRESS: "203.0.113.7"}
    for _ in range(3):
        refusal = denied(await per_client.check(flooder, token=forged(issuer)))
        assert (refusal.status, refusal.reason) == (401, "token_invalid")
    for token in (forged(issuer), issuer.token()):
        refusal = denied(await per_client.check(flooder, token=token))
        assert (refusal.status, refusal.reason) == (429, "new_token_rate_limited")
        assert int(refusal.headers["retry-after"]) >= 1
    other = denied(await per_client.check({ADDRESS: "203.0.113.8"}, token=forged(issuer)))
    assert (other.status, other.reason) == (401, "token_invalid")


async def test_a_cached_valid_token_never_pays(per_client: RunningAuthz, issuer: Issuer) -> None:
    """A token verified before the flood is still allowed from the flooded address."""
    client = {ADDRESS: "203.0.113.9"}
    valid = issuer.token()
    assert "x-orrery-principal" in ok_headers(await per_client.check(client, token=valid))
    for _ in range(5):
        await per_client.check(client, token=forged(issuer))
    for _ in range(5):
        assert "x-orrery-principal" in ok_headers(await per_client.check(client, token=valid))


async def test_a_remembered_refusal_never_pays(per_client: RunningAuthz, issuer: Issuer) -> None:
    """The same forged token again is answered from memory, not from the budget."""
    client = {ADDRESS: "203.0.113.10"}
    token = forged(issuer)
    for _ in range(10):
        refusal = denied(await per_client.check(client, token=token))
        assert (refusal.status, refusal.reason) == (401, "token_invalid")


async def test_an_ipv6_client_pays_per_64(per_client: RunningAuthz, issuer: Issuer) -> None:
    """Addresses rotated within one /64 share its budget; the next /64 has its own."""
    for host in ("1", "2", "ffff:ffff:ffff:ffff"):
        client = {ADDRESS: f"2001:db8:0:7::{host}" if ":" not in host else f"2001:db8:0:7:{host}"}
        await per_client.check(client, token=forged(issuer))
    same = denied(await per_client.check({ADDRESS: "2001:db8:0:7::abcd"}, token=forged(issuer)))
    assert same.reason == "new_token_rate_limited"
    next_64 = denied(await per_client.check({ADDRESS: "2001:db8:0:8::1"}, token=forged(issuer)))
    assert next_64.reason == "token_invalid"


async def test_without_the_header_the_checks_source_address_pays(
    per_client: RunningAuthz, issuer: Issuer
) -> None:
    """Where no edge Envoy named the client (a mesh's sidecar asking), the Check's source address
    is the client."""
    for _ in range(3):
        await per_client.check(token=forged(issuer), source="198.51.100.4")
    refusal = denied(await per_client.check(token=forged(issuer), source="198.51.100.4"))
    assert refusal.reason == "new_token_rate_limited"
    other = denied(await per_client.check(token=forged(issuer), source="198.51.100.5"))
    assert other.reason == "token_invalid"


async def test_a_flood_from_many_addresses_meets_the_process_budget(
    per_process: RunningAuthz, issuer: Issuer
) -> None:
    """However many addresses send new tokens, the process checks at most its budget of
    signatures and then answers 503 verification_busy with Retry-After at once; what it
    verified before is still allowed."""
    valid = issuer.token()
    assert "x-orrery-principal" in ok_headers(await per_process.check(token=valid))
    for host in range(2):
        await per_process.check({ADDRESS: f"192.0.2.{host}"}, token=forged(issuer))
    refusal = denied(await per_process.check({ADDRESS: "192.0.2.99"}, token=forged(issuer)))
    assert (refusal.status, refusal.reason) == (503, "verification_busy")
    assert int(refusal.headers["retry-after"]) >= 1
    new = denied(await per_process.check({ADDRESS: "192.0.2.100"}, token=issuer.token(jti="n")))
    assert new.reason == "verification_busy"
    assert "x-orrery-principal" in ok_headers(await per_process.check(token=valid))


@pytest.mark.parametrize(
    ("header", "source", "client"),
    [
        ("203.0.113.7", "10.0.0.1", "203.0.113.7"),
        ("", "10.0.0.1", "10.0.0.1"),
        ("::ffff:203.0.113.7", "", "203.0.113.7"),
        ("2001:db8:1:2:3:4:5:6", "", "2001:db8:1:2::/64"),
        ("not an address", "10.0.0.1", "unknown"),
        ("", "", "unknown"),
    ],
)
def test_the_client_is_the_address_envoy_resolved(header: str, source: str, client: str) -> None:
    """The edge's resolved address first, else the Check's source; IPv6 by its /64; anything
    unreadable is the one shared `unknown` client, never a fresh budget."""
    headers = {ADDRESS: header} if header else {}
    assert client_of(headers, lambda: source) == client
