"""How `orrery-a2a up` wires authz and the adapter: every variable it sets, in one place.

The children inherit the user's environment (so `ORRERY_A2A_RATE_LIMIT`, `DATABASE_URL`, … can be
tried locally) and then get the variables below, which always win: they bind the processes to the
stack's addresses, to this run's dev issuer and to this run's assertion keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from runtime.addresses import Address, format_address
from stack.issuer import JWKS_PATH
from stack.settings import StackSettings
from stack.tokens import DEFAULT_CLIENTS

DEV_AUDIENCE = "orrery-a2a"
DEV_CONSOLE_AUDIENCE = "orrery-console"
DEV_ALGORITHMS = "ES256"
REPLICA_DRAIN_DELAY = "2s"  # two of Envoy's health-check intervals (envoy/envoy.yaml)


@dataclass(frozen=True, slots=True)
class Wiring:
    """What one run of the stack decided: the issuer it started, its keys, its public URL."""

    issuer: str
    assertion_keys: str
    public_url: str
    card_signing_keys: str = ""

    @property
    def jwks_url(self) -> str:
        return self.issuer + JWKS_PATH


def _replica(settings: StackSettings, address: Address) -> str:
    """The configured address, or a free port on its host when several replicas share it."""
    host, port = address
    return format_address((host, port if settings.replicas == 1 else 0))


def authz_env(settings: StackSettings, wiring: Wiring) -> dict[str, str]:
    env = {
        "ORRERY_A2A_AUTHZ_ADDR": _replica(settings, settings.authz),
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": _replica(settings, settings.authz_diag),
        "ORRERY_A2A_JWT_ISSUER": wiring.issuer,
        "ORRERY_A2A_JWKS_URL": wiring.jwks_url,
        "ORRERY_A2A_JWT_AUDIENCE": DEV_AUDIENCE,
        "ORRERY_CONSOLE_JWT_AUDIENCE": DEV_CONSOLE_AUDIENCE,
        # the client `orrery-a2a token --kind human` / `approve` mint console tokens for
        "ORRERY_CONSOLE_CLIENTS": DEFAULT_CLIENTS["human"],
        "ORRERY_A2A_JWT_ALGORITHMS": DEV_ALGORITHMS,
        "ORRERY_A2A_ASSERTION_KEYS": wiring.assertion_keys,
    }
    if settings.authz_transport == "http":
        env["ORRERY_A2A_AUTHZ_HTTP_ADDR"] = _replica(settings, settings.authz_http)
    return env


def adapter_env(settings: StackSettings, wiring: Wiring) -> dict[str, str]:
    env = {
        "ORRERY_A2A_ADAPTER_ADDR": _replica(settings, settings.adapter),
        "ORRERY_A2A_ASSERTION_KEYS": wiring.assertion_keys,
        "ORRERY_A2A_PUBLIC_URL": wiring.public_url,
    }
    if wiring.card_signing_keys:
        env["ORRERY_A2A_CARD_SIGNING_KEYS"] = wiring.card_signing_keys
    if settings.replicas > 1:
        # Replicas must share tasks, approvals and in-flight counts: the adapter then refuses to
        # start unless DATABASE_URL and ORRERY_A2A_REDIS_URL are in the environment.
        env["ORRERY_MULTI_REPLICA"] = "true"
        # A stopping replica fails /readyz but keeps serving until Envoy's health check (every
        # second) has taken it out of the rotation: no request meets its closing socket.
        env["ORRERY_A2A_DRAIN_DELAY"] = REPLICA_DRAIN_DELAY
    return env


# Never passed on: a JWKS file would override the issuer's URL, and a bearer token the user
# exported for `ask` / `approve` is no business of the components.
NOT_INHERITED = frozenset({"ORRERY_A2A_JWKS_FILE", "ORRERY_A2A_TOKEN"})


def child_env(inherited: Mapping[str, str], own: Mapping[str, str]) -> dict[str, str]:
    """The user's environment, minus `NOT_INHERITED`, plus `own`."""
    env = {name: value for name, value in inherited.items() if name not in NOT_INHERITED}
    env["PYTHONUNBUFFERED"] = "1"
    env.update(own)
    return env
