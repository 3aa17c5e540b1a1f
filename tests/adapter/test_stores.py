"""Task and confirmation stores: the same owner-scoping contract in memory and in PostgreSQL."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import pytest
from a2a.server.cluster.task_store import ConcurrentTaskModificationError
from a2a.server.cluster.version import TaskVersion
from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import InvalidParamsError
from google.protobuf import timestamp_pb2

from adapter.gateway import ConfirmationStore, action_digest
from adapter.principal import PrincipalUser
from adapter.stores.memory import BoundedTaskStore, MemoryConfirmationStore
from adapter.stores.postgres import PostgresStores, PostgresTaskStore
from tests.adapter.conftest import PROPOSAL, delegated, fresh_schema

ALICE = ServerCallContext(user=PrincipalUser(delegated("bot", "alice")))
BOB = ServerCallContext(user=PrincipalUser(delegated("bot", "bob")))


def task(
    seconds: int,
    context_id: str = "ctx",
    state: pb.TaskState = pb.TASK_STATE_COMPLETED,
    task_id: str | None = None,
) -> pb.Task:
    stamp = timestamp_pb2.Timestamp(seconds=seconds)
    return pb.Task(
        id=task_id or uuid.uuid4().hex,
        context_id=context_id,
        status=pb.TaskStatus(state=state, timestamp=stamp),
    )


class Unversioned:
    """The plain `TaskStore` view of a versioned store, so one contract runs on both stores."""

    def __init__(self, store: PostgresTaskStore) -> None:
        self.store = store

    async def save(self, saved: pb.Task, context: ServerCallContext) -> None:
        current = await self.store.get(saved.id, context)
        version = current.version if current else TaskVersion.MISSING
        # Another owner's id is refused (raises); the contract tests observe the outcome.
        with contextlib.suppress(ConcurrentTaskModificationError):
            await self.store.save(
                saved, event=None, prev=None, prev_version=version, context=context
            )

    async def get(self, task_id: str, context: ServerCallContext) -> pb.Task | None:
        stored = await self.store.get(task_id, context)
        return stored.task if stored else None

    async def list(self, params: pb.ListTasksRequest, context: ServerCallContext) -> Any:
        return await self.store.list(params, context)

    async def delete(self, task_id: str, context: ServerCallContext) -> None:
        await self.store.delete(task_id, context)


async def status_of(confirmations: ConfirmationStore, action_id: str) -> str:
    """The status alice (the delegating human) sees for `action_id`, which must exist."""
    entry = await confirmations.get(action_id, subject="alice")
    assert entry is not None
    return entry.status


@pytest.fixture(params=["memory", "postgres"])
def backend(request: pytest.FixtureRequest) -> str | None:
    """None for the memory store, the database URL for PostgreSQL."""
    if request.param == "memory":
        return None
    return str(request.getfixturevalue("database_url"))


@contextlib.asynccontextmanager
async def postgres_stores(database_url: str) -> AsyncIterator[PostgresStores]:
    """Both PostgreSQL stores on a fresh schema, closed afterwards."""
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema)
        try:
            yield stores
        finally:
            await stores.close()


@pytest.fixture
async def store(backend: str | None) -> AsyncIterator[Any]:
    if backend is None:
        yield BoundedTaskStore()
        return
    async with postgres_stores(backend) as stores:
        yield Unversioned(stores.tasks)


async def test_get_is_owner_scoped(store: Any) -> None:
    """Another owner's task reads as missing."""
    saved = task(10)
    await store.save(saved, ALICE)
    assert (await store.get(saved.id, ALICE)) == saved
    assert await store.get(saved.id, BOB) is None


async def test_returned_tasks_are_copies(store: Any) -> None:
    """Mutating a returned task does not change the stored one."""
    saved = task(10)
    await store.save(saved, ALICE)
    got = await store.get(saved.id, ALICE)
    got.status.state = pb.TASK_STATE_FAILED
    assert (await store.get(saved.id, ALICE)).status.state == pb.TASK_STATE_COMPLETED


async def test_save_cannot_overwrite_another_owners_task(store: Any) -> None:
    """A save under another owner with the same id never changes the first owner's task."""
    saved = task(10)
    await store.save(saved, ALICE)
    forged = task(20, task_id=saved.id, state=pb.TASK_STATE_FAILED)
    await store.save(forged, BOB)
    assert (await store.get(saved.id, ALICE)) == saved


async def test_delete_is_owner_scoped(store: Any) -> None:
    """Deleting someone else's task does nothing."""
    saved = task(10)
    await store.save(saved, ALICE)
    await store.delete(saved.id, BOB)
    assert await store.get(saved.id, ALICE) is not None
    await store.delete(saved.id, ALICE)
    assert await store.get(saved.id, ALICE) is None


async def test_list_pages_newest_first_with_owner_totals(store: Any) -> None:
    """Pages run newest first; totals and tokens only know the caller's tasks."""
    mine = [task(seconds) for seconds in (10, 30, 20, 40, 50)]
    for saved in mine:
        await store.save(saved, ALICE)
    await store.save(task(35), BOB)
    seen: list[str] = []
    token = ""
    while True:
        page = await store.list(pb.ListTasksRequest(page_size=2, page_token=token), ALICE)
        assert page.total_size == 5 and page.page_size == 2
        seen += [t.id for t in page.tasks]
        token = page.next_page_token
        if not token:
            break
    expected = [t.id for t in sorted(mine, key=lambda t: t.status.timestamp.seconds, reverse=True)]
    assert seen == expected


async def test_equal_timestamps_are_ordered_by_id(store: Any) -> None:
    """Ties on the timestamp are broken by id (descending), the same in both stores."""
    tied = [task(10, task_id=f"task-{c}") for c in "bAa_Z"]
    for saved in tied:
        await store.save(saved, ALICE)
    page = await store.list(pb.ListTasksRequest(), ALICE)
    assert [t.id for t in page.tasks] == sorted((t.id for t in tied), reverse=True)


async def test_list_filters(store: Any) -> None:
    """contextId, status and statusTimestampAfter filter before counting."""
    await store.save(task(10, "c1"), ALICE)
    await store.save(task(20, "c2", pb.TASK_STATE_INPUT_REQUIRED), ALICE)
    await store.save(task(30, "c1", pb.TASK_STATE_INPUT_REQUIRED), ALICE)
    by_context = await store.list(pb.ListTasksRequest(context_id="c1"), ALICE)
    by_state = await store.list(pb.ListTasksRequest(status=pb.TASK_STATE_INPUT_REQUIRED), ALICE)
    after = pb.ListTasksRequest(status_timestamp_after=timestamp_pb2.Timestamp(seconds=20))
    recent = await store.list(after, ALICE)
    assert (by_context.total_size, by_state.total_size, recent.total_size) == (2, 2, 2)


async def test_bad_page_token_is_invalid_params(store: Any) -> None:
    """A token that does not decode is -32602."""
    with pytest.raises(InvalidParamsError):
        await store.list(pb.ListTasksRequest(page_token="!!"), ALICE)


async def test_memory_store_drops_idle_tasks() -> None:
    """A task not touched for the idle TTL is gone."""
    now = [0.0]
    store = BoundedTaskStore(idle_ttl=3600, clock=lambda: now[0])
    old, fresh = task(1), task(2)
    await store.save(old, ALICE)
    now[0] = 1800
    await store.save(fresh, ALICE)
    now[0] = 3601
    assert await store.get(old.id, ALICE) is None
    assert await store.get(fresh.id, ALICE) is not None
    assert (await store.list(pb.ListTasksRequest(), ALICE)).total_size == 1


async def test_memory_store_keeps_at_most_max_tasks() -> None:
    """Over the cap the least recently used task goes first."""
    store = BoundedTaskStore(max_tasks=3)
    tasks = [task(i) for i in range(3)]
    for saved in tasks:
        await store.save(saved, ALICE)
    await store.get(tasks[0].id, ALICE)  # touch: now tasks[1] is the oldest
    await store.save(task(9), BOB)
    assert await store.count() == 3
    assert await store.get(tasks[1].id, ALICE) is None
    assert await store.get(tasks[0].id, ALICE) is not None


async def test_postgres_confirmations_follow_the_rules(database_url: str) -> None:
    """Decide once, only by the subject; consume once, only by the owner; expiry wins."""
    now = [1000.0]
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema, clock=lambda: now[0])
        try:
            await _confirmation_rules(stores, now)
        finally:
            await stores.close()


async def _confirmation_rules(stores: PostgresStores, now: list[float]) -> None:
    store = stores.confirmations
    entry = await store.propose(PROPOSAL)
    assert await store.get(entry.action_id, subject="bob") is None
    assert await store.decide(entry.action_id, subject="bob", decision="approve") == "not_found"
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "pending"
    assert await store.decide(entry.action_id, subject="alice", decision="approve") == "approved"
    assert await store.decide(entry.action_id, subject="alice", decision="deny") == (
        "already_decided"
    )
    assert await store.consume(entry.action_id, owner="k2", digest=PROPOSAL.digest) == "not_found"
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "approved"
    assert await store.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest) == "consumed"
    late = await store.propose(dataclasses.replace(PROPOSAL, task_id="t2"))
    now[0] += 61
    assert await store.decide(late.action_id, subject="alice", decision="approve") == "expired"
    assert await status_of(store, late.action_id) == "expired"


@pytest.fixture
async def confirmations(backend: str | None) -> AsyncIterator[ConfirmationStore]:
    if backend is None:
        yield MemoryConfirmationStore()
        return
    async with postgres_stores(backend) as stores:
        yield stores.confirmations


async def test_withdrawn_action_can_be_neither_decided_nor_run(
    confirmations: ConfirmationStore,
) -> None:
    """The owner withdraws a pending action: deciding and consuming both answer `withdrawn`."""
    entry = await confirmations.propose(PROPOSAL)
    await confirmations.withdraw(entry.action_id, owner="k1")
    assert await confirmations.decide(entry.action_id, subject="alice", decision="approve") == (
        "withdrawn"
    )
    assert (
        await confirmations.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest)
        == "withdrawn"
    )
    assert await status_of(confirmations, entry.action_id) == "withdrawn"


async def test_an_approved_action_withdrawn_never_runs(confirmations: ConfirmationStore) -> None:
    """Approved but not yet consumed: withdrawing still wins over the gate."""
    entry = await confirmations.propose(PROPOSAL)
    await confirmations.decide(entry.action_id, subject="alice", decision="approve")
    await confirmations.withdraw(entry.action_id, owner="k1")
    assert (
        await confirmations.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest)
        == "withdrawn"
    )


async def test_only_the_owner_can_withdraw(confirmations: ConfirmationStore) -> None:
    """Another owner's withdraw changes nothing; the action stays decidable."""
    entry = await confirmations.propose(PROPOSAL)
    await confirmations.withdraw(entry.action_id, owner="k2")
    assert await confirmations.decide(entry.action_id, subject="alice", decision="approve") == (
        "approved"
    )


async def test_a_settled_action_is_not_rewritten_by_withdraw(
    confirmations: ConfirmationStore,
) -> None:
    """Denied and consumed stay what they are: withdraw only stops what could still run."""
    denied = await confirmations.propose(PROPOSAL)
    await confirmations.decide(denied.action_id, subject="alice", decision="deny")
    consumed = await confirmations.propose(PROPOSAL)
    await confirmations.decide(consumed.action_id, subject="alice", decision="approve")
    await confirmations.consume(consumed.action_id, owner="k1", digest=PROPOSAL.digest)
    for entry, status in ((denied, "denied"), (consumed, "consumed")):
        await confirmations.withdraw(entry.action_id, owner="k1")
        assert await status_of(confirmations, entry.action_id) == status


async def test_pending_counts_only_undecided_unexpired_actions(
    confirmations: ConfirmationStore,
) -> None:
    """`pending()` (the approvals_pending gauge): decided and withdrawn actions leave it."""
    assert await confirmations.pending() == 0
    waiting = await confirmations.propose(PROPOSAL)
    decided = await confirmations.propose(PROPOSAL)
    withdrawn = await confirmations.propose(PROPOSAL)
    await confirmations.decide(decided.action_id, subject="alice", decision="deny")
    await confirmations.withdraw(withdrawn.action_id, owner="k1")
    assert await confirmations.pending() == 1
    await confirmations.decide(waiting.action_id, subject="alice", decision="approve")
    assert await confirmations.pending() == 0


async def test_pending_leaves_out_expired_actions() -> None:
    """An action past its TTL no longer counts, though nobody looked at it."""
    now = [1000.0]
    store = MemoryConfirmationStore(clock=lambda: now[0])
    await store.propose(PROPOSAL)
    assert await store.pending() == 1
    now[0] += PROPOSAL.ttl + 1
    assert await store.pending() == 0


async def test_postgres_sweep_drops_idle_tasks_and_settled_approvals(database_url: str) -> None:
    """Tasks not written for the idle TTL and approvals long expired are swept away."""
    now = [1000.0]
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(
            database_url, schema, clock=lambda: now[0], idle_ttl=3600
        )
        try:
            fresh, idle = task(10), task(20)
            tasks = Unversioned(stores.tasks)
            await tasks.save(idle, ALICE)
            await stores.pool.execute(
                # S608: the schema is the test's own fresh one; no value is interpolated
                f"UPDATE {schema}.tasks SET updated_at = now() - interval '2 hours'"
            )
            await tasks.save(fresh, ALICE)
            entry = await stores.confirmations.propose(PROPOSAL)
            await stores.sweep()
            assert await tasks.get(idle.id, ALICE) is None
            assert await tasks.get(fresh.id, ALICE) is not None
            assert await stores.confirmations.get(entry.action_id, subject="alice") is not None
            now[0] += 60 + 3600 + 1
            await stores.sweep()
            assert await stores.confirmations.get(entry.action_id, subject="alice") is None
        finally:
            await stores.close()


async def test_postgres_writes_compare_and_swap(database_url: str) -> None:
    """A stale writer loses; a cancel overwrites a running task but never a finished one."""
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema)
        try:
            tasks = stores.tasks
            running = task(10, state=pb.TASK_STATE_WORKING)
            first = await tasks.save(
                running, event=None, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
            )
            with pytest.raises(ConcurrentTaskModificationError):
                await tasks.save(
                    running, event=None, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
                )
            second = await tasks.save(
                running, event=None, prev=None, prev_version=first, context=ALICE
            )
            with pytest.raises(ConcurrentTaskModificationError):
                await tasks.save(running, event=None, prev=None, prev_version=first, context=ALICE)
            cancelled = task(20, state=pb.TASK_STATE_CANCELED, task_id=running.id)
            with pytest.raises(ConcurrentTaskModificationError):  # not Bob's to cancel
                await tasks.save(cancelled, event=None, prev=None, prev_version=first, context=BOB)
            third = await tasks.save(
                cancelled, event=None, prev=None, prev_version=first, context=ALICE
            )
            assert third.is_after(second)
            with pytest.raises(ConcurrentTaskModificationError):  # already terminal
                await tasks.save(
                    cancelled, event=None, prev=None, prev_version=third, context=ALICE
                )
            completed = task(30, state=pb.TASK_STATE_COMPLETED, task_id=running.id)
            with pytest.raises(ConcurrentTaskModificationError):  # a terminal task is final
                await tasks.save(
                    completed, event=None, prev=None, prev_version=third, context=ALICE
                )
        finally:
            await stores.close()


async def test_schema_creation_is_safe_when_replicas_start_together(database_url: str) -> None:
    """Two replicas opening the same fresh schema at once both succeed."""
    async with fresh_schema(database_url) as schema:
        opened = await asyncio.gather(
            PostgresStores.open(database_url, schema), PostgresStores.open(database_url, schema)
        )
        for stores in opened:
            await stores.close()


async def test_the_gate_lets_only_the_approved_action_run(confirmations: ConfirmationStore) -> None:
    """The approval records the digest of the exact action proposed: consuming it for another
    action (other args) is a `mismatch` that uses nothing up; the approved action consumes it,
    once."""
    entry = await confirmations.propose(PROPOSAL)
    assert entry.digest == PROPOSAL.digest
    await confirmations.decide(entry.action_id, subject="alice", decision="approve")
    other = action_digest("restart_service", {"service": "another"})
    assert await confirmations.consume(entry.action_id, owner="k1", digest=other) == "mismatch"
    assert await status_of(confirmations, entry.action_id) == "approved"
    approved = PROPOSAL.digest
    assert await confirmations.consume(entry.action_id, owner="k1", digest=approved) == "approved"
    assert await confirmations.consume(entry.action_id, owner="k1", digest=approved) == "consumed"


def test_the_action_digest_is_canonical() -> None:
    """Key order and JSON spelling do not change the digest; any argument or the tool does."""
    base = action_digest("restart_service", {"service": "checkout", "force": False})
    assert base == action_digest("restart_service", {"force": False, "service": "checkout"})
    assert base != action_digest("restart_service", {"service": "checkout", "force": True})
    assert base != action_digest("rollback_service", {"service": "checkout", "force": False})


@pytest.mark.postgres
async def test_a_schema_from_before_digests_and_claims_is_brought_up_to_date(
    database_url: str,
) -> None:
    """Opening on tables made before `approvals.digest` and `message_claims` existed adds both;
    an old approval's digest is empty, so it matches no action (fail closed)."""
    async with fresh_schema(database_url) as schema:
        connection = await asyncpg.connect(database_url)
        try:
            await connection.execute(OLD_DDL.format(s=schema))
            await connection.execute(
                f"""INSERT INTO {schema}.approvals VALUES ('a1', 'k1', 'alice', 's', 't',
                    'restart_service', '{{}}', 'L3', 'approved', 0, 1e12, NULL)"""
            )
        finally:
            await connection.close()
        stores = await PostgresStores.open(database_url, schema)
        try:
            claim = await stores.claims.claim("k1", "m1", task_id="t1", fingerprint="f")
            assert claim.mine
            outcome = await stores.confirmations.consume("a1", owner="k1", digest=PROPOSAL.digest)
            assert outcome == "mismatch"
        finally:
            await stores.close()


# The tables as the adapter created them before `approvals.digest`, `message_claims` and the
# `tasks_running` index existed.
OLD_DDL = """
CREATE SCHEMA {s};
CREATE TABLE {s}.tasks (
    id text PRIMARY KEY, owner text NOT NULL, context_id text NOT NULL, state integer NOT NULL,
    has_ts boolean NOT NULL, ts_ns bigint NOT NULL, version bigint NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(), task bytea NOT NULL
);
CREATE TABLE {s}.task_events (
    seq bigserial PRIMARY KEY, task_id text NOT NULL, version bigint NOT NULL,
    event bytea NOT NULL, created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE {s}.approvals (
    action_id text PRIMARY KEY, owner text NOT NULL, subject text NOT NULL,
    session_id text NOT NULL, task_id text NOT NULL, tool text NOT NULL, args jsonb NOT NULL,
    level text NOT NULL, status text NOT NULL, created_at double precision NOT NULL,
    expires_at double precision NOT NULL, decided_at double precision
);
"""
