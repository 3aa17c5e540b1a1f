"""`orrery-a2a up` end to end: real issuer and Envoy, stand-in authz and adapter (see fakes/)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import jwt
import pytest

from stack import cli
from stack.runtime import ISSUER_KEY_FILE, STATE_FILE, pid_alive
from tests.stack.conftest import LocalStackRun, cli_argv

pytestmark = pytest.mark.envoy

SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "hi"}]}},
}


def _token(run: LocalStackRun, *args: str) -> str:
    result = subprocess.run(
        cli_argv("token", *args), env=run.env, capture_output=True, text=True, check=True
    )
    return result.stdout.strip()


def test_up_shows_each_component_and_what_to_type(stack_run: LocalStackRun) -> None:
    """One ready line per component in start order, then the URL, an ask line and a curl line."""
    assert list(stack_run.components) == ["issuer", "authz", "adapter", "envoy"]
    assert stack_run.wait_for("Ctrl-C stops everything")
    text = "\n".join(stack_run.lines)
    assert (
        f"orrery-a2a ask --state-dir {stack_run.state_dir} 'Which services are unhealthy?'" in text
    )
    assert f'curl -sS {stack_run.url}/a2a -H "Authorization: Bearer $(orrery-a2a token' in text


def test_state_is_private_and_names_the_stack(stack_run: LocalStackRun) -> None:
    """stack.json and the issuer key are 0600 in a 0700 directory; stack.json has the URL."""
    state = json.loads((stack_run.state_dir / STATE_FILE).read_text())
    assert state["url"] == stack_run.url
    assert state["pid"] == stack_run.process.pid
    assert (stack_run.state_dir.stat().st_mode & 0o777) == 0o700
    for name in (STATE_FILE, ISSUER_KEY_FILE):
        assert ((stack_run.state_dir / name).stat().st_mode & 0o777) == 0o600


def test_a_request_through_envoy_reaches_the_adapter_as_the_token_principal(
    stack_run: LocalStackRun,
) -> None:
    """The wiring holds: authz trusts the issuer's JWKS, the adapter trusts authz's assertion."""
    token = _token(stack_run, "--kind", "service")
    response = httpx.post(
        f"{stack_run.url}/a2a", json=SEND, headers={"Authorization": f"Bearer {token}"}
    )
    assert response.status_code == 200
    (artifact,) = response.json()["result"]["task"]["artifacts"]
    assert artifact["parts"][0]["text"] == "echo hi for service:dev-service::dev-service"


def test_a_request_without_a_token_is_refused_in_front_of_the_adapter(
    stack_run: LocalStackRun,
) -> None:
    """No token: authz's 401 with a challenge, from Envoy."""
    response = httpx.post(f"{stack_run.url}/a2a", json=SEND)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")


def test_token_kinds_verify_against_the_issuers_jwks(stack_run: LocalStackRun) -> None:
    """`token` signs with the running issuer's key: its JWKS verifies every kind."""
    issuer, _ = stack_run.components["issuer"]
    keys = jwt.PyJWKClient(f"{issuer}/.well-known/jwks.json")
    for kind, audience in (
        ("service", "orrery-a2a"),
        ("delegated", "orrery-a2a"),
        ("human", "orrery-console"),
    ):
        token = _token(stack_run, "--kind", kind)
        claims = jwt.decode(
            token,
            keys.get_signing_key_from_jwt(token),
            algorithms=["ES256"],
            audience=audience,
            issuer=issuer,
        )
        assert ("act" in claims) == (kind == "delegated")


def test_ask_prints_the_reply(stack_run: LocalStackRun, capsys: pytest.CaptureFixture[str]) -> None:
    """`ask` goes through Envoy with the a2a-sdk client as the delegated dev principal."""
    assert cli.main(["ask", "is checkout healthy?"], env=stack_run.env) == 0
    out, err = capsys.readouterr()
    assert out == "echo is checkout healthy? for delegated:dev-agent-client:dev-agent:dev-user\n"
    assert "orrery-a2a ask --context-id" in err


def test_ask_shows_a_pending_approval_and_how_to_decide(
    stack_run: LocalStackRun, capsys: pytest.CaptureFixture[str]
) -> None:
    """An input-required task prints the action and ready-to-paste approve/deny/resume lines."""
    assert cli.main(["ask", "please restart checkout"], env=stack_run.env) == 0
    out, err = capsys.readouterr()
    assert out.startswith("Approval needed: restart checkout needs approval\n")
    assert "tool:    restart_service (level L3)" in out
    action = out.split("action:  ")[1].split()[0]
    assert f"orrery-a2a approve {action}\n" in err
    assert f"orrery-a2a approve {action} --deny\n" in err
    assert "orrery-a2a ask --task-id " in err


@pytest.mark.parametrize(("flags", "status"), [([], "approved"), (["--deny"], "denied")])
def test_approve_decides_as_the_human(
    stack_run: LocalStackRun,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    status: str,
) -> None:
    """`approve` posts the decision on the approvals surface with a human (console) token."""
    assert cli.main(["approve", "act-1", *flags], env=stack_run.env) == 0
    assert capsys.readouterr().out == f"act-1: {status} — decided by dev-user\n"


def test_a_second_up_on_the_same_state_dir_is_refused(stack_run: LocalStackRun) -> None:
    """Only one `up` per state directory; the second says so and exits 2."""
    second = LocalStackRun.start(stack_run.state_dir)
    assert second.finish() == 2
    assert any("another `orrery-a2a up` is running" in line for line in second.lines)


def test_ctrl_c_stops_every_component_and_removes_the_secrets(state_dir: Path) -> None:
    """SIGINT: all four stop, `up` exits 0, the key and state are gone, the logs stay."""
    run = LocalStackRun.start(state_dir)
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    assert run.stop() == 0
    assert run.lines[-1] == "orrery-a2a up: stopped envoy, adapter, authz, issuer"
    assert not [name for name, pid in pids.items() if pid_alive(pid)]
    assert not (state_dir / STATE_FILE).exists()
    assert not (state_dir / ISSUER_KEY_FILE).exists()
    assert (state_dir / "logs" / "envoy.log").exists()


def test_a_component_that_dies_stops_the_stack_and_is_named(state_dir: Path) -> None:
    """authz dying after start: `up` names it, stops the rest and exits 1."""
    trigger = state_dir.parent / "kill-authz"
    run = LocalStackRun.start(state_dir, {"FAKE_AUTHZ_DIE_WHEN": str(trigger)})
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    trigger.touch()
    assert run.finish() == 1
    text = "\n".join(run.lines)
    assert "orrery-a2a up: authz exited with code 3; stopping the stack" in text
    assert "| fake authz: dying on purpose" in text
    assert not [name for name, pid in pids.items() if pid_alive(pid)]


def test_a_component_that_fails_to_start_is_named_with_its_log(state_dir: Path) -> None:
    """authz exiting 2 on bad config: named, its message shown, the issuer stopped, exit 1."""
    run = LocalStackRun.start(state_dir, {"FAKE_AUTHZ_FAIL": "1"})
    assert run.finish() == 1
    text = "\n".join(run.lines)
    assert "  authz    FAILED  exited with code 2 before it was ready" in text
    assert "| invalid configuration:" in text
    assert list(run.components) == ["issuer"]
    (_, issuer_pid) = run.components["issuer"]
    assert not pid_alive(issuer_pid)
    assert run.lines[-1] == "orrery-a2a up: stopped authz (exited with code 2), issuer"


def test_up_refuses_a_non_loopback_issuer(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dev issuer never binds a network address: `up` refuses before starting anything."""
    env = {**os.environ, "ORRERY_A2A_STATE_DIR": str(state_dir)}
    assert cli.main(["up", "--issuer", "0.0.0.0:8090"], env=env) == 2
    assert "ORRERY_A2A_ISSUER_ADDR: the dev issuer binds loopback only" in capsys.readouterr().err
    assert not (state_dir / "logs").exists()
