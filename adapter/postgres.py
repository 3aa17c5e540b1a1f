"""PostgreSQL stores for tasks and approvals, shared by every replica (`DATABASE_URL`).

One asyncpg pool serves both stores. The schema (`ORRERY_A2A_DB_SCHEMA`, default `orrery_a2a`)
and its tables are created on start under an advisory lock, so replicas starting together do not
race. Every task query carries `owner = <principal key>`: a row of another owner is never read,
counted, positioned against or overwritten (an upsert whose id belongs to another owner changes
nothing). Tasks are stored as serialized protobuf next to the columns that listing filters and
sorts on. Approval decisions and the gate are single conditional `UPDATE … RETURNING` statements,
so a decision or a consumption happens once even with replicas racing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import asyncpg
from a2a.server.context import ServerCallContext
from a2a.server.tasks import TaskStore
from a2a.types import a2a_pb2 as pb

from adapter.approvals import new_action_id
from adapter.gateway import Confirmation, Decision, DecisionOutcome, GateOutcome, Proposal
from adapter.principal import owner_of
from adapter.task_store import ListQuery, page_response, sort_key
from authz import logs

logger = logging.getLogger("adapter.postgres")

_SCHEMA_LOCK = 0x0A2A_5C4E  # pg_advisory_xact_lock key for schema creation
_KEEP_SETTLED_SECONDS = 3600.0  # approvals are kept this long after they expire

_DDL = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.tasks (
    id text PRIMARY KEY,
    owner text NOT NULL,
    context_id text NOT NULL,
    state integer NOT NULL,
    has_ts boolean NOT NULL,
    ts_ns bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    task bytea NOT NULL
);
CREATE INDEX IF NOT EXISTS tasks_owner_order
    ON {s}.tasks (owner, has_ts DESC, ts_ns DESC, (id COLLATE "C") DESC);
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
"""


class PostgresTaskStore(TaskStore):
    """Owner-scoped tasks in PostgreSQL."""

    shared = True

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self._pool = pool
        self._t = f"{schema}.tasks"

    async def save(self, task: pb.Task, context: ServerCallContext) -> None:
        has_ts, ts_ns, _ = sort_key(task)
        await self._pool.execute(
            f"""INSERT INTO {self._t} (id, owner, context_id, state, has_ts, ts_ns, task)
                VALUES ($1, $2, $3, $4, $5, $6, $7)
                ON CONFLICT (id) DO UPDATE SET context_id = EXCLUDED.context_id,
                    state = EXCLUDED.state, has_ts = EXCLUDED.has_ts, ts_ns = EXCLUDED.ts_ns,
                    task = EXCLUDED.task, updated_at = now()
                WHERE {self._t}.owner = EXCLUDED.owner""",  # noqa: S608 - schema is validated
            task.id,
            owner_of(context),
            task.context_id,
            task.status.state,
            has_ts,
            ts_ns,
            task.SerializeToString(),
        )

    async def get(self, task_id: str, context: ServerCallContext) -> pb.Task | None:
        blob = await self._pool.fetchval(
            f"SELECT task FROM {self._t} WHERE id = $1 AND owner = $2",  # noqa: S608
            task_id,
            owner_of(context),
        )
        return None if blob is None else pb.Task.FromString(blob)

    async def list(
        self, params: pb.ListTasksRequest, context: ServerCallContext
    ) -> pb.ListTasksResponse:
        query = ListQuery.of(params)
        args: list[Any] = [owner_of(context)]
        where = ["owner = $1"]
        if query.context_id:
            args.append(query.context_id)
            where.append(f"context_id = ${len(args)}")
        if query.state:
            args.append(query.state)
            where.append(f"state = ${len(args)}")
        if query.updated_after_ns is not None:
            args.append(query.updated_after_ns)
            where.append(f"has_ts AND ts_ns >= ${len(args)}")
        filters = " AND ".join(where)
        total = await self._pool.fetchval(
            f"SELECT count(*) FROM {self._t} WHERE {filters}",  # noqa: S608
            *args,
        )
        page_args = list(args)
        page_where = filters
        if query.after is not None:
            page_args.extend(query.after)
            n = len(page_args)
            page_where += f' AND (has_ts, ts_ns, id COLLATE "C") < (${n - 2}, ${n - 1}, ${n})'
        page_args.append(query.page_size + 1)
        rows = await self._pool.fetch(
            f"""SELECT task FROM {self._t} WHERE {page_where}
                ORDER BY has_ts DESC, ts_ns DESC, id COLLATE "C" DESC
                LIMIT ${len(page_args)}""",  # noqa: S608
            *page_args,
        )
        page = [pb.Task.FromString(row["task"]) for row in rows[: query.page_size]]
        return page_response(query, page, len(rows) > query.page_size, total)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._pool.execute(
            f"DELETE FROM {self._t} WHERE id = $1 AND owner = $2",  # noqa: S608
            task_id,
            owner_of(context),
        )

    async def count(self) -> int:
        return int(await self._pool.fetchval(f"SELECT count(*) FROM {self._t}"))  # noqa: S608

    async def ping(self) -> None:
        await self._pool.fetchval("SELECT 1")


def _confirmation(row: Mapping[str, Any]) -> Confirmation:
    return Confirmation(
        action_id=row["action_id"],
        owner=row["owner"],
        subject=row["subject"],
        session_id=row["session_id"],
        task_id=row["task_id"],
        tool=row["tool"],
        args=json.loads(row["args"]),
        level=row["level"],
        status=row["status"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
    )


class PostgresConfirmationStore:
    """Confirmations shared by every replica; decisions and consumption are atomic."""

    shared = True

    def __init__(
        self, pool: asyncpg.Pool, schema: str, *, clock: Callable[[], float] = time.time
    ) -> None:
        self._pool = pool
        self._a = f"{schema}.approvals"
        self._clock = clock

    async def propose(self, proposal: Proposal) -> Confirmation:
        now = self._clock()
        row = await self._pool.fetchrow(
            f"""INSERT INTO {self._a} (action_id, owner, subject, session_id, task_id, tool,
                    args, level, status, created_at, expires_at)
                VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, 'pending', $9, $10)
                RETURNING *""",  # noqa: S608
            new_action_id(),
            proposal.owner,
            proposal.subject,
            proposal.session_id,
            proposal.task_id,
            proposal.tool,
            json.dumps(dict(proposal.args)),
            proposal.level,
            now,
            now + proposal.ttl,
        )
        return _confirmation(row)

    async def _expire(self, condition: str, *args: Any) -> None:
        await self._pool.execute(
            f"""UPDATE {self._a} SET status = 'expired'
                WHERE {condition} AND status IN ('pending', 'approved')
                  AND expires_at <= ${len(args) + 1}""",  # noqa: S608
            *args,
            self._clock(),
        )

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        await self._expire(
            "action_id = $1 AND subject = $2 AND status = 'pending'", action_id, subject
        )
        row = await self._pool.fetchrow(
            f"SELECT * FROM {self._a} WHERE action_id = $1 AND subject = $2",  # noqa: S608
            action_id,
            subject,
        )
        return None if row is None else _confirmation(row)

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        new_status = "approved" if decision == "approve" else "denied"
        status = await self._pool.fetchval(
            f"""UPDATE {self._a} SET status = $3, decided_at = $4
                WHERE action_id = $1 AND subject = $2 AND status = 'pending' AND expires_at > $4
                RETURNING status""",  # noqa: S608
            action_id,
            subject,
            new_status,
            self._clock(),
        )
        if status is not None:
            return "approved" if status == "approved" else "denied"
        entry = await self.get(action_id, subject=subject)
        if entry is None:
            return "not_found"
        return "expired" if entry.status == "expired" else "already_decided"

    async def consume(self, action_id: str, *, owner: str) -> GateOutcome:
        await self._expire("action_id = $1 AND owner = $2", action_id, owner)
        consumed = await self._pool.fetchval(
            f"""UPDATE {self._a} SET status = 'consumed'
                WHERE action_id = $1 AND owner = $2 AND status = 'approved' AND expires_at > $3
                RETURNING status""",  # noqa: S608
            action_id,
            owner,
            self._clock(),
        )
        if consumed is not None:
            return "approved"
        status = await self._pool.fetchval(
            f"SELECT status FROM {self._a} WHERE action_id = $1 AND owner = $2",  # noqa: S608
            action_id,
            owner,
        )
        return "not_found" if status is None else status

    async def ping(self) -> None:
        await self._pool.fetchval("SELECT 1")


class PostgresStores:
    """The pool and both stores; `open()` creates the schema, `close()` drains the pool.

    Like the memory store, PostgreSQL keeps tasks only while they are used: a sweep (every
    replica, every `min(idle_ttl / 4, 60 s)`; deletes are idempotent) drops tasks not written for
    `idle_ttl`, and approvals an hour after they expired.
    """

    def __init__(
        self, pool: asyncpg.Pool, schema: str, clock: Callable[[], float], idle_ttl: float
    ) -> None:
        self.pool = pool
        self.tasks = PostgresTaskStore(pool, schema)
        self.confirmations = PostgresConfirmationStore(pool, schema, clock=clock)
        self._schema = schema
        self._clock = clock
        self._idle_ttl = idle_ttl
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="postgres-sweep")

    @classmethod
    async def open(
        cls,
        url: str,
        schema: str,
        *,
        clock: Callable[[], float] = time.time,
        idle_ttl: float = 3600.0,
    ) -> PostgresStores:
        pool = await asyncpg.create_pool(url, min_size=1, max_size=10, command_timeout=10)
        try:
            async with pool.acquire() as connection, connection.transaction():
                await connection.execute("SELECT pg_advisory_xact_lock($1)", _SCHEMA_LOCK)
                await connection.execute(_DDL.format(s=schema))
        except BaseException:
            await pool.close()
            raise
        return cls(pool, schema, clock, idle_ttl)

    async def sweep(self) -> None:
        """Drop idle tasks and long-settled approvals."""
        await self.pool.execute(
            f"DELETE FROM {self._schema}.tasks "  # noqa: S608 - schema is validated
            "WHERE updated_at < now() - make_interval(secs => $1)",
            self._idle_ttl,
        )
        await self.pool.execute(
            f"DELETE FROM {self._schema}.approvals WHERE expires_at < $1",  # noqa: S608
            self._clock() - _KEEP_SETTLED_SECONDS,
        )

    async def _sweep_forever(self) -> None:
        while True:
            await asyncio.sleep(min(self._idle_ttl / 4, 60.0))
            try:
                await self.sweep()
            except (asyncpg.PostgresError, OSError, TimeoutError) as exc:  # next time
                logs.event(logger, "sweep_failed", logging.WARNING, error_type=type(exc).__name__)

    async def close(self) -> None:
        self._sweeper.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._sweeper
        await self.pool.close()
