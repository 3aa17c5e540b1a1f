"""PostgreSQL: every statement the stores send — per request, per scrape, per sweep — reads an
index range; none scans a whole table of tasks, events, claims or approvals (issue 12)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from typing import Any

import asyncpg
import pytest
from a2a.server.cluster.version import TaskVersion
from a2a.types import a2a_pb2 as pb
from google.protobuf import timestamp_pb2

from adapter.stores.postgres import PostgresStores
from tests.adapter.conftest import PROPOSAL, fresh_schema
from tests.adapter.test_stores import ALICE, BOB, task

LARGE_TABLES = {"tasks", "task_events", "message_claims", "approvals"}
DML = {"SELECT", "INSERT", "UPDATE", "DELETE", "WITH"}


@pytest.fixture
async def recorded(
    database_url: str, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[PostgresStores, list[Any]]]:
    """Stores on a fresh schema whose pool records every statement it sends (after start-up)."""
    statements: list[Any] = []
    create_pool = asyncpg.create_pool

    def recording_pool(*args: Any, **kwargs: Any) -> Any:
        async def init(connection: asyncpg.Connection) -> None:
            connection.add_query_logger(statements.append)

        return create_pool(*args, init=init, **kwargs)

    monkeypatch.setattr(asyncpg, "create_pool", recording_pool)
    async with fresh_schema(database_url) as schema:
        stores = await PostgresStores.open(database_url, schema)
        statements.clear()  # the migrations are not per request
        try:
            yield stores, statements
        finally:
            await stores.close()


async def use_every_store_statement(stores: PostgresStores) -> None:
    """Each task, event, approval and claim operation, each listing filter, the gauges and a
    sweep."""
    waiting = task(10, "c1", pb.TASK_STATE_WORKING)
    event = pb.TaskStatusUpdateEvent(task_id=waiting.id, context_id="c1", status=waiting.status)
    first = await stores.tasks.save(
        waiting, event=event, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
    )
    await stores.tasks.save(
        task(20, "c1", pb.TASK_STATE_CANCELED, task_id=waiting.id),
        event=None,
        prev=None,
        prev_version=first,
        context=ALICE,
    )
    for saved, owner in ((task(15, "c2"), ALICE), (task(30), BOB)):
        await stores.tasks.save(
            saved, event=None, prev=None, prev_version=TaskVersion.MISSING, context=owner
        )
    await stores.tasks.get(waiting.id, ALICE)
    since = timestamp_pb2.Timestamp(seconds=5)
    page = await stores.tasks.list(pb.ListTasksRequest(page_size=1), ALICE)
    for request in (
        pb.ListTasksRequest(page_size=1, page_token=page.next_page_token),
        pb.ListTasksRequest(status=pb.TASK_STATE_CANCELED),
        pb.ListTasksRequest(context_id="c1"),
        pb.ListTasksRequest(context_id="c1", status=pb.TASK_STATE_CANCELED),
        pb.ListTasksRequest(status_timestamp_after=since),
        pb.ListTasksRequest(status=pb.TASK_STATE_CANCELED, status_timestamp_after=since),
    ):
        await stores.tasks.list(request, ALICE)
    events = stores.events.subscribe(waiting.id, after=TaskVersion.MISSING)
    await anext(events)
    await events.aclose()
    await stores.tasks.count()
    await stores.tasks.delete(waiting.id, ALICE)
    entry = await stores.confirmations.propose(PROPOSAL)
    await stores.confirmations.get(entry.action_id, subject="alice")
    await stores.confirmations.decide(entry.action_id, subject="alice", decision="approve")
    await stores.confirmations.consume(entry.action_id, owner="k1", digest=PROPOSAL.digest)
    await stores.confirmations.withdraw(entry.action_id, owner="k1")
    await stores.confirmations.pending()
    await stores.claims.claim("k1", "m1", task_id="t1", fingerprint="f")
    await stores.claims.get("k1", "m1")
    await stores.claims.take_over("k1", "m1", stale="t1", task_id="t2", fingerprint="f", min_age=0)
    await stores.claims.release("k1", "m1", task_id="t2")
    await stores.tasks.end_stale(0.0, lambda stale: stale.status, limit=10)  # the recovery sweep
    await stores.sweep()


def scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from scans(child)


def unbounded_reads(plan: dict[str, Any]) -> list[str]:
    """Each read of a large table that is not an index range (a `Seq Scan`, or an index scan
    without an index condition, which walks the whole index)."""
    problems = []
    for node in scans(plan):
        if node.get("Relation Name") not in LARGE_TABLES or node["Node Type"] == "ModifyTable":
            continue  # the write itself: what it writes was found by the scans below it
        ranged = "Index Cond" in node or any(
            "Index Cond" in child for child in scans(node) if child is not node
        )
        if node["Node Type"] not in ("Index Scan", "Index Only Scan", "Bitmap Heap Scan"):
            problems.append(f"{node['Node Type']} on {node['Relation Name']}")
        elif not ranged:
            problems.append(f"{node['Node Type']} without a range on {node['Relation Name']}")
    return problems


async def test_no_store_statement_scans_a_whole_table(
    recorded: tuple[PostgresStores, list[Any]],
) -> None:
    """EXPLAIN of every statement sent (sequential scans priced out, so any that remains has no
    index to use) reads the large tables by index ranges only."""
    stores, statements = recorded
    await use_every_store_statement(stores)
    checked: dict[str, list[str]] = {}
    async with stores.pool.acquire() as connection, connection.transaction():
        await connection.execute("SET LOCAL enable_seqscan = off")
        for statement in list(statements):
            verb = statement.query.split(maxsplit=1)[0].upper()
            if verb not in DML or "pg_advisory" in statement.query:
                continue  # BEGIN, COMMIT, the pool's reset; advisory locks read no table
            explained = await connection.fetchval(
                "EXPLAIN (FORMAT JSON) " + statement.query, *statement.args
            )
            checked[statement.query] = unbounded_reads(json.loads(explained)[0]["Plan"])
    assert len(checked) > 25  # the exercise reached the statements
    assert {query: problems for query, problems in checked.items() if problems} == {}


async def test_the_tasks_stored_gauge_reads_no_task_row(
    recorded: tuple[PostgresStores, list[Any]],
) -> None:
    """The gauge sums the per-owner counts; it never touches the tasks table."""
    stores, statements = recorded
    await stores.tasks.count()
    (gauge,) = [s.query for s in statements if "pg_advisory" not in s.query]  # not the reset
    assert ".tasks " not in gauge and ".task_counts" in gauge


async def test_the_counts_follow_every_write(recorded: tuple[PostgresStores, list[Any]]) -> None:
    """Inserts, state changes, deletes and sweeps keep `task_counts` equal to a real count."""
    stores, _ = recorded
    await use_every_store_statement(stores)
    for idle in (task(40), task(50, state=pb.TASK_STATE_INPUT_REQUIRED)):
        await stores.tasks.save(
            idle, event=None, prev=None, prev_version=TaskVersion.MISSING, context=ALICE
        )
    schema = stores.tasks._t.split(".")[0]
    await stores.pool.execute(
        f"UPDATE {schema}.tasks SET updated_at = now() - interval '2 hours' WHERE ts_ns = $1",
        40 * 10**9,
    )
    await stores.sweep()
    counted = await stores.pool.fetch(
        f"SELECT owner, state, n FROM {schema}.task_counts ORDER BY 1, 2"
    )
    real = await stores.pool.fetch(
        f"SELECT owner, state, count(*) AS n FROM {schema}.tasks GROUP BY 1, 2 ORDER BY 1, 2"
    )
    assert [tuple(row) for row in counted] == [tuple(row) for row in real]
    assert await stores.tasks.count() == sum(row["n"] for row in real) == 3
