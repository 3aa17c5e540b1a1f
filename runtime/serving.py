"""The `serving` event: how each of our processes says it is ready, and where it listens.

Whoever starts a process — the stack's supervisor, the tests, the benchmarks — waits for this one
JSON line on stderr before sending it traffic, and reads the real bound addresses from it (a
process told to listen on port 0 reports the port the OS chose). So the event has one shape,
written by `log_serving` and read by `serving_fields`:

    {"ts": …, "level": "info", "logger": …, "event": "serving", "pid": 1234, <addresses and facts>}

The address fields are the process's own (authz: `grpc`, `metrics`, `workers`; the adapter and
the dev issuer: `addr`), each formatted by `runtime.addresses.format_address`. The contract:
docs/contract.md#start-up-event.

A process that cannot listen says so the same way, in one `startup_failed` event naming the
variable that sets the address (`CannotListen`), and exits 1: the operator learns which setting
to change from one line, not from a traceback.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Literal

from runtime import logs
from runtime.addresses import Address, format_address

EVENT: Literal["serving"] = "serving"
FAILED = "startup_failed"


class CannotListen(OSError):
    """A socket the process must listen on could not be bound; names the variable setting it."""

    def __init__(self, variable: str, address: Address, reason: str) -> None:
        self.variable = variable
        self.addr = format_address(address)
        self.reason = reason
        super().__init__(
            f"cannot listen on {self.addr} ({reason}); set {variable} to a free address"
        )


def cannot_listen(variable: str, address: Address, exc: BaseException) -> CannotListen:
    """`CannotListen` for a failed bind, with the system's reason (`Address already in use`)."""
    reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return CannotListen(variable, address, reason or type(exc).__name__)


def log_startup_failed(logger: logging.Logger, exc: OSError) -> None:
    """Log the one `startup_failed` event (any log level, like `serving`): the variable and the
    address when the failure was a `CannotListen`, and always the error in words."""
    fields: dict[str, Any] = {"pid": os.getpid(), "error": str(exc)}
    if isinstance(exc, CannotListen):
        fields.update(variable=exc.variable, addr=exc.addr)
    logs.write(logger, FAILED, logging.ERROR, fields)


def log_serving(logger: logging.Logger, **fields: Any) -> None:
    """Log the `serving` event with this process's pid and `fields`, whatever the configured log
    level: a supervisor waiting for it must not wait forever because the operator chose WARNING."""
    logs.write(logger, EVENT, logging.INFO, {"pid": os.getpid(), **fields})


def serving_fields(line: str) -> dict[str, Any] | None:
    """The whole event if `line` is a `serving` event, else None (other events, other output)."""
    if f'"{EVENT}"' not in line:  # most lines are not: skip parsing them
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if isinstance(record, dict) and record.get("event") == EVENT:
        return record
    return None
