"""Versioned PostgreSQL schema migrations: how a database of any earlier release becomes current.

The schema (`ORRERY_A2A_DB_SCHEMA`) records what has been applied in `schema_version` (one row per
migration: version, name, when). `migrate` runs on every start, in one transaction under an
advisory lock keyed by the schema, so replicas starting together queue: the first applies what is
missing, the others find it applied and change nothing. DDL is transactional in PostgreSQL, so a
migration that fails leaves the schema exactly as it was (and the adapter does not start).

Migrations are append-only: a released migration is never edited, a change is a new one with the
next version. They must stay *expand-only* (add tables, columns with defaults, indexes; never drop
or rename what the previous release reads), so the previous release still runs on a migrated
schema during a rolling update or a rollback; a schema newer than the code is logged
(`schema_newer_than_code`), not refused.

Migration 1 is the schema as it stood when versioning began. It is written to *adopt* a database
made before `schema_version` existed: every statement is idempotent (`IF NOT EXISTS`), and the
columns added over time without an upgrade path (`tasks.version`, `approvals.digest`) are added
when missing, so every earlier layout ends up the same as a fresh one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from runtime import logs

logger = logging.getLogger("adapter.migrations")

# pg_advisory_xact_lock(int, int): this constant and hashtext(schema): one lock per schema.
MIGRATION_LOCK = 0x0A2A_5C4E


@dataclass(frozen=True, slots=True)
class Migration:
    """One step of the schema; `sql` names the schema as `{s}`."""

    version: int
    name: str
    sql: str


_BASELINE = """
CREATE TABLE IF NOT EXISTS {s}.tasks (
    id text PRIMARY KEY,
    owner text NOT NULL,
    context_id text NOT NULL,
    state integer NOT NULL,
    has_ts boolean NOT NULL,
    ts_ns bigint NOT NULL,
    version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    task bytea NOT NULL
);
-- Tables made before versioned writes lack it: every existing row starts at version 1.
ALTER TABLE {s}.tasks ADD COLUMN IF NOT EXISTS version bigint NOT NULL DEFAULT 1;
ALTER TABLE {s}.tasks ALTER COLUMN version DROP DEFAULT;
CREATE TABLE IF NOT EXISTS {s}.task_events (
    seq bigserial PRIMARY KEY,
    task_id text NOT NULL,
    version bigint NOT NULL,
    event bytea NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS task_events_by_task ON {s}.task_events (task_id, seq);
CREATE INDEX IF NOT EXISTS tasks_owner_order
    ON {s}.tasks (owner, has_ts DESC, ts_ns DESC, (id COLLATE "C") DESC);
CREATE TABLE IF NOT EXISTS {s}.message_claims (
    owner text NOT NULL,
    key text NOT NULL,
    task_id text NOT NULL,
    fingerprint text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner, key)
);
CREATE TABLE IF NOT EXISTS {s}.approvals (
    action_id text PRIMARY KEY,
    owner text NOT NULL,
    subject text NOT NULL,
    session_id text NOT NULL,
    task_id text NOT NULL,
    tool text NOT NULL,
    args jsonb NOT NULL,
    level text NOT NULL,
    status text NOT NULL,
    created_at double precision NOT NULL,
    expires_at double precision NOT NULL,
    decided_at double precision
);
-- The exact action's digest; rows from before it existed match no action (fail closed).
ALTER TABLE {s}.approvals ADD COLUMN IF NOT EXISTS digest text NOT NULL DEFAULT '';
"""

# Issue 12: no per-call cost that grows with an owner's tasks or the whole table. Listing by a
# state or a context walks its own index; totals without those filters read `task_counts`, kept
# by a statement-level trigger (every writer, also a bulk one or a future one, keeps it right);
# each sweep and gauge has the index it deletes or counts by.
_BOUNDED_COSTS = """
CREATE INDEX IF NOT EXISTS tasks_owner_state_order
    ON {s}.tasks (owner, state, has_ts DESC, ts_ns DESC, (id COLLATE "C") DESC);
CREATE INDEX IF NOT EXISTS tasks_owner_context_order
    ON {s}.tasks (owner, context_id, has_ts DESC, ts_ns DESC, (id COLLATE "C") DESC);
CREATE INDEX IF NOT EXISTS tasks_by_update ON {s}.tasks (updated_at);
CREATE INDEX IF NOT EXISTS task_events_by_age ON {s}.task_events (created_at);
CREATE INDEX IF NOT EXISTS message_claims_by_age ON {s}.message_claims (created_at);
CREATE INDEX IF NOT EXISTS approvals_by_expiry ON {s}.approvals (expires_at);
CREATE INDEX IF NOT EXISTS approvals_live_by_owner
    ON {s}.approvals (owner, expires_at) WHERE status IN ('pending', 'approved');

CREATE TABLE {s}.task_counts (
    owner text NOT NULL,
    state integer NOT NULL,
    n bigint NOT NULL,
    PRIMARY KEY (owner, state)
);
CREATE INDEX task_counts_empty ON {s}.task_counts (owner) WHERE n = 0;
-- Per statement: one upsert per (owner, state) it changed, in key order (no lock-order deadlock
-- between two statements); a statement that changes no state (most updates) writes nothing.
CREATE FUNCTION {s}.count_tasks() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO {s}.task_counts AS c (owner, state, n)
            SELECT owner, state, count(*) FROM new_rows GROUP BY owner, state
            ORDER BY owner, state
            ON CONFLICT (owner, state) DO UPDATE SET n = c.n + excluded.n;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO {s}.task_counts AS c (owner, state, n)
            SELECT owner, state, -count(*) FROM old_rows GROUP BY owner, state
            ORDER BY owner, state
            ON CONFLICT (owner, state) DO UPDATE SET n = c.n + excluded.n;
    ELSE
        INSERT INTO {s}.task_counts AS c (owner, state, n)
            SELECT owner, state, sum(d) FROM (
                SELECT owner, state, 1 AS d FROM new_rows
                UNION ALL SELECT owner, state, -1 FROM old_rows
            ) AS changed GROUP BY owner, state HAVING sum(d) <> 0
            ORDER BY owner, state
            ON CONFLICT (owner, state) DO UPDATE SET n = c.n + excluded.n;
    END IF;
    RETURN NULL;
END $$;
-- The trigger first: its lock on tasks holds writers off until this commits, so the counts
-- below miss nothing written meanwhile by a replica of the previous release.
CREATE TRIGGER tasks_counted_insert AFTER INSERT ON {s}.tasks
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_tasks();
CREATE TRIGGER tasks_counted_update AFTER UPDATE ON {s}.tasks
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_tasks();
CREATE TRIGGER tasks_counted_delete AFTER DELETE ON {s}.tasks
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION {s}.count_tasks();
INSERT INTO {s}.task_counts (owner, state, n)
    SELECT owner, state, count(*) FROM {s}.tasks GROUP BY owner, state;
"""

# The recovery sweep (`PostgresTaskStore.end_stale`) reads only tasks whose turn runs, or is gone:
# a few rows, whatever the table holds.
_RUNNING_TASKS = """
CREATE INDEX IF NOT EXISTS tasks_running ON {s}.tasks (updated_at) WHERE state IN (1, 2);
"""

MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "baseline", _BASELINE),
    Migration(2, "bounded per-owner costs", _BOUNDED_COSTS),
    Migration(3, "running tasks for the recovery sweep", _RUNNING_TASKS),
)


def latest() -> int:
    """The version a migrated schema is at."""
    return MIGRATIONS[-1].version


async def migrate(connection: Any, schema: str) -> list[int]:
    """Bring `schema` up to `latest()`; the versions applied by this call (often none).

    `connection` is an asyncpg connection; `schema` a validated identifier (settings.py)."""
    applied: list[int] = []
    async with connection.transaction():
        await connection.execute(
            "SELECT pg_advisory_xact_lock($1, hashtext($2))", MIGRATION_LOCK, schema
        )
        await connection.execute(
            f"""CREATE SCHEMA IF NOT EXISTS {schema};
                CREATE TABLE IF NOT EXISTS {schema}.schema_version (
                    version integer PRIMARY KEY,
                    name text NOT NULL,
                    applied_at timestamptz NOT NULL DEFAULT now()
                )"""
        )
        current = int(
            await connection.fetchval(
                f"SELECT coalesce(max(version), 0) FROM {schema}.schema_version"
            )
        )
        if current > latest():
            logs.event(
                logger,
                "schema_newer_than_code",
                logging.WARNING,
                schema_version=current,
                code_version=latest(),
            )
        for migration in MIGRATIONS:
            if migration.version <= current:
                continue
            await connection.execute(migration.sql.format(s=schema))
            await connection.execute(
                f"INSERT INTO {schema}.schema_version (version, name) VALUES ($1, $2)",
                migration.version,
                migration.name,
            )
            applied.append(migration.version)
    if applied:
        logs.event(logger, "schema_migrated", schema=schema, applied=applied, version=latest())
    return applied
