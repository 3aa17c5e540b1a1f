"""How `orrery-a2a up` stops, and what it does when a component dies: each test runs a stack of
its own (the real issuer, authz, adapter and Envoy), since each stops or breaks it."""

from __future__ import annotations

import json
import os
import re
import signal
from pathlib import Path

import pytest

from stack.state import CARD_KEY_FILE, ENVOY_ADMIN_SOCKET, ISSUER_KEY_FILE, STATE_FILE, pid_alive
from tests.processes import descendants, port_free, wait_gone
from tests.stack.conftest import LocalStackRun, orrery

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


def test_ctrl_c_stops_every_component_and_removes_the_secrets(state_dir: Path) -> None:
    """SIGINT: all four stop, `up` exits 0, the key, state and admin socket are gone, the logs
    stay."""
    run = LocalStackRun.start(state_dir)
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    assert run.stop() == 0
    assert run.lines[-1] == "orrery-a2a up: stopped adapter, envoy, authz, issuer"
    assert not [name for name, pid in pids.items() if pid_alive(pid)]
    assert not (state_dir / STATE_FILE).exists()
    assert not (state_dir / ISSUER_KEY_FILE).exists()
    assert not (state_dir / CARD_KEY_FILE).exists()
    assert not (state_dir / ENVOY_ADMIN_SOCKET).exists()
    assert (state_dir / "logs" / "latest" / "envoy.log").exists()


def test_a_closed_terminal_stops_every_component_and_removes_the_secrets(state_dir: Path) -> None:
    """SIGHUP (the terminal went away) is a clean stop like Ctrl-C, not an abandoned stack."""
    run = LocalStackRun.start(state_dir)
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    run.process.send_signal(signal.SIGHUP)
    assert run.finish() == 0
    assert run.lines[-1] == "orrery-a2a up: stopped adapter, envoy, authz, issuer"
    assert not [name for name, pid in pids.items() if pid_alive(pid)]
    assert not (state_dir / ISSUER_KEY_FILE).exists()


def test_killing_up_outright_stops_every_component(state_dir: Path) -> None:
    """SIGKILL gives `up` no chance to clean up; the kernel still stops all four and whatever they
    started, so no port stays taken (the next `up` removes the secrets left behind)."""
    run = LocalStackRun.start(state_dir)
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    assert set(pids) == {"issuer", "authz", "adapter", "envoy"}
    tree = descendants(run.process.pid)
    assert set(pids.values()) <= tree
    # Every address a ready line names: listener, issuer, authz and its metrics, adapter (Envoy's
    # admin API is a Unix socket, not a port).
    ready = [line for line in run.lines if " ready " in line]
    addresses = {found for line in ready for found in re.findall(r"127\.0\.0\.1:\d+", line)}
    assert len(addresses) == 5
    run.process.kill()
    run.finish()
    assert wait_gone(tree, timeout=20) == set()
    assert [address for address in addresses if not port_free(address)] == []


def test_a_component_that_dies_is_restarted_on_its_address_and_named(state_dir: Path) -> None:
    """authz killed after start: `up` says how it ended and restarts it on the same address;
    the stack keeps answering and stops cleanly afterwards (exit 0)."""
    run = LocalStackRun.start(state_dir)
    assert run.wait_for("is up at")
    pids = {name: pid for name, (_, pid) in run.components.items()}
    os.kill(pids["authz"], signal.SIGKILL)
    assert run.wait_for("orrery-a2a up: authz was killed by SIGKILL; restarting in 0.5s")
    restarted = run.wait_for(r"orrery-a2a up: authz restarted \(pid \d+\)")
    assert restarted is not None
    assert f"(pid {pids['authz']})" not in restarted
    answer = orrery(run, "ask", "is search up?")
    assert answer.returncode == 0, answer.stderr
    assert run.stop() == 0
    events = [
        json.loads(line)
        for line in (state_dir / "logs" / "latest" / "supervisor.log").read_text().splitlines()
    ]
    assert [(e["event"], e["component"]) for e in events] == [
        ("component_exited", "authz"),
        ("component_restarted", "authz"),
    ]
    assert events[0]["pid"] == pids["authz"]
