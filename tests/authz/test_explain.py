"""`python -m authz explain`: authz's own decision for one token on each surface, offline, with
the configured JWKS; the reason code is the one a request would get, the token never printed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from authz.explain import explain, self_description, settings_for_explain
from tests.authz.support import (
    AUDIENCE,
    CONSOLE,
    CONSOLE_CLIENT,
    DROP,
    Issuer,
    SigningKey,
    base_env,
)

pytestmark = pytest.mark.slow  # starts `python -m authz explain` as a process


def _env(jwks_file: Path) -> dict[str, str]:
    env = base_env(jwks_file=jwks_file)
    del env["ORRERY_A2A_ASSERTION_KEYS"]  # explain signs no assertion anyone reads
    return env


async def _verdicts(jwks_file: Path, token: str) -> dict[str, tuple[str, int, str]]:
    verdicts = await explain(settings_for_explain(_env(jwks_file)), token)
    return {v.surface: (v.decision, v.status, v.reason) for v in verdicts}


async def test_a_delegated_token_is_allowed_on_a2a_with_its_principal(
    jwks_file: Path, issuer: Issuer
) -> None:
    """Allowed on a2a with the derived principal, role and autonomy; on approvals the console
    audience is missing, so the same 401 a request there would get."""
    token = issuer.token(sub="ada", act={"sub": "agent-7"}, roles=["admin"], client_id="cli-1")
    verdicts = await explain(settings_for_explain(_env(jwks_file)), token)
    a2a, approvals = verdicts
    assert (a2a.surface, a2a.decision, a2a.status, a2a.reason) == ("a2a", "allow", 200, "ok")
    assert a2a.principal is not None
    assert (a2a.principal.kind, a2a.principal.subject, a2a.principal.agent) == (
        "delegated",
        "ada",
        "agent-7",
    )
    assert (a2a.principal.role, a2a.principal.autonomy) == ("admin", "L3")
    assert (approvals.decision, approvals.status, approvals.reason) == (
        "deny",
        401,
        "token_invalid",
    )


@pytest.mark.parametrize(
    ("claims", "expected"),
    [
        (
            {"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200},
            ("deny", 401, "token_expired"),
        ),
        ({"roles": ["nobody"], "scope": DROP}, ("deny", 403, "insufficient_scope")),
        ({"iss": "https://elsewhere.test"}, ("deny", 401, "token_invalid")),
    ],
)
async def test_each_denial_is_the_reason_a_request_would_get(
    jwks_file: Path, issuer: Issuer, claims: dict[str, Any], expected: tuple[str, int, str]
) -> None:
    """Expired, no recognised role, another issuer: the exact status and reason code."""
    verdicts = await _verdicts(jwks_file, issuer.token(**claims))
    assert verdicts["a2a"] == expected


async def test_a_key_the_jwks_does_not_publish_is_unknown_key(
    jwks_file: Path, issuer: Issuer
) -> None:
    """A token signed with a key outside the configured JWKS."""
    stranger = SigningKey.generate("ES256", kid="not-published")
    verdicts = await _verdicts(jwks_file, issuer.token(key=stranger))
    assert verdicts["a2a"] == ("deny", 401, "unknown_key")


async def test_a_human_token_is_allowed_only_on_approvals(jwks_file: Path, issuer: Issuer) -> None:
    """A console client's token for a person: a human on approvals, refused on a2a."""
    token = issuer.token(sub="ada", aud=CONSOLE, client_id=CONSOLE_CLIENT, roles=["admin"])
    verdicts = await _verdicts(jwks_file, token)
    assert verdicts["approvals"] == ("allow", 200, "ok")
    assert verdicts["a2a"] == ("deny", 401, "token_invalid")


def test_what_the_token_says_is_shown_unverified_and_without_its_signature(issuer: Issuer) -> None:
    """Header and claims worth showing; not the signature, and garbage says nothing."""
    token = issuer.token(sub="ada")
    said = self_description(token)
    assert (said["sub"], said["aud"], said["alg"]) == ("ada", AUDIENCE, "ES256")
    assert token.rsplit(".", 1)[1] not in json.dumps(said)
    assert self_description("not a token") == {}


def _explain(env: dict[str, str], *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ORRERY_")}
    return subprocess.run(
        [sys.executable, "-m", "authz", "explain", *args],
        env={**clean, **env},
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_the_command_reads_the_token_from_stdin_and_never_prints_it(
    jwks_file: Path, issuer: Issuer
) -> None:
    """`explain -` with the token on stdin: one block per surface with the reason code, exit 0
    (allowed somewhere); the token itself appears nowhere in the output."""
    token = issuer.token(sub="ada", act={"sub": "agent-7"}, roles=["operator"])
    result = _explain(_env(jwks_file), "-", stdin=token + "\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "a2a:       allow 200 ok" in out
    assert (
        "principal delegated ada (client svc-reporter, agent agent-7), role operator, autonomy L2"
        in out
    )
    assert "approvals: deny 401 token_invalid" in out
    assert f"expects issuer https://issuer.test, audience {CONSOLE}" in out
    assert "rate limit: not checked" in out
    assert token not in out + result.stderr


def test_the_command_reads_orrery_a2a_token_and_speaks_json(
    jwks_file: Path, issuer: Issuer
) -> None:
    """ORRERY_A2A_TOKEN and `--json`: one object; denied on both surfaces → exit 1."""
    token = issuer.token(exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)
    result = _explain({**_env(jwks_file), "ORRERY_A2A_TOKEN": token}, "--json")
    assert result.returncode == 1, result.stderr
    body = json.loads(result.stdout)
    assert [(s["surface"], s["reason"]) for s in body["surfaces"]] == [
        ("a2a", "token_expired"),
        ("approvals", "token_expired"),
    ]
    assert body["token"]["sub"] == "svc-reporter"
    assert token not in result.stdout


def test_no_token_and_bad_configuration_are_usage_errors(jwks_file: Path) -> None:
    """Nothing on stdin, or configuration authz would refuse: exit 2 with the reason."""
    empty = _explain(_env(jwks_file), "-", stdin="")
    assert (empty.returncode, empty.stderr) == (
        2,
        "python -m authz explain: stdin does not hold one token\n",
    )
    bad = _explain({**_env(jwks_file), "ORRERY_A2A_JWT_AUDIENCE": ""}, "-", stdin="a.b.c")
    assert bad.returncode == 2
    assert "ORRERY_A2A_JWT_AUDIENCE: is required" in bad.stderr
