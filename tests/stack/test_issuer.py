"""The dev issuer: a real process serving a JWKS that verifies the tokens `token` mints."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import jwt
import pytest

from stack.addresses import NotLoopback, require_loopback
from stack.issuer import JWKS_PATH
from stack.keys import load_signing_key, new_signing_key, private_pem, public_jwk
from stack.state import write_private
from stack.tokens import TOKEN_KINDS, Audiences, TokenKind, TokenRequest, mint
from tests.processes import EventProcess

pytestmark = pytest.mark.slow  # starts the dev issuer as a process

AUDIENCES = Audiences(a2a="orrery-a2a", console="orrery-console")


@pytest.fixture
def key_file(tmp_path: Path) -> Path:
    path = tmp_path / "issuer-key.pem"
    write_private(path, private_pem(new_signing_key()))
    return path


def _issuer_argv(key_file: Path, addr: str) -> list[str]:
    return [sys.executable, "-m", "stack.issuer", "--key", str(key_file), "--addr", addr]


@pytest.fixture
def issuer(key_file: Path) -> Iterator[tuple[str, EventProcess]]:
    """A running `python -m stack.issuer` on an ephemeral loopback port; yields its issuer URL."""
    process = EventProcess(_issuer_argv(key_file, "127.0.0.1:0"), os.environ)
    try:
        yield process.wait_for("serving")["issuer"], process
    finally:
        if process.proc.poll() is None:
            process.stop(signal.SIGTERM)
        process.kill()


def test_serving_event_names_the_bound_address_and_issuer(
    issuer: tuple[str, EventProcess],
) -> None:
    """Started on port 0, the issuer reports the real port in its issuer string."""
    url, _ = issuer
    assert url.startswith("http://127.0.0.1:")
    assert int(url.rsplit(":", 1)[1]) > 0


def test_jwks_holds_only_the_public_key(issuer: tuple[str, EventProcess], key_file: Path) -> None:
    """One EC P-256 signing key, kid = its RFC 7638 thumbprint, no private member."""
    url, _ = issuer
    response = httpx.get(url + JWKS_PATH)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    (key,) = response.json()["keys"]
    assert set(key) == {"kty", "crv", "x", "y", "kid", "use", "alg"}
    assert (key["kty"], key["crv"], key["alg"], key["use"]) == ("EC", "P-256", "ES256", "sig")
    assert key == public_jwk(load_signing_key(key_file))


@pytest.mark.parametrize("kind", TOKEN_KINDS)
def test_minted_tokens_verify_with_the_served_jwks(
    issuer: tuple[str, EventProcess], key_file: Path, kind: TokenKind
) -> None:
    """A token of each kind verifies with PyJWT against the JWKS fetched over HTTP."""
    url, _ = issuer
    token = mint(
        load_signing_key(key_file),
        TokenRequest(kind=kind),
        issuer=url,
        audiences=AUDIENCES,
        now=int(time.time()),
    )
    header = jwt.get_unverified_header(token)
    assert (header["alg"], header["typ"]) == ("ES256", "at+jwt")
    signing_key = jwt.PyJWKClient(url + JWKS_PATH).get_signing_key_from_jwt(token)
    audience = AUDIENCES.console if kind == "human" else AUDIENCES.a2a
    claims = jwt.decode(token, signing_key, algorithms=["ES256"], audience=audience, issuer=url)
    assert claims["exp"] - claims["iat"] == 3600


def test_issuer_stops_cleanly_on_sigterm(issuer: tuple[str, EventProcess]) -> None:
    """SIGTERM → exit 0 (the process contract `up` relies on)."""
    _, process = issuer
    assert process.stop(signal.SIGTERM) == 0


@pytest.mark.parametrize("addr", ["0.0.0.0:0", "[::]:0", "192.0.2.10:0", "localhost:0"])
def test_issuer_refuses_a_non_loopback_address(key_file: Path, addr: str) -> None:
    """Anything but a literal loopback address: exit 2 with a message, nothing bound."""
    result = subprocess.run(
        _issuer_argv(key_file, addr), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert "binds loopback only" in result.stderr
    assert "serving" not in result.stderr


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.53", "::1"])
def test_loopback_addresses_are_accepted(host: str) -> None:
    """127.0.0.0/8 and ::1 are loopback."""
    assert require_loopback(host) == host


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.1", "localhost", "example.test", ""])
def test_other_hosts_are_refused(host: str) -> None:
    """Unspecified, private, and any name (even localhost) are refused."""
    with pytest.raises(NotLoopback):
        require_loopback(host)


def test_issuer_refuses_a_key_that_is_not_p256(tmp_path: Path) -> None:
    """A wrong key file is a clear start-up error (exit 2), not a crash."""
    bad = tmp_path / "bad.pem"
    bad.write_text("not a key")
    result = subprocess.run(
        _issuer_argv(bad, "127.0.0.1:0"), capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 2
    assert result.stderr.startswith("orrery dev issuer:")


def test_a_taken_address_is_one_startup_failed_event(key_file: Path) -> None:
    """The issuer's port in use: one JSON `startup_failed` naming ORRERY_A2A_ISSUER_ADDR, exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = f"127.0.0.1:{holder.getsockname()[1]}"
        result = subprocess.run(
            _issuer_argv(key_file, addr), capture_output=True, text=True, check=False, timeout=60
        )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    event = json.loads(line)
    assert (event["event"], event["variable"], event["addr"]) == (
        "startup_failed",
        "ORRERY_A2A_ISSUER_ADDR",
        addr,
    )
