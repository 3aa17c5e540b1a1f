"""The local stack's own address rules: the dev issuer and Envoy's admin API bind loopback only,
where a local client reaches a listener, and how long a Unix socket's path may be. (Parsing and
formatting addresses is `runtime.addresses`.)"""

from __future__ import annotations

import os
from pathlib import Path

from runtime.addresses import Address, format_address, is_loopback_host

# Linux's sockaddr_un has 108 bytes for the path, its terminating NUL included.
MAX_UNIX_SOCKET_PATH = 107


class NotLoopback(ValueError):
    """A loopback-only socket (the dev issuer, Envoy's admin API) was given another address."""


def require_loopback(host: str, what: str = "the dev issuer") -> str:
    """Return `host` if it is a literal loopback address (127.0.0.0/8 or ::1), else refuse,
    naming `what` binds there.

    Names are refused too, `localhost` included: what a name resolves to is not ours to decide.
    """
    if not is_loopback_host(host):
        raise NotLoopback(f"{what} binds loopback only (127.0.0.1 or ::1), not {host!r}")
    return host


def client_host(address: Address) -> str:
    """Where a local client reaches a listener bound to `address` (unspecified → loopback)."""
    host, port = address
    host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(host, host)  # noqa: S104 (a mapping, not a bind)
    return format_address((host, port))


def fits_a_unix_socket(path: Path) -> bool:
    """Whether `path` is short enough to bind a Unix socket at."""
    return len(os.fsencode(path)) <= MAX_UNIX_SOCKET_PATH


def socket_path_problem(path: Path, what: str) -> str | None:
    """Why `path` cannot be bound as a Unix socket (too long), or None. A longer path would fail
    only when the socket is bound, with an error that names neither the path nor the limit."""
    if fits_a_unix_socket(path):
        return None
    return (
        f"{what} {path} would be {len(os.fsencode(path))} bytes long; a Unix socket path has"
        f" at most {MAX_UNIX_SOCKET_PATH}"
    )
