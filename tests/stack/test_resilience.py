"""`orrery-a2a up --replicas 2` under steady load: replicas take each other's place.

One real `up` process (two authz, two adapters, Envoy, over PostgreSQL and Redis) for the module;
a few principals each send SendMessage after SendMessage through Envoy while a test stops, kills
or freezes one replica. What counts as an error is anything but an HTTP 200 JSON-RPC success. The
stack stops last, with a subscription open. The figures these tests hold are in
docs/operations.md#replicas-and-draining.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from stack.state import StackState
from stack.tokens import TokenRequest, mint_for_stack
from tests.admin_socket import admin_client
from tests.conftest import DATABASE_URL, REDIS_URL, require_service
from tests.stack.conftest import LocalStackRun

pytestmark = [pytest.mark.envoy, pytest.mark.e2e, pytest.mark.redis, pytest.mark.postgres]

PRINCIPALS = 4  # one request at a time each: well inside the in-flight cap per principal
LOAD_SECONDS = 6.0
STRIKE_AFTER = 1.0  # seconds of load before a replica is hit
MAX_ERROR_RATE = 0.01
ASK = "Which services are unhealthy?"
HEADERS = {"Content-Type": "application/json", "A2A-Version": "1.0"}


@dataclass(frozen=True)
class Outcome:
    started: float  # seconds since the load began
    ok: bool
    answer: str


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStackRun]:
    """`up --replicas 2` on shared stores (a schema of its own), budgets out of the way (the
    load comes from one address and few subjects), a 1 s stream grace."""
    database_url = require_service("PostgreSQL", DATABASE_URL, 5432)
    redis_url = require_service("Redis", REDIS_URL, 6379)
    state_dir = tmp_path_factory.mktemp("replicas") / "state"
    state_dir.mkdir(mode=0o700)
    schema = "resilience_" + uuid.uuid4().hex[:12]
    run = LocalStackRun.start(
        state_dir,
        {
            "ORRERY_A2A_REPLICAS": "2",
            "DATABASE_URL": database_url,
            "ORRERY_A2A_REDIS_URL": redis_url,
            "ORRERY_A2A_DB_SCHEMA": schema,
            "ORRERY_A2A_SHUTDOWN_GRACE": "1s",
            "ORRERY_A2A_RATE_LIMIT": "100000/minute",
            "ORRERY_A2A_RATE_BURST": "100000",
            "ORRERY_A2A_CLIENT_RATE_LIMIT": "100000/second",
            "ORRERY_A2A_CLIENT_RATE_BURST": "100000",
        },
    )
    try:
        assert run.wait_for("is up at"), run.lines
        yield run
    finally:
        if run.process.poll() is None:  # the last test stops it itself
            run.stop()
        asyncio.run(drop_schema(database_url, schema))


async def drop_schema(database_url: str, schema: str) -> None:
    import asyncpg

    connection = await asyncpg.connect(database_url)
    try:
        await connection.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
    finally:
        await connection.close()


def tokens(run: LocalStackRun, count: int = PRINCIPALS) -> list[str]:
    state = StackState.load(run.state_dir)
    return [
        mint_for_stack(
            state, TokenRequest(subject=f"load-{uuid.uuid4().hex[:8]}"), now=int(time.time())
        )
        for _ in range(count)
    ]


def send_message(text: str) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "role": "ROLE_USER",
                "messageId": uuid.uuid4().hex,
                "parts": [{"text": text}],
            }
        },
    }


async def steady_load(run: LocalStackRun, strike: int, signum: signal.Signals) -> list[Outcome]:
    """`PRINCIPALS` callers, each one SendMessage after another for `LOAD_SECONDS`; `signum` goes
    to process `strike` after `STRIKE_AFTER` seconds."""
    outcomes: list[Outcome] = []
    start = time.monotonic()

    async def caller(http: httpx.AsyncClient, token: str) -> None:
        while (now := time.monotonic() - start) < LOAD_SECONDS:
            try:
                answer = await http.post(
                    f"{run.url}/a2a",
                    json=send_message(ASK),
                    headers={**HEADERS, "Authorization": f"Bearer {token}"},
                )
                ok = answer.status_code == 200 and "result" in answer.json()
                outcomes.append(Outcome(now, ok, f"{answer.status_code} {answer.text[:200]}"))
            except httpx.HTTPError as exc:
                outcomes.append(Outcome(now, False, type(exc).__name__))

    async def strike_later() -> None:
        await asyncio.sleep(STRIKE_AFTER)
        os.kill(strike, signum)

    async with httpx.AsyncClient(timeout=30) as http:
        await asyncio.gather(strike_later(), *(caller(http, token) for token in tokens(run)))
    return outcomes


def error_rate(outcomes: list[Outcome]) -> float:
    """The share of failed requests; printed (`pytest -s`) with the counts, for the record."""
    failed = sum(not outcome.ok for outcome in outcomes)
    print(f"{failed} of {len(outcomes)} requests failed", *failures(outcomes), sep="\n  ")
    return failed / len(outcomes)


def failures(outcomes: list[Outcome]) -> list[str]:
    return [f"{outcome.started:.2f}s {outcome.answer}" for outcome in outcomes if not outcome.ok]


def pid_of(run: LocalStackRun, name: str) -> int:
    return run.components[name][1]


def restarted(run: LocalStackRun, name: str, old_pid: int) -> int:
    """The new pid `up` reports for `name` once it is back (the old one is gone)."""
    line = run.wait_for(rf"orrery-a2a up: {name} restarted \(pid \d+\)")
    assert line is not None, run.lines
    pid = int(line.rsplit("pid ", 1)[1].rstrip(")"))
    assert pid != old_pid
    return pid


async def all_in_rotation(run: LocalStackRun, timeout: float = 60.0) -> None:
    """Until Envoy counts every authz and adapter replica healthy (health-checked, not ejected):
    where each test starts, and how a replica that came back is seen to be back."""
    admin = StackState.load(run.state_dir).admin
    flags: list[str] = []
    async with admin_client(admin) as http, asyncio.timeout(timeout):
        while True:
            clusters = (await http.get("/clusters")).text.splitlines()
            flags = [
                line
                for line in clusters
                if line.startswith(("authz::", "adapter::")) and "::health_flags::" in line
            ]
            if len(flags) == 4 and all(line.endswith("::healthy") for line in flags):
                return
            await asyncio.sleep(0.2)


def supervisor_events(run: LocalStackRun) -> list[dict[str, Any]]:
    path = run.state_dir / "logs" / "latest" / "supervisor.log"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_a_draining_adapter_costs_under_one_percent_and_comes_back(
    replicated: LocalStackRun,
) -> None:
    """SIGTERM to one adapter under load: it fails /readyz at once, Envoy takes it out, its
    socket closes only after its drain delay; under 1% of requests fail, and `up` restarts it."""
    await all_in_rotation(replicated)
    old = pid_of(replicated, "adapter-1")
    outcomes = await steady_load(replicated, old, signal.SIGTERM)
    assert error_rate(outcomes) < MAX_ERROR_RATE, failures(outcomes)
    restarted(replicated, "adapter-1", old)
    await all_in_rotation(replicated)
    exited = [e for e in supervisor_events(replicated) if e["event"] == "component_exited"]
    assert (exited[-1]["component"], exited[-1]["exit"]) == ("adapter-1", "exited with code 0")


async def test_a_killed_authz_costs_under_one_percent_and_is_restarted(
    replicated: LocalStackRun,
) -> None:
    """SIGKILL to one authz under load: the Checks it held are asked again of the other one,
    outlier detection and its health check take it out; under 1% fail, and `up` restarts it."""
    await all_in_rotation(replicated)
    old = pid_of(replicated, "authz-1")
    outcomes = await steady_load(replicated, old, signal.SIGKILL)
    assert error_rate(outcomes) < MAX_ERROR_RATE, failures(outcomes)
    restarted(replicated, "authz-1", old)
    await all_in_rotation(replicated)


async def test_a_frozen_authz_is_taken_out_by_outlier_detection(
    replicated: LocalStackRun,
) -> None:
    """SIGSTOP to one authz under load: only the Checks it already held time out (1 s, then
    503); once two have, it is ejected, and from then on under 1% of requests fail."""
    await all_in_rotation(replicated)
    frozen = pid_of(replicated, "authz-2")
    try:
        outcomes = await steady_load(replicated, frozen, signal.SIGSTOP)
    finally:
        os.kill(frozen, signal.SIGCONT)
    detected = STRIKE_AFTER + 2.0  # two Check timeouts (or health checks) after the freeze
    after = [outcome for outcome in outcomes if outcome.started >= detected]
    assert error_rate(after) < MAX_ERROR_RATE, failures(after)
    assert error_rate(outcomes) <= 2 * PRINCIPALS / len(outcomes), failures(outcomes)
    await all_in_rotation(replicated)  # thawed, it passes its health check again


async def test_stopping_the_stack_ends_an_open_subscription_with_a_final_event(
    replicated: LocalStackRun,
) -> None:
    """Ctrl-C with a SubscribeToTask open (a task waiting for approval): Envoy stops accepting,
    the adapter's grace ends the stream with the task's state as its final event, the stream
    ends cleanly; then everything stops, adapters first (this test stops the module's stack)."""
    (token,) = tokens(replicated, 1)
    headers = {**HEADERS, "Authorization": f"Bearer {token}"}
    events: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=60) as http:
        proposed = await http.post(
            f"{replicated.url}/a2a", json=send_message("restart checkout"), headers=headers
        )
        task = proposed.json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
        subscribe = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        }
        async with http.stream(
            "POST", f"{replicated.url}/a2a", json=subscribe, headers=headers
        ) as stream:
            lines = stream.aiter_lines()
            events.append(json.loads((await anext(lines)).removeprefix("data: ")))
            replicated.process.send_signal(signal.SIGINT)
            # Ends without an error: a clean end of the response.
            events += [
                json.loads(line.removeprefix("data: "))
                async for line in lines
                if line.startswith("data: ")
            ]
    assert len(events) == 2
    final = events[-1]["result"]["task"]
    assert (final["id"], final["status"]["state"]) == (task["id"], "TASK_STATE_INPUT_REQUIRED")
    assert replicated.finish() == 0
    assert replicated.lines[-1] == (
        "orrery-a2a up: stopped adapter-2, adapter-1, envoy, authz-2, authz-1, issuer"
    )
