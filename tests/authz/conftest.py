"""Fixtures for authz tests: a fresh issuer, its JWKS on disk, and a running authz server."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.authz.support import Issuer, RunningAuthz, SigningKey, base_env, running_authz


@pytest.fixture(scope="session")
def signing_keys() -> list[SigningKey]:
    """One key per algorithm allowed by default (RSA generation is slow: once a session)."""
    return [SigningKey.generate(alg) for alg in ("ES256", "RS256", "PS256", "EdDSA")]


@pytest.fixture
def issuer(signing_keys: list[SigningKey]) -> Issuer:
    """An issuer whose first key is ES256; tests may add or drop keys on their own copy."""
    return Issuer(list(signing_keys))


@pytest.fixture
def jwks_file(tmp_path: Path, issuer: Issuer) -> Path:
    path = tmp_path / "jwks.json"
    path.write_text(json.dumps(issuer.jwks()))
    return path


@pytest.fixture
async def authz(jwks_file: Path) -> AsyncIterator[RunningAuthz]:
    """authz on port 0 with the issuer's keys from a file and a generous rate limit."""
    async with running_authz(base_env(jwks_file=jwks_file)) as running:
        yield running
