"""A PostgreSQL restart under load, through two real `python -m adapter` replicas.

The issue's measurement (a 3.9 s restart gave 218 HTTP 200 answers carrying -32603 and ~400 error
log lines) as a test: the database is reached through a TCP proxy the test owns
(`tests.tcp_proxy`), stopped for a few seconds while clients keep sending turns and reading
tasks on both replicas.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import httpx
import pytest

from tests.adapter.conftest import assertion_headers, delegated, fresh_schema, message_params
from tests.adapter.test_main import adapter_env
from tests.processes import EventProcess
from tests.tcp_proxy import TcpProxy
from tests.waiting import eventually

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # adapters as processes

ALICE_BOT = delegated("bot", "alice")
WORKERS = 6
OUTAGE_SECONDS = 4.0


@pytest.fixture
async def proxied(database_url: str) -> AsyncIterator[tuple[TcpProxy, str, str]]:
    """The proxy, the database URL through it, and a schema of the test's own."""
    parts = urlsplit(database_url)
    proxy = TcpProxy(parts.hostname or "127.0.0.1", parts.port or 5432)
    await proxy.start()
    user = f"{parts.username}@" if parts.username else ""
    url = urlunsplit(parts._replace(netloc=f"{user}127.0.0.1:{proxy.port}"))
    try:
        async with fresh_schema(database_url) as schema:
            yield proxy, url, schema
    finally:
        await proxy.close()


class Load:
    """Clients sending a turn and reading its task, round-robin over the replicas."""

    def __init__(self, bases: list[str]) -> None:
        self.bases = bases
        self.outcomes: Counter[tuple[int, str]] = Counter()
        self.bad: list[str] = []  # answers that break the rules, for the failure message
        self.tasks: set[str] = set()
        self.running = True

    async def worker(self, n: int) -> None:
        async with httpx.AsyncClient(timeout=30) as http:
            i = n
            while self.running:
                base = self.bases[i % len(self.bases)]
                i += 1
                sent = await self.call(http, base, "SendMessage", message_params())
                if sent is not None:
                    await self.call(http, base, "GetTask", {"id": sent})

    async def call(
        self, http: httpx.AsyncClient, base: str, method: str, params: object
    ) -> str | None:
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        headers = {"A2A-Version": "1.0", **assertion_headers(ALICE_BOT)}
        response = await http.post(base + "/a2a", json=body, headers=headers)
        if response.status_code == 503:
            reason = response.json()["error"]
            self.outcomes[(503, reason)] += 1
            if reason != "store_unavailable" or "Retry-After" not in response.headers:
                self.bad.append(response.text)
            return None
        payload = response.json()
        if response.status_code != 200 or "error" in payload:
            self.outcomes[(response.status_code, str(payload.get("error", {}).get("code")))] += 1
            self.bad.append(response.text)
            return None
        self.outcomes[(200, "ok")] += 1
        task = payload["result"].get("task") or payload["result"]
        self.tasks.add(task["id"])
        return str(task["id"])


async def running_states(database_url: str, schema: str) -> int:
    connection = await asyncpg.connect(database_url)
    try:
        return int(
            await connection.fetchval(f"SELECT count(*) FROM {schema}.tasks WHERE state IN (1, 2)")
        )
    finally:
        await connection.close()


async def test_a_postgres_restart_under_load_answers_503_and_leaves_no_task_submitted(
    database_url: str, proxied: tuple[TcpProxy, str, str]
) -> None:
    """Two replicas under steady load, the database gone for 4 s: no HTTP 200 with an error,
    every refusal a 503 `store_unavailable` with `Retry-After`, one `store_unavailable` and one
    `store_recovered` event per replica, no -32603 logged, and no task left SUBMITTED."""
    proxy, url, schema = proxied
    env = adapter_env(DATABASE_URL=url, ORRERY_A2A_DB_SCHEMA=schema, ORRERY_A2A_MAX_IN_FLIGHT="64")
    replicas = [EventProcess([sys.executable, "-m", "adapter"], env) for _ in range(2)]
    try:
        # Waited for on a thread: the proxy they connect through runs on this event loop.
        serving = [await asyncio.to_thread(replica.wait_for, "serving") for replica in replicas]
        bases = [f"http://{event['addr']}" for event in serving]
        load = Load(bases)
        workers = [asyncio.create_task(load.worker(n)) for n in range(WORKERS)]

        async def flowing() -> bool:
            return load.outcomes[(200, "ok")] >= WORKERS

        await eventually(flowing)  # the load runs through both replicas
        await proxy.stop()
        await asyncio.sleep(OUTAGE_SECONDS)  # the outage itself: the database gone this long
        await proxy.start()
        served = load.outcomes[(200, "ok")]

        async def recovered() -> bool:
            """Both replicas say the store is back, and the load is answered again."""
            return load.outcomes[(200, "ok")] > served and all(
                any(event.get("event") == "store_recovered" for event in replica.events)
                for replica in replicas
            )

        await eventually(recovered)
        load.running = False
        await asyncio.gather(*workers)
        restored = time.monotonic()
        while await running_states(database_url, schema) and time.monotonic() - restored < 15:
            await asyncio.sleep(0.2)
        left = await running_states(database_url, schema)
    finally:
        for replica in replicas:
            if replica.proc.poll() is None:
                await asyncio.to_thread(replica.stop)
    print(f"outcomes {dict(load.outcomes)}")
    assert not load.bad, load.bad[:3]
    assert load.outcomes[(503, "store_unavailable")] > 0 and load.outcomes[(200, "ok")] > 0
    assert left == 0, f"{left} tasks left SUBMITTED/WORKING"
    for replica in replicas:
        names = Counter(str(event.get("event")) for event in replica.events)
        assert names["store_unavailable"] == 1 and names["store_recovered"] == 1, names
        assert names["a2a_internal_error"] == 0, names
        errors = [event for event in replica.events if event.get("level") == "error"]
        kinds = Counter(f"{event.get('logger')}:{event.get('event')}"[:90] for event in errors)
        print(f"replica {replica.pid}: {len(replica.lines)} stderr lines, ERROR events {kinds}")
