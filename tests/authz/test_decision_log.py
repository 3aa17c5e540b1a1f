"""The `decision` line assembled from pre-encoded pieces is the line the JSON formatter writes."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from authz.decision import Allow, Deny
from authz.decision_log import DecisionLog, fields
from authz.errors import BadRequest, RateLimited
from runtime import logs
from tests.authz.test_callers import memo, verified

CALLER = memo(4).caller("t1", verified(act={"sub": "agent"}), "a2a")
RESULTS: dict[str, Allow | Deny] = {
    "allow": Allow(CALLER, "a2a", "req-1", "assertion", None),
    "rate limited": Deny(
        RateLimited("rate limit exceeded", retry_after=1, policy="1;w=1"),
        "a2a",
        'req-"2"',
        CALLER.principal,
    ),
    "no principal, no request id": Deny(BadRequest("no id"), "approvals"),
    "an unknown label": Deny(BadRequest("no route"), "s\u00fcrface\n"),
}
PATHS = ["/a2a", "/a2a?access_token=secret#frag", '/approvals/\u00e9"\\x' + "y" * 300]


@pytest.fixture
def written() -> Iterator[tuple[DecisionLog, io.StringIO]]:
    """A decision log on a logger whose only handler is a JsonLinesHandler (the fast path)."""
    stream = io.StringIO()
    logger = logging.getLogger("tests.decision_log")
    logger.handlers[:] = [logs.JsonLinesHandler(stream)]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield DecisionLog(logger), stream
    logger.handlers[:] = []


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", list(RESULTS))
def test_the_line_is_the_formatters_line_byte_for_byte(
    written: tuple[DecisionLog, io.StringIO], name: str, path: str
) -> None:
    """Same members, order, escaping and numbers as `logs.encode_line` of the same fields."""
    log, stream = written
    result = RESULTS[name]
    log.write(result, path, 0.125)
    line = stream.getvalue()
    timestamp = json.loads(line)["ts"]
    expected = logs.encode_line(
        {
            "ts": timestamp,
            "level": "info",
            "logger": "tests.decision_log",
            "event": "decision",
            **fields(result, path, 0.125),
        }
    )
    assert line == expected + "\n"


def test_no_line_below_the_level(written: tuple[DecisionLog, io.StringIO]) -> None:
    """With the level above INFO (ORRERY_A2A_LOG_LEVEL=WARNING) nothing is written."""
    log, stream = written
    logging.getLogger("tests.decision_log").setLevel(logging.WARNING)
    log.write(RESULTS["allow"], "/a2a", 0.125)
    assert stream.getvalue() == ""


def test_another_set_up_gets_the_same_fields(caplog: pytest.LogCaptureFixture) -> None:
    """With handlers other than one JsonLinesHandler the event goes through logging, same fields."""
    logger = logging.getLogger("tests.decision_log.caplog")
    with caplog.at_level(logging.INFO, logger=logger.name):
        DecisionLog(logger).write(RESULTS["allow"], "/a2a?x=1", 0.5)
    (record,) = caplog.records
    assert record.getMessage() == "decision"
    assert record.__dict__["orrery_fields"] == fields(RESULTS["allow"], "/a2a?x=1", 0.5)
