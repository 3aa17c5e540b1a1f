"""A recording gateway: the demo gateway plus a log of the turns it saw and an optional gate.

A fake at a seam we own (`AgentGateway`), used to observe what reaches the gateway (session ids,
text), to hold turns open (in-flight caps, streams, shutdown) and to make them fail.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence

from adapter.gateway import (
    ConfirmationStore,
    GatewayContext,
    Pending,
    Reply,
    Specialist,
    Turn,
    action_digest,
)
from gateways.demo import SPECIALISTS, DemoGateway


class RecordingGateway:
    def __init__(self, context: GatewayContext) -> None:
        self.demo = DemoGateway(context.confirmations, context.approval_ttl)
        self.turns: list[Turn] = []
        self.hold: asyncio.Event | None = None
        self.error: Exception | None = None  # raised by every turn (after the hold) when set
        self.started = asyncio.Event()
        self.specialists: list[Specialist] = list(SPECIALISTS)

    @property
    def confirmations(self) -> ConfirmationStore:
        return self.demo.confirmations

    async def inventory(self) -> Sequence[Specialist]:
        return list(self.specialists)

    async def run_in_session(self, turn: Turn) -> Reply | Pending:
        self.turns.append(turn)
        self.started.set()
        if self.hold is not None:
            await self.hold.wait()
        if self.error is not None:
            raise self.error
        return await self.demo.run_in_session(turn)


def create(context: GatewayContext) -> RecordingGateway:
    return RecordingGateway(context)


class ClosingGateway(RecordingGateway):
    """A gateway holding connections of its own: `aclose` counts the adapter's calls."""

    closed = 0

    async def aclose(self) -> None:
        ClosingGateway.closed += 1


def create_closing(context: GatewayContext) -> ClosingGateway:
    return ClosingGateway(context)


class StoreWithoutWithdraw:
    """A confirmation store written before `withdraw` existed (every other member delegated)."""

    def __init__(self, store: ConfirmationStore) -> None:
        self.shared = store.shared
        self.propose, self.get, self.decide = store.propose, store.get, store.decide
        self.consume, self.ping = store.consume, store.ping


def create_with_an_old_store(context: GatewayContext) -> RecordingGateway:
    old = StoreWithoutWithdraw(context.confirmations)
    # on purpose: a store without withdraw(), as an old deployment's would be
    return RecordingGateway(dataclasses.replace(context, confirmations=old))  # type: ignore[arg-type]


class ReplanningGateway(DemoGateway):
    """An agent that changes its plan between the approval and the run: it proposes what the
    demo gateway proposes (restarting the service the message names) and, once approved, wants
    to restart `then` instead — the same tool, other args."""

    def __init__(self, context: GatewayContext, then: str = "payments") -> None:
        super().__init__(context.confirmations, context.approval_ttl)
        self.then = then
        self.ran: list[tuple[str, dict[str, str]]] = []

    async def run_in_session(self, turn: Turn) -> Reply | Pending:
        if turn.resume_action_id is None:
            return await super().run_in_session(turn)
        action = ("restart_service", {"service": self.then})
        outcome = await self.confirmations.consume(
            turn.resume_action_id, owner=turn.principal.key, digest=action_digest(*action)
        )
        if outcome != "approved":
            return Reply(f"nothing was done ({outcome})", rejected=True)
        self.ran.append(action)
        return Reply(f"restarted {self.then}")


def create_replanning(context: GatewayContext) -> ReplanningGateway:
    return ReplanningGateway(context)
