"""PostgreSQL stores for tasks and approvals, shared by every replica (`DATABASE_URL`).

One asyncpg pool serves both stores. The schema (`ORRERY_A2A_DB_SCHEMA`, default `orrery_a2a`)
is brought to the code's version on start by the versioned migrations of `migrations.py` (under an
advisory lock, so replicas starting together do not race).

Every task query carries `owner = <principal key>`: a row of another owner is never read,
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
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import asyncpg
from a2a.server.cluster.event_stream import TaskEventStream, VersionedEvent
from a2a.server.cluster.task_store import (
    ConcurrentTaskModificationError,
    StoredTask,
    VersionedTaskStore,
)
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.types import a2a_pb2 as pb
from a2a.utils import proto_utils

from adapter.errors import ApprovalQuotaExceeded
from adapter.principal import owner_of
from adapter.stores.listing import ListQuery, page_response, sort_key
from adapter.stores.migrations import migrate
from adapter.stores.protocols import (
    RUNNING,
    TERMINAL,
    Claim,
    Confirmation,
    Decision,
    DecisionOutcome,
    GateOutcome,
    Proposal,
    new_action_id,
)
from runtime import logs

logger = logging.getLogger("adapter.postgres")

# What "PostgreSQL cannot be reached" looks like (`adapter.outage`): no connection, a connection
# cut (a restart, a failover, `pg_terminate_backend`), a server shutting down or still starting,
# out of connection slots, or a statement past `command_timeout`.
OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    OSError,
    TimeoutError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
)

_KEEP_SETTLED_SECONDS = 3600.0  # approvals are kept this long after they expire
_PROPOSE_LOCK = 0x0A2A_A990  # pg_advisory_xact_lock(this, hashtext(owner)): one proposer per owner
_CONNECT_TIMEOUT = 5.0  # seconds


def _as_int(version: TaskVersion) -> int:
    value = version._value  # the SDK gives no accessor; we minted it as an int
    if not isinstance(value, int):
        raise TypeError("PostgreSQL task versions are integers")
    return value


class PostgresTaskStore(VersionedTaskStore):
    """Owner-scoped, versioned tasks in PostgreSQL (the SDK's cluster contract).

    Every write is a compare-and-swap on the row's `version`, so two replicas never silently
    overwrite each other: a stale writer gets `ConcurrentTaskModificationError`, reloads and
    decides (the SDK does that). A write to CANCELED overwrites any non-terminal task — that is how
    a cancel on one replica stops a turn running on another — and a terminal task is never
    written again. The event that produced a write is
    appended to `task_events` in the same transaction; `PostgresEventStream` tails it.
    """

    shared = True

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self._pool = pool
        self._t = f"{schema}.tasks"
        self._counts = f"{schema}.task_counts"
        self._events = f"{schema}.task_events"

    async def save(
        self,
        task: pb.Task,
        *,
        event: Event | None,
        prev: pb.Task | None,
        prev_version: TaskVersion,
        context: ServerCallContext,
    ) -> TaskVersion:
        del prev
        return await self._save(task, owner_of(context), prev_version, event)

    async def _save(
        self, task: pb.Task, owner: str, prev_version: TaskVersion, event: Event | None
    ) -> TaskVersion:
        async with self._pool.acquire() as connection, connection.transaction():
            version = await self._write(connection, task, owner, prev_version)
            if version is None:
                raise ConcurrentTaskModificationError(task.id)
            if event is not None:
                await connection.execute(
                    f"INSERT INTO {self._events} (task_id, version, event) VALUES ($1, $2, $3)",
                    task.id,
                    version,
                    proto_utils.to_stream_response(event).SerializeToString(),
                )
        return TaskVersion(version)

    async def _write(
        self, connection: Any, task: pb.Task, owner: str, prev_version: TaskVersion
    ) -> int | None:
        """The new version, or None when the compare-and-swap (or the first insert) lost."""
        has_ts, ts_ns, _ = sort_key(task)
        values = (
            task.id,
            owner,
            task.context_id,
            task.status.state,
            has_ts,
            ts_ns,
            task.SerializeToString(),
        )
        # A terminal task is final: no write changes it, whatever version it names. (The SDK's
        # consumer, after losing a race to a remote cancel, reloads and would otherwise apply the
        # turn's next event on top of CANCELED.)
        update = f"""UPDATE {self._t} SET context_id = $3, state = $4, has_ts = $5, ts_ns = $6,
                         task = $7, version = version + 1, updated_at = now()
                     WHERE id = $1 AND owner = $2 AND NOT (state = ANY($8::int[]))"""
        terminal = [int(state) for state in TERMINAL]
        if task.status.state == pb.TASK_STATE_CANCELED:
            # asyncpg is untyped: fetchval is Any; the column is the integer version
            return await connection.fetchval(  # type: ignore[no-any-return]
                update + " RETURNING version", *values, terminal
            )
        if prev_version.is_missing:
            # asyncpg is untyped: fetchval is Any; the column is the integer version
            return await connection.fetchval(  # type: ignore[no-any-return]
                f"""INSERT INTO {self._t} (id, owner, context_id, state, has_ts, ts_ns, task,
                        version) VALUES ($1, $2, $3, $4, $5, $6, $7, 1)
                    ON CONFLICT (id) DO NOTHING RETURNING version""",
                *values,
            )
        # asyncpg is untyped: fetchval is Any; the column is the integer version
        return await connection.fetchval(  # type: ignore[no-any-return]
            update + " AND version = $9 RETURNING version",
            *values,
            terminal,
            _as_int(prev_version),
        )

    async def get(self, task_id: str, context: ServerCallContext) -> StoredTask | None:
        row = await self._pool.fetchrow(
            f"SELECT task, version FROM {self._t} WHERE id = $1 AND owner = $2",
            task_id,
            owner_of(context),
        )
        if row is None:
            return None
        return StoredTask(pb.Task.FromString(row["task"]), TaskVersion(row["version"]))

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
        if query.context_id or query.updated_after_ns is not None:
            # An index range bounded by one conversation or by the tasks updated since.
            total = await self._pool.fetchval(
                f"SELECT count(*) FROM {self._t} WHERE {filters}",
                *args,
            )
        else:  # the owner's (or its state's) count, kept by the trigger of migration 2
            total = await self._pool.fetchval(
                f"SELECT coalesce(sum(n), 0)::bigint FROM {self._counts} WHERE {filters}",
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
                LIMIT ${len(page_args)}""",
            *page_args,
        )
        page = [pb.Task.FromString(row["task"]) for row in rows[: query.page_size]]
        return page_response(query, page, len(rows) > query.page_size, total)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self._pool.execute(
            f"DELETE FROM {self._t} WHERE id = $1 AND owner = $2",
            task_id,
            owner_of(context),
        )

    async def admit(self, owner: str) -> None:
        """Nothing to do: PostgreSQL keeps every task until the idle sweep."""
        del owner

    async def count(self) -> int:
        """From `task_counts` (one row per owner and state), never a scan of the tasks."""
        return int(
            await self._pool.fetchval(f"SELECT coalesce(sum(n), 0)::bigint FROM {self._counts}")
        )

    async def end_stale(
        self, older_than: float, ended: Callable[[pb.Task], pb.TaskStatus], *, limit: int
    ) -> int:
        # `updated_at` is the database's clock, the same for every replica; `tasks_running`
        # (a partial index on the few RUNNING rows) keeps this off a full scan.
        rows = await self._pool.fetch(
            f"""SELECT owner, version, task FROM {self._t}
                WHERE state = ANY($1::int[])
                  AND updated_at < now() - make_interval(secs => $2)
                ORDER BY updated_at LIMIT $3""",
            [int(state) for state in RUNNING],
            older_than,
            limit,
        )
        count = 0
        for row in rows:
            task = pb.Task.FromString(row["task"])
            task.status.CopyFrom(ended(task))
            event = pb.TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
            try:
                await self._save(task, row["owner"], TaskVersion(row["version"]), event)
            except ConcurrentTaskModificationError:
                continue  # written meanwhile: not stale
            count += 1
        return count

    async def ping(self) -> None:
        await self._pool.fetchval("SELECT 1")


class PostgresEventStream(TaskEventStream):
    """Task events across replicas: tails `task_events` (written by `PostgresTaskStore.save`).

    Every `SubscribeToTask` with shared stores reads it (`handler.py`): the stored snapshot, then
    these events until the task is terminal, whichever replica runs the task's turns. Polls every
    `POLL_SECONDS`; callers are owner-checked before.
    """

    POLL_SECONDS = 0.2

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self._pool = pool
        self._events = f"{schema}.task_events"

    async def publish(self, task_id: str, event: VersionedEvent) -> None:
        """Nothing to do: the store appended the event in the transaction that applied it."""
        del task_id, event

    async def subscribe(
        self, task_id: str, *, after: TaskVersion
    ) -> AsyncGenerator[VersionedEvent, None]:
        cursor = 0
        if not after.is_missing:
            cursor = await self._pool.fetchval(
                f"SELECT coalesce(max(seq), 0) FROM {self._events} "
                "WHERE task_id = $1 AND version <= $2",
                task_id,
                _as_int(after),
            )
        while True:
            rows = await self._pool.fetch(
                f"SELECT seq, version, event FROM {self._events} "
                "WHERE task_id = $1 AND seq > $2 ORDER BY seq",
                task_id,
                cursor,
            )
            for row in rows:
                cursor = row["seq"]
                version = TaskVersion(row["version"])
                if version.is_after(after):
                    yield VersionedEvent(
                        _event(pb.StreamResponse.FromString(row["event"])), version
                    )
            if not rows:
                await asyncio.sleep(self.POLL_SECONDS)

    async def destroy(self, task_id: str) -> None:
        """Nothing to do: the sweep deletes old events."""
        del task_id


def _event(response: pb.StreamResponse) -> Event:
    kind = response.WhichOneof("payload")
    if kind is None:
        raise ValueError("stored event has no payload")
    # protobuf's oneof accessor by name is untyped; `kind` names one of the event messages
    return getattr(response, kind)  # type: ignore[no-any-return]


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
        digest=row["digest"],
    )


class PostgresConfirmationStore:
    """Confirmations shared by every replica; decisions and consumption are atomic."""

    shared = True

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        *,
        clock: Callable[[], float] = time.time,
        max_pending_per_owner: int = 100,
    ) -> None:
        self._pool = pool
        self._a = f"{schema}.approvals"
        self._clock = clock
        self._per_owner = max_pending_per_owner

    async def propose(self, proposal: Proposal) -> Confirmation:
        now = self._clock()
        async with self._pool.acquire() as connection, connection.transaction():
            # One proposer per owner at a time, across replicas, so the quota holds exactly.
            await connection.execute(
                "SELECT pg_advisory_xact_lock($1, hashtext($2))", _PROPOSE_LOCK, proposal.owner
            )
            live = await connection.fetchval(
                f"""SELECT count(*) FROM {self._a} WHERE owner = $1
                    AND status IN ('pending', 'approved') AND expires_at > $2""",
                proposal.owner,
                now,
            )
            if live >= self._per_owner:
                raise ApprovalQuotaExceeded(limit=self._per_owner)
            row = await connection.fetchrow(
                f"""INSERT INTO {self._a} (action_id, owner, subject, session_id, task_id, tool,
                        args, level, status, created_at, expires_at, digest)
                    VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8, 'pending', $9, $10, $11)
                    RETURNING *""",
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
                proposal.digest,
            )
        return _confirmation(row)

    async def _expire(self, condition: str, *args: Any) -> None:
        await self._pool.execute(
            f"""UPDATE {self._a} SET status = 'expired'
                WHERE {condition} AND status IN ('pending', 'approved')
                  AND expires_at <= ${len(args) + 1}""",
            *args,
            self._clock(),
        )

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        await self._expire(
            "action_id = $1 AND subject = $2 AND status = 'pending'", action_id, subject
        )
        row = await self._pool.fetchrow(
            f"SELECT * FROM {self._a} WHERE action_id = $1 AND subject = $2",
            action_id,
            subject,
        )
        return None if row is None else _confirmation(row)

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        new_status = "approved" if decision == "approve" else "denied"
        status = await self._pool.fetchval(
            f"""UPDATE {self._a} SET status = $3, decided_at = $4
                WHERE action_id = $1 AND subject = $2 AND status = 'pending' AND expires_at > $4
                RETURNING status""",
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
        return entry.status if entry.status in ("expired", "withdrawn") else "already_decided"

    async def consume(self, action_id: str, *, owner: str, digest: str) -> GateOutcome:
        await self._expire("action_id = $1 AND owner = $2", action_id, owner)
        consumed = await self._pool.fetchval(
            f"""UPDATE {self._a} SET status = 'consumed'
                WHERE action_id = $1 AND owner = $2 AND status = 'approved' AND expires_at > $3
                  AND digest = $4
                RETURNING status""",
            action_id,
            owner,
            self._clock(),
            digest,
        )
        if consumed is not None:
            return "approved"
        row = await self._pool.fetchrow(
            f"SELECT status, digest FROM {self._a} WHERE action_id = $1 AND owner = $2",
            action_id,
            owner,
        )
        if row is None:
            return "not_found"
        if row["status"] == "approved" and row["digest"] != digest:
            return "mismatch"
        # asyncpg rows are untyped; the column's CHECK admits only the status literals
        return row["status"]  # type: ignore[no-any-return]

    async def withdraw(self, action_id: str, *, owner: str) -> None:
        await self._pool.execute(
            f"""UPDATE {self._a} SET status = 'withdrawn', decided_at = $3
                WHERE action_id = $1 AND owner = $2 AND status IN ('pending', 'approved')""",
            action_id,
            owner,
            self._clock(),
        )

    async def pending(self) -> int:
        return int(
            await self._pool.fetchval(
                f"SELECT count(*) FROM {self._a} WHERE status = 'pending' AND expires_at > $1",
                self._clock(),
            )
        )

    async def ping(self) -> None:
        await self._pool.fetchval("SELECT 1")


class PostgresMessageClaims:
    """Message claims shared by every replica: the claim is one `INSERT … ON CONFLICT DO NOTHING`,
    so of duplicates racing on any replicas exactly one makes it."""

    shared = True

    def __init__(self, pool: asyncpg.Pool, schema: str) -> None:
        self._pool = pool
        self._c = f"{schema}.message_claims"

    async def claim(self, owner: str, key: str, *, task_id: str, fingerprint: str) -> Claim:
        while True:
            made = await self._pool.fetchval(
                f"""INSERT INTO {self._c} (owner, key, task_id, fingerprint)
                    VALUES ($1, $2, $3, $4) ON CONFLICT DO NOTHING RETURNING true""",
                owner,
                key,
                task_id,
                fingerprint,
            )
            if made:
                return Claim(task_id, fingerprint, 0.0, mine=True)
            # Read in a statement of its own: the INSERT's snapshot may predate the row it lost to.
            existing = await self.get(owner, key)
            if existing is not None:
                return existing
            # Released or swept in between: try again.

    async def get(self, owner: str, key: str) -> Claim | None:
        row = await self._pool.fetchrow(
            f"""SELECT task_id, fingerprint,
                       extract(epoch FROM now() - created_at)::float8 AS age
                FROM {self._c} WHERE owner = $1 AND key = $2""",
            owner,
            key,
        )
        return None if row is None else Claim(row["task_id"], row["fingerprint"], row["age"])

    async def take_over(
        self, owner: str, key: str, *, stale: str, task_id: str, fingerprint: str, min_age: float
    ) -> bool:
        moved = await self._pool.fetchval(
            f"""UPDATE {self._c} SET task_id = $3, fingerprint = $4, created_at = now()
                WHERE owner = $1 AND key = $2 AND task_id = $5
                  AND created_at <= now() - make_interval(secs => $6)
                RETURNING true""",
            owner,
            key,
            task_id,
            fingerprint,
            stale,
            min_age,
        )
        return bool(moved)

    async def release(self, owner: str, key: str, *, task_id: str) -> None:
        await self._pool.execute(
            f"DELETE FROM {self._c} WHERE owner = $1 AND key = $2 AND task_id = $3",
            owner,
            key,
            task_id,
        )


class PostgresStores:
    """The pool and both stores; `open()` migrates the schema, `close()` drains the pool.

    Like the memory store, PostgreSQL keeps tasks only while they are used: a sweep (every
    replica, every `min(idle_ttl / 4, 60 s)`; deletes are idempotent) drops tasks not written for
    `idle_ttl`, and approvals an hour after they expired.
    """

    def __init__(
        self,
        pool: asyncpg.Pool,
        schema: str,
        clock: Callable[[], float],
        idle_ttl: float,
        max_pending_per_owner: int,
    ) -> None:
        self.pool = pool
        self.tasks = PostgresTaskStore(pool, schema)
        self.events = PostgresEventStream(pool, schema)
        self.confirmations = PostgresConfirmationStore(
            pool, schema, clock=clock, max_pending_per_owner=max_pending_per_owner
        )
        self.claims = PostgresMessageClaims(pool, schema)
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
        max_pending_per_owner: int = 100,
    ) -> PostgresStores:
        # A connection attempt is bounded too (asyncpg's default is a minute), so a request in an
        # outage is answered 503 within seconds.
        pool = await asyncpg.create_pool(
            url, min_size=1, max_size=10, command_timeout=10, timeout=_CONNECT_TIMEOUT
        )
        try:
            async with pool.acquire() as connection:
                await migrate(connection, schema)
        except BaseException:
            await pool.close()
            raise
        return cls(pool, schema, clock, idle_ttl, max_pending_per_owner)

    async def sweep(self) -> None:
        """Drop idle tasks and long-settled approvals."""
        await self.pool.execute(
            f"DELETE FROM {self._schema}.tasks "
            "WHERE updated_at < now() - make_interval(secs => $1)",
            self._idle_ttl,
        )
        await self.pool.execute(
            f"DELETE FROM {self._schema}.task_events "
            "WHERE created_at < now() - make_interval(secs => $1)",
            self._idle_ttl,
        )
        await self.pool.execute(
            f"DELETE FROM {self._schema}.message_claims "
            "WHERE created_at < now() - make_interval(secs => $1)",
            self._idle_ttl,
        )
        await self.pool.execute(
            f"DELETE FROM {self._schema}.approvals WHERE expires_at < $1",
            self._clock() - _KEEP_SETTLED_SECONDS,
        )
        await self.pool.execute(f"DELETE FROM {self._schema}.task_counts WHERE n = 0")

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
