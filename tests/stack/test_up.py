"""`orrery-a2a up` end to end: the real issuer, authz, adapter and Envoy as one subprocess, and
the real `token`, `ask` and `approve` commands — as printed by the stack — against it."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import time
from pathlib import Path

import httpx
import jwt
import pytest

from stack import cli
from stack.state import (
    CARD_KEY_FILE,
    ISSUER_KEY_FILE,
    STATE_FILE,
)
from tests.stack.conftest import LocalStackRun, orrery

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {
        "message": {"role": "ROLE_USER", "messageId": "m1", "parts": [{"text": "is search up?"}]}
    },
}
HEALTH = "Service health — checkout: degraded; inventory: down; payments: healthy; search: healthy."


def _printed(run: LocalStackRun, line: str) -> subprocess.CompletedProcess[str]:
    """Run a command line exactly as the stack printed it (`orrery-a2a …`)."""
    program, *args = shlex.split(line)
    assert program == "orrery-a2a", line
    return orrery(run, *args)


def _token(run: LocalStackRun, *args: str) -> str:
    result = orrery(run, "token", *args)
    assert result.returncode == 0, result.stderr
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


def test_the_printed_ask_line_gets_an_answer(stack_run: LocalStackRun) -> None:
    """The `ask:` line `up` prints, pasted as is, answers through Envoy, authz and the adapter."""
    (line,) = [line for line in stack_run.lines if line.startswith("  ask:  ")]
    result = _printed(stack_run, line.removeprefix("  ask:  "))
    assert result.returncode == 0, result.stderr
    assert result.stdout == HEALTH + "\n"
    assert "Continue this conversation:\n  orrery-a2a ask --state-dir" in result.stderr


def test_state_is_private_and_names_the_stack(stack_run: LocalStackRun) -> None:
    """stack.json and the issuer key are 0600 in a 0700 directory; stack.json has the URL."""
    state = json.loads((stack_run.state_dir / STATE_FILE).read_text())
    assert state["url"] == stack_run.url
    assert state["pid"] == stack_run.process.pid
    assert (stack_run.state_dir.stat().st_mode & 0o777) == 0o700
    for name in (STATE_FILE, ISSUER_KEY_FILE, CARD_KEY_FILE):
        assert ((stack_run.state_dir / name).stat().st_mode & 0o777) == 0o600


def test_a_token_from_the_cli_reaches_the_adapter_as_its_principal(
    stack_run: LocalStackRun,
) -> None:
    """The wiring holds: authz trusts the issuer's JWKS, the adapter trusts authz's assertion and
    logs the token's principal."""
    token = _token(stack_run, "--kind", "service", "--client-id", "wiring-check")
    response = httpx.post(
        f"{stack_run.url}/a2a",
        json=SEND,
        headers={"Authorization": f"Bearer {token}", "A2A-Version": "1.0"},
        timeout=60,
    )
    assert response.status_code == 200
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    logged = _adapter_event(stack_run, "service:wiring-check::wiring-check")
    assert (logged["method"], logged["outcome"]) == ("SendMessage", "ok")


def _adapter_event(run: LocalStackRun, principal: str) -> dict[str, object]:
    """The adapter's first `a2a_request` for `principal`, once `up` has copied it to the log."""
    log = run.state_dir / "logs" / "latest" / "adapter.log"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            if line.startswith("{") and (event := json.loads(line)).get("principal") == principal:
                return dict(event)
        time.sleep(0.05)
    raise AssertionError(f"the adapter logged nothing for {principal}")


def test_a_request_without_a_token_is_refused_in_front_of_the_adapter(
    stack_run: LocalStackRun,
) -> None:
    """No token: authz's 401 with the bare RFC 6750 challenge, from Envoy."""
    response = httpx.post(f"{stack_run.url}/a2a", json=SEND, timeout=60)
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == 'Bearer realm="orrery-a2a"'


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


def test_ask_takes_its_token_from_stdin_or_the_environment(stack_run: LocalStackRun) -> None:
    """`ask --token-file -` and ORRERY_A2A_TOKEN send the given token (never on the command
    line): the adapter serves each as that token's principal."""
    for source in ("stdin", "env"):
        client = f"given-{source}"
        token = _token(stack_run, "--kind", "service", "--client-id", client)
        if source == "stdin":
            result = orrery(stack_run, "ask", "is search up?", "--token-file", "-", stdin=token)
        else:
            result = orrery(stack_run, "ask", "is search up?", env={"ORRERY_A2A_TOKEN": token})
        assert result.returncode == 0, result.stderr
        assert _adapter_event(stack_run, f"service:{client}::{client}")["outcome"] == "ok"


def test_a_refused_token_is_explained_but_never_printed(stack_run: LocalStackRun) -> None:
    """A token authz refuses (here: for the console audience, on /a2a): `ask` prints authz's
    status and reason code, exits 1, and the token appears nowhere in its output."""
    token = _token(stack_run, "--kind", "human")
    result = orrery(stack_run, "ask", "is search up?", env={"ORRERY_A2A_TOKEN": token})
    assert result.returncode == 1
    assert "answered 401 token_invalid" in result.stderr
    assert token not in result.stdout + result.stderr


def test_explain_answers_for_the_running_stacks_authz(stack_run: LocalStackRun) -> None:
    """`orrery-a2a explain -` with a token on stdin (as `token` prints it): authz's decision on
    each surface with the stack's issuer and audiences; the token itself is never printed."""
    token = _token(stack_run, "--kind", "human")
    result = orrery(stack_run, "explain", "-", stdin=token)
    assert result.returncode == 0, result.stderr
    assert "approvals: allow 200 ok" in result.stdout
    assert "principal human dev-user (client dev-console), role admin, autonomy L3" in result.stdout
    assert "a2a:       deny 401 token_invalid" in result.stdout
    assert token not in result.stdout + result.stderr
    delegated = _token(stack_run)
    from_env = orrery(stack_run, "explain", "--json", env={"ORRERY_A2A_TOKEN": delegated})
    assert from_env.returncode == 0, from_env.stderr
    surfaces = json.loads(from_env.stdout)["surfaces"]
    assert surfaces[0]["principal"]["key"] == "delegated:dev-agent-client:dev-agent:dev-user"


def test_ask_prints_the_reply(stack_run: LocalStackRun, capsys: pytest.CaptureFixture[str]) -> None:
    """`ask` (in process) answers as the delegated dev principal; the hint goes to stderr."""
    assert cli.main(["ask", "is checkout healthy?"], env=stack_run.env) == 0
    out, err = capsys.readouterr()
    assert out.startswith("checkout is degraded: error rate 4.2%")
    assert "orrery-a2a ask --context-id" in err


def _hints(stderr: str) -> dict[str, str]:
    """The approve / deny / resume command lines `ask` printed, each on a line of its own."""
    lines = stderr.splitlines()
    resume_at = lines.index("Then resume the task:")
    return {
        "approve": next(
            x for x in lines if x.startswith("  orrery-a2a approve") and "--deny" not in x
        ),
        "deny": next(x for x in lines if x.startswith("  orrery-a2a approve") and "--deny" in x),
        "resume": lines[resume_at + 1],
    }


@pytest.mark.parametrize(
    ("decision", "answer", "resumed"),
    [
        ("approve", "approved", "Approved action {action} carried out.\n"),
        ("deny", "denied", ""),
    ],
)
def test_the_printed_approval_commands_decide_and_resume(
    stack_run: LocalStackRun, decision: str, answer: str, resumed: str
) -> None:
    """`ask` for a guarded action prints the action and the commands; running them as printed
    decides as the human and resumes the task (a denied one ends rejected)."""
    asked = orrery(stack_run, "ask", "please restart checkout")
    assert asked.returncode == 0, asked.stderr
    assert asked.stdout.startswith("Approval needed: Restart checkout is a guarded (L3) action")
    assert "  tool:    restart_service (level L3)\n" in asked.stdout
    action = asked.stdout.split("  action:  ")[1].split("\n")[0]
    hints = _hints(asked.stderr)
    assert hints["resume"].startswith("  orrery-a2a ask --task-id ")
    assert hints["resume"].endswith(" 'go ahead'")

    decided = _printed(stack_run, hints[decision])
    assert decided.returncode == 0, decided.stderr
    assert decided.stdout.startswith(f"{action}: {answer}; ")  # the outcome, said once

    result = _printed(stack_run, hints["resume"])
    assert result.stdout == resumed.format(action=action)
    if decision == "deny":
        assert result.returncode == 1
        assert f"was rejected: Action {action} was denied; nothing was done." in result.stderr

    again = _printed(stack_run, hints["approve"])
    assert again.returncode == 1
    assert "409 already_decided: " in again.stderr


def test_a_second_up_on_the_same_state_dir_is_refused(stack_run: LocalStackRun) -> None:
    """Only one `up` per state directory; the second says so and exits 2."""
    second = LocalStackRun.start(stack_run.state_dir)
    assert second.finish() == 2
    assert any("another `orrery-a2a up` is running" in line for line in second.lines)


def test_up_checks_every_component_before_starting_anything(state_dir: Path) -> None:
    """Bad variables of authz and the adapter, and replicas without shared stores: `up` lists
    every problem at once, exits 2, and starts nothing (no component, no log directory)."""
    run = LocalStackRun.start(
        state_dir,
        {
            "ORRERY_A2A_RATE_LIMIT": "often",
            "ORRERY_A2A_MAX_IN_FLIGHT": "0",
            "ORRERY_A2A_REPLICAS": "2",
            "DATABASE_URL": "",
            "ORRERY_A2A_REDIS_URL": "",
        },
    )
    assert run.finish() == 2
    text = "\n".join(run.lines)
    assert "orrery-a2a up: 4 problem(s); nothing was started" in text
    assert "  authz:   ORRERY_A2A_RATE_LIMIT: expected a rate like 60/minute got 'often'" in text
    assert "  adapter: ORRERY_A2A_MAX_IN_FLIGHT: must be at least 1" in text
    assert "  adapter: DATABASE_URL: ORRERY_MULTI_REPLICA=true needs a shared store" in text
    assert "  adapter: ORRERY_A2A_REDIS_URL: ORRERY_MULTI_REPLICA=true needs" in text
    assert run.components == {}
    assert not (state_dir / "logs").exists()


def test_up_refuses_a_non_loopback_issuer(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The dev issuer never binds a network address: `up` refuses before starting anything."""
    env = {**os.environ, "ORRERY_A2A_STATE_DIR": str(state_dir)}
    assert cli.main(["up", "--issuer", "0.0.0.0:8090"], env=env) == 2
    assert "ORRERY_A2A_ISSUER_ADDR: the dev issuer binds loopback only" in capsys.readouterr().err
    assert not (state_dir / "logs").exists()
