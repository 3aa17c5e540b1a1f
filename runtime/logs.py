"""Structured logs: one JSON object per line on stderr.

Each component logs one event per decision (authz: per Check; adapter: per request), so a log
pipeline can count, join and alert on fields rather than parse prose. Every process of ours (authz,
the adapter, the dev issuer) logs this way, so the pipeline sees one format. Fields are passed
explicitly with `event(...)`; nothing here inspects values, so callers are responsible for never
passing a credential — the decision code passes reason codes, principal keys and request ids only.
"""

from __future__ import annotations

import io
import json
import logging
import math
import os
import sys
import time
from collections.abc import Mapping
from json.encoder import encode_basestring
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


def encode_line(body: Mapping[str, Any]) -> str:
    """`_ENCODER.encode(body)` for a flat object, byte for byte, without the encoder's per-call
    set-up (it builds a C encoder and calls a Python `floatstr` for every float): strings go
    through the same C escaping function, ints and finite floats through their `repr`, and any
    other value (containers, NaN, a bool, objects for `default=str`) through `_ENCODER` itself."""
    parts = []
    for name, value in body.items():
        kind = type(value)
        if kind is str:
            text = encode_basestring(value)
        elif kind is int or (kind is float and math.isfinite(value)):
            text = repr(value)
        elif value is None:
            text = "null"
        else:
            text = _ENCODER.encode(value)
        parts.append(f"{encode_basestring(name)}:{text}")
    return "{" + ",".join(parts) + "}"


class JsonFormatter(logging.Formatter):
    """Render a record as `{"ts", "level", "logger", "event", …fields}`; exceptions by type only."""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, _FIELDS, {})
        body = _line(record.created, record.levelno, record.name, record.getMessage(), fields)
        if record.exc_info and record.exc_info[0] is not None:
            # The type is enough to find the bug; a message or traceback could echo request data.
            body["error_type"] = record.exc_info[0].__name__
        return encode_line(body)


# StreamHandler is generic only in typeshed; subscripting it fails at run time
class JsonLinesHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The handler `configure` installs: JSON lines on a stream, plus a direct path for `event`."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self.setFormatter(JsonFormatter())

    def write_event(self, level: int, logger: str, event: str, fields: Mapping[str, Any]) -> None:
        """Write what `emit` would write for this event, without a LogRecord (`write_line`)."""
        line = encode_line(_line(time.time(), level, logger, event, fields))
        self.write_line(line, level, event)

    def write_line(self, line: str, level: int, event: str) -> None:
        """Write one encoded line (without its terminator) for an `event` at `level`.

        The line reaches the kernel before this returns (a crash right after a decision does not
        lose its line): on a stream with a file descriptor by one `os.write` of the whole line —
        after flushing whatever else was written to the stream, so lines never interleave out
        of order — which costs a fifth of the text stream's write + flush; otherwise by write +
        flush."""
        line += self.terminator
        stream = self.stream
        with self.lock:  # type: ignore[union-attr]  # the lock emit() uses; created in __init__
            try:
                fd = _descriptor(stream)
                if fd is None:
                    stream.write(line)
                    stream.flush()
                else:
                    stream.flush()
                    _write_all(fd, line.encode(stream.encoding, stream.errors or "strict"))
            except (OSError, ValueError):  # a broken or closed log stream must not break a Check
                self.handleError(logging.makeLogRecord({"msg": event, "levelno": level}))


def _descriptor(stream: TextIO) -> int | None:
    """The file descriptor under a text stream, or None (StringIO, a pytest capture)."""
    try:
        return stream.fileno()
    except (io.UnsupportedOperation, AttributeError):
        return None


def _write_all(fd: int, data: bytes) -> None:
    """`os.write` until every byte is written (a pipe may take a long line in parts)."""
    written = os.write(fd, data)
    if written < len(data):
        view = memoryview(data)[written:]
        while view:
            view = view[os.write(fd, view) :]


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


def sole_json_handler(logger: logging.Logger, level: int) -> JsonLinesHandler | None:
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
    handler = sole_json_handler(logger, level)
    if handler is not None:
        handler.write_event(level, logger.name, name, fields)
    else:
        extra = {_FIELDS: fields}
        logger.handle(logger.makeRecord(logger.name, level, "", 0, name, (), None, extra=extra))


def monotonic_ms(start: float) -> float:
    """Milliseconds since `start` (a `time.perf_counter()` value), rounded for logs."""
    return round((time.perf_counter() - start) * 1000.0, 3)
