"""JSON log lines: one timestamp format for every process, and Envoy's access log."""

from __future__ import annotations

import io
import json
import logging
import re

import pytest

from runtime import logs

RFC3339_UTC = r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z"


@pytest.mark.parametrize(
    ("created", "text"),
    [
        (0.0, "1970-01-01T00:00:00.000000Z"),
        (1796274000.123456, "2026-12-03T05:00:00.123456Z"),
        (1796274000.999999, "2026-12-03T05:00:00.999999Z"),
        (1796274001.5, "2026-12-03T05:00:01.500000Z"),
    ],
)
def test_timestamps_are_rfc3339_utc_with_microseconds(created: float, text: str) -> None:
    """One format for every log line: RFC 3339, UTC (`Z`), six fractional digits."""
    assert logs.timestamp(created) == text


def test_a_log_line_carries_an_rfc3339_timestamp() -> None:
    """The `ts` member of a JSON line is the RFC 3339 text, not a float."""
    stream = io.StringIO()
    logger = logging.Logger("t.ts", logging.INFO)
    logger.propagate = False
    logger.addHandler(logs.JsonLinesHandler(stream))
    logs.event(logger, "decision")
    assert re.fullmatch(RFC3339_UTC, json.loads(stream.getvalue())["ts"])
