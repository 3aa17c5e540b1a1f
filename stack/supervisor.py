"""Run the stack's processes: start each until ready, keep each running, stop them in order.

Start: each component starts only after the previous one is ready, so a failure names the
component that failed (and shows the end of its log), not the first one that noticed. A stack
that cannot start does not half-run: the first failure stops everything started so far.

Running: once the stack is up, `supervise()` keeps every component running on its own. A process
that exits — crashed, killed, or stopped cleanly by someone else — is started again after a
back-off (0.5 s, doubling to 30 s while it keeps dying within 10 s of its start), with the
addresses its `pin` takes from its first start (the same ports, so Envoy's clusters still
point at it), and the others go on serving: replicas take each other's place meanwhile. Each
exit and restart is one structured event in `<logs>/supervisor.log` (`component_exited`,
`component_restarted`, `component_restart_failed`; docs/contract.md#supervisor-events).

Stop (`stop()`): first every component's `drain` hook (Envoy: stop accepting new connections and
requests), then the components by `stop_phase`, lowest first, each phase's processes together:
SIGTERM, their own grace period (`stop_grace`), then SIGKILL. `up` orders it Envoy's drain, the
adapters (which finish their streams through the still running Envoy), Envoy, authz, the issuer.

Children run in their own session, so Ctrl-C in the terminal reaches only the supervisor. Should
the supervisor itself be killed outright (SIGKILL, the OOM killer), Linux sends each child SIGTERM
(`runtime.lifecycle`), so no component outlives it holding the stack's ports. Each child's stdout
and stderr go to `<logs>/<name>.log`; stderr is also read line by line for the readiness event.

Readiness is one of:
* `SERVING` — the child logs the `serving` event (`runtime.serving`,
  docs/contract.md#start-up-event); its fields (the real bound addresses) are returned, so
  children can start on port 0;
* a probe — an async callable polled until it returns the ready details (Envoy: the admin API).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TextIO, cast

from runtime import logs
from runtime.lifecycle import dying_with_this_process
from runtime.serving import EVENT as SERVING
from runtime.serving import serving_fields

Probe = Callable[[], Awaitable[dict[str, Any] | None]]
# Before anything stops: given the component's ready details (Envoy: stop accepting).
Drain = Callable[[Mapping[str, Any]], Awaitable[None]]
# The component to restart: this one pinned to what its first start reported (its bound ports).
Pin = Callable[["Component", Mapping[str, Any]], "Component"]
LOG_TAIL_LINES = 15
SUPERVISOR_LOG = "supervisor.log"
_LINE_LIMIT = 1 << 20
_PROBE_INTERVAL = 0.1
RESTART_FIRST_DELAY = 0.5
RESTART_MAX_DELAY = 30.0
RESTART_STABLE_SECONDS = 10.0  # a process that ran this long starts the back-off over
DRAIN_TIMEOUT = 5.0


@dataclass(frozen=True)
class Component:
    """One process of the stack; `env` is its whole environment. `stop_phase`: lower phases stop
    first; `stop_grace`: SIGTERM to SIGKILL (None: the supervisor's default)."""

    name: str
    argv: Sequence[str]
    env: Mapping[str, str]
    ready: Literal["serving"] | Probe = SERVING
    ready_timeout: float = 60.0
    stop_phase: int = 0
    stop_grace: float | None = None
    drain: Drain | None = None
    pin: Pin | None = None


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


def restart_delay(failures: int) -> float:
    """The back-off before restart number `failures` of a process that keeps dying young."""
    return min(RESTART_MAX_DELAY, RESTART_FIRST_DELAY * 2.0 ** max(0, failures - 1))


@dataclass
class Running:
    component: Component
    process: asyncio.subprocess.Process
    log_path: Path
    serving: asyncio.Future[dict[str, Any]]
    reader: asyncio.Task[None]
    details: dict[str, Any] = field(default_factory=dict)
    started_at: float = field(default_factory=time.monotonic)

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
    """Starts components one by one, keeps them running, stops them in phases."""

    def __init__(
        self,
        log_dir: Path,
        *,
        grace_seconds: float = 10.0,
        notify: Callable[[str], None] | None = None,
    ) -> None:
        self.log_dir = log_dir
        self.grace_seconds = grace_seconds
        self.running: list[Running] = []
        self._notify = notify or (lambda _: None)
        self._stopping = asyncio.Event()
        self._supervising: asyncio.Future[list[None]] | None = None
        self._events: logs.JsonLinesHandler | None = None

    async def start(self, component: Component) -> Running:
        """Start `component` and wait until it is ready; `ComponentFailed` if it is not, or if
        a component started before it exits meanwhile."""
        running = await self._spawn(component)
        self.running.append(running)
        running.details = await self._wait_ready(running, self.running)
        return running

    async def _spawn(self, component: Component) -> Running:
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
        return Running(component, process, log_path, serving, reader)

    async def _wait_ready(self, running: Running, watched: Sequence[Running]) -> dict[str, Any]:
        """Ready details, or `ComponentFailed` naming whichever of `watched` ended first: this
        one, or one started before it (a stack is only up if all of it is)."""
        component = running.component
        exits = {asyncio.ensure_future(item.process.wait()): item for item in watched}
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

    # --- keeping them running -----------------------------------------------------------------

    def supervise(self) -> None:
        """From now on, restart whichever component exits (until `stop()`)."""
        if self._supervising is None:
            self._supervising = asyncio.ensure_future(
                asyncio.gather(*(self._keep_running(item) for item in self.running))
            )

    async def _keep_running(self, first: Running) -> None:
        """Watch one component's process; each time it exits, start it again after a back-off
        until it is ready, pinned (`pin`) to what its first start reported."""
        component = first.component
        if component.pin is not None:
            component = component.pin(component, first.details)
        current, failures = first, 0
        while True:
            returncode = await current.process.wait()
            if self._stopping.is_set():
                return
            young = time.monotonic() - current.started_at < RESTART_STABLE_SECONDS
            failures = failures + 1 if young else 1
            delay = restart_delay(failures)
            self._event(
                "component_exited",
                logging.WARNING,
                component=current.name,
                pid=current.pid,
                exit=describe_exit(returncode),
                restart_in_seconds=delay,
            )
            self._notify(f"{current.name} {describe_exit(returncode)}; restarting in {delay:g}s")
            while True:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopping.wait(), delay)
                if self._stopping.is_set():
                    return
                try:
                    current = await self._replace(current, component)
                    current.details = await self._wait_ready(current, [current])
                except ComponentFailed as failure:  # could not start, or not ready: try again
                    await self._stop_one(current)
                    failures += 1
                    delay = restart_delay(failures)
                    self._event(
                        "component_restart_failed",
                        logging.WARNING,
                        component=failure.name,
                        reason=failure.reason,
                        restart_in_seconds=delay,
                    )
                    self._notify(f"{failure}; restarting in {delay:g}s")
                    continue
                self._event("component_restarted", component=current.name, pid=current.pid)
                self._notify(f"{current.name} restarted (pid {current.pid})")
                break

    async def _replace(self, old: Running, component: Component) -> Running:
        """A new process in `old`'s place in `running`, so `stop()` stops it whatever happens."""
        new = await self._spawn(component)
        self.running[self.running.index(old)] = new
        return new

    def _event(self, name: str, level: int = logging.INFO, **fields: Any) -> None:
        """One JSON line in `<logs>/supervisor.log`, shaped like every process's events."""
        if self._events is None:
            self.log_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._events = logs.JsonLinesHandler(
                (self.log_dir / SUPERVISOR_LOG).open("a", encoding="utf-8")
            )
        self._events.write_event(level, "stack.supervisor", name, fields)

    # --- stopping -------------------------------------------------------------------------------

    async def stop(self) -> list[tuple[str, int]]:
        """Drain, then stop every component by phase (each phase together, last started first
        within it); return each name with its exit code, in stop order."""
        self._stopping.set()
        if self._supervising is not None:
            self._supervising.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._supervising
        await asyncio.gather(
            *(self._drain(item) for item in self.running if item.component.drain is not None)
        )
        stopped: list[tuple[str, int]] = []
        order = list(reversed(self.running))
        for phase in sorted({item.component.stop_phase for item in order}):
            group = [item for item in order if item.component.stop_phase == phase]
            codes = await asyncio.gather(*(self._stop_one(item) for item in group))
            stopped += [(item.name, code) for item, code in zip(group, codes, strict=True)]
        self.running.clear()
        if self._events is not None:
            self._events.stream.close()
            self._events = None
        return stopped

    async def _drain(self, item: Running) -> None:
        """The component's drain hook, bounded; a failure only means it stops undrained."""
        drain = cast(Drain, item.component.drain)
        if item.process.returncode is not None:
            return
        try:
            await asyncio.wait_for(drain(item.details), DRAIN_TIMEOUT)
        except Exception as exc:  # noqa: BLE001 - stopping goes on whatever the hook did
            self._event(
                "component_drain_failed",
                logging.WARNING,
                component=item.name,
                error_type=type(exc).__name__,
            )

    async def _stop_one(self, item: Running) -> int:
        process = item.process
        grace = item.component.stop_grace
        grace = self.grace_seconds if grace is None else grace
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        try:
            returncode = await asyncio.wait_for(process.wait(), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            returncode = await process.wait()
        try:
            # stderr closes when the child exits, unless something it started still holds it.
            await asyncio.wait_for(asyncio.shield(item.reader), grace)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await item.reader
        return returncode
