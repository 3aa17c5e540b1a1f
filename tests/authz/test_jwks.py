"""Key sources: a real JWKS HTTP server (rotation, floods, outages, hostile answers) and files."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from grpc_health.v1 import health_pb2

from authz.jwks import JwksError, parse_jwks
from tests.authz.support import (
    Issuer,
    JwksServer,
    RunningAuthz,
    SigningKey,
    b64int,
    base_env,
    denied,
    ok_headers,
    running_authz,
)
from tests.base64url import respell
from tests.clocks import FakeClock
from tests.metrics import metric
from tests.waiting import eventually

SERVING: int = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING: int = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
async def jwks_server(issuer: Issuer) -> AsyncIterator[JwksServer]:
    server = JwksServer(issuer.jwks())
    await server.start()
    yield server
    await server.close()


def url_env(server: JwksServer, **overrides: str) -> dict[str, str]:
    return {**base_env(jwks_url=server.url), **overrides}


async def is_allowed(authz: RunningAuthz, token: str) -> bool:
    return bool((await authz.check(token=token)).status.code == 0)


async def test_keys_load_from_url_and_health_is_serving(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """With keys loaded over HTTP, both health names answer SERVING and tokens verify."""
    async with running_authz(url_env(jwks_server)) as authz:
        assert authz.bound.keys_usable
        assert await authz.health_status("") == SERVING
        assert await authz.health_status("envoy.service.auth.v3.Authorization") == SERVING
        assert await is_allowed(authz, issuer.token())


async def test_rotation_new_kid_is_fetched_on_demand(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """A token signed by a newly published key verifies after one refetch."""
    env, clock = url_env(jwks_server, ORRERY_A2A_JWKS_COOLDOWN="1s"), FakeClock()
    async with running_authz(env, clock=clock) as authz:
        clock.advance(1.1)  # the cooldown since the start-up load is over
        fresh = SigningKey.generate("ES256", kid="rotated-in")
        jwks_server.document = {"keys": [*issuer.jwks()["keys"], fresh.jwk()]}
        before = jwks_server.fetches
        assert await is_allowed(authz, issuer.token(key=fresh))
        assert jwks_server.fetches == before + 1


async def test_unknown_kid_flood_does_not_fetch_per_request(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """200 concurrent tokens with random kids share one fetch once the cooldown has passed."""
    env, clock = url_env(jwks_server, ORRERY_A2A_JWKS_COOLDOWN="2s"), FakeClock()
    async with running_authz(env, clock=clock) as authz:
        clock.advance(2.1)  # the cooldown since the start-up load is over
        before = jwks_server.fetches
        strangers = [SigningKey(f"random-{i}", "ES256", issuer.key.private) for i in range(200)]
        results = await asyncio.gather(
            *(authz.check(token=issuer.token(key=key)) for key in strangers)
        )
        assert {denied(r).reason for r in results} == {"unknown_key"}
        assert jwks_server.fetches == before + 1


async def test_unknown_kid_refetch_waits_for_the_cooldown(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """With the default 30 s cooldown, a burst of unknown kids right after start fetches nothing."""
    async with running_authz(url_env(jwks_server)) as authz:
        before = jwks_server.fetches
        for i in range(50):
            stranger = SigningKey(f"unknown-{i}", "ES256", issuer.key.private)
            assert denied(await authz.check(token=issuer.token(key=stranger))).reason == (
                "unknown_key"
            )
        assert jwks_server.fetches == before


async def test_unknown_kid_is_negatively_cached(jwks_server: JwksServer, issuer: Issuer) -> None:
    """The same unknown kid again does not refetch, even when the cooldown has passed."""
    env, clock = url_env(jwks_server, ORRERY_A2A_JWKS_COOLDOWN="2s"), FakeClock()
    async with running_authz(env, clock=clock) as authz:
        stranger = SigningKey("ghost", "ES256", issuer.key.private)
        clock.advance(2.1)
        before = jwks_server.fetches
        await authz.check(token=issuer.token(key=stranger))
        assert jwks_server.fetches == before + 1
        for _ in range(20):
            assert denied(await authz.check(token=issuer.token(key=stranger))).reason == (
                "unknown_key"
            )
        assert jwks_server.fetches == before + 1


async def test_outage_keeps_last_good_keys_then_goes_not_serving(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """During an IdP outage the last keys serve for the stale window, then authz fails closed."""
    env = url_env(jwks_server, ORRERY_A2A_JWKS_REFRESH="100ms", ORRERY_A2A_JWKS_STALE="3s")
    async with running_authz(env) as authz:
        token = issuer.token()
        assert await is_allowed(authz, token)
        jwks_server.status = 503
        fetched = jwks_server.fetches
        await eventually(lambda: _at_least(jwks_server, fetched + 2))
        assert await is_allowed(authz, token)  # stale but inside the window
        assert await authz.health_status() == SERVING

        async def not_serving() -> bool:
            return await authz.health_status() == NOT_SERVING

        await eventually(not_serving)
        refusal = denied(await authz.check(token=token))
        assert (refusal.status, refusal.reason) == (503, "keys_unavailable")

        jwks_server.status = 200  # the IdP comes back: so do we

        async def serving() -> bool:
            return await authz.health_status() == SERVING

        await eventually(serving)
        assert await is_allowed(authz, token)


async def _at_least(server: JwksServer, fetches: int) -> bool:
    return server.fetches >= fetches


async def test_removed_key_stops_verifying_a_cached_token(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """A key that leaves the JWKS takes its cached tokens with it."""
    env = url_env(jwks_server, ORRERY_A2A_JWKS_REFRESH="100ms")
    async with running_authz(env) as authz:
        token = issuer.token()
        assert await is_allowed(authz, token)
        assert await is_allowed(authz, token)  # now cached
        jwks_server.document = Issuer(issuer.keys[1:]).jwks()

        async def refused() -> bool:
            return not await is_allowed(authz, token)

        await eventually(refused)
        assert denied(await authz.check(token=token)).reason == "unknown_key"


async def test_unchanged_jwks_costs_a_304(jwks_server: JwksServer, issuer: Issuer) -> None:
    """Background refreshes send If-None-Match and accept 304 as "still good"."""
    env = url_env(jwks_server, ORRERY_A2A_JWKS_REFRESH="100ms")
    async with running_authz(env) as authz:

        async def revalidated() -> bool:
            return jwks_server.not_modified >= 2

        await eventually(revalidated)
        assert await is_allowed(authz, issuer.token())


async def test_redirect_is_not_followed(jwks_server: JwksServer, issuer: Issuer) -> None:
    """A 302 to a JWKS elsewhere is a failed load: no keys, NOT_SERVING, 503."""
    target = JwksServer(issuer.jwks())
    await target.start()
    try:
        jwks_server.redirect_to = target.url
        async with running_authz(url_env(jwks_server)) as authz:
            assert not authz.bound.keys_usable
            assert target.fetches == 0
            assert await authz.health_status() == NOT_SERVING
            assert denied(await authz.check(token=issuer.token())).reason == "keys_unavailable"
    finally:
        await target.close()


async def test_oversize_jwks_is_refused(jwks_server: JwksServer, issuer: Issuer) -> None:
    """A key set over 64 KiB is not loaded."""
    document = issuer.jwks()
    document["padding"] = "x" * (64 * 1024)
    jwks_server.document = document
    async with running_authz(url_env(jwks_server)) as authz:
        assert not authz.bound.keys_usable
        assert await authz.health_status() == NOT_SERVING


async def test_slow_jwks_is_cut_off_by_the_timeout(jwks_server: JwksServer, issuer: Issuer) -> None:
    """A JWKS endpoint that does not answer within the timeout is a failed load."""
    jwks_server.delay = 1.0
    env = url_env(jwks_server, ORRERY_A2A_JWKS_TIMEOUT="200ms")
    async with running_authz(env) as authz:
        assert not authz.bound.keys_usable
        assert denied(await authz.check(token=issuer.token())).status == 503


async def test_no_keys_at_start_means_not_serving_until_they_load(
    jwks_server: JwksServer, issuer: Issuer
) -> None:
    """authz starts without keys (IdP down), denies with 503, and recovers on its own."""
    jwks_server.status = 500
    env = url_env(jwks_server, ORRERY_A2A_JWKS_REFRESH="100ms")
    async with running_authz(env) as authz:
        assert await authz.health_status() == NOT_SERVING
        assert denied(await authz.check(token=issuer.token())).reason == "keys_unavailable"
        jwks_server.status = 200

        async def serving() -> bool:
            return await authz.health_status() == SERVING

        await eventually(serving)
        assert await is_allowed(authz, issuer.token())


async def test_jwks_file_is_reloaded_when_it_changes(issuer: Issuer, tmp_path: Path) -> None:
    """Writing a new key set to the file takes effect without a restart."""
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(Issuer(issuer.keys[:1]).jwks()))
    env = {**base_env(jwks_file=path), "ORRERY_A2A_JWKS_REFRESH": "50ms"}
    async with running_authz(env) as authz:
        rsa_token = issuer.token(key=issuer.keys[1])
        assert denied(await authz.check(token=rsa_token)).reason == "unknown_key"
        path.write_text(json.dumps(issuer.jwks()))

        async def accepted() -> bool:
            return await is_allowed(authz, rsa_token)

        await eventually(accepted)


async def test_broken_jwks_file_keeps_the_last_good_keys(issuer: Issuer, tmp_path: Path) -> None:
    """A half-written or emptied file does not unload the keys (within the stale window)."""
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(issuer.jwks()))
    env = {**base_env(jwks_file=path), "ORRERY_A2A_JWKS_REFRESH": "50ms"}
    async with running_authz(env) as authz:
        path.write_text('{"keys": [')

        async def failed_to_load() -> bool:
            url = f"http://{authz.bound.diag}/metrics"
            return await metric(url, "orrery_authz_jwks_refresh_total", outcome="error") >= 1

        await eventually(failed_to_load)
        assert "x-orrery-principal" in ok_headers(await authz.check(token=issuer.token()))
        assert await authz.health_status() == SERVING


# --- parsing (unit) -------------------------------------------------------------------------


def small_rsa_jwk() -> dict[str, Any]:
    # S505: a key too small on purpose: the parser must refuse it
    private = rsa.generate_private_key(public_exponent=65537, key_size=1024)  # noqa: S505
    public = private.public_key().public_numbers()
    return {"kid": "small", "kty": "RSA", "n": b64int(public.n), "e": b64int(public.e)}


@pytest.mark.parametrize(
    ("jwk", "why"),
    [
        ({"kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}, "no kid"),
        ({"kid": "k", "kty": "oct", "k": "c2VjcmV0"}, "unsupported kty"),
        ({"kid": "k", "kty": "EC", "crv": "secp256k1", "x": "AA", "y": "AA"}, "unsupported EC"),
        ({"kid": "k", "kty": "EC", "crv": "P-256", "x": "AA", "y": "AA"}, "wrong length"),
        ({"kid": "k", "kty": "EC", "crv": "P-256", "x": "A" * 43, "y": "A" * 43}, "curve"),
        ({"kid": "k", "kty": "OKP", "crv": "X25519", "x": "A" * 43}, "unsupported OKP"),
        ({"kid": "k", "kty": "RSA", "n": 5, "e": "AQAB"}, "needs n, e"),
        ("not-an-object", "not an object"),
    ],
)
def test_unusable_keys_are_skipped(signing_keys: list[SigningKey], jwk: Any, why: str) -> None:
    """A key that cannot be used safely is skipped with a reason; the good ones still load."""
    keyset, skipped = parse_jwks(json.dumps({"keys": [jwk, signing_keys[0].jwk()]}).encode())
    assert list(keyset.keys) == [signing_keys[0].kid]
    assert len(skipped) == 1
    assert why in skipped[0]


def test_a_respelled_key_member_is_skipped(signing_keys: list[SigningKey]) -> None:
    """A JWK coordinate spelled non-canonically is skipped like any malformed member."""
    jwk = signing_keys[0].jwk()  # ES256: x and y are 43 characters, 2 unused bits each
    jwk["x"] = respell(jwk["x"])
    keyset, skipped = parse_jwks(json.dumps({"keys": [jwk, signing_keys[1].jwk()]}).encode())
    assert list(keyset.keys) == [signing_keys[1].kid]
    assert skipped == ["key 0: not canonical base64url"]


@pytest.mark.parametrize(
    ("extra", "why"),
    [
        ({"use": "enc"}, "use is not sig"),
        ({"key_ops": ["encrypt"]}, "key_ops"),
        ({"d": "AAAA"}, "private key material"),
    ],
)
def test_keys_not_meant_for_verification_are_skipped(
    signing_keys: list[SigningKey], extra: dict[str, Any], why: str
) -> None:
    """Encryption keys, keys without verify, and private keys are never used."""
    with pytest.raises(JwksError, match="no usable"):
        parse_jwks(json.dumps({"keys": [signing_keys[0].jwk(**extra)]}).encode())


def test_small_rsa_key_is_skipped(signing_keys: list[SigningKey]) -> None:
    """RSA moduli under 2048 bits are not trusted."""
    keyset, skipped = parse_jwks(
        json.dumps({"keys": [small_rsa_jwk(), signing_keys[1].jwk()]}).encode()
    )
    assert "small" not in keyset.keys
    assert "2048" in skipped[0]


def test_kid_published_twice_is_dropped(signing_keys: list[SigningKey]) -> None:
    """Two keys under one kid are ambiguous: neither is used."""
    first, second = signing_keys[0].jwk(), signing_keys[3].jwk(kid=signing_keys[0].kid)
    with pytest.raises(JwksError, match="no usable"):
        parse_jwks(json.dumps({"keys": [first, second]}).encode())


@pytest.mark.parametrize(
    "raw",
    [b"[]", b'{"keys": {}}', b"not json", b'{"keys": [], "keys": []}', "{}".encode("utf-16")],
)
def test_malformed_jwks_documents_are_errors(raw: bytes) -> None:
    """Only a strict JSON object with a keys array is a key set."""
    with pytest.raises(JwksError):
        parse_jwks(raw)


def test_unchanged_key_is_reused_across_reloads(signing_keys: list[SigningKey]) -> None:
    """A reload that republishes a JWK keeps the same key object (the cache relies on it)."""
    raw = json.dumps({"keys": [k.jwk() for k in signing_keys]}).encode()
    first, _ = parse_jwks(raw)
    second, _ = parse_jwks(raw, first)
    assert all(second.keys[kid] is first.keys[kid] for kid in first.keys)
    changed = SigningKey.generate("ES256", kid=signing_keys[0].kid).jwk()
    third, _ = parse_jwks(json.dumps({"keys": [changed]}).encode(), first)
    assert third.keys[signing_keys[0].kid] is not first.keys[signing_keys[0].kid]
