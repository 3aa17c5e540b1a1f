"""Where a running stack keeps its state, and how other commands find it.

`orrery-a2a up` writes the dev issuer's signing key and a small `stack.json` (URLs, audiences, the
supervisor's pid) into a per-user directory; `token`, `ask` and `approve` read them from there.
Why files and not a "mint a token" endpoint on the issuer: anyone on the machine can reach a
loopback port, but only this OS user can read a 0700 directory with 0600 files. So the right to
mint dev tokens is exactly the right to be the user who ran `up`.

The directory is `ORRERY_A2A_STATE_DIR`, else `$XDG_RUNTIME_DIR/orrery-a2a` (per user, cleared at
logout), else `<tmp>/orrery-a2a-<uid>`. A shared tmp is hostile ground, so an existing directory
must be ours, not a symlink, and not readable by anyone else — otherwise we refuse to use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

STATE_FILE = "stack.json"
ISSUER_KEY_FILE = "issuer-key.pem"
CARD_KEY_FILE = "card-key.pem"
# Envoy's admin API (drain, quit, fail health, change runtime): a 0600 socket here, not a port.
ENVOY_ADMIN_SOCKET = "envoy-admin.sock"


class StackError(Exception):
    """A problem the user can act on; the message says what to do."""


class NoStack(StackError):
    """No `orrery-a2a up` is running for this state directory."""


def default_state_dir(env: Mapping[str, str]) -> Path:
    """Absolute, so the paths recorded in `stack.json` work from any directory."""
    if env.get("ORRERY_A2A_STATE_DIR"):
        return Path(env["ORRERY_A2A_STATE_DIR"]).absolute()
    if env.get("XDG_RUNTIME_DIR"):
        return Path(env["XDG_RUNTIME_DIR"]).absolute() / "orrery-a2a"
    return Path(tempfile.gettempdir()).absolute() / f"orrery-a2a-{os.getuid()}"


def private_dir(path: Path) -> Path:
    """Create `path` (0700) or check that an existing one is a private directory we own."""
    try:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700, parents=True)
        info = path.lstat()
    except OSError as exc:
        raise StackError(f"cannot use {path} for the stack's state: {exc.strerror}") from None
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise StackError(f"{path} is not a directory (refusing a symlink or file)")
    if info.st_uid != os.getuid():
        raise StackError(f"{path} belongs to another user; set ORRERY_A2A_STATE_DIR")
    if info.st_mode & 0o077:
        raise StackError(f"{path} is readable by other users; run `chmod 700 {path}`")
    return path


def write_private(path: Path, data: bytes) -> None:
    """Write a 0600 file, replacing an old one; never follow a symlink planted at `path`."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else: not our stack
        return False
    return True


@dataclass(frozen=True, slots=True)
class StackState:
    """What `up` tells the other commands about the stack it runs."""

    pid: int
    url: str
    issuer: str
    audience: str
    console_audience: str
    key_file: str
    admin: str
    logs: str

    def save(self, state_dir: Path) -> None:
        write_private(state_dir / STATE_FILE, json.dumps(asdict(self), indent=2).encode())

    @classmethod
    def load(cls, state_dir: Path) -> StackState:
        """The state of the running stack, or `NoStack` saying how to start one."""
        hint = "start one with `orrery-a2a up` (with the same --state-dir, if you gave one)"
        try:
            raw = (state_dir / STATE_FILE).read_bytes()
        except FileNotFoundError:
            raise NoStack(f"no running stack found in {state_dir}; {hint}") from None
        try:
            state = cls(**json.loads(raw))
        except (ValueError, TypeError):
            state = None
        if state is None or type(state.pid) is not int:
            raise NoStack(f"{state_dir / STATE_FILE} is unreadable; {hint}")
        if not pid_alive(state.pid):
            raise NoStack(f"the stack recorded in {state_dir} (pid {state.pid}) is gone; {hint}")
        return state
