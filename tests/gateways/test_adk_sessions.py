"""Where the ADK gateway keeps sessions (gateways/adk/sessions.py): bounded in memory, or ADK's
database service on PostgreSQL, shared by replicas."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg
import pytest

from adapter.gateway import Reply
from adapter.stores.postgres import PostgresStores
from gateways.adk import example
from gateways.adk.gateway import AdkGateway
from gateways.adk.sessions import (
    BoundedSessionService,
    SweptDatabaseSessionService,
    open_session_service,
)
from gateways.adk.settings import AdkSettings
from tests.adapter.conftest import fresh_schema
from tests.clocks import FakeClock
from tests.gateways.conftest import APPROVAL_TTL, Conversation, caller

APP = "app"


async def test_an_idle_session_is_dropped() -> None:
    """A session untouched for the idle TTL is gone (with its user's state); one in use stays."""
    clock = FakeClock()
    service = BoundedSessionService(idle_ttl=60, clock=clock)
    await service.create_session(app_name=APP, user_id="u1", session_id="s1", state={"user:x": 1})
    await service.create_session(app_name=APP, user_id="u2", session_id="s2")
    clock.advance(40)
    assert await service.get_session(app_name=APP, user_id="u2", session_id="s2") is not None
    clock.advance(30)
    assert await service.get_session(app_name=APP, user_id="u1", session_id="s1") is None
    assert await service.get_session(app_name=APP, user_id="u2", session_id="s2") is not None
    assert await service.get_user_state(app_name=APP, user_id="u1") == {}
    assert len(service) == 1


async def test_past_the_cap_the_least_recently_used_session_goes() -> None:
    """At most `max_sessions` are kept: a new one evicts the least recently used."""
    service = BoundedSessionService(max_sessions=2, clock=FakeClock())
    for name in ("s1", "s2"):
        await service.create_session(app_name=APP, user_id="u", session_id=name)
    await service.get_session(app_name=APP, user_id="u", session_id="s1")  # s2 is now oldest
    await service.create_session(app_name=APP, user_id="u", session_id="s3")
    kept = [
        name
        for name in ("s1", "s2", "s3")
        if await service.get_session(app_name=APP, user_id="u", session_id=name) is not None
    ]
    assert kept == ["s1", "s3"]
    assert len(service) == 2


@asynccontextmanager
async def replica(database_url: str, schema: str) -> AsyncIterator[AdkGateway]:
    """One adapter replica's ADK gateway: its own connections to the shared PostgreSQL."""
    settings = AdkSettings.from_env(
        {
            "ORRERY_A2A_ADK_AGENT": "gateways.adk.example:root_agent",
            "DATABASE_URL": database_url,
            "ORRERY_A2A_DB_SCHEMA": schema,
        }
    )
    stores = await PostgresStores.open(database_url, schema)
    try:
        gateway = AdkGateway(
            example.build_agent(example.ScriptedModel()),
            await open_session_service(settings),
            stores.confirmations,
            APPROVAL_TTL,
        )
        try:
            yield gateway
        finally:
            await gateway.aclose()
    finally:
        await stores.close()


@pytest.fixture
async def replicas(database_url: str) -> AsyncIterator[tuple[AdkGateway, AdkGateway]]:
    async with fresh_schema(database_url) as schema:
        try:
            async with (
                replica(database_url, schema) as first,
                replica(database_url, schema) as second,
            ):
                yield first, second
        finally:
            connection = await asyncpg.connect(database_url)
            try:
                await connection.execute(f"DROP SCHEMA IF EXISTS {schema}_adk CASCADE")
            finally:
                await connection.close()


@pytest.mark.postgres
async def test_replicas_share_a_conversation_and_its_pending_approval(
    replicas: tuple[AdkGateway, AdkGateway],
) -> None:
    """Proposed on one replica, approved, resumed on the other: the tool runs once there, and the
    first replica then finds it carried out."""
    first, second = replicas
    on_first, on_second = Conversation(first, caller()), Conversation(second, caller())
    action_id = await on_first.propose()
    assert await first.confirmations.decide(action_id, subject="alice", decision="approve") == (
        "approved"
    )
    assert await on_second.say("go ahead", resume=action_id) == Reply(
        "Restarted checkout (restart #1 here)."
    )
    assert await on_first.say("go ahead", resume=action_id) == Reply(
        f"Action {action_id} was already carried out; nothing was done.", True
    )
    assert example.RESTARTS["checkout"] == 1
    session = await first.sessions.get_session(
        app_name="orrery_example", user_id="alice", session_id=on_first.session_id
    )
    assert session is not None
    assert any(event.author == "change_planner" for event in session.events)


@pytest.mark.postgres
async def test_idle_sessions_are_swept_from_postgresql(
    replicas: tuple[AdkGateway, AdkGateway],
) -> None:
    """ADK's database service keeps every session; the sweep drops those idle past the TTL
    (one hour here) and leaves the others."""
    first, second = replicas
    talk = Conversation(first, caller())
    await talk.say("how is checkout?")
    sessions = second.sessions
    assert isinstance(sessions, SweptDatabaseSessionService)
    await Conversation(second, caller(subject="bob")).say("how is search?")
    assert await sessions.sweep(time.time()) == 0
    assert await sessions.sweep(time.time() + 3601) == 2
    gone = await first.sessions.get_session(
        app_name="orrery_example", user_id="alice", session_id=talk.session_id
    )
    assert gone is None
