"""Settings plumbing: every bad variable is reported at once, secrets are never echoed."""

from __future__ import annotations

import json
import logging

import pytest

from runtime import logs
from runtime.addresses import parse_address
from runtime.env import EnvReader, is_loopback_url
from runtime.errors import ConfigError


def test_every_problem_is_reported_together() -> None:
    """Two bad variables give one error that names both."""
    reader = EnvReader({"A": "x", "B": "maybe"})
    reader.integer("A", 1)
    reader.boolean("B")
    reader.string("C", required=True)
    with pytest.raises(ConfigError) as caught:
        reader.finish()
    assert [p.split(":")[0] for p in caught.value.problems] == ["A", "B", "C"]


def test_clean_environment_finishes_quietly() -> None:
    """Defaults alone are valid."""
    reader = EnvReader({})
    assert reader.integer("N", 4, minimum=1) == 4
    assert reader.seconds("T", "24h") == 86400.0
    assert reader.boolean("F") is False
    assert reader.address("ADDR", "127.0.0.1:9191") == ("127.0.0.1", 9191)
    reader.finish()


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("250ms", 0.25), ("30s", 30.0), ("10m", 600.0), ("2h", 7200.0), ("45", 45.0)],
)
def test_durations_parse(text: str, seconds: float) -> None:
    """Durations accept ms, s, m, h and bare seconds."""
    assert EnvReader({"T": text}).seconds("T", "1s") == seconds


def test_integer_bounds_are_enforced() -> None:
    """A number outside its range is a named problem."""
    reader = EnvReader({"N": "0"})
    assert reader.integer("N", 4, minimum=1) == 4
    assert reader.problems == ["N: must be at least 1, got 0"]


@pytest.mark.parametrize("text", ["9191", "host:", ":80", "h:99999", "h:x"])
def test_bad_addresses_are_refused(text: str) -> None:
    """An address must be host:port with a real port."""
    with pytest.raises(ValueError, match="host:port"):
        parse_address(text)


def test_ipv6_address_parses() -> None:
    """Bracketed IPv6 hosts are accepted."""
    assert parse_address("[::1]:8081") == ("::1", 8081)


@pytest.mark.parametrize(
    ("url", "loopback"),
    [
        ("http://127.0.0.1:8090/jwks", True),
        ("http://localhost/jwks", True),
        ("http://[::1]:8090/", True),
        ("http://127.evil.example/jwks", False),
        ("http://10.0.0.1/jwks", False),
        ("https://issuer.example/jwks", False),
    ],
)
def test_loopback_detection(url: str, loopback: bool) -> None:
    """Only real loopback hosts count (a DNS name starting with 127. does not)."""
    assert is_loopback_url(url) is loopback


def test_log_event_is_one_json_line(caplog: pytest.LogCaptureFixture) -> None:
    """An event renders as one JSON object with its fields at the top level."""
    logger = logging.getLogger("test.logs")
    with caplog.at_level(logging.INFO, logger="test.logs"):
        logs.event(logger, "decision", reason="ok", key="service:a::a")
    line = logs.JsonFormatter().format(caplog.records[0])
    body = json.loads(line)
    assert body["event"] == "decision"
    assert (body["reason"], body["key"], body["level"]) == ("ok", "service:a::a", "info")
    assert "\n" not in line


def test_log_exceptions_show_type_not_message(caplog: pytest.LogCaptureFixture) -> None:
    """An exception is logged by type only, so its message cannot leak request data."""
    logger = logging.getLogger("test.logs")
    try:
        raise ValueError("Bearer eyJsecret")
    except ValueError:
        with caplog.at_level(logging.INFO, logger="test.logs"):
            logger.exception("bug")
    line = logs.JsonFormatter().format(caplog.records[0])
    assert json.loads(line)["error_type"] == "ValueError"
    assert "eyJsecret" not in line


@pytest.mark.parametrize(
    ("text", "level"), [("", "INFO"), ("debug", "DEBUG"), ("Warning", "WARNING")]
)
def test_log_levels_are_read_in_any_case(text: str, level: str) -> None:
    """The log level defaults to INFO and is case-insensitive."""
    reader = EnvReader({"LEVEL": text})
    assert reader.log_level("LEVEL") == level
    reader.finish()


def test_an_unknown_log_level_is_a_problem() -> None:
    """Anything but DEBUG, INFO, WARNING or ERROR is refused by name."""
    reader = EnvReader({"LEVEL": "chatty"})
    assert reader.log_level("LEVEL") == "INFO"
    assert reader.problems == ["LEVEL: expected DEBUG, INFO, WARNING or ERROR, got 'chatty'"]


@pytest.mark.parametrize("url", ["redis://h:6379/0", "rediss://h/1", "unix:///run/redis.sock"])
def test_redis_urls_are_accepted(url: str) -> None:
    """redis://, rediss:// and unix:// URLs pass; absent is None."""
    assert EnvReader({"R": url}).redis_url("R") == url
    assert EnvReader({}).redis_url("R") is None


def test_a_bad_redis_url_is_refused_without_echoing_it() -> None:
    """The URL may carry a password: the problem names the variable, never the value."""
    reader = EnvReader({"R": "http://user:hunter2@h/0"})
    assert reader.redis_url("R") is None
    assert reader.problems == ["R: expected a redis://, rediss:// or unix:// URL"]
