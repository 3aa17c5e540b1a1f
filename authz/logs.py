"""Structured logs: one JSON object per line on stderr.

Each component logs one event per decision (authz: per Check; adapter: per request), so a log
pipeline can count, join and alert on fields rather than parse prose. Fields are passed explicitly
with `event(...)`; nothing here inspects values, so callers are responsible for never passing a
credential — the decision code passes reason codes, principal keys and request ids only.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

_FIELDS = "orrery_fields"
# One encoder instance: `json.dumps` with non-default options builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False)


class JsonFormatter(logging.Formatter):
    """Render a record as `{"ts", "level", "logger", "event", …fields}`; exceptions by type only."""

    def format(self, record: logging.LogRecord) -> str:
        body: dict[str, Any] = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": record.getMessage(),
        }
        body.update(getattr(record, _FIELDS, {}))
        if record.exc_info and record.exc_info[0] is not None:
            # The type is enough to find the bug; a message or traceback could echo request data.
            body["error_type"] = record.exc_info[0].__name__
        return _ENCODER.encode(body)


def configure(level: str = "INFO") -> None:
    """Send every logger's records to stderr as JSON lines (idempotent)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # Records would otherwise look up the thread, process and process name for every event;
    # the JSON line shows none of them, and authz logs one event per Check.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event; `fields` become top-level JSON members.

    The record is made directly rather than through `logger.log`, which would walk the stack to
    find the caller's file and line — information the JSON line never shows, paid on every Check.
    """
    if logger.isEnabledFor(level):
        logger.handle(
            logger.makeRecord(logger.name, level, "", 0, name, (), None, extra={_FIELDS: fields})
        )


def monotonic_ms(start: float) -> float:
    """Milliseconds since `start` (a `time.perf_counter()` value), rounded for logs."""
    return round((time.perf_counter() - start) * 1000.0, 3)
