"""The ADK gateway over the example agent and its scripted model: ADK's real Runner, tools and
confirmation flow, the adapter's real confirmation store (in memory, or PostgreSQL), no network.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass

import pytest

from adapter.gateway import Pending, Reply, Turn
from adapter.sessions import session_id
from adapter.stores.memory import MemoryConfirmationStore
from contract.identity import Autonomy, Kind, Principal
from gateways.adk import example
from gateways.adk.gateway import AdkGateway
from gateways.adk.sessions import BoundedSessionService
from tests.clocks import FakeClock

APPROVAL_TTL = 600.0


def caller(
    kind: Kind = "delegated",
    subject: str = "alice",
    agent: str = "agent-1",
    autonomy: Autonomy = "L3",
) -> Principal:
    client = "svc-1" if kind == "service" else "client-a"
    return Principal(
        kind=kind,
        subject=client if kind == "service" else subject,
        client=client,
        agent="" if kind == "service" else agent,
        role="operator",
        autonomy="L2" if kind == "service" else autonomy,
    )


@dataclass
class Conversation:
    """One caller's conversation (contextId) with the gateway, as the adapter drives it."""

    gateway: AdkGateway
    principal: Principal
    context_id: str = "ctx-1"
    task_id: str = "task-1"

    @property
    def session_id(self) -> str:
        return session_id(self.principal.key, self.context_id)

    async def say(self, text: str, *, resume: str | None = None) -> Reply | Pending:
        return await self.gateway.run_in_session(
            Turn(
                session_id=self.session_id,
                principal=self.principal,
                text=text,
                task_id=self.task_id,
                message_id=f"m-{text}",
                context_id=self.context_id,
                resume_action_id=resume,
            )
        )

    async def propose(self, text: str = "restart checkout") -> str:
        """Ask for the guarded restart; the id of the action waiting for a decision."""
        pending = await self.say(text)
        assert isinstance(pending, Pending), pending
        return pending.confirmation.action_id


@pytest.fixture(autouse=True)
def no_restarts() -> Iterator[None]:
    """The example's restart counter starts at zero in every test."""
    example.RESTARTS.clear()
    yield
    example.RESTARTS.clear()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(now=1_800_000_000.0)


@pytest.fixture
def store(clock: FakeClock) -> MemoryConfirmationStore:
    return MemoryConfirmationStore(clock=clock)


@pytest.fixture
async def gateway(store: MemoryConfirmationStore) -> AsyncIterator[AdkGateway]:
    adk = AdkGateway(
        example.build_agent(example.ScriptedModel()), BoundedSessionService(), store, APPROVAL_TTL
    )
    try:
        yield adk
    finally:
        await adk.aclose()


@pytest.fixture
def alice(gateway: AdkGateway) -> Conversation:
    return Conversation(gateway, caller())
