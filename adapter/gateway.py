"""The gateway seam: the adapter's only path into agents.

`AgentGateway` is what Orrery's `AgentGateway.run_in_session` looks like from here: a live
inventory of specialists (the extended card is built from it, so it cannot drift) and one call per
turn that answers either a final `Reply` or a `Pending` guarded action that a human must approve.
Approvals live in a `ConfirmationStore` the gateway exposes; the `/approvals` endpoint decides
through it, and the gate inside `run_in_session` consumes a decision exactly once.

`ORRERY_A2A_GATEWAY=module:factory` loads another implementation: `factory(GatewayContext)` returns
the gateway (or an awaitable of it). The default is `adapter.demo_gateway:create`.
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

from adapter.errors import GatewayLoadError
from authz.principal import Principal

DEFAULT_GATEWAY = "adapter.demo_gateway:create"

Status = Literal["pending", "approved", "denied", "consumed", "expired", "withdrawn"]
Decision = Literal["approve", "deny"]
# What deciding answered: the new state, or why nothing changed.
DecisionOutcome = Literal[
    "approved", "denied", "not_found", "expired", "already_decided", "withdrawn"
]
# What the gate found when a turn resumed: "approved" means it consumed the approval just now.
GateOutcome = Literal[
    "approved", "denied", "pending", "expired", "consumed", "withdrawn", "not_found"
]


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
    """One user message for one conversation (session) of one principal."""

    session_id: str
    principal: Principal
    text: str
    task_id: str
    # Set when the task waits on a guarded action: the server-stored id from its status, never a
    # value the client sent.
    resume_action_id: str | None = None


@dataclass(frozen=True, slots=True)
class Reply:
    """The final reply text of a turn; `rejected` when the gateway refused to act."""

    text: str
    rejected: bool = False


@dataclass(frozen=True, slots=True)
class Confirmation:
    """A guarded action waiting for (or past) a human decision."""

    action_id: str
    owner: str  # principal key of the agent that proposed it
    subject: str  # the delegating human: the only one who may decide
    session_id: str
    task_id: str
    tool: str
    args: Mapping[str, Any]  # already redacted
    level: str
    status: Status
    created_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Proposal:
    """A guarded action a gateway wants a human to decide (`args` redacted by the gateway)."""

    owner: str  # principal key of the proposing agent: only its turns may consume the approval
    subject: str  # the delegating human: the only one who may decide
    session_id: str
    task_id: str
    tool: str
    args: Mapping[str, Any]
    level: str
    ttl: float  # seconds until both the decision and the consumption expire


@dataclass(frozen=True, slots=True)
class Pending:
    """The turn stopped at a guarded action; the task goes to input-required."""

    confirmation: Confirmation
    summary: str


@runtime_checkable
class ConfirmationStore(Protocol):
    """Where pending guarded actions and their decisions live (memory or PostgreSQL)."""

    @property
    def shared(self) -> bool:
        """True when every replica sees the same confirmations."""

    async def propose(self, proposal: Proposal) -> Confirmation:
        """Record a new pending action; its id is unguessable."""

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        """The action if `subject` may decide it (otherwise None, as if it did not exist)."""

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        """Approve or deny a pending, unexpired action of `subject`'s; once."""

    async def consume(self, action_id: str, *, owner: str) -> GateOutcome:
        """The gate: turn an approval of `owner`'s action into one execution."""

    async def withdraw(self, action_id: str, *, owner: str) -> None:
        """`owner` cancelled the task waiting on this action: a pending or approved action
        becomes `withdrawn` — never to run, and a later decision is told so."""

    async def ping(self) -> None:
        """Raise if the store cannot be reached (readiness)."""


@runtime_checkable
class AgentGateway(Protocol):
    """The only way the adapter reaches agents."""

    @property
    def confirmations(self) -> ConfirmationStore: ...

    async def inventory(self) -> Sequence[Specialist]: ...

    async def run_in_session(self, turn: Turn) -> Reply | Pending: ...


@dataclass(frozen=True, slots=True)
class GatewayContext:
    """What a gateway factory gets from the adapter."""

    confirmations: ConfirmationStore
    approval_ttl: float


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


async def load_gateway(spec: str | None, context: GatewayContext) -> AgentGateway:
    """Import `module:factory` (default: the demo gateway) and build the gateway."""
    module_name, _, factory_name = (spec or DEFAULT_GATEWAY).partition(":")
    try:
        factory = getattr(importlib.import_module(module_name), factory_name)
    except (ImportError, AttributeError) as exc:
        raise GatewayLoadError(f"ORRERY_A2A_GATEWAY: cannot load {spec!r}: {exc}") from None
    gateway = factory(context)
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
