"""`orrery-a2a check`, `python -m authz check` and `python -m adapter check`: every problem of
every component at once, exit 0 or 2, nothing started."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.checks import read_report, report
from stack import cli, envoy_config
from stack.state import ENVOY_ADMIN_SOCKET

pytestmark = pytest.mark.slow  # starts `orrery-a2a check` as a process

CLEAN = {
    name: value
    for name, value in os.environ.items()
    if not name.startswith(("ORRERY_", "DATABASE_URL"))
}
EPHEMERAL = {
    "ORRERY_A2A_LISTEN_ADDR": "127.0.0.1:0",
    "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
    "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
    "ORRERY_A2A_ADAPTER_ADDR": "127.0.0.1:0",
    "ORRERY_A2A_ISSUER_ADDR": "127.0.0.1:0",
}


def check(state_dir: Path, capsys: pytest.CaptureFixture[str], **env: str) -> tuple[int, str]:
    code = cli.main(["check", f"--state-dir={state_dir}"], env={**CLEAN, **EPHEMERAL, **env})
    return code, capsys.readouterr().out


def test_a_clean_environment_checks_ok(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Defaults everywhere: every component and the Envoy bootstrap pass, exit 0."""
    assert check(state_dir, capsys) == (0, "orrery-a2a check: ok (stack, authz, adapter, envoy)\n")


def test_every_problem_of_every_component_is_listed(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One run names the stack's, authz's, the adapter's and Envoy's problems together."""
    bootstrap = tmp_path / "envoy.yaml"
    bootstrap.write_text("static_resources: {listeners: [{name: public}]}\n")
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    code, out = check(
        state_dir,
        capsys,
        ORRERY_A2A_REPLICAS="9",
        ORRERY_A2A_ENVOY_CONFIG=str(bootstrap),
        ORRERY_A2A_JWT_MAX_LIFETIME="soon",
        ORRERY_A2A_PUBLIC_URL="https://edge.example/api",
        ORRERY_A2A_GATEWAY="no_such_module:create",
    )
    assert code == 2
    lines = out.splitlines()
    assert lines[0].startswith("orrery-a2a check: ") and "nothing was started" in lines[0]
    body = "\n".join(lines[1:])
    assert "  stack:   ORRERY_A2A_REPLICAS: must be at least 1 and at most 8, got 9" in body
    assert "  authz:   ORRERY_A2A_JWT_MAX_LIFETIME: expected a duration" in body
    assert "  adapter: ORRERY_A2A_PUBLIC_URL: its path must be /a2a" in body
    assert "  envoy:   " in body


def test_a_taken_address_is_named_with_its_flag(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A configured port another process listens on is a problem before anything starts."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = f"127.0.0.1:{holder.getsockname()[1]}"
        code, out = check(state_dir, capsys, ORRERY_A2A_ADAPTER_ADDR=taken)
    assert code == 2
    assert (
        f"  stack:   ORRERY_A2A_ADAPTER_ADDR (--adapter): cannot listen on {taken}"
        " (Address already in use)"
    ) in out


def test_a_state_dir_too_deep_for_the_admin_socket_is_a_problem(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Envoy's admin socket lives in the state directory and a Unix socket's path has at most
    107 bytes: a deeper directory is a stack problem naming the variable, before anything starts."""
    deep = tmp_path / ("d" * (108 - len(str(tmp_path))))
    code, out = check(deep, capsys)
    assert code == 2
    socket_path = deep / ENVOY_ADMIN_SOCKET
    assert (
        f"  stack:   ORRERY_A2A_STATE_DIR (--state-dir): Envoy's admin socket {socket_path} would"
        f" be {len(str(socket_path))} bytes long; a Unix socket path has at most 107:"
        " choose a shorter state directory"
    ) in out
    assert out.count("a Unix socket path has at most") == 1


def test_an_envoy_admin_tcp_address_is_refused(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ORRERY_A2A_ENVOY_ADMIN_ADDR (once the admin API's TCP address) is a problem, not ignored:
    the admin API is the state directory's socket, never a TCP port any local user reaches."""
    code, out = check(state_dir, capsys, ORRERY_A2A_ENVOY_ADMIN_ADDR="127.0.0.1:9901")
    assert code == 2
    assert (
        "  stack:   ORRERY_A2A_ENVOY_ADMIN_ADDR: the local stack serves Envoy's admin API only on"
        f" the Unix socket {state_dir / ENVOY_ADMIN_SOCKET}; unset this variable"
    ) in out


def test_replicas_need_shared_stores(state_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--replicas 2` without DATABASE_URL and ORRERY_A2A_REDIS_URL: the adapter's problems."""
    code, out = check(state_dir, capsys, ORRERY_A2A_REPLICAS="2")
    assert code == 2
    assert "  adapter: DATABASE_URL: ORRERY_MULTI_REPLICA=true needs a shared store" in out
    assert "  adapter: ORRERY_A2A_REDIS_URL: ORRERY_MULTI_REPLICA=true needs" in out


def test_an_envoy_bootstrap_envoy_rejects_is_a_problem(
    state_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The rendered bootstrap goes through `envoy --mode validate`: what Envoy refuses is named."""
    source = Path(envoy_config.repo_config_path()).read_text()
    broken = tmp_path / "envoy.yaml"
    broken.write_text(
        source.replace("drain_timeout: 5s", "drain_timeout: 5s\n                no_such_field: 1")
    )
    code, out = check(state_dir, capsys, ORRERY_A2A_ENVOY_CONFIG=str(broken))
    assert code == 2
    assert f"  envoy:   {broken} does not validate: " in out
    assert "no_such_field" in out


def _component(name: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", name, "check"],
        env={**CLEAN, **env},
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_authz_check_reads_a_jwks_file(tmp_path: Path) -> None:
    """`python -m authz check`: the settings and a JWKS file that holds no usable key."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text('{"keys": []}')
    env = {
        "ORRERY_A2A_JWT_ISSUER": "https://idp.example/",
        "ORRERY_A2A_JWT_AUDIENCE": "a2a",
        "ORRERY_CONSOLE_JWT_AUDIENCE": "console",
        "ORRERY_CONSOLE_CLIENTS": "console-app",
        "ORRERY_A2A_JWKS_FILE": str(jwks),
        "ORRERY_A2A_ASSERTION_KEYS": "k1=" + "A" * 43,
    }
    result = _component("authz", env)
    assert result.returncode == 2
    assert result.stdout == (
        "authz: 1 problem(s)\n  ORRERY_A2A_JWKS_FILE: JWKS holds no usable signature key\n"
    )


def test_adapter_check_imports_the_gateway() -> None:
    """`python -m adapter check`: a gateway that cannot be imported is a problem."""
    env = {"ORRERY_A2A_ASSERTION_KEYS": "k1=" + "A" * 43, "ORRERY_A2A_GATEWAY": "nowhere:create"}
    result = _component("adapter", env)
    assert result.returncode == 2
    assert "ORRERY_A2A_GATEWAY: cannot load 'nowhere:create'" in result.stdout
    ok = _component("adapter", {"ORRERY_A2A_ASSERTION_KEYS": "k1=" + "A" * 43})
    assert (ok.returncode, ok.stdout) == (0, "adapter: configuration ok\n")


def test_the_json_report_is_what_the_stack_reads() -> None:
    """`report(..., as_json=True)` and `read_report` agree; other output is not a report."""
    out = io.StringIO()
    assert report("authz", ["A: bad", "B: worse"], as_json=True, out=out) == 2
    assert read_report("a log line\n" + out.getvalue()) == ["A: bad", "B: worse"]
    assert json.loads(out.getvalue())["component"] == "authz"
    assert read_report("Traceback …\n") is None


def test_the_adk_agent_flag_checks_the_agent_path(
    state_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--adk-agent` selects the ADK gateway; the adapter's check names a bad agent path."""
    code = cli.main(
        ["check", f"--state-dir={state_dir}", "--adk-agent=nowhere:root_agent"],
        env={**CLEAN, **EPHEMERAL},
    )
    out = capsys.readouterr().out
    assert code == 2
    assert "  adapter: ORRERY_A2A_ADK_AGENT: cannot load 'nowhere:root_agent'" in out
    good = ["check", f"--state-dir={state_dir}", "--adk-agent=gateways.adk.example:root_agent"]
    assert cli.main(good, env={**CLEAN, **EPHEMERAL}) == 0
