"""The supervisor with real child processes: readiness, restarts, ordered stops, logs."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest

from stack.supervisor import (
    SUPERVISOR_LOG,
    Component,
    ComponentFailed,
    Running,
    Supervisor,
    describe_exit,
    restart_delay,
)
from tests.processes import process_gone, wait_gone

SERVE_THEN_WAIT = """
import json, signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
print("starting on stdout", flush=True)
print(json.dumps({"event": "serving", "addr": "127.0.0.1:4242"}), file=sys.stderr, flush=True)
time.sleep(600)
"""
SERVE_THEN_DIE = """
import json, sys, time
print(json.dumps({"event": "serving", "addr": "x"}), file=sys.stderr, flush=True)
time.sleep(0.5)
print("giving up", file=sys.stderr, flush=True)
sys.exit(5)
"""
DIE_AT_ONCE = """
import sys
print("ORRERY_A2A_JWT_ISSUER: is required", file=sys.stderr)
sys.exit(7)
"""
NEVER_READY = """
import signal, sys, time
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
time.sleep(600)
"""
IGNORES_SIGTERM = """
import json, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
print(json.dumps({"event": "serving"}), file=sys.stderr, flush=True)
time.sleep(600)
"""

pytestmark = pytest.mark.slow  # starts child processes supervised


def program(name: str, code: str, **options: Any) -> Component:
    return Component(name, [sys.executable, "-c", code], {"PATH": "/usr/bin:/bin"}, **options)


@pytest.fixture
def supervisor(tmp_path: Path) -> Supervisor:
    return Supervisor(tmp_path / "logs", grace_seconds=5.0)


async def test_ready_when_the_serving_event_is_logged(supervisor: Supervisor) -> None:
    """start() returns once the child logs `serving`, with the event's fields."""
    running = await supervisor.start(program("authz", SERVE_THEN_WAIT))
    assert running.details["addr"] == "127.0.0.1:4242"
    assert await supervisor.stop() == [("authz", 0)]


async def test_exit_before_ready_names_the_component_and_its_code(
    supervisor: Supervisor,
) -> None:
    """A child that exits first fails start() with its name, exit code and log."""
    with pytest.raises(ComponentFailed) as failed:
        await supervisor.start(program("adapter", DIE_AT_ONCE))
    assert failed.value.name == "adapter"
    assert str(failed.value) == "adapter exited with code 7 before it was ready"
    await supervisor.stop()
    assert "ORRERY_A2A_JWT_ISSUER: is required" in failed.value.log_path.read_text()


async def test_not_ready_in_time_is_a_named_failure(supervisor: Supervisor) -> None:
    """No serving event within the timeout: a failure naming the component; stop() ends it."""
    with pytest.raises(ComponentFailed, match="authz was not ready within 1s"):
        await supervisor.start(program("authz", NEVER_READY, ready_timeout=1.0))
    assert await supervisor.stop() == [("authz", 0)]


async def test_a_program_that_cannot_start_is_a_named_failure(supervisor: Supervisor) -> None:
    """A missing executable is reported, not raised as an OSError."""
    component = Component("envoy", ["/nonexistent/envoy"], {})
    with pytest.raises(ComponentFailed, match="envoy could not start"):
        await supervisor.start(component)


async def test_probe_readiness_polls_until_ready(supervisor: Supervisor) -> None:
    """A probe is polled until it returns details (how Envoy's admin /ready is used)."""
    calls = []

    async def probe() -> dict[str, Any] | None:
        calls.append(1)
        return {"admin": "127.0.0.1:1"} if len(calls) >= 3 else None

    running = await supervisor.start(program("envoy", NEVER_READY, ready=probe))
    assert running.details == {"admin": "127.0.0.1:1"}
    assert len(calls) == 3
    await supervisor.stop()


def supervisor_events(supervisor: Supervisor) -> list[dict[str, Any]]:
    """The structured events the supervisor logged so far (`supervisor.log`)."""
    path = supervisor.log_dir / SUPERVISOR_LOG
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()]


async def wait_until(condition: Callable[[], bool], timeout: float = 60.0) -> None:
    """Until `condition()` holds (bounded: a failed test must not hang)."""
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.05)


async def test_a_process_that_exits_is_restarted_and_the_others_keep_running(
    supervisor: Supervisor,
) -> None:
    """A supervised child exits on its own: it is started again (a new pid, ready again), one
    event says how it ended and one that it is back; its sibling was never touched."""
    sibling = await supervisor.start(program("authz-1", SERVE_THEN_WAIT))
    dying = await supervisor.start(program("authz-2", SERVE_THEN_DIE))
    supervisor.supervise()
    await wait_until(
        lambda: "component_restarted" in {e["event"] for e in supervisor_events(supervisor)}
    )
    exited, restarted = supervisor_events(supervisor)[:2]
    assert exited["event"] == "component_exited"
    assert (exited["component"], exited["pid"], exited["exit"]) == (
        "authz-2",
        dying.pid,
        "exited with code 5",
    )
    assert restarted["component"] == "authz-2"
    assert restarted["pid"] != dying.pid
    assert supervisor.running[0] is sibling and sibling.process.returncode is None
    await supervisor.stop()


async def test_a_clean_exit_is_restarted_too(supervisor: Supervisor) -> None:
    """Exit code 0 is no reason to stay down: only `stop()` stops a supervised component."""
    first = await supervisor.start(program("adapter-1", SERVE_THEN_WAIT))
    supervisor.supervise()
    first.process.send_signal(signal.SIGTERM)
    await wait_until(
        lambda: supervisor.running[0] is not first and bool(supervisor.running[0].details)
    )
    assert supervisor_events(supervisor)[0]["exit"] == "exited with code 0"
    assert await supervisor.stop() == [("adapter-1", 0)]


async def test_a_restart_uses_what_its_pin_makes_of_the_first_start(
    supervisor: Supervisor,
) -> None:
    """`pin` turns the first start's ready details into the component to restart: here, the
    environment names the address it first reported (how replicas keep their ports)."""
    code = (
        "import json, os, sys\n"
        "print(json.dumps({'event': 'serving', 'addr': os.environ.get('ADDR', '127.0.0.1:4343')}),"
        " file=sys.stderr, flush=True)\n"
    )

    def pin(component: Component, details: Mapping[str, Any]) -> Component:
        return dataclasses.replace(component, env={**component.env, "ADDR": details["addr"] + "0"})

    await supervisor.start(program("adapter-1", code, pin=pin))
    supervisor.supervise()
    await wait_until(lambda: supervisor.running[0].details.get("addr") == "127.0.0.1:43430")
    await supervisor.stop()


def test_restarts_back_off_while_a_process_keeps_dying_young() -> None:
    """0.5 s, then doubling, at most 30 s."""
    assert [restart_delay(n) for n in (1, 2, 3, 4, 7, 8, 20)] == [0.5, 1, 2, 4, 30, 30, 30]


async def test_a_restart_that_never_becomes_ready_is_retried_and_logged(tmp_path: Path) -> None:
    """A replacement that exits before it is ready is one `component_restart_failed` event,
    and the supervisor tries again (with a longer back-off) instead of giving up."""
    supervisor = Supervisor(tmp_path / "logs", grace_seconds=5.0)
    marker = tmp_path / "started-once"
    code = (
        "import json, pathlib, sys, time\n"
        f"marker = pathlib.Path({str(marker)!r})\n"
        "if marker.exists():\n"
        "    sys.exit(3)\n"
        "marker.touch()\n"
        "print(json.dumps({'event': 'serving'}), file=sys.stderr, flush=True)\n"
    )
    await supervisor.start(program("issuer", code))
    supervisor.supervise()
    await wait_until(
        lambda: "component_restart_failed" in {e["event"] for e in supervisor_events(supervisor)}
    )
    failed = next(
        e for e in supervisor_events(supervisor) if e["event"] == "component_restart_failed"
    )
    assert failed["reason"] == "exited with code 3 before it was ready"
    assert failed["restart_in_seconds"] == 1.0
    await supervisor.stop()


async def test_a_restart_that_cannot_even_start_is_retried(supervisor: Supervisor) -> None:
    """The program is gone by the time of the restart: `component_restart_failed` says so, the
    supervisor keeps trying, and `stop()` still ends cleanly."""
    code = "import json, sys; print(json.dumps({'event': 'serving'}), file=sys.stderr)"

    def gone(component: Component, details: Mapping[str, Any]) -> Component:
        return dataclasses.replace(component, argv=["/nonexistent/program"])

    await supervisor.start(program("issuer", code, pin=gone))
    supervisor.supervise()
    await wait_until(
        lambda: "component_restart_failed" in {e["event"] for e in supervisor_events(supervisor)}
    )
    failed = next(
        e for e in supervisor_events(supervisor) if e["event"] == "component_restart_failed"
    )
    assert failed["reason"].startswith("could not start")
    await supervisor.stop()


async def test_stop_drains_first_then_stops_phase_by_phase(supervisor: Supervisor) -> None:
    """Every drain hook runs before anything is signalled; then the lowest phase stops first
    (its processes together), whatever the start order."""
    calls: list[tuple[str, bool]] = []
    adapters: list[Running] = []

    async def drain(details: Mapping[str, Any]) -> None:
        calls.append(("drain", all(item.process.returncode is None for item in adapters)))

    await supervisor.start(program("authz", SERVE_THEN_WAIT, stop_phase=2))
    adapters.append(await supervisor.start(program("adapter-1", SERVE_THEN_WAIT, stop_phase=0)))
    adapters.append(await supervisor.start(program("adapter-2", SERVE_THEN_WAIT, stop_phase=0)))
    await supervisor.start(program("envoy", SERVE_THEN_WAIT, stop_phase=1, drain=drain))
    assert await supervisor.stop() == [
        ("adapter-2", 0),
        ("adapter-1", 0),
        ("envoy", 0),
        ("authz", 0),
    ]
    assert calls == [("drain", True)]


async def test_a_failing_drain_hook_does_not_stop_the_stop(supervisor: Supervisor) -> None:
    """A drain that raises is logged (`component_drain_failed`); everything still stops."""

    async def drain(details: Mapping[str, Any]) -> None:
        raise ConnectionRefusedError

    await supervisor.start(program("envoy", SERVE_THEN_WAIT, drain=drain))
    assert await supervisor.stop() == [("envoy", 0)]
    (event,) = supervisor_events(supervisor)
    assert (event["event"], event["error_type"]) == (
        "component_drain_failed",
        "ConnectionRefusedError",
    )


async def test_a_child_ignoring_sigterm_is_killed_after_the_grace_period(
    tmp_path: Path,
) -> None:
    """SIGTERM ignored: SIGKILL after the grace period, reported as such."""
    supervisor = Supervisor(tmp_path / "logs", grace_seconds=0.5)
    await supervisor.start(program("stubborn", IGNORES_SIGTERM))
    ((name, code),) = await supervisor.stop()
    assert (name, describe_exit(code)) == ("stubborn", "was killed by SIGKILL")


async def test_a_components_own_grace_wins(supervisor: Supervisor) -> None:
    """`stop_grace` is the component's own SIGTERM-to-SIGKILL time (an adapter's stream drain)."""
    await supervisor.start(program("stubborn", IGNORES_SIGTERM, stop_grace=0.2))
    ((_, code),) = await supervisor.stop()
    assert describe_exit(code) == "was killed by SIGKILL"


async def test_stdout_and_stderr_go_to_the_components_log(supervisor: Supervisor) -> None:
    """Both streams end up in logs/<name>.log."""
    running = await supervisor.start(program("authz", SERVE_THEN_WAIT))
    await supervisor.stop()
    text = running.log_path.read_text()
    assert running.log_path.name == "authz.log"
    assert "starting on stdout" in text
    assert json.loads(text.splitlines()[-1])["event"] == "serving"


async def test_children_get_exactly_the_given_environment(supervisor: Supervisor) -> None:
    """A component's env is its whole environment (nothing leaks from the supervisor)."""
    code = (
        "import json, os, sys, time, signal\n"
        "signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))\n"
        "print(json.dumps({'event': 'serving', 'env': sorted(os.environ)}), file=sys.stderr,"
        " flush=True)\n"
        "time.sleep(600)\n"
    )
    component = Component("x", [sys.executable, "-c", code], {"ONLY": "1"})
    running = await supervisor.start(component)
    await supervisor.stop()
    assert "ONLY" in running.details["env"]
    assert "PATH" not in running.details["env"]


def test_exit_descriptions_read_well() -> None:
    """Exit codes and signals are described in words."""
    assert describe_exit(0) == "exited with code 0"
    assert describe_exit(3) == "exited with code 3"
    assert describe_exit(-15) == "was killed by SIGTERM"


async def test_an_earlier_component_dying_during_a_later_start_is_named(
    supervisor: Supervisor,
) -> None:
    """If authz dies while the adapter is starting, the failure names authz, not the adapter."""
    await supervisor.start(program("authz", SERVE_THEN_DIE))
    with pytest.raises(ComponentFailed) as failed:
        await supervisor.start(program("adapter", NEVER_READY, ready_timeout=60.0))
    assert failed.value.name == "authz"
    assert str(failed.value) == "authz exited with code 5 while adapter was starting"
    assert "giving up" in failed.value.log_path.read_text()
    assert await supervisor.stop() == [("adapter", 0), ("authz", 5)]  # one phase: reverse order


SUPERVISE_ONE = f"""
import asyncio, sys
from pathlib import Path
from stack.supervisor import Component, Supervisor

async def main():
    supervisor = Supervisor(Path(sys.argv[1]))
    child = Component("child", [sys.executable, "-c", {SERVE_THEN_WAIT!r}], {{}})
    running = await supervisor.start(child)
    print(running.pid, flush=True)
    await asyncio.sleep(600)

asyncio.run(main())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_children_stop_when_the_supervisor_is_killed_outright(tmp_path: Path) -> None:
    """SIGKILL leaves the supervisor no chance to stop anything: the kernel SIGTERMs the child."""
    with subprocess.Popen(
        [sys.executable, "-c", SUPERVISE_ONE, str(tmp_path / "logs")],
        stdout=subprocess.PIPE,
        text=True,
    ) as supervisor:
        assert supervisor.stdout is not None
        child = int(supervisor.stdout.readline())
        assert not process_gone(child)
        os.kill(supervisor.pid, signal.SIGKILL)
        supervisor.wait()
    assert wait_gone({child}) == set()
