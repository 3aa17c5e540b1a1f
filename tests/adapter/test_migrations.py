"""Versioned PostgreSQL migrations: any earlier layout upgrades to the current one, once, safely."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator

import asyncpg
import pytest
from a2a.types import a2a_pb2 as pb

from adapter.principal import owner_of
from adapter.stores import migrations
from adapter.stores.migrations import Migration, latest, migrate
from adapter.stores.postgres import PostgresStores
from tests.adapter.conftest import PROPOSAL, fresh_schema
from tests.adapter.test_stores import ALICE, task

# The layouts earlier releases created (CREATE … IF NOT EXISTS, no upgrade path), from git history.
# 518f7b5: the first PostgreSQL stores: unversioned tasks, no events.
FIRST_LAYOUT = """
CREATE SCHEMA {s};
CREATE TABLE {s}.tasks (
    id text PRIMARY KEY, owner text NOT NULL, context_id text NOT NULL, state integer NOT NULL,
    has_ts boolean NOT NULL, ts_ns bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(), task bytea NOT NULL
);
CREATE INDEX tasks_owner_order
    ON {s}.tasks (owner, has_ts DESC, ts_ns DESC, (id COLLATE "C") DESC);
CREATE TABLE {s}.approvals (
    action_id text PRIMARY KEY, owner text NOT NULL, subject text NOT NULL,
    session_id text NOT NULL, task_id text NOT NULL, tool text NOT NULL, args jsonb NOT NULL,
    level text NOT NULL, status text NOT NULL, created_at double precision NOT NULL,
    expires_at double precision NOT NULL, decided_at double precision
);
"""
# ee787b4 … 73eb7f6: versioned tasks and their events; before message_claims (f735701) and
# approvals.digest (07c13eb).
BEFORE_CLAIMS_LAYOUT = (
    FIRST_LAYOUT.replace(
        "ts_ns bigint NOT NULL,", "ts_ns bigint NOT NULL, version bigint NOT NULL,"
    )
    + """
CREATE TABLE {s}.task_events (
    seq bigserial PRIMARY KEY, task_id text NOT NULL, version bigint NOT NULL,
    event bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX task_events_by_task ON {s}.task_events (task_id, seq);
"""
)
OLD_TASK = task(10, state=pb.TASK_STATE_INPUT_REQUIRED, task_id="old-task")


@pytest.fixture
async def connection(database_url: str) -> AsyncIterator[asyncpg.Connection]:
    connection = await asyncpg.connect(database_url)
    try:
        yield connection
    finally:
        await connection.close()


async def layout(connection: asyncpg.Connection, schema: str) -> set[tuple[str, ...]]:
    """Every column (name, type, nullability, default) and index of `schema`, schema-neutral."""
    columns = await connection.fetch(
        """SELECT table_name, column_name, data_type, is_nullable, coalesce(column_default, '')
           FROM information_schema.columns WHERE table_schema = $1""",
        schema,
    )
    indexes = await connection.fetch(
        "SELECT tablename, indexname, indexdef FROM pg_indexes WHERE schemaname = $1", schema
    )
    return {
        tuple(str(value).replace(schema + ".", "<s>.") for value in row)
        for row in [*columns, *indexes]
    }


async def versions(connection: asyncpg.Connection, schema: str) -> list[int]:
    rows = await connection.fetch(f"SELECT version FROM {schema}.schema_version ORDER BY version")
    return [row["version"] for row in rows]


async def test_a_fresh_schema_gets_every_migration_once(
    connection: asyncpg.Connection, database_url: str
) -> None:
    """A new schema is migrated to the latest version; migrating again changes nothing."""
    all_versions = [migration.version for migration in migrations.MIGRATIONS]
    async with fresh_schema(database_url) as schema:
        assert await migrate(connection, schema) == all_versions
        assert await migrate(connection, schema) == []
        assert await versions(connection, schema) == all_versions == list(range(1, latest() + 1))


@pytest.mark.parametrize("old", [FIRST_LAYOUT, BEFORE_CLAIMS_LAYOUT], ids=["first", "pre-claims"])
async def test_an_earlier_layout_upgrades_to_the_fresh_one(
    connection: asyncpg.Connection, database_url: str, old: str
) -> None:
    """A schema an earlier release created (no schema_version) ends up column for column and
    index for index the same as a fresh one, its rows kept."""
    async with fresh_schema(database_url) as fresh, fresh_schema(database_url) as upgraded:
        await migrate(connection, fresh)
        await connection.execute(old.format(s=upgraded))
        await _old_rows(connection, upgraded)
        stores = await PostgresStores.open(database_url, upgraded)
        await stores.close()
        assert await layout(connection, upgraded) == await layout(connection, fresh)
        assert await versions(connection, upgraded) == list(range(1, latest() + 1))


async def test_rows_of_an_earlier_layout_stay_usable_and_old_approvals_fail_closed(
    connection: asyncpg.Connection, database_url: str
) -> None:
    """After the upgrade an old task still reads and updates; an approval from before digests
    matches no action, so it can never run."""
    async with fresh_schema(database_url) as schema:
        await connection.execute(BEFORE_CLAIMS_LAYOUT.format(s=schema))
        await _old_rows(connection, schema)
        stores = await PostgresStores.open(database_url, schema)
        try:
            stored = await stores.tasks.get(OLD_TASK.id, ALICE)
            assert stored is not None and stored.task == OLD_TASK
            await stores.tasks.save(
                task(20, state=pb.TASK_STATE_FAILED, task_id=OLD_TASK.id),
                event=None,
                prev=None,
                prev_version=stored.version,
                context=ALICE,
            )
            decided = await stores.confirmations.decide(
                "old-action", subject="alice", decision="approve"
            )
            consumed = await stores.confirmations.consume(
                "old-action", owner="k1", digest=PROPOSAL.digest
            )
            assert (decided, consumed) == ("approved", "mismatch")
            claim = await stores.claims.claim("k1", "m1", task_id="t1", fingerprint="f")
            assert claim.mine
        finally:
            await stores.close()


async def test_replicas_starting_together_migrate_once(database_url: str) -> None:
    """Four starters racing on an earlier layout: one applies each migration, all succeed."""
    async with fresh_schema(database_url) as schema:
        setup = await asyncpg.connect(database_url)
        try:
            await setup.execute(BEFORE_CLAIMS_LAYOUT.format(s=schema))
            starters = [await asyncpg.connect(database_url) for _ in range(4)]
            try:
                applied = await asyncio.gather(*(migrate(c, schema) for c in starters))
            finally:
                for starter in starters:
                    await starter.close()
            assert sorted(applied, key=len) == [[], [], [], list(range(1, latest() + 1))]
            assert await versions(setup, schema) == list(range(1, latest() + 1))
        finally:
            await setup.close()


async def test_a_failing_migration_changes_nothing(
    connection: asyncpg.Connection, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migration that fails rolls back with the whole run: no table, no version recorded."""
    broken = Migration(latest() + 1, "broken", "CREATE TABLE {s}.half (x int); SELECT 1/0;")
    async with fresh_schema(database_url) as schema:
        await migrate(connection, schema)
        monkeypatch.setattr(migrations, "MIGRATIONS", (*migrations.MIGRATIONS, broken))
        with pytest.raises(asyncpg.DivisionByZeroError):
            await migrate(connection, schema)
        assert await versions(connection, schema) == list(range(1, latest()))
        assert await connection.fetchval("SELECT to_regclass($1)", f"{schema}.half") is None


async def test_a_schema_newer_than_the_code_is_used_and_logged(
    connection: asyncpg.Connection, database_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A replica of the previous release starting on a migrated schema (a rolling update, a
    rollback) changes nothing and says so: migrations are expand-only."""
    async with fresh_schema(database_url) as schema:
        await migrate(connection, schema)
        await connection.execute(
            f"INSERT INTO {schema}.schema_version (version, name) VALUES ($1, 'next')",
            latest() + 1,
        )
        caplog.set_level(logging.INFO, logger="adapter.migrations")
        assert await migrate(connection, schema) == []
    assert [record.getMessage() for record in caplog.records] == ["schema_newer_than_code"]


async def _old_rows(connection: asyncpg.Connection, schema: str) -> None:
    """A task and a pending approval as an earlier release wrote them."""
    columns = "id, owner, context_id, state, has_ts, ts_ns, task"
    if await connection.fetchval(
        """SELECT count(*) FROM information_schema.columns
           WHERE table_schema = $1 AND table_name = 'tasks' AND column_name = 'version'""",
        schema,
    ):
        columns += ", version"  # NOT NULL without a default in that layout
    values = ", ".join(f"${n}" for n in range(1, columns.count(",") + 2))
    await connection.execute(
        f"INSERT INTO {schema}.tasks ({columns}) VALUES ({values})",
        *(OLD_TASK.id, owner_of(ALICE), OLD_TASK.context_id, OLD_TASK.status.state, True),
        OLD_TASK.status.timestamp.ToNanoseconds(),
        OLD_TASK.SerializeToString(),
        *([1] if columns.endswith("version") else []),
    )
    await connection.execute(
        f"""INSERT INTO {schema}.approvals (action_id, owner, subject, session_id, task_id, tool,
                args, level, status, created_at, expires_at)
            VALUES ('old-action', 'k1', 'alice', 's', 't', 'restart_service', '{{}}', 'L3',
                    'pending', extract(epoch FROM now()), extract(epoch FROM now()) + 600)"""
    )
