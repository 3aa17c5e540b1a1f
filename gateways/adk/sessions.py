"""Where the ADK sessions live: bounded in memory, or ADK's database service on PostgreSQL.

ADK's `InMemorySessionService` never forgets a session, so an edge that serves many callers would
grow until it is killed. `BoundedSessionService` is that service with the task store's bounds
(`adapter/stores/memory.py`): a session idle for `idle_ttl` is dropped, and past `max_sessions`
the least recently used one goes (with the user state of a user left without sessions). A
conversation whose session was dropped starts afresh; a guarded action waiting in it can then no
longer run (the gate finds no call to run, `bridge.py`), which fails closed.

With `DATABASE_URL`, `DatabaseSessionService` keeps the sessions in PostgreSQL, so every replica
continues every conversation (and every pending guarded action). Its tables go in a schema of their
own (`ORRERY_A2A_ADK_DB_SCHEMA`), created if missing, reached through the connection's
`search_path`: ADK's table names are not schema-qualified. ADK never deletes a stored session
either, so `SweptDatabaseSessionService` drops those idle for the same TTL, on every replica, every
`min(idle_ttl / 4, 60 s)` (through ADK's own `list_sessions` / `delete_session`: deleting twice is
harmless).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from google.adk.events import Event
from google.adk.sessions import (
    BaseSessionService,
    DatabaseSessionService,
    InMemorySessionService,
    Session,
)
from google.adk.sessions.base_session_service import GetSessionConfig

from gateways.adk.settings import AdkSettings
from runtime import logs

logger = logging.getLogger("gateways.adk")

_Key = tuple[str, str, str]  # app, user, session


class BoundedSessionService(InMemorySessionService):
    """ADK's in-memory sessions, bounded by idle time and by count (module docstring)."""

    def __init__(
        self,
        *,
        max_sessions: int = 10000,
        idle_ttl: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._max_sessions = max_sessions
        self._idle_ttl = idle_ttl
        self._clock = clock
        self._touched: OrderedDict[_Key, float] = OrderedDict()  # least recently used first

    def __len__(self) -> int:
        return len(self._touched)

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        self._evict()
        session = await super().create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id
        )
        self._touch((app_name, user_id, session.id))
        self._evict()
        return session

    async def get_session(
        self,
        *,
        app_name: str,
        user_id: str,
        session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:
        self._evict()
        session = await super().get_session(
            app_name=app_name, user_id=user_id, session_id=session_id, config=config
        )
        if session is not None:
            self._touch((app_name, user_id, session_id))
        return session

    async def append_event(self, session: Session, event: Event) -> Event:
        appended = await super().append_event(session, event)
        key = (session.app_name, session.user_id, session.id)
        if key in self._touched:
            self._touch(key)
        return appended

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await super().delete_session(app_name=app_name, user_id=user_id, session_id=session_id)
        self._forget((app_name, user_id, session_id))

    def _touch(self, key: _Key) -> None:
        self._touched[key] = self._clock()
        self._touched.move_to_end(key)

    def _evict(self) -> None:
        oldest = self._clock() - self._idle_ttl
        while self._touched:
            key, touched = next(iter(self._touched.items()))
            if touched > oldest and len(self._touched) <= self._max_sessions:
                return
            self._delete(key)

    def _delete(self, key: _Key) -> None:
        app_name, user_id, session_id = key
        by_user = self.sessions.get(app_name, {}).get(user_id, {})
        by_user.pop(session_id, None)
        if not by_user:
            self.sessions.get(app_name, {}).pop(user_id, None)
            self.user_state.get(app_name, {}).pop(user_id, None)
        if not self.sessions.get(app_name, True):
            self.sessions.pop(app_name, None)
        self._forget(key)

    def _forget(self, key: _Key) -> None:
        self._touched.pop(key, None)


async def drop_idle(service: BaseSessionService, app_name: str, idle_ttl: float, now: float) -> int:
    """Delete the app's sessions last updated over `idle_ttl` seconds before `now` (wall time,
    as ADK stamps them); how many."""
    listed = await service.list_sessions(app_name=app_name)
    idle = [session for session in listed.sessions if session.last_update_time < now - idle_ttl]
    for session in idle:
        await service.delete_session(
            app_name=app_name, user_id=session.user_id, session_id=session.id
        )
    return len(idle)


class SweptDatabaseSessionService(DatabaseSessionService):
    """ADK's database sessions, idle ones dropped in the background (module docstring)."""

    def __init__(self, db_url: str, *, idle_ttl: float, **engine: Any) -> None:
        super().__init__(db_url, **engine)
        self._idle_ttl = idle_ttl
        self._apps: set[str] = set()
        self._sweeper: asyncio.Task[None] | None = None

    async def create_session(
        self,
        *,
        app_name: str,
        user_id: str,
        state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:
        self._apps.add(app_name)
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep_forever(), name="adk-session-sweep")
        return await super().create_session(
            app_name=app_name, user_id=user_id, state=state, session_id=session_id
        )

    async def sweep(self, now: float) -> int:
        """Drop the idle sessions of every app this replica served; how many."""
        return sum([await drop_idle(self, app, self._idle_ttl, now) for app in sorted(self._apps)])

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_ttl / 4, 60.0))
            try:
                dropped = await self.sweep(time.time())
            except Exception as exc:  # noqa: BLE001 - an outage now is retried at the next sweep
                logs.event(
                    logger, "adk_session_sweep_failed", logging.WARNING, error=type(exc).__name__
                )
            else:
                if dropped:
                    logs.event(logger, "adk_sessions_dropped", sessions=dropped)

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await super().close()


# Any fixed key: replicas starting together create the schema and ADK's tables one at a time
# (`CREATE ... IF NOT EXISTS` still races in PostgreSQL, and ADK only locks within a process).
_PREPARE_LOCK = 0x4F52_4144_4B00  # "ORADK"


async def open_session_service(settings: AdkSettings) -> BaseSessionService:
    """The session service the settings ask for (module docstring); `close()` it at the end."""
    if settings.database_url is None:
        return BoundedSessionService(
            max_sessions=settings.max_sessions, idle_ttl=settings.session_idle_ttl
        )
    from sqlalchemy import text

    service = SweptDatabaseSessionService(
        settings.database_url,
        idle_ttl=settings.session_idle_ttl,
        connect_args={"server_settings": {"search_path": settings.db_schema}},
    )
    try:
        async with service.db_engine.connect() as connection:
            await connection.execute(text(f"SELECT pg_advisory_lock({_PREPARE_LOCK})"))
            try:
                # validated in AdkSettings: a lower-case SQL identifier
                await connection.execute(text(f"CREATE SCHEMA IF NOT EXISTS {settings.db_schema}"))
                await connection.commit()
                await service.prepare_tables()
            finally:
                await connection.execute(text(f"SELECT pg_advisory_unlock({_PREPARE_LOCK})"))
                await connection.commit()
    except BaseException:
        await service.close()
        raise
    return service
