"""Recently refused tokens cost a lookup, not a signature check (docs/authz.md#token-rules).

A token naming a published `kid` with a random signature costs a full signature check; sent
again and again it would cost one per request. The verifier remembers such a refusal (and an
expired token's), keyed by a hash of the token, briefly and boundedly — and never so that a good
token fails: an entry holds only while the very key that refused it is still the one chosen.
"""

from __future__ import annotations

import json
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from authz import tokens
from authz.errors import InvalidToken, TokenExpired
from authz.jwks import FileSource, KeyStore
from authz.settings import JwksSettings, TokenRules
from authz.tokens import TokenVerifier
from tests.authz.support import (
    AUDIENCE,
    CONSOLE,
    ISSUER,
    Issuer,
    RunningAuthz,
    SigningKey,
    base_env,
    denied,
    ok_headers,
    running_authz,
)
from tests.metrics import metric
from tests.waiting import eventually


@pytest.fixture
def signature_checks(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every signature check the verifier makes (the algorithm of each)."""
    calls: list[str] = []
    real: Callable[..., bool] = tokens.verify_signature

    def counted(alg: str, *args: Any) -> bool:
        calls.append(alg)
        return real(alg, *args)

    monkeypatch.setattr(tokens, "verify_signature", counted)
    return calls


def forged(issuer: Issuer) -> str:
    """The published kid, a random signature of the right length."""
    return issuer.token(signature=secrets.token_bytes(64))


async def test_a_repeated_forged_token_costs_one_signature_check(
    authz: RunningAuthz, issuer: Issuer, signature_checks: list[str]
) -> None:
    """Five times the same forgery: five identical refusals, one signature check."""
    token = forged(issuer)
    refusals = [denied(await authz.check(token=token)) for _ in range(5)]
    assert {(r.status, r.reason, r.description) for r in refusals} == {
        (401, "token_invalid", "token signature is invalid")
    }
    assert signature_checks == ["ES256"]


async def test_a_repeated_expired_token_costs_one_signature_check(
    authz: RunningAuthz, issuer: Issuer, signature_checks: list[str]
) -> None:
    """A genuine token past its exp is refused from memory once it was refused once."""
    now = int(time.time())
    token = issuer.token(iat=now - 7200, exp=now - 3600)
    refusals = [denied(await authz.check(token=token)) for _ in range(3)]
    assert {r.reason for r in refusals} == {"token_expired"}
    assert signature_checks == ["ES256"]


async def test_remembered_refusals_are_counted(authz: RunningAuthz, issuer: Issuer) -> None:
    """orrery_authz_token_refusals_remembered_total counts the refusals answered from memory."""
    token = forged(issuer)
    for _ in range(3):
        denied(await authz.check(token=token))
    remembered = await metric(
        f"http://{authz.bound.diag}/metrics", "orrery_authz_token_refusals_remembered_total"
    )
    assert remembered == 2


async def test_a_key_rotated_in_makes_a_remembered_token_good(
    issuer: Issuer, tmp_path: Path
) -> None:
    """Refused under the key published for its kid, accepted as soon as the key that signed it
    is published under that kid: a remembered refusal never outlives its key."""
    old, new = SigningKey.generate("ES256", "rotating"), SigningKey.generate("ES256", "rotating")
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps({"keys": [old.jwk()]}))
    env = {**base_env(jwks_file=path), "ORRERY_A2A_JWKS_REFRESH": "50ms"}
    token = issuer.token(key=new)
    async with running_authz(env) as authz:
        for _ in range(2):
            assert denied(await authz.check(token=token)).description == (
                "token signature is invalid"
            )
        path.write_text(json.dumps({"keys": [new.jwk()]}))

        async def accepted() -> bool:
            response = await authz.check(token=token)
            return bool(response.status.code == 0)

        await eventually(accepted)
        assert "x-orrery-principal" in ok_headers(await authz.check(token=token))


async def test_a_token_not_yet_valid_is_not_remembered(
    authz: RunningAuthz, issuer: Issuer, signature_checks: list[str]
) -> None:
    """A refusal that time can undo (nbf ahead) is checked afresh every time."""
    token = issuer.token(nbf=int(time.time()) + 3600)
    for _ in range(3):
        assert denied(await authz.check(token=token)).reason == "token_not_yet_valid"
    assert len(signature_checks) == 3


# --- bound and lifetime (unit level, explicit clock) -------------------------------------------


def _rules() -> TokenRules:
    return TokenRules(
        issuer=ISSUER,
        audience=AUDIENCE,
        console_audience=CONSOLE,
        algorithms=frozenset({"ES256"}),
        max_lifetime=86400,
    )


async def _verifier(issuer: Issuer, tmp_path: Path, **limits: Any) -> TokenVerifier:
    path = tmp_path / "keys.json"
    path.write_text(json.dumps(issuer.jwks()))
    settings = JwksSettings(url=None, file=path, refresh=60, cooldown=1, stale=3600, timeout=1)
    store = KeyStore(settings, FileSource(path))
    await store.refresh()
    return TokenVerifier(_rules(), store, cache_size=10, **limits)


async def _refuse(verifier: TokenVerifier, token: str, now: float) -> None:
    with pytest.raises(InvalidToken, match="signature is invalid"):
        await verifier.verify(token, AUDIENCE, now)


async def test_memory_of_refusals_is_bounded_oldest_first(
    issuer: Issuer, tmp_path: Path, signature_checks: list[str]
) -> None:
    """Past its size the oldest refusal is forgotten (and costs a check again)."""
    verifier = await _verifier(issuer, tmp_path, refusals_size=3)
    first, *others = [forged(issuer) for _ in range(4)]
    now = time.time()
    for token in (first, *others):
        await _refuse(verifier, token, now)
    await _refuse(verifier, others[-1], now)  # remembered
    assert len(signature_checks) == 4
    await _refuse(verifier, first, now)  # forgotten: checked again
    assert len(signature_checks) == 5


async def test_a_refusal_is_remembered_briefly(
    issuer: Issuer, tmp_path: Path, signature_checks: list[str]
) -> None:
    """After the memory's lifetime the token is checked again."""
    verifier = await _verifier(issuer, tmp_path, refusals_ttl=60.0)
    token, now = forged(issuer), time.time()
    await _refuse(verifier, token, now)
    await _refuse(verifier, token, now + 59)
    assert len(signature_checks) == 1
    await _refuse(verifier, token, now + 61)
    assert len(signature_checks) == 2


async def test_an_expired_refusal_is_remembered_as_expired(
    issuer: Issuer, tmp_path: Path, signature_checks: list[str]
) -> None:
    """The remembered answer is the refusal itself: token_expired stays token_expired."""
    verifier = await _verifier(issuer, tmp_path)
    now = int(time.time())
    token = issuer.token(iat=now - 7200, exp=now - 3600)
    for _ in range(2):
        with pytest.raises(TokenExpired):
            await verifier.verify(token, AUDIENCE, now)
    assert len(signature_checks) == 1
