"""The embedded demo gateway: deterministic, no model, so the product runs on a fresh machine.

Two specialists over a small built-in view of service health, and a third with remote agents:

* `investigator` (any autonomy): answers questions about a service's health from the table below.
* `change-planner`: proposes changes. `annotate` (an unguarded L2 action) runs at once for L2+;
  `restart` / `rollback` / `scale` are guarded L3 actions that always need a human approval, and
  are refused outright for a service principal (pinned to L2) and for anyone below L3 — so a
  service principal never reaches input-required.
* `delegator` (listed only when remote agents are configured): hands a question to a remote A2A
  agent on the allowlist (`ORRERY_A2A_REMOTE_AGENTS`, see `gateways/remote/`):
  `ask <agent>: <question>`. Delegation is
  counted as destructive: each call is a guarded (L3) action the delegating person approves, used
  once, never open to a service principal; the reply comes back screened and framed as untrusted
  tool output, a failed call as a refusal with its reason code.

Routing is by keyword (the `routing_hint` says which), the same text always gives the same reply,
and the guarded action only "runs" (a line in the reply) after the gate consumed an approval of
exactly that action. The demo keeps no plan of its own between turns: at the resume, the action
it runs is the one its proposal recorded (`{verb}_service(service=…)`), so its digest is the
recorded one; a gateway with a model replans and passes what it would run now.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapter.gateway import (
    Confirmation,
    ConfirmationStore,
    GatewayContext,
    Pending,
    Proposal,
    Reply,
    Specialist,
    Turn,
    action_digest,
    redact,
)
from contract.identity import Principal
from gateways.gate import not_run, settled
from gateways.remote.client import RemoteAgents
from gateways.remote.errors import RemoteAgentError
from gateways.remote.metrics import RemoteMetrics
from gateways.remote.screening import framed
from gateways.remote.settings import RemoteSettings
from runtime.errors import ConfigError

LEVELS = {"L1": 1, "L2": 2, "L3": 3}


@dataclass(frozen=True, slots=True)
class ServiceHealth:
    status: str
    error_rate: float
    p99_ms: int
    note: str


HEALTH: Mapping[str, ServiceHealth] = {
    "checkout": ServiceHealth("degraded", 0.042, 1850, "error rate up since the 14:05 deploy"),
    "payments": ServiceHealth("healthy", 0.001, 210, "steady"),
    "search": ServiceHealth("healthy", 0.003, 340, "steady"),
    "inventory": ServiceHealth("down", 1.0, 0, "no healthy pods; crash-looping on start"),
}

GUARDED_VERBS = ("restart", "rollback", "scale")
_SERVICE = re.compile(r"\b(" + "|".join(HEALTH) + r")\b", re.IGNORECASE)
_GUARDED = re.compile(r"\b(" + "|".join(GUARDED_VERBS) + r")\b", re.IGNORECASE)
_ANNOTATE = re.compile(r"\b(annotate|note)\b", re.IGNORECASE)
_DELEGATE = re.compile(r"\s*ask\s+([a-z][a-z0-9-]*)\s*:\s*(\S.*)", re.IGNORECASE | re.DOTALL)
REMOTE_TOOL = "call_remote_agent"

SPECIALISTS: tuple[Specialist, ...] = (
    Specialist(
        name="investigator",
        description="Answers questions about service health from the platform's health view.",
        routing_hint="questions about a service's status, errors or latency",
        examples=("How is checkout doing?", "Is inventory up?"),
    ),
    Specialist(
        name="change-planner",
        description=(
            "Proposes changes to services. Restarts, rollbacks and scaling are guarded (L3) "
            "and run only after the delegating person approves them."
        ),
        routing_hint="requests to restart, roll back, scale or annotate a service",
        examples=("Restart checkout", "Annotate payments: investigating latency"),
    ),
)


# Listed (so on the extended card) only when remote agents are configured: the card never offers
# what this gateway cannot do.
DELEGATOR = Specialist(
    name="delegator",
    description=(
        "Asks a remote A2A agent from the operator's allowlist. Each call is guarded (L3) "
        "and runs only after the delegating person approves it; the reply is untrusted."
    ),
    routing_hint="'ask <remote agent>: <question>'",
    examples=("ask billing: what did checkout cost last week?",),
)


def _level(principal: Principal) -> int:
    level = LEVELS[principal.autonomy]
    return min(level, 2) if principal.kind == "service" else level


class DemoGateway:
    """A deterministic `AgentGateway` (see the module docstring)."""

    def __init__(
        self,
        confirmations: ConfirmationStore,
        approval_ttl: float,
        remote: RemoteAgents | None = None,
    ) -> None:
        self._confirmations = confirmations
        self._approval_ttl = approval_ttl
        self._remote = remote

    @property
    def confirmations(self) -> ConfirmationStore:
        return self._confirmations

    async def inventory(self) -> Sequence[Specialist]:
        return SPECIALISTS if self._remote is None else (*SPECIALISTS, DELEGATOR)

    async def run_in_session(self, turn: Turn) -> Reply | Pending:
        if turn.resume_action_id is not None:
            return await self._resume(turn, turn.resume_action_id)
        delegation = _DELEGATE.fullmatch(turn.text)
        if delegation:
            return await self._propose_delegation(turn, delegation[1].lower(), delegation[2])
        service_match = _SERVICE.search(turn.text)
        service = service_match[1].lower() if service_match else None
        guarded = _GUARDED.search(turn.text)
        if guarded:
            return await self._propose(turn, guarded[1].lower(), service)
        if _ANNOTATE.search(turn.text):
            return self._annotate(turn, service)
        return self._investigate(service)

    def _investigate(self, service: str | None) -> Reply:
        if service is None:
            lines = [f"{name}: {health.status}" for name, health in sorted(HEALTH.items())]
            return Reply("Service health — " + "; ".join(lines) + ".")
        health = HEALTH[service]
        return Reply(
            f"{service} is {health.status}: error rate {health.error_rate:.1%}, "
            f"p99 {health.p99_ms} ms ({health.note})."
        )

    def _annotate(self, turn: Turn, service: str | None) -> Reply:
        if _level(turn.principal) < 2:
            return Reply("Annotating a service is an L2 action; your autonomy is L1.", True)
        if service is None:
            return Reply("Which service should I annotate? Known: " + ", ".join(sorted(HEALTH)))
        return Reply(f"Annotated {service}.")

    async def _propose(self, turn: Turn, verb: str, service: str | None) -> Reply | Pending:
        if service is None:
            return Reply(f"Which service should I {verb}? Known: " + ", ".join(sorted(HEALTH)))
        refused = _guarded_refusal(turn.principal, verb)
        if refused is not None:
            return refused
        confirmation = await self._guard(turn, f"{verb}_service", {"service": service})
        return Pending(
            confirmation=confirmation,
            summary=(
                f"{verb.capitalize()} {service} is a guarded (L3) action and needs approval by "
                "the person who delegated to you. Once they decide, send any message on this "
                "task to continue."
            ),
        )

    async def _propose_delegation(self, turn: Turn, agent: str, text: str) -> Reply | Pending:
        refused = _guarded_refusal(turn.principal, "asking a remote agent")
        if refused is not None:
            return refused
        known = self._remote.names if self._remote is not None else ()
        if agent not in known:
            return Reply(
                f"Refused (not_allowlisted): {agent!r} is not an allowlisted remote agent. "
                "Known: " + (", ".join(known) or "none"),
                True,
            )
        args = {"agent": agent, "message": text.strip()}
        if redact(args) != args:
            # The person must approve exactly what is sent; a message the approval page would
            # show cut or redacted cannot be approved as it is.
            return Reply(
                "Refused: that message is too long or looks like a credential; a delegation "
                "is approved as shown, so send a short message without secrets.",
                True,
            )
        confirmation = await self._guard(turn, REMOTE_TOOL, args)
        return Pending(
            confirmation=confirmation,
            summary=(
                f"Asking the remote agent {agent!r} is a guarded (L3) action and needs approval "
                "by the person who delegated to you. Once they decide, send any message on this "
                "task to continue."
            ),
        )

    async def _guard(self, turn: Turn, tool: str, args: Mapping[str, str]) -> Confirmation:
        """Propose `tool(args)` as a guarded L3 action of this turn's principal."""
        return await self._confirmations.propose(
            Proposal(
                owner=turn.principal.key,
                subject=turn.principal.subject,
                session_id=turn.session_id,
                task_id=turn.task_id,
                tool=tool,
                args=redact(args),
                level="L3",
                ttl=self._approval_ttl,
                digest=action_digest(tool, args),
            )
        )

    async def _resume(self, turn: Turn, action_id: str) -> Reply | Pending:
        entry = await self._confirmations.get(action_id, subject=turn.principal.subject)
        action = action_digest(entry.tool, entry.args) if entry is not None else ""
        outcome = await self._confirmations.consume(
            action_id, owner=turn.principal.key, digest=action
        )
        if outcome == "approved" and entry is not None and entry.tool == REMOTE_TOOL:
            return await self._delegate(turn, str(entry.args["agent"]), str(entry.args["message"]))
        if outcome == "approved":
            return Reply(f"Approved action {action_id} carried out.")
        status = await settled(self._confirmations, action_id, outcome, turn.principal.subject)
        return status if isinstance(status, Pending) else not_run(action_id, status)

    async def _delegate(self, turn: Turn, agent: str, text: str) -> Reply:
        """Run an approved delegation: the remote's screened reply, or why there is none."""
        if self._remote is None:  # approved on a replica configured with remote agents
            return Reply(f"Refused (not_allowlisted): {agent!r} is not allowlisted here.", True)
        try:
            reply = await self._remote.call(agent, text, principal_key=turn.principal.key)
        except RemoteAgentError as exc:
            return Reply(
                f"The call to the remote agent {agent!r} failed ({exc.reason}): {exc.description}.",
                True,
            )
        return Reply(framed(agent, reply))


def _guarded_refusal(principal: Principal, what: str) -> Reply | None:
    """Why `principal` may not even propose a guarded (L3) action, if it may not."""
    if principal.kind == "service":
        return Reply(
            f"Refused: {what} is a guarded (L3) action and a service principal is limited "
            "to L2. Ask through a delegated agent so a person can approve it.",
            True,
        )
    if _level(principal) < 3:
        return Reply(
            f"Refused: {what} is a guarded (L3) action; your autonomy is {principal.autonomy}.",
            True,
        )
    return None


def check(env: Mapping[str, str]) -> list[str]:
    """The problems of the demo gateway's own settings (its remote agents), for `check`."""
    try:
        RemoteSettings.from_env(env)
    except ConfigError as exc:
        return list(exc.problems)
    return []


def create(context: GatewayContext) -> DemoGateway:
    """The `ORRERY_A2A_GATEWAY` factory of the demo gateway (the default); `ConfigError` names
    every bad remote-agent variable."""
    settings = RemoteSettings.from_env(context.env)
    remote = RemoteAgents(settings, RemoteMetrics(context.registry)) if settings.agents else None
    return DemoGateway(context.confirmations, context.approval_ttl, remote)
