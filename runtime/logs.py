"""Structured logs: one JSON object per line on stderr.

Each component logs one event per decision (authz: per Check; adapter: per request), so a log
pipeline can count, join and alert on fields rather than parse prose. Every process of ours (authz,
the adapter, the dev issuer) logs this way, so the pipeline sees one format. Fields are passed
explicitly with `event(...)`; nothing here inspects values, so callers are responsible for never
passing a credential — the decision code passes reason codes, principal keys and request ids only.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any, TextIO

_FIELDS = "orrery_fields"
# One encoder instance: `json.dumps` with non-default options builds a new encoder per call.
_ENCODER = json.JSONEncoder(separators=(",", ":"), default=str, ensure_ascii=False)


_LEVEL_NAMES = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning"}
# The second a cached `timestamp` prefix is for, and the prefix; one pair, replaced atomically.
_SECOND: tuple[int, str] = (-1, "")


def timestamp(created: float) -> str:
    """RFC 3339 in UTC with microseconds, `2026-12-03T05:00:00.123456Z`: the format of every log
    line of ours and of Envoy's access log (`%START_TIME(%Y-%m-%dT%H:%M:%S.%6fZ)%`), so lines of
    all three sort and join as text. The date and time of day change once a second; they are
    formatted once per second, the fraction per line (authz logs one event per Check)."""
    global _SECOND  # noqa: PLW0603 - a one-entry cache, swapped as one tuple
    second = int(created)
    cached_second, prefix = _SECOND
    if second != cached_second:
        prefix = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _SECOND = (second, prefix)
    micros = min(int((created - second) * 1_000_000), 999_999)
    return f"{prefix}.{micros:06d}Z"


def _line(
    created: float, level: int, logger: str, event: str, fields: Mapping[str, Any]
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "ts": timestamp(created),
        "level": _LEVEL_NAMES.get(level) or logging.getLevelName(level).lower(),
        "logger": logger,
        "event": event,
    }
    body.update(fields)
    return body


class JsonFormatter(logging.Formatter):
    """Render a record as `{"ts", "level", "logger", "event", …fields}`; exceptions by type only."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, {})
        body = _line(record.created, record.levelno, record.name, record.getMessage(), fields)
        if record.exc_info and record.exc_info[0] is not None:
            # The type is enough to find the bug; a message or traceback could echo request data.
            body["error_type"] = record.exc_info[0].__name__
        return _ENCODER.encode(body)


# StreamHandler is generic only in typeshed; subscripting it fails at run time
class JsonLinesHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure` installs: JSON lines on a stream, plus a direct path for `event`."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())

    def write_event(self, level: int, logger: str, event: str, fields: Mapping[str, Any]) -> None:
        """Write what `emit` would write for this event, without a LogRecord."""
        line = _ENCODER.encode(_line(time.time(), level, logger, event, fields))
        with self.lock:  # type: ignore[union-attr]  # the lock emit() uses; created in __init__
            try:
                self.stream.write(line + self.terminator)
                self.stream.flush()
            except (OSError, ValueError):  # a broken or closed log stream must not break a Check
                self.handleError(logging.makeLogRecord({"msg": event, "levelno": level}))


def configure(level: str = "INFO") -> None:
    """Send every logger's records to stderr as JSON lines (idempotent)."""
    root = logging.getLogger()
    root.handlers[:] = [JsonLinesHandler(sys.stderr)]
    root.setLevel(level.upper())
    # Records would otherwise look up the thread, process and process name for every event;
    # the JSON line shows none of them, and authz logs one event per Check.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False


def _sole_json_handler(logger: logging.Logger, level: int) -> JsonLinesHandler | None:
    """The one handler a record from `logger` would reach, if that is a filter-free
    `JsonLinesHandler`; otherwise None (another handler, a filter — e.g. pytest's caplog)."""
    found: JsonLinesHandler | None = None
    current: logging.Logger | None = logger
    while current is not None:
        if current.filters or current.disabled:
            return None
        for handler in current.handlers:
            if found is not None or type(handler) is not JsonLinesHandler:
                return None
            if handler.filters or level < handler.level:
                return None
            found = handler
        current = current.parent if current.propagate else None
    return found


def event(logger: logging.Logger, name: str, level: int = logging.INFO, **fields: Any) -> None:
    """Log one structured event; `fields` become top-level JSON members.

    authz logs one event per Check, and Python's logging machinery (a LogRecord, the handler
    chain, the formatter) cost about half of what the decision itself costs (docs/authz.md). So
    when the event would reach exactly one `JsonLinesHandler` and nothing else, the line is
    written directly — the same bytes `JsonFormatter` would produce. Any other set-up (more
    handlers, filters) takes the ordinary path, without `logger.log`'s stack walk for the
    caller's file and line, which the JSON line never shows.
    """
    if logger.isEnabledFor(level):
        write(logger, name, level, fields)


def write(logger: logging.Logger, name: str, level: int, fields: Mapping[str, Any]) -> None:
    """`event` without the level check: for the few events that are logged whatever the
    configured level says (a process's `serving` line, which its supervisor waits for)."""
    handler = _sole_json_handler(logger, level)
    if handler is not None:
        handler.write_event(level, logger.name, name, fields)
    else:
        extra = {_FIELDS: fields}
        logger.handle(logger.makeRecord(logger.name, level, "", 0, name, (), None, extra=extra))


def monotonic_ms(start: float) -> float:
    """Milliseconds since `start` (a `time.perf_counter()` value), rounded for logs."""
    return round((time.perf_counter() - start) * 1000.0, 3)
