"""Dev token claims per kind (docs/contract.md#kinds) and the `token` command's failures."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stack import cli
from stack.state import STATE_FILE, StackState, write_private
from stack.tokens import Audiences, TokenRequest, claims_for

AUDIENCES = Audiences(a2a="orrery-a2a", console="orrery-console")
ISSUER = "http://127.0.0.1:8090"
NOW = 1_800_000_000


def _claims(request: TokenRequest) -> dict[str, object]:
    return claims_for(request, issuer=ISSUER, audiences=AUDIENCES, now=NOW)


def test_service_token_is_a_client_on_its_own_behalf() -> None:
    """service: sub = client_id, A2A audience, role operator, no act."""
    claims = _claims(TokenRequest(kind="service"))
    assert claims["sub"] == claims["client_id"] == "dev-service"
    assert claims["aud"] == "orrery-a2a"
    assert claims["roles"] == ["operator"]
    assert "act" not in claims


def test_delegated_token_names_the_person_and_the_acting_agent() -> None:
    """delegated: sub = the person, act.sub = the agent, role admin (reaches approvals)."""
    claims = _claims(TokenRequest(kind="delegated"))
    assert claims["sub"] == "dev-user"
    assert claims["act"] == {"sub": "dev-agent"}
    assert claims["aud"] == "orrery-a2a"
    assert claims["roles"] == ["admin"]
    assert claims["client_id"] == "dev-agent-client"


def test_human_token_is_for_the_console_and_the_same_person() -> None:
    """human: console audience, no act, the same subject as the delegated default."""
    claims = _claims(TokenRequest(kind="human"))
    assert claims["aud"] == "orrery-console"
    assert claims["sub"] == _claims(TokenRequest(kind="delegated"))["sub"]
    assert "act" not in claims
    assert claims["roles"] == ["admin"]


def test_overrides_and_lifetime_are_honoured() -> None:
    """Subject, agent, client, roles and lifetime can be chosen; times are integers."""
    claims = _claims(
        TokenRequest(
            kind="delegated",
            subject="alice",
            agent="planner",
            client_id="c1",
            roles=("viewer",),
            lifetime_seconds=600,
        )
    )
    assert (claims["sub"], claims["act"], claims["client_id"]) == (
        "alice",
        {"sub": "planner"},
        "c1",
    )
    assert claims["roles"] == ["viewer"]
    assert (claims["iss"], claims["iat"], claims["exp"]) == (ISSUER, NOW, NOW + 600)


def test_every_token_has_a_unique_id() -> None:
    """jti differs between two tokens minted the same second."""
    assert _claims(TokenRequest())["jti"] != _claims(TokenRequest())["jti"]


def test_token_without_a_running_stack_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """No stack: exit 1 and one line that says how to start one."""
    env = {**os.environ, "ORRERY_A2A_STATE_DIR": str(tmp_path)}
    assert cli.main(["token"], env=env) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err == (
        f"orrery-a2a token: no running stack found in {tmp_path}; start one with "
        "`orrery-a2a up` (with the same --state-dir, if you gave one)\n"
    )


def test_token_with_a_stale_state_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A state file left by a stack that is gone is not a running stack."""
    state = StackState(
        pid=2**22 + 12345,  # above any default pid_max: never a live process
        url="http://127.0.0.1:8080",
        issuer=ISSUER,
        audience="orrery-a2a",
        console_audience="orrery-console",
        key_file=str(tmp_path / "gone.pem"),
        admin=str(tmp_path / "envoy-admin.sock"),
        logs=str(tmp_path / "logs"),
    )
    state.save(tmp_path)
    env = {**os.environ, "ORRERY_A2A_STATE_DIR": str(tmp_path)}
    assert cli.main(["token"], env=env) == 1
    assert f"(pid {state.pid}) is gone" in capsys.readouterr().err


def test_token_with_a_corrupt_state_fails_clearly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An unreadable stack.json is reported, not a traceback."""
    write_private(tmp_path / STATE_FILE, json.dumps({"pid": "x"}).encode())
    env = {**os.environ, "ORRERY_A2A_STATE_DIR": str(tmp_path)}
    assert cli.main(["token"], env=env) == 1
    assert "is unreadable" in capsys.readouterr().err


@pytest.mark.parametrize("ttl", ["25h", "0s", "soon"])
def test_token_lifetime_must_be_positive_and_at_most_a_day(
    ttl: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--ttl outside 1 s … 24 h is a usage error (exit 2)."""
    with pytest.raises(SystemExit) as exited:
        cli.main(["token", "--ttl", ttl], env={})
    assert exited.value.code == 2
    assert "--ttl" in capsys.readouterr().err
