"""Reading settings from the environment, reporting every bad variable at once.

An operator who gets "ORRERY_A2A_JWT_ISSUER is required" only to fix it and then learn about the
next bad variable loses a deploy cycle per mistake. `EnvReader` collects every problem while the
settings are built and `finish()` raises one `ConfigError` that names them all. Values are never
echoed for variables that may hold secrets.

authz, the adapter and the local stack build their frozen settings with it
(`Settings.from_env(env)`); the checks more than one of them makes (durations, addresses, rates,
the log level, a Redis URL) are written once, here.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

from runtime.addresses import Address, is_loopback_host, parse_address
from runtime.errors import ConfigError

T = TypeVar("T")

_DURATION = re.compile(r"(\d+)(ms|s|m|h)?")
_DURATION_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_PERIODS = {"second": 1, "minute": 60, "hour": 3600, "day": 86400}
_RATE = re.compile(r"(\d+)\s*/\s*(second|minute|hour|day)s?")
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
REDIS_SCHEMES = ("redis", "rediss", "unix")


class EnvReader:
    """Typed accessors over an env mapping that record problems instead of raising."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self._env = env
        self.problems: list[str] = []

    def raw(self, name: str) -> str | None:
        value = self._env.get(name)
        return value.strip() if value is not None else None

    def problem(self, name: str, message: str) -> None:
        self.problems.append(f"{name}: {message}")

    def string(self, name: str, default: str | None = None, *, required: bool = False) -> str:
        value = self.raw(name)
        if value:
            return value
        if required:
            self.problem(name, "is required")
        return default or ""

    def parsed(self, name: str, default: str, parse: Callable[[str], T], fallback: T) -> T:
        """Parse with `parse` (which raises ValueError with a safe message) or record why not."""
        value = self.raw(name) or default
        try:
            return parse(value)
        except ValueError as exc:
            self.problem(name, str(exc))
            return fallback

    def integer(
        self, name: str, default: int, *, minimum: int = 0, maximum: int | None = None
    ) -> int:
        def parse(text: str) -> int:
            if not re.fullmatch(r"-?\d+", text):
                raise ValueError(f"expected an integer, got {text!r}")
            number = int(text)
            if number < minimum or (maximum is not None and number > maximum):
                upper = "" if maximum is None else f" and at most {maximum}"
                raise ValueError(f"must be at least {minimum}{upper}, got {number}")
            return number

        return self.parsed(name, str(default), parse, default)

    def seconds(self, name: str, default: str, *, minimum: float = 0.0) -> float:
        """A duration such as `30s`, `250ms`, `24h` or a bare number of seconds."""

        def parse(text: str) -> float:
            return parse_duration(text, minimum=minimum)

        return self.parsed(name, default, parse, parse(default))

    def boolean(self, name: str, default: bool = False) -> bool:
        value = self.raw(name)
        if not value:
            return default
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        self.problem(name, f"expected true or false, got {value!r}")
        return default

    def address(self, name: str, default: str) -> Address:
        """`host:port` (IPv6 as `[::1]:port`); port 0 asks the OS for a free port."""
        return self.parsed(name, default, parse_address, ("127.0.0.1", 0))

    def log_level(self, name: str) -> str:
        """A logging level name (DEBUG, INFO, WARNING or ERROR, any case), upper-cased."""
        return self.parsed(name, "INFO", _log_level, "INFO")

    def redis_url(self, name: str) -> str | None:
        """An optional redis://, rediss:// or unix:// URL; absent or empty is None.

        The URL may hold a password: a problem names the variable, never the value.
        """
        value = self.raw(name) or None
        if value is not None and urlsplit(value).scheme not in REDIS_SCHEMES:
            self.problem(name, "expected a redis://, rediss:// or unix:// URL")
            return None
        return value

    def finish(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def parse_duration(text: str, *, minimum: float = 0.0) -> float:
    """Seconds in `30s`, `250ms`, `10m`, `24h` or a bare number; `ValueError` says what is wrong."""
    match = _DURATION.fullmatch(text)
    if not match:
        raise ValueError(f"expected a duration like 30s, 250ms, 10m or 24h, got {text!r}")
    value = int(match[1]) * _DURATION_UNITS[match[2]]
    if value < minimum:
        raise ValueError(f"must be at least {minimum:g}s")
    return value


def parse_rate(text: str) -> tuple[int, int]:
    """`60/minute` → (60, 60): a count per second, minute, hour or day."""
    match = _RATE.fullmatch(text.strip().lower())
    if not match or int(match[1]) < 1:
        raise ValueError(f"expected a rate like 60/minute got {text!r}")
    return int(match[1]), _PERIODS[match[2]]


def _log_level(text: str) -> str:
    level = text.upper()
    if level not in LOG_LEVELS:
        raise ValueError(f"expected DEBUG, INFO, WARNING or ERROR, got {text!r}")
    return level


def is_loopback_url(url: str) -> bool:
    """True for http(s) URLs whose host is a loopback name or address (dev-only plain HTTP)."""
    host = (urlsplit(url).hostname or "").lower()
    return host == "localhost" or is_loopback_host(host)
