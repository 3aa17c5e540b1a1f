"""The `serving` event: one shape, written by every process and read by whoever waits for it."""

from __future__ import annotations

import io
import json
import logging
import os
from collections.abc import Iterator

import pytest

from runtime import logs
from runtime.serving import log_serving, serving_fields


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """The root logger writing JSON lines to a buffer, as `logs.configure` sets it up."""
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    buffer = io.StringIO()
    root.handlers[:] = [logs.JsonLinesHandler(buffer)]
    try:
        yield buffer
    finally:
        root.handlers[:], level = saved
        root.setLevel(level)


def test_the_event_carries_the_pid_and_the_fields(stream: io.StringIO) -> None:
    """`log_serving` writes one JSON line: event `serving`, this pid, the given addresses."""
    logging.getLogger().setLevel(logging.INFO)
    log_serving(logging.getLogger("test.serving"), addr="127.0.0.1:8081")
    record = json.loads(stream.getvalue())
    assert (record["event"], record["pid"], record["addr"]) == (
        "serving",
        os.getpid(),
        "127.0.0.1:8081",
    )


def test_the_event_is_written_whatever_the_log_level(stream: io.StringIO) -> None:
    """With ORRERY_A2A_LOG_LEVEL=WARNING a supervisor still sees the process become ready."""
    logging.getLogger().setLevel(logging.WARNING)
    logger = logging.getLogger("test.serving")
    logs.event(logger, "decision")  # an ordinary INFO event is filtered out...
    log_serving(logger, addr="127.0.0.1:8081")  # ...the start-up event is not
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == ["serving"]


def test_what_log_serving_writes_serving_fields_reads(stream: io.StringIO) -> None:
    """The reader takes exactly the writer's line as the event, with every field."""
    logging.getLogger().setLevel(logging.INFO)
    log_serving(logging.getLogger("test.serving"), grpc="127.0.0.1:9191", workers=2)
    record = serving_fields(stream.getvalue())
    assert record is not None
    assert (record["grpc"], record["workers"]) == ("127.0.0.1:9191", 2)


@pytest.mark.parametrize(
    "line",
    [
        '{"event": "stopped"}',
        '{"event": "decision", "note": "serving"}',
        '"serving"',
        "serving on port 80",
        '{"event": "serving"',
    ],
)
def test_other_lines_are_not_the_event(line: str) -> None:
    """Other events, plain text, a truncated line: none of them is taken for `serving`."""
    assert serving_fields(line) is None
