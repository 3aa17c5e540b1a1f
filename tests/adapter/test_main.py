"""`python -m adapter` as a process, and graceful shutdown of running streams."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
from typing import Any

import httpx
import pytest

from adapter.__main__ import check
from runtime.version import version
from tests.adapter.conftest import (
    KEYS_SPEC,
    assertion_headers,
    delegated,
    fresh_schema,
    running,
)
from tests.processes import EventProcess

pytestmark = pytest.mark.slow  # starts `python -m adapter` as a process

DIST = "orrery-a2a-edge"


def adapter_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORRERY_", "DATABASE_URL"))}
    env.update({"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC, "ORRERY_A2A_ADAPTER_ADDR": "127.0.0.1:0"})
    env.update(extra)
    return env


def start_adapter(env: dict[str, str]) -> EventProcess:
    """`python -m adapter` with `env`; its JSON log events are collected as they come."""
    return EventProcess([sys.executable, "-m", "adapter"], env)


async def test_serves_logs_its_address_and_stops_on_sigterm() -> None:
    """Start on port 0, log `serving` with the real address, answer, exit 0 on SIGTERM."""
    process = start_adapter(adapter_env())
    try:
        serving = process.wait_for("serving")
        host, port = serving["addr"].rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        async with httpx.AsyncClient(base_url=f"http://{serving['addr']}") as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            card = await http.get("/.well-known/agent-card.json")
            assert card.json()["name"] == "Orrery"
        assert process.stop(signal.SIGTERM) == 0
        process.wait_for("stopped")
    finally:
        process.kill()


async def test_the_diagnostics_address_takes_probes_and_metrics_off_the_a2a_socket() -> None:
    """ORRERY_A2A_ADAPTER_DIAG_ADDR: /healthz, /readyz, /metrics answer there (on another address
    than 127.0.0.1, as a kubelet reaches a pod) and 404 on the A2A socket, which keeps the card."""
    process = start_adapter(adapter_env(ORRERY_A2A_ADAPTER_DIAG_ADDR="0.0.0.0:0"))
    try:
        serving = process.wait_for("serving")
        diag_port = serving["diag"].rsplit(":", 1)[1]
        async with httpx.AsyncClient(base_url=f"http://127.0.0.2:{diag_port}") as http:
            assert (await http.get("/healthz")).json() == {"status": "ok"}
            ready = await http.get("/readyz")
            metrics = await http.get("/metrics")
        assert ready.status_code == 200
        assert ready.json()["checks"] == {
            "tasks": "ok",
            "approvals": "ok",
            "limiter": "ok",
            "serving": "ok",
        }
        assert f'orrery_a2a_build_info{{version="{version()}"}} 1.0' in metrics.text
        assert "process_cpu_seconds_total" in metrics.text
        assert "_created" not in metrics.text
        async with httpx.AsyncClient(base_url=f"http://{serving['addr']}") as http:
            for path in ("/healthz", "/readyz", "/metrics"):
                assert (await http.get(path)).status_code == 404, path
            assert (await http.get("/.well-known/agent-card.json")).status_code == 200
    finally:
        assert process.stop(signal.SIGTERM) == 0


async def test_a_taken_diagnostics_address_is_a_startup_failure() -> None:
    """The diagnostics port is in use: one `startup_failed` event and exit 1, no traceback."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        process = start_adapter(adapter_env(ORRERY_A2A_ADAPTER_DIAG_ADDR=f"127.0.0.1:{port}"))
        failure = process.wait_for("startup_failed")
        assert failure["variable"] == "ORRERY_A2A_ADAPTER_DIAG_ADDR"
        assert "Address already in use" in failure["error"]
        assert process.finish() == 1


async def test_serving_is_logged_at_any_log_level() -> None:
    """With ORRERY_A2A_LOG_LEVEL=WARNING the start-up event still tells a supervisor it is ready."""
    process = start_adapter(adapter_env(ORRERY_A2A_LOG_LEVEL="WARNING"))
    try:
        serving = process.wait_for("serving")
        assert serving["pid"] == process.pid
    finally:
        assert process.stop(signal.SIGTERM) == 0


@pytest.mark.postgres
@pytest.mark.redis
async def test_multi_replica_starts_with_shared_stores(database_url: str, redis_url: str) -> None:
    """ORRERY_MULTI_REPLICA=true with PostgreSQL and Redis serves, and says so."""
    async with fresh_schema(database_url) as schema:
        process = start_adapter(
            adapter_env(
                ORRERY_MULTI_REPLICA="true",
                DATABASE_URL=database_url,
                ORRERY_A2A_DB_SCHEMA=schema,
                ORRERY_A2A_REDIS_URL=redis_url,
            )
        )
        try:
            serving = process.wait_for("serving")
            assert (serving["stores"], serving["limiter"]) == ("postgresql", "redis")
            async with httpx.AsyncClient(base_url=f"http://{serving['addr']}") as http:
                assert (await http.get("/readyz")).json()["status"] == "ready"
        finally:
            assert process.stop(signal.SIGTERM) == 0


async def test_sigint_also_stops_cleanly() -> None:
    """Ctrl-C (SIGINT) is a clean stop too."""
    process = start_adapter(adapter_env())
    process.wait_for("serving")
    assert process.stop(signal.SIGINT) == 0


async def test_bad_configuration_exits_2_naming_every_variable() -> None:
    """Every bad variable in one message on stderr, exit code 2, nothing served."""
    env = adapter_env(ORRERY_A2A_MAX_IN_FLIGHT="many", ORRERY_MULTI_REPLICA="true")
    del env["ORRERY_A2A_ASSERTION_KEYS"]
    process = start_adapter(env)
    assert process.finish() == 2
    text = process.stderr
    for name in (
        "ORRERY_A2A_ASSERTION_KEYS",
        "ORRERY_A2A_MAX_IN_FLIGHT",
        "DATABASE_URL",
        "ORRERY_A2A_REDIS_URL",
    ):
        assert name in text
    assert "Traceback" not in text


async def test_unloadable_gateway_exits_2() -> None:
    """ORRERY_A2A_GATEWAY naming a missing module stops start-up with exit code 2."""
    process = start_adapter(adapter_env(ORRERY_A2A_GATEWAY="no_such_module:create"))
    assert process.finish() == 2
    assert "ORRERY_A2A_GATEWAY" in process.stderr and "Traceback" not in process.stderr


async def test_running_stream_ends_with_a_final_event_on_shutdown() -> None:
    """At shutdown a stream gets its grace; its turn, still running, then ends the task FAILED
    (`adapter_stopped`), which is the stream's final event before a clean end."""
    async with running({"ORRERY_A2A_SHUTDOWN_GRACE": "1s"}) as server:
        server.gateway.hold = asyncio.Event()
        body = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "SendStreamingMessage",
            "params": {
                "message": {
                    "messageId": "m",
                    "role": "ROLE_USER",
                    "parts": [{"text": "how is search?"}],
                }
            },
        }
        headers = {"A2A-Version": "1.0", **assertion_headers(delegated())}
        events: list[dict[str, Any]] = []
        async with (
            httpx.AsyncClient(base_url=server.base, timeout=60) as http,
            http.stream("POST", "/a2a", json=body, headers=headers) as response,
        ):
            lines = response.aiter_lines()
            async for line in lines:
                if line.startswith("data: "):
                    events.append(json.loads(line[6:]))
                    break
            stopping = asyncio.create_task(server.runner.cleanup())
            # The rest ends cleanly: no read error, no cut connection.
            events += [json.loads(line[6:]) async for line in lines if line.startswith("data: ")]
        await stopping
    assert [next(iter(e["result"])) for e in events] == ["task", "statusUpdate"]
    assert events[-1]["id"] == 7
    status = events[-1]["result"]["statusUpdate"]["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert status["message"]["metadata"] == {"reason": "adapter_stopped"}


async def test_a_taken_address_is_one_startup_failed_event_naming_the_variable() -> None:
    """The port in use: no traceback, one JSON `startup_failed` naming ORRERY_A2A_ADAPTER_ADDR
    and the address, exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        addr = f"127.0.0.1:{holder.getsockname()[1]}"
        process = start_adapter(adapter_env(ORRERY_A2A_ADAPTER_ADDR=addr))
        assert process.finish() == 1
    (line,) = process.stderr.splitlines()
    event = json.loads(line)
    assert (event["event"], event["level"], event["variable"], event["addr"]) == (
        "startup_failed",
        "error",
        "ORRERY_A2A_ADAPTER_ADDR",
        addr,
    )
    assert "Address already in use" in event["error"]


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_needs_no_configuration(flag: str) -> None:
    """`python -m adapter --help` prints usage and where the configuration lives, exit 0, even
    with no variable set."""
    result = subprocess.run(
        [sys.executable, "-m", "adapter", flag],
        env={k: v for k, v in os.environ.items() if not k.startswith("ORRERY_")},
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: python -m adapter")
    assert "ORRERY_A2A_ASSERTION_KEYS" in result.stdout
    assert "docs/contract.md#adapter-variables" in result.stdout


async def test_bad_remote_agent_settings_exit_2_naming_the_variable() -> None:
    """The demo gateway's allowlist is checked at start: http outside loopback stops it."""
    env = adapter_env(ORRERY_A2A_REMOTE_AGENTS="billing=http://billing.example.com/card")
    process = start_adapter(env)
    assert process.finish() == 2
    assert "ORRERY_A2A_REMOTE_AGENTS" in process.stderr and "Traceback" not in process.stderr


def test_check_reports_the_gateways_remote_agent_settings() -> None:
    """`python -m adapter check` asks the demo gateway's module too."""
    env = adapter_env(
        ORRERY_A2A_REMOTE_AGENTS="billing=https://billing.example.com/card",
        ORRERY_A2A_REMOTE_BILLING_TOKEN_URL="https://idp.example.com/token",
    )
    assert check(env) == [
        "ORRERY_A2A_REMOTE_BILLING_CLIENT_ID: is required",
        "ORRERY_A2A_REMOTE_BILLING_CLIENT_SECRET_FILE: is required",
    ]


# Runs in a fresh interpreter: what `python -m adapter check` loads.
CHECK_PROBE = """
import json
import sys

from adapter.__main__ import main

code = main(["check", "--json"])
serving = ("aiohttp", "adapter.app", "adapter.serving", "a2a.server.request_handlers")
print(json.dumps({"code": code, "loaded": [name for name in serving if name in sys.modules]}))
"""


def test_check_loads_no_serving_machinery() -> None:
    """`check` runs before every start of the stack: it answers without aiohttp or the SDK's
    request handlers (half the CPU of a start)."""
    result = subprocess.run(
        [sys.executable, "-c", CHECK_PROBE],
        env=adapter_env(),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert json.loads(result.stdout.splitlines()[-1]) == {"code": 0, "loaded": []}
