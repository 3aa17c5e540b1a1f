"""The gateway seam: the adapter's only path into agents.

`AgentGateway` is what Orrery's `AgentGateway.run_in_session` looks like from here: a live
inventory of specialists (the extended card is built from it, so it cannot drift) and one call per
turn that answers either a final `Reply` or a `Pending` guarded action that a human must approve.
Approvals live in a `ConfirmationStore` the gateway exposes; the `/approvals` endpoint decides
through it, and the gate inside `run_in_session` consumes a decision exactly once — for exactly
the action the person was shown: a `Proposal` carries the `action_digest` of the exact action
(tool and unredacted args), and `consume` takes the digest of the action about to run, answering
`mismatch` (nothing consumed, nothing may run) when the plan changed in between.

`ORRERY_A2A_GATEWAY=module:factory` loads another implementation: `factory(GatewayContext)` returns
the gateway (or an awaitable of it). The default is `gateways.demo:create`. Two optional
members complete the seam: the factory's module may define `check(env) -> list[str]` (what
`python -m adapter check` adds to its report: a missing extra, a bad setting of the gateway's
own), and the gateway may define `async aclose()` (called once when the adapter stops, after the
last turn: connections it opened close).

The confirmation store's contract and rows (`ConfirmationStore`, `Confirmation`, `Proposal`, the
decision and gate outcomes) are defined with the other store contracts in `stores/protocols.py`
and are part of this seam: a gateway imports them from here.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from prometheus_client import CollectorRegistry

from adapter.errors import GatewayLoadError
from adapter.messages import MAX_CHARS as MESSAGE_MAX_CHARS
from adapter.stores.protocols import (
    Confirmation,
    ConfirmationStore,
    Decision,
    DecisionOutcome,
    GateOutcome,
    Proposal,
    Status,
    action_digest,
)
from contract.identity import Principal

__all__ = [
    "DEFAULT_GATEWAY",
    "MESSAGE_MAX_CHARS",
    "REDACTED",
    "AgentGateway",
    "Confirmation",
    "ConfirmationStore",
    "Decision",
    "DecisionOutcome",
    "GateOutcome",
    "GatewayContext",
    "Pending",
    "Proposal",
    "Reply",
    "Specialist",
    "Status",
    "Turn",
    "action_digest",
    "close_gateway",
    "gateway_problems",
    "load_gateway",
    "redact",
]

DEFAULT_GATEWAY = "gateways.demo:create"


@dataclass(frozen=True, slots=True)
class Specialist:
    """One agent the gateway routes to; an enabled one becomes a skill on the extended card."""

    name: str
    description: str
    routing_hint: str
    enabled: bool = True
    examples: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Turn:
    """One user message for one conversation (session) of one principal.

    The gateway gets the message's text, never its raw parts (the message rules let only text
    through), with the ids a real gateway needs: the caller's `message_id` (a retried send of it
    never reaches the gateway again: the adapter answers it, see `retries.py`), and the `task_id`
    and `context_id` of the task the message runs in, as the caller sees them.
    """

    session_id: str
    principal: Principal
    text: str
    task_id: str
    message_id: str
    context_id: str
    # Set when the task waits on a guarded action: the server-stored id from its status, never a
    # value the client sent.
    resume_action_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The final reply text of a turn; `rejected` when the gateway refused to act."""

    text: str
    rejected: bool = False


@dataclass(frozen=True, slots=True)
class Pending:
    """The turn stopped at a guarded action; the task goes to input-required."""

    confirmation: Confirmation
    summary: str


@runtime_checkable
class AgentGateway(Protocol):
    """The only way the adapter reaches agents."""

    @property
    def confirmations(self) -> ConfirmationStore: ...

    async def inventory(self) -> Sequence[Specialist]: ...

    async def run_in_session(self, turn: Turn) -> Reply | Pending: ...


@dataclass(frozen=True, slots=True)
class GatewayContext:
    """What a gateway factory gets from the adapter: the approvals, the process environment (a
    gateway builds its own frozen settings from it) and the adapter's metrics registry (a
    gateway's metrics are served on the adapter's `/metrics`)."""

    confirmations: ConfirmationStore
    approval_ttl: float
    env: Mapping[str, str] = field(default_factory=dict)
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)


_SECRET_NAME = re.compile(
    r"pass(word|wd)?|secret|token|api_?key|private_?key|auth|credential|cookie|session",
    re.IGNORECASE,
)
_SECRET_VALUE = re.compile(
    r"^(bearer\s+\S+|eyJ[\w-]+\.[\w-]+\.[\w-]*|-----BEGIN [A-Z ]*PRIVATE KEY-----.*)$",
    re.IGNORECASE | re.DOTALL,
)
REDACTED = "[redacted]"
_MAX_VALUE_CHARS = 200


def redact(value: Any, *, key: str = "") -> Any:
    """Redact tool arguments like any tool result before they leave the server.

    Values under secret-looking names and values that look like credentials (bearer tokens, JWTs,
    PEM private keys) become `[redacted]`; long strings are cut. Applied by the adapter to every
    pending action it shows, whatever the gateway did.
    """
    if key and _SECRET_NAME.search(key):
        return REDACTED
    return _redact_value(value)


def _redact_value(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): redact(v, key=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_redact_value(item) for item in value]
    if isinstance(value, str):
        if _SECRET_VALUE.match(value.strip()):
            return REDACTED
        return value if len(value) <= _MAX_VALUE_CHARS else value[:_MAX_VALUE_CHARS] + "…"
    if value is None or isinstance(value, bool | int | float):
        return value
    return REDACTED


def gateway_factory(spec: str | None) -> Callable[[GatewayContext], Any]:
    """Import `module:factory` (default: the demo gateway); `GatewayLoadError` if it is not
    there or not callable (also what `python -m adapter check` asks)."""
    module_name, _, factory_name = (spec or DEFAULT_GATEWAY).partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise GatewayLoadError(f"ORRERY_A2A_GATEWAY: cannot load {spec!r}: {exc}") from None
    if not callable(factory):
        raise GatewayLoadError(f"ORRERY_A2A_GATEWAY: {spec!r} is not callable")
    # loaded by name from the environment: callable is all Python can check here
    return factory  # type: ignore[no-any-return]


def gateway_problems(spec: str | None, env: Mapping[str, str]) -> list[str]:
    """What `python -m adapter check` reports of the gateway: the factory must import, and the
    `check(env)` its module may define finds the rest (without building the gateway: building may
    open connections)."""
    try:
        factory = gateway_factory(spec)
    except GatewayLoadError as exc:
        return [str(exc)]
    check = getattr(importlib.import_module(factory.__module__), "check", None)
    return list(check(env)) if callable(check) else []


async def close_gateway(gateway: AgentGateway) -> None:
    """Let a gateway that opened connections close them (`aclose`, optional)."""
    close = getattr(gateway, "aclose", None)
    if close is not None:
        await close()


async def load_gateway(spec: str | None, context: GatewayContext) -> AgentGateway:
    """Import `module:factory` (default: the demo gateway) and build the gateway."""
    gateway = gateway_factory(spec)(context)
    if inspect.isawaitable(gateway):
        gateway = await gateway
    if not isinstance(gateway, AgentGateway):
        raise GatewayLoadError(
            f"ORRERY_A2A_GATEWAY: {spec!r} did not return an AgentGateway "
            "(confirmations, inventory(), run_in_session())"
        )
    # Checked now rather than at the first cancel or decision: a store written against an older
    # seam (without `withdraw`, say) would otherwise fail in the middle of a request.
    if not isinstance(gateway.confirmations, ConfirmationStore):
        raise GatewayLoadError(
            f"ORRERY_A2A_GATEWAY: {spec!r} has a confirmation store without every "
            "ConfirmationStore member (shared, propose, get, decide, consume, withdraw, ping)"
        )
    return gateway
