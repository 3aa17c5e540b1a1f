"""PostgreSQL going away under the adapter: retryable answers, one log line per incident, and no
task left `TASK_STATE_SUBMITTED` (`adapter/outage.py`, `adapter/recovery.py`).

The database is reached through a TCP proxy the test owns (`tests.tcp_proxy`): stopping it cuts
every connection and refuses new ones, as a restart does, while the shared server runs on.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest
from a2a.types import a2a_pb2 as pb

from adapter.app import METRICS, RECOVERY
from tests.adapter.conftest import (
    Server,
    delegated,
    fresh_schema,
    human,
    message_params,
    running,
    sse_events,
)
from tests.tcp_proxy import TcpProxy

pytestmark = [
    pytest.mark.postgres,
    # The a2a-sdk's consumer task (ActiveTask._run_consumer) fails when the store goes away under
    # it and nobody retrieves its exception: garbage collection reports it. The SDK's, not ours.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]

ALICE_BOT = delegated("bot", "alice")
IMMEDIATE = {"configuration": {"returnImmediately": True}}


@pytest.fixture
async def proxy(database_url: str) -> AsyncIterator[TcpProxy]:
    parts = urlsplit(database_url)
    started = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await started.start()
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture
async def env(database_url: str, proxy: TcpProxy) -> AsyncIterator[dict[str, str]]:
    parts = urlsplit(database_url)
    user = f"{parts.username}@" if parts.username else ""
    proxied = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))
    async with fresh_schema(database_url) as schema:
        yield {"DATABASE_URL": proxied, "ORRERY_A2A_DB_SCHEMA": schema}


def lost(server: Server) -> float:
    sample = server.app[METRICS].registry.get_sample_value(
        "orrery_a2a_turns_ended_total", {"reason": "turn_lost"}
    )
    return sample or 0.0


def events_named(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [record for record in caplog.records if record.getMessage() == name]


async def calls(server: Server, task_id: str) -> list[Any]:
    """One of each store-backed call: a turn, a read, a listing, a cancel."""
    return [
        await server.rpc(ALICE_BOT, "SendMessage", message_params()),
        await server.rpc(ALICE_BOT, "GetTask", {"id": task_id}),
        await server.rpc(ALICE_BOT, "ListTasks", {}),
        await server.rpc(ALICE_BOT, "CancelTask", {"id": task_id}),
    ]


async def test_an_outage_is_answered_503_and_logged_once(
    env: dict[str, str], proxy: TcpProxy, caplog: pytest.LogCaptureFixture
) -> None:
    """While PostgreSQL is unreachable every store-backed call (approvals too) is HTTP 503
    `store_unavailable` with `Retry-After` (never 200 with -32603); the incident is one
    `store_unavailable` and one `store_recovered` event, and the calls work again once it is
    back."""
    caplog.set_level(logging.INFO, logger="adapter.store")
    async with running(env) as server:
        done = await server.rpc(ALICE_BOT, "SendMessage", message_params())
        task_id = done.json()["result"]["task"]["id"]
        await proxy.stop()
        down = [*(await calls(server, task_id)), *(await calls(server, task_id))]
        assert {response.status_code for response in down} == {503}
        assert {response.json()["error"] for response in down} == {"store_unavailable"}
        assert {response.headers["Retry-After"] for response in down} == {"2"}
        async with server.http(human("alice"), "approvals") as http:
            shown = await http.get("/approvals/" + "a" * 24)
        assert (shown.status_code, shown.json()["error"]) == (503, "store_unavailable")
        assert not events_named(caplog, "a2a_internal_error")
        assert len(events_named(caplog, "store_unavailable")) == 1
        await proxy.start()
        for _ in range(3):
            back = await server.rpc(ALICE_BOT, "GetTask", {"id": task_id})
            assert back.status_code == 200 and "result" in back.json()
        assert len(events_named(caplog, "store_recovered")) == 1
        metrics = (await server.http(None).get("/metrics")).text
        assert 'orrery_a2a_requests_total{method="GetTask",outcome="store_unavailable"} 2.0' in (
            metrics
        )
        assert "orrery_a2a_store_up 1.0" in metrics


async def schema_rows(database_url: str, schema: str) -> list[tuple[str, int]]:
    connection = await asyncpg.connect(database_url)
    try:
        rows = await connection.fetch(f"SELECT id, state FROM {schema}.tasks")
        return [(str(row["id"]), int(row["state"])) for row in rows]
    finally:
        await connection.close()


async def test_a_turn_cut_by_an_outage_ends_failed_once_the_store_is_back(
    env: dict[str, str], database_url: str, proxy: TcpProxy
) -> None:
    """The store fails as a turn writes its end (so the SDK's FAILED write fails too): once the
    store answers again the replica that ran it ends the task FAILED `turn_lost`; a subscriber on
    another replica was told the outage by a retryable error event."""
    schema = env["ORRERY_A2A_DB_SCHEMA"]
    async with running(env) as one, running(env) as two:
        one.gateway.hold = asyncio.Event()
        sent = await one.rpc(ALICE_BOT, "SendMessage", message_params() | IMMEDIATE)
        task_id = sent.json()["result"]["task"]["id"]
        body = {"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": task_id}}
        async with (
            two.http(ALICE_BOT) as http,
            http.stream("POST", "/a2a", json=body, headers={"A2A-Version": "1.0"}) as stream,
        ):
            await proxy.stop()
            assert (await one.rpc(ALICE_BOT, "GetTask", {"id": task_id})).status_code == 503
            one.gateway.hold.set()  # the turn ends while its store is gone: its writes fail
            events = await sse_events(stream)
        assert events[-1][0] == "error"
        assert events[-1][1]["error"]["data"][0]["reason"] == "STORE_UNAVAILABLE"
        assert await schema_rows(database_url, schema) == [(task_id, 1)]  # left SUBMITTED
        await proxy.start()
        for _ in range(200):
            task = (await two.rpc(ALICE_BOT, "GetTask", {"id": task_id})).json()["result"]
            if task["status"]["state"] != "TASK_STATE_SUBMITTED":
                break
            await asyncio.sleep(0.05)
        assert task["status"]["state"] == "TASK_STATE_FAILED"
        assert task["status"]["message"]["metadata"] == {"reason": "turn_lost"}


async def left_by_a_dead_replica(database_url: str, schema: str) -> str:
    """A task SUBMITTED an hour ago by a replica that is gone (written as the store writes it)."""
    task = pb.Task(
        id=uuid.uuid4().hex,
        context_id="c",
        status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED),
        history=[pb.Message(message_id="m", role=pb.ROLE_USER, parts=[pb.Part(text="hi")])],
    )
    task.status.timestamp.GetCurrentTime()
    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(
            f"""INSERT INTO {schema}.tasks
                    (id, owner, context_id, state, has_ts, ts_ns, version, updated_at, task)
                VALUES ($1, $2, 'c', 1, true, 0, 1, now() - interval '1 hour', $3)""",
            task.id,
            ALICE_BOT.key,
            task.SerializeToString(),
        )
    finally:
        await connection.close()
    return task.id


async def test_the_sweep_ends_a_task_whose_replica_is_gone_on_every_replica(
    env: dict[str, str], database_url: str
) -> None:
    """A task left SUBMITTED by a replica that died: once it is older than any live turn, a sweep
    ends it FAILED `turn_lost`, a subscriber on another replica hears that as its last event, and
    no replica ends it twice."""
    async with running(env) as one, running(env) as two:
        task_id = await left_by_a_dead_replica(database_url, env["ORRERY_A2A_DB_SCHEMA"])
        body = {"jsonrpc": "2.0", "id": 9, "method": "SubscribeToTask", "params": {"id": task_id}}
        async with (
            two.http(ALICE_BOT) as http,
            http.stream("POST", "/a2a", json=body, headers={"A2A-Version": "1.0"}) as stream,
        ):
            await one.app[RECOVERY].sweep()  # now, not in 30 s (the start-up sweep may be first)
            events = await sse_events(stream)
        if events:  # subscribed before the end (else refused: the task was already terminal)
            status = events[-1][1]["result"]["statusUpdate"]["status"]
            assert status["state"] == "TASK_STATE_FAILED"
            assert status["message"]["metadata"] == {"reason": "turn_lost"}
        stored = (await two.rpc(ALICE_BOT, "GetTask", {"id": task_id})).json()["result"]
        assert stored["status"]["message"]["metadata"] == {"reason": "turn_lost"}
        assert await two.app[RECOVERY].sweep() == 0
        assert sum(lost(server) for server in (one, two)) == 1


async def test_a_starting_replica_ends_the_tasks_a_dead_one_left(
    env: dict[str, str], database_url: str
) -> None:
    """Recovery on start-up: a replica started after the crash ends the stale task by itself."""
    async with running(env):
        pass  # the replica that died (its tables stay)
    task_id = await left_by_a_dead_replica(database_url, env["ORRERY_A2A_DB_SCHEMA"])
    async with running(env) as server:
        for _ in range(200):
            task = (await server.rpc(ALICE_BOT, "GetTask", {"id": task_id})).json()["result"]
            if task["status"]["state"] != "TASK_STATE_SUBMITTED":
                break
            await asyncio.sleep(0.05)
        assert task["status"]["message"]["metadata"] == {"reason": "turn_lost"}
