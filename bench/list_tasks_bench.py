"""`ListTasks` cost for one owner with many tasks, in memory and in PostgreSQL (issue 12).

One owner holds `--tasks` tasks (20 000 by default; ten per context, one in twenty waiting for
input, the rest completed) among 100 other owners' 20 each. Each case calls the store's `list`
(the code path `ListTasks` runs, minus JSON) `--calls` times and reports the median; the baseline,
measured in the same run on the same store, is `GetTask` of one of the owner's tasks, so the
ratio says how many keyed reads one listing costs. PostgreSQL also reports the `tasks_stored`
gauge (`count()`) and one idle sweep (`sweep()`, nothing to delete) — both were full table scans.

    .venv/bin/python bench/list_tasks_bench.py [--tasks 20000] [--calls 200]
        [--database-url postgresql://postgres@127.0.0.1:5432/test]

The same script measures an older tree: run it with that tree first on `PYTHONPATH` (e.g.
`git archive main | tar -x -C /tmp/main && PYTHONPATH=/tmp/main python bench/list_tasks_bench.py`):
it uses only the stores' public members. Prints a table; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import secrets
import statistics
import time
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from google.protobuf import timestamp_pb2

from adapter.principal import PrincipalUser
from adapter.stores.listing import sort_key
from adapter.stores.memory import BoundedTaskStore
from contract.identity import Principal

OTHER_OWNERS = 100
OTHERS_TASKS = 20
TASKS_PER_CONTEXT = 10
WAITING_EVERY = 20
PAGE = 50


def context_of(agent: str) -> ServerCallContext:
    principal = Principal(
        kind="delegated", subject="bench", client="bench", agent=agent, role="admin", autonomy="L3"
    )
    return ServerCallContext(user=PrincipalUser(principal))


HEAVY = context_of("heavy")


def make_task(i: int) -> pb.Task:
    state = pb.TASK_STATE_INPUT_REQUIRED if i % WAITING_EVERY == 0 else pb.TASK_STATE_COMPLETED
    return pb.Task(
        id=uuid.uuid4().hex,
        context_id=f"ctx-{i // TASKS_PER_CONTEXT}",
        status=pb.TaskStatus(
            state=state,
            timestamp=timestamp_pb2.Timestamp(seconds=1_700_000_000 + i),
        ),
        history=[pb.Message(message_id=uuid.uuid4().hex, parts=[pb.Part(text="x" * 200)])],
    )


def population(tasks: int) -> list[tuple[ServerCallContext, pb.Task]]:
    rows = [(HEAVY, make_task(i)) for i in range(tasks)]
    for owner in range(OTHER_OWNERS):
        context = context_of(f"other-{owner}")
        rows += [(context, make_task(i)) for i in range(OTHERS_TASKS)]
    return rows


async def median_us(call: Callable[[], Awaitable[Any]], calls: int) -> float:
    await call()  # warm
    samples = []
    for _ in range(calls):
        started = time.perf_counter()
        await call()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


async def cases(store: Any, tasks: list[pb.Task], calls: int) -> dict[str, float]:
    """Median µs per call of each case on a filled store; `tasks` are the heavy owner's."""
    probe = tasks[len(tasks) // 2]
    deep = await store.list(pb.ListTasksRequest(page_size=100), HEAVY)
    for _ in range(len(tasks) // 200 - 1):  # the token of the page in the middle
        deep = await store.list(
            pb.ListTasksRequest(page_size=100, page_token=deep.next_page_token), HEAVY
        )
    recent = timestamp_pb2.Timestamp()
    recent.CopyFrom(tasks[-100].status.timestamp)
    requests = {
        "first page": pb.ListTasksRequest(page_size=PAGE),
        "middle page": pb.ListTasksRequest(page_size=PAGE, page_token=deep.next_page_token),
        "status=input-required": pb.ListTasksRequest(
            page_size=PAGE, status=pb.TASK_STATE_INPUT_REQUIRED
        ),
        "contextId": pb.ListTasksRequest(page_size=PAGE, context_id=probe.context_id),
        "updated in the last 100": pb.ListTasksRequest(
            page_size=PAGE, status_timestamp_after=recent
        ),
    }
    results = {"GetTask (baseline)": await median_us(lambda: store.get(probe.id, HEAVY), calls)}
    for name, request in requests.items():
        results[name] = await median_us(
            # a default argument binds each request now; mypy cannot type such a lambda
            lambda request=request: store.list(request, HEAVY),  # type: ignore[misc]
            calls,
        )
    return results


async def memory(tasks: int, calls: int) -> dict[str, float]:
    room = 2 * tasks + OTHER_OWNERS * OTHERS_TASKS
    options: dict[str, Any] = {"max_tasks": room}
    if "max_tasks_per_owner" in inspect.signature(BoundedTaskStore).parameters:
        options["max_tasks_per_owner"] = room  # the tree before quotas has no such option
    store = BoundedTaskStore(**options)
    rows = population(tasks)
    for context, task in rows:
        await store.save(task, context)
    return await cases(store, [task for context, task in rows if context is HEAVY], calls)


async def postgres(url: str, tasks: int, calls: int) -> dict[str, float]:
    import asyncpg

    from adapter.stores.postgres import PostgresStores

    schema = "bench_list_" + secrets.token_hex(4)
    stores = await PostgresStores.open(url, schema)
    try:
        rows = population(tasks)
        records = []
        for context, task in rows:
            has_ts, ts_ns, _ = sort_key(task)
            owner = context.user.user_name
            fields = (task.id, owner, task.context_id, task.status.state, has_ts, ts_ns)
            records.append((*fields, 1, task.SerializeToString()))
        columns = ["id", "owner", "context_id", "state", "has_ts", "ts_ns", "version", "task"]
        async with stores.pool.acquire() as connection:
            await connection.copy_records_to_table(
                "tasks", schema_name=schema, records=records, columns=columns
            )
            await connection.execute(f"VACUUM ANALYZE {schema}.tasks")
        heavy = [task for context, task in rows if context is HEAVY]
        results = await cases(stores.tasks, heavy, calls)
        results["tasks_stored gauge"] = await median_us(stores.tasks.count, calls)
        results["idle sweep"] = await median_us(stores.sweep, max(calls // 10, 5))
        return results
    finally:
        await stores.close()
        connection = await asyncpg.connect(url)
        await connection.execute(f"DROP SCHEMA {schema} CASCADE")
        await connection.close()


def report(title: str, results: dict[str, float]) -> None:
    baseline = results["GetTask (baseline)"]
    print(f"\n{title}\n| case | median µs | times GetTask |\n|---|---:|---:|")
    for name, micros in results.items():
        print(f"| {name} | {micros:,.0f} | {micros / baseline:,.1f} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=20000)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--database-url", default="")
    args = parser.parse_args()
    report(f"memory, one owner with {args.tasks} tasks", await memory(args.tasks, args.calls))
    if args.database_url:
        results = await postgres(args.database_url, args.tasks, args.calls)
        report(f"PostgreSQL, one owner with {args.tasks} tasks", results)


if __name__ == "__main__":
    asyncio.run(main())
