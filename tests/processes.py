"""Processes in tests: read a child's JSON events as they come, see its process tree gone and its
ports free.

Why a thread reads the child's stderr: `select()` on the pipe followed by `readline()` on the
buffered text stream loses events. `readline()` pulls everything the pipe holds into Python's
buffer and returns one line; the next `select()` then sees an empty pipe and waits for output
that may never come (a `serving` event sitting unread in the buffer, while the child sits idle).
A busy machine makes this likely, because the child's lines pile up before the test reads.
Reading every line on a thread also keeps the pipe drained, so a chatty child never blocks on
a full pipe while the test is looking elsewhere.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

START_TIMEOUT = 60.0
GONE_TIMEOUT = 10.0


class EventProcess:
    """A child process whose stderr lines are collected, in order, as `lines`, and the JSON ones
    among them as `events`. With `merge_stdout` its stdout is read too, interleaved (a command
    that prints for people, like `orrery-a2a up`)."""

    def __init__(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        *,
        cwd: Path | None = None,
        merge_stdout: bool = False,
    ) -> None:
        self.proc = subprocess.Popen(
            list(argv),
            env=dict(env),
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if merge_stdout else subprocess.DEVNULL,
            stderr=subprocess.STDOUT if merge_stdout else subprocess.PIPE,
            text=True,
        )
        self._output = self.proc.stdout if merge_stdout else self.proc.stderr
        self.lines: list[str] = []
        self.events: list[dict[str, Any]] = []
        self._changed = threading.Condition()
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def stderr(self) -> str:
        """Everything the child wrote to stderr so far."""
        with self._changed:
            return "".join(self.lines)

    def _read(self) -> None:
        assert self._output is not None
        for line in self._output:
            with self._changed:
                self.lines.append(line)
                # Not every line is ours: gRPC's C core writes plain text, e.g. when a bind fails.
                if line.startswith("{"):
                    self.events.append(json.loads(line))
                self._changed.notify_all()
        self._output.close()  # at its end: nothing more to read, and no pipe left open
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait_for(self, event: str, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        """The first `event` the child logged, waiting for it if need be."""

        def seen() -> dict[str, Any] | None:
            return next((e for e in self.events if e.get("event") == event), None)

        with self._changed:
            self._changed.wait_for(lambda: seen() is not None or self._closed, timeout)
            found = seen()
            if found is None:
                raise AssertionError(f"no {event!r} event; got {self.events}")
            return found

    def wait_for_line(self, pattern: str, timeout: float = START_TIMEOUT) -> str | None:
        """The first line matching `pattern` (a regex), waiting for it if need be; None when the
        output ends without one."""

        def seen() -> str | None:
            return next((line for line in self.lines if re.search(pattern, line)), None)

        with self._changed:
            if not self._changed.wait_for(lambda: seen() is not None or self._closed, timeout):
                raise AssertionError(f"no line matching {pattern!r} in time; got {self.lines}")
            found = seen()
            return found.rstrip("\n") if found is not None else None

    def finish(self, timeout: float = START_TIMEOUT) -> int:
        """Wait for the child to exit and for the end of its stderr; return its exit code."""
        code = self.proc.wait(timeout=timeout)
        self._reader.join(timeout)
        return code

    def stop(self, sig: int = signal.SIGTERM, timeout: float = START_TIMEOUT) -> int:
        self.proc.send_signal(sig)
        return self.finish(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


def process_gone(pid: int) -> bool:
    """No such process, or only its zombie (a container's PID 1 may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def descendants(pid: int) -> set[int]:
    """Every living process below `pid`: children, their children, and so on (Linux /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (FileNotFoundError, ProcessLookupError, IndexError, ValueError):
            continue  # gone while we looked
        children.setdefault(parent, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def wait_gone(pids: Iterable[int], timeout: float = GONE_TIMEOUT) -> set[int]:
    """Wait until every process in `pids` is gone; return those still alive at the deadline."""
    alive = set(pids)
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = {pid for pid in alive if not process_gone(pid)}
    return alive


def port_free(address: str) -> bool:
    """True when a new server could listen on `address` ("host:port", "[v6]:port").

    Binding the way a server does (SO_REUSEADDR, never SO_REUSEPORT) fails while anyone still
    listens there, even a stale process that would share the port with SO_REUSEPORT."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, int(port)))
            probe.listen()
        except OSError:
            return False
    return True


def listening_tcp_ports(pids: Iterable[int]) -> set[tuple[str, int]]:
    """Every TCP (host, port) one of `pids` listens on, from the kernel's own tables (Linux
    /proc): not what a process says it bound, so a port nobody announced is found too."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            links = [entry.readlink() for entry in Path(f"/proc/{pid}/fd").iterdir()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # gone while we looked
        inodes |= {str(link)[8:-1] for link in links if str(link).startswith("socket:[")}
    found: set[tuple[str, int]] = set()
    for table, loopback in (("/proc/net/tcp", "127.0.0.1"), ("/proc/net/tcp6", "::1")):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                # Any local address reaches a loopback or wildcard listener from this host.
                found.add((loopback, int(local.rsplit(":", 1)[1], 16)))
    return found
