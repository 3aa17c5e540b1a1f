"""Run the stack's processes as one unit: start each until ready, stop all when one stops.

A local stack that half-runs is worse than one that does not run: a dead authz behind a live Envoy
answers every request with 503 and hides why. So the supervisor treats the processes as one unit:
each is started only after the previous one is ready, the first one to exit (for any reason) stops
the rest, and the error names it and shows the end of its log.

Children run in their own session, so Ctrl-C in the terminal reaches only the supervisor, which
then stops them in reverse start order (Envoy first, so no request is admitted to a half-stopped
stack): SIGTERM, a grace period, then SIGKILL. Should the supervisor itself be killed outright
(SIGKILL, the OOM killer), Linux sends each child SIGTERM (`runtime.lifecycle`), so no component
outlives it holding the stack's ports. Each child's stdout and stderr go to
`<logs>/<name>.log`; stderr is also read line by line for the readiness event.

Readiness is one of:
* `SERVING` — the child logs the `serving` event (`runtime.serving`,
  docs/contract.md#start-up-event); its fields (the real bound addresses) are returned, so
  children can start on port 0;
* a probe — an async callable polled until it returns the ready details (Envoy: the admin API).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, cast

from runtime.lifecycle import dying_with_this_process
from runtime.serving import EVENT as SERVING
from runtime.serving import serving_fields

Probe = Callable[[], Awaitable[dict[str, Any] | None]]
LOG_TAIL_LINES = 15
_LINE_LIMIT = 1 << 20
_PROBE_INTERVAL = 0.1


@dataclass(frozen=True)
class Component:
    """One process of the stack; `env` is its whole environment."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    ready: Literal["serving"] | Probe = SERVING
    ready_timeout: float = 60.0


class ComponentFailed(Exception):
    """A component exited or never became ready; the message names it and how it ended."""

    def __init__(self, name: str, reason: str, log_path: Path) -> None:
        super().__init__(f"{name} {reason}")
        self.name = name
        self.reason = reason
        self.log_path = log_path


def tail(path: Path, lines: int, *, max_bytes: int = 64 * 1024) -> list[str]:
    """The last `lines` lines of a log (reading at most its last `max_bytes`)."""
    try:
        with path.open("rb") as handle:
            handle.seek(max(0, handle.seek(0, os.SEEK_END) - max_bytes))
            text = handle.read().decode("utf-8", errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def describe_exit(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


@dataclass
class Running:
    component: Component
    process: asyncio.subprocess.Process
    log_path: Path
    serving: asyncio.Future[dict[str, Any]]
    reader: asyncio.Task[None]
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.component.name

    @property
    def pid(self) -> int:
        return self.process.pid


async def _tee_stderr(
    stream: asyncio.StreamReader, log: TextIO, serving: asyncio.Future[dict[str, Any]]
) -> None:
    """Copy every stderr line to the log; resolve `serving` with the first serving event."""
    while True:
        try:
            raw = await stream.readline()
        except ValueError:  # a line over the limit: keep going, it is only a log
            continue
        if not raw:
            return
        line = raw.decode("utf-8", errors="replace")
        log.write(line)
        log.flush()
        if not serving.done():
            record = serving_fields(line)
            if record is not None:
                serving.set_result(record)


class Supervisor:
    """Starts components one by one and stops them all together."""

    def __init__(self, log_dir: Path, *, grace_seconds: float = 10.0) -> None:
        self.log_dir = log_dir
        self.grace_seconds = grace_seconds
        self.running: list[Running] = []

    async def start(self, component: Component) -> Running:
        """Start `component` and wait until it is ready; `ComponentFailed` if it is not."""
        self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        log_path = self.log_dir / f"{component.name}.log"
        log = log_path.open("a", encoding="utf-8")
        try:
            process = await asyncio.create_subprocess_exec(
                *component.argv,
                env=dict(component.env),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=log,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
                preexec_fn=dying_with_this_process(),
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            log.close()
            raise ComponentFailed(
                component.name, f"could not start: {exc.strerror or exc}", log_path
            ) from None
        stderr = cast(asyncio.StreamReader, process.stderr)  # a PIPE, so never None
        serving: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        reader = asyncio.create_task(_tee_stderr(stderr, log, serving))
        reader.add_done_callback(lambda _: log.close())
        running = Running(component, process, log_path, serving, reader)
        self.running.append(running)
        running.details = await self._wait_ready(running)
        return running

    async def _wait_ready(self, running: Running) -> dict[str, Any]:
        """Ready details, or `ComponentFailed` naming whichever process ended first: this one,
        or one started before it (a stack is only up if all of it is)."""
        component = running.component
        exits = {asyncio.ensure_future(item.process.wait()): item for item in self.running}
        ready = asyncio.ensure_future(
            running.serving if component.ready == SERVING else self._poll(component.ready)
        )
        try:
            done, _ = await asyncio.wait(
                {*exits, ready},
                timeout=component.ready_timeout,
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            for task in (*exits, ready):
                if not task.done() and task is not running.serving:
                    task.cancel()
        if ready in done:
            return ready.result()
        for task, item in exits.items():
            if task in done:
                reason = describe_exit(task.result())
                if item is running:
                    raise ComponentFailed(item.name, f"{reason} before it was ready", item.log_path)
                raise ComponentFailed(
                    item.name, f"{reason} while {component.name} was starting", item.log_path
                )
        raise ComponentFailed(
            component.name, f"was not ready within {component.ready_timeout:g}s", running.log_path
        )

    @staticmethod
    async def _poll(probe: Probe) -> dict[str, Any]:
        while True:
            details = await probe()
            if details is not None:
                return details
            await asyncio.sleep(_PROBE_INTERVAL)

    async def wait_for_exit(self) -> tuple[Running, int]:
        """The first running component to exit, with its exit code."""
        waits = {asyncio.ensure_future(item.process.wait()): item for item in self.running}
        try:
            done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in waits:
                task.cancel()
        first = next(iter(done))
        return waits[first], first.result()

    async def stop(self) -> list[tuple[str, int]]:
        """Stop every component, last started first; return each name with its exit code."""
        stopped = [(item.name, await self._stop_one(item)) for item in reversed(self.running)]
        self.running.clear()
        return stopped

    async def _stop_one(self, item: Running) -> int:
        process = item.process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            returncode = await asyncio.wait_for(process.wait(), self.grace_seconds)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            returncode = await process.wait()
        try:
            # stderr closes when the child exits, unless something it started still holds it.
            await asyncio.wait_for(asyncio.shield(item.reader), self.grace_seconds)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await item.reader
        return returncode
