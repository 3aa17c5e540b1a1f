"""Reading settings from the environment, reporting every bad variable at once.

An operator who gets "ORRERY_A2A_JWT_ISSUER is required" only to fix it and then learn about the
next bad variable loses a deploy cycle per mistake. `EnvReader` collects every problem while the
settings are built and `finish()` raises one `ConfigError` that names them all. Values are never
echoed for variables that may hold secrets.

Both `authz` and `adapter` build their frozen settings with it (`Settings.from_env(env)`).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from typing import TypeVar
from urllib.parse import urlsplit

from authz.errors import ConfigError

T = TypeVar("T")

_DURATION = re.compile(r"(\d+)(ms|s|m|h)?")
_DURATION_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


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
            match = _DURATION.fullmatch(text)
            if not match:
                raise ValueError(f"expected a duration like 30s, 250ms, 10m or 24h, got {text!r}")
            value = int(match[1]) * _DURATION_UNITS[match[2]]
            if value < minimum:
                raise ValueError(f"must be at least {minimum:g}s")
            return value

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

    def address(self, name: str, default: str) -> tuple[str, int]:
        """`host:port` (IPv6 as `[::1]:port`); port 0 asks the OS for a free port."""
        return self.parsed(name, default, parse_address, ("127.0.0.1", 0))

    def finish(self) -> None:
        if self.problems:
            raise ConfigError(self.problems)


def parse_address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {text!r}")
    return host.strip("[]"), int(port)


def is_loopback_url(url: str) -> bool:
    """True for http(s) URLs whose host is a loopback name or address (dev-only plain HTTP)."""
    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
