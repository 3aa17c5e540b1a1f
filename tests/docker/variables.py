"""Which variables compose.yaml passes a service, and which ones a settings class reads.

Used by tests/authz and tests/adapter (each may import its own package; tests/docker may not):
compose.yaml must pass each process exactly the variables its settings look up, so a new setting
fails there until compose passes it, and nothing else leaks into the container.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Protocol

from stack.keys import new_assertion_keys
from tests.docker import compose, engine

# The least a user sets (compose refuses to start without the first three; authz needs a JWKS).
REQUIRED: Mapping[str, str] = {
    "ORRERY_A2A_JWT_ISSUER": "https://idp.example.com/",
    "ORRERY_A2A_ASSERTION_KEYS": new_assertion_keys(),
    "ORRERY_CONSOLE_CLIENTS": "console",
    "ORRERY_A2A_JWKS_URL": "https://idp.example.com/.well-known/jwks.json",
}


class Settings(Protocol):
    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Any: ...


class Recording(Mapping[str, str]):
    """An environment that remembers every variable a settings class looks up."""

    def __init__(self, values: Mapping[str, str]) -> None:
        self.known = dict(values)
        self.read: set[str] = set()

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return self.known[name]

    def __contains__(self, name: object) -> bool:
        self.read.add(str(name))
        return name in self.known

    def __iter__(self) -> Iterator[str]:
        raise AssertionError("settings must look variables up by name, not list them")

    def __len__(self) -> int:
        return len(self.known)


def compose_environment(service: str) -> dict[str, str]:
    """What compose.yaml gives `service` when a user sets only the required variables."""
    project = compose.load(engine.REPO / "compose.yaml", REQUIRED, profiles=["replicated"])
    return dict(project.services[service].environment)


def variables_read(settings: type[Settings]) -> set[str]:
    """Every variable `settings.from_env` looks up, given what compose passes."""
    recording = Recording(compose_environment_for_settings())
    settings.from_env(recording)
    return recording.read


def compose_environment_for_settings() -> dict[str, str]:
    """Every value either service gets, so settings build without a missing-variable error."""
    return {**compose_environment("authz"), **compose_environment("adapter")}


def without_empty(environment: Mapping[str, str]) -> dict[str, str]:
    """The environment of a process started without the variables compose passes as empty."""
    return {name: value for name, value in environment.items() if value}
