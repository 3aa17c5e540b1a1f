"""Plumbing for the local-stack tests: real child processes, a private state dir, `up` runs.

`LocalStackRun` starts `orrery-a2a up` as a real process on ephemeral ports — the real issuer,
authz, adapter and Envoy. It waits for the "is up at" line and parses the per-component lines, so a
test can check every pid after the stack stops.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from runtime.addresses import format_address
from tests.processes import EventProcess

EPHEMERAL = [
    "--listen=127.0.0.1:0",
    "--authz=127.0.0.1:0",
    "--authz-diag=127.0.0.1:0",
    "--adapter=127.0.0.1:0",
    "--issuer=127.0.0.1:0",
]
START_TIMEOUT = 90.0
_READY_LINE = re.compile(r"^  ([\w-]+)\s+ready\s+(\S+).*\(pid (\d+)\)$")


@contextlib.asynccontextmanager
async def serving(app: web.Application, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve `app` on an ephemeral port of `host` (loopback); yields its base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    try:
        yield f"http://{format_address((host, runner.addresses[0][1]))}"
    finally:
        await runner.cleanup()


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    path = tmp_path / "state"
    path.mkdir(mode=0o700)
    return path


def cli_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "stack.cli", *args]


@dataclass
class LocalStackRun:
    """One `orrery-a2a up` process and what it printed (stdout and stderr, in order)."""

    run: EventProcess
    state_dir: Path

    @classmethod
    def start(cls, state_dir: Path, extra_env: Mapping[str, str] | None = None) -> LocalStackRun:
        env = {**os.environ, **(extra_env or {})}
        env.pop("ORRERY_A2A_STATE_DIR", None)
        argv = cli_argv("up", f"--state-dir={state_dir}", *EPHEMERAL)
        # cwd: anywhere; `up` needs nothing from the working directory
        return cls(EventProcess(argv, env, cwd=state_dir.parent, merge_stdout=True), state_dir)

    @property
    def process(self) -> subprocess.Popen[str]:
        return self.run.proc

    @property
    def lines(self) -> list[str]:
        """What `up` printed so far, a line each."""
        return [line.rstrip("\n") for line in self.run.lines]

    def wait_for(self, pattern: str, timeout: float = START_TIMEOUT) -> str | None:
        """The first line matching `pattern`, or None when the output ends first."""
        return self.run.wait_for_line(pattern, timeout)

    def finish(self, timeout: float = 60.0) -> int:
        """Wait for `up` to exit (reading the rest of its output); return its exit code."""
        return self.run.finish(timeout)

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
        return self.finish()

    @property
    def url(self) -> str:
        for line in self.lines:
            if match := re.search(r"is up at (\S+)", line):
                return match[1]
        raise AssertionError(f"not up: {self.lines}")

    @property
    def components(self) -> dict[str, tuple[str, int]]:
        """name → (where, pid) from the ready lines."""
        found = {}
        for line in self.lines:
            if match := _READY_LINE.match(line):
                found[match[1]] = (match[2].rstrip(","), int(match[3]))
        return found

    @property
    def env(self) -> dict[str, str]:
        """An environment for CLI calls that talk to this stack."""
        return {**os.environ, "ORRERY_A2A_STATE_DIR": str(self.state_dir)}


@pytest.fixture(scope="module")
def stack_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRun]:
    """One running stack shared by a module's read-only tests (starting one takes seconds)."""
    state_dir = tmp_path_factory.mktemp("stack") / "state"
    state_dir.mkdir(mode=0o700)
    run = LocalStackRun.start(state_dir)
    try:
        assert run.wait_for(r"is up at"), run.lines
        yield run
    finally:
        run.stop()


def orrery(
    run: LocalStackRun, *args: str, env: dict[str, str] | None = None, stdin: str = ""
) -> subprocess.CompletedProcess[str]:
    """`orrery-a2a ARGS…` as a separate process talking to `run`'s stack (with `env` added to
    its environment and `stdin` as its input)."""
    return subprocess.run(
        cli_argv(*args),
        env={**run.env, **(env or {})},
        input=stdin,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
