"""The `serving` event: how each of our processes says it is ready, and where it listens.

Whoever starts a process — the stack's supervisor, the tests, the benchmarks — waits for this one
JSON line on stderr before sending it traffic, and reads the real bound addresses from it (a
process told to listen on port 0 reports the port the OS chose). So the event has one shape,
written by `log_serving` and read by `serving_fields`:

    {"ts": …, "level": "info", "logger": …, "event": "serving", "pid": 1234, <addresses and facts>}

The address fields are the process's own (authz: `grpc`, `metrics`, `workers`; the adapter and
the dev issuer: `addr`), each formatted by `runtime.addresses.format_address`. The contract:
docs/contract.md#start-up-event.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Any, Literal

from runtime import logs

EVENT: Literal["serving"] = "serving"


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
