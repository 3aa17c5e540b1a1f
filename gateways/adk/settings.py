"""The ADK gateway's settings, read once from the environment (`AdkSettings.from_env`).

The gateway is loaded inside the adapter's process but owns its variables: the adapter knows
nothing of ADK. `DATABASE_URL` and `ORRERY_A2A_DB_SCHEMA` are the adapter's own, read again here
so the ADK sessions live in the same PostgreSQL as the tasks and approvals (in a schema of their
own beside the adapter's, since ADK names its tables `sessions`, `events`, ...).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

from runtime.env import EnvReader

AGENT_VARIABLE = "ORRERY_A2A_ADK_AGENT"
DEFAULT_ADAPTER_SCHEMA = "orrery_a2a"  # the adapter's default ORRERY_A2A_DB_SCHEMA
_AGENT = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_SCHEMA = re.compile(r"[a-z_][a-z0-9_]{0,62}")


@dataclass(frozen=True, slots=True)
class AdkSettings:
    agent: str  # `module:attribute` of the user's ADK agent (a `BaseAgent`)
    # With it, ADK's database session service on this PostgreSQL (replicas share sessions);
    # without, the bounded in-memory one.
    database_url: str | None
    db_schema: str
    max_sessions: int
    session_idle_ttl: float

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> AdkSettings:
        reader = EnvReader(env)
        agent = reader.parsed(AGENT_VARIABLE, "", _agent, "")
        database_url = None
        if reader.raw("DATABASE_URL"):
            database_url = reader.parsed("DATABASE_URL", "", _async_url, None)
        adapter_schema = reader.raw("ORRERY_A2A_DB_SCHEMA") or DEFAULT_ADAPTER_SCHEMA
        settings = cls(
            agent=agent,
            database_url=database_url,
            db_schema=reader.parsed(
                "ORRERY_A2A_ADK_DB_SCHEMA", f"{adapter_schema}_adk"[:63], _schema, ""
            ),
            max_sessions=reader.integer("ORRERY_A2A_ADK_MAX_SESSIONS", 10000, minimum=1),
            session_idle_ttl=reader.seconds("ORRERY_A2A_ADK_SESSION_IDLE_TTL", "1h", minimum=1.0),
        )
        reader.finish()
        return settings


def _agent(text: str) -> str:
    if not text:
        raise ValueError("is required: module:attribute of your ADK agent, e.g. my_app:root_agent")
    if not _AGENT.fullmatch(text):
        raise ValueError(f"expected module:attribute, got {text!r}")
    return text


def _schema(text: str) -> str:
    if not _SCHEMA.fullmatch(text):
        raise ValueError("expected a lower-case SQL identifier ([a-z_][a-z0-9_]*)")
    return text


def _async_url(text: str) -> str:
    """`postgresql://…` as SQLAlchemy's asyncpg URL (ADK's database service is async only)."""
    parts = urlsplit(text)
    if parts.scheme not in ("postgres", "postgresql"):
        raise ValueError("expected a postgresql:// URL")  # never echo it: it may hold a password
    return urlunsplit(parts._replace(scheme="postgresql+asyncpg"))
