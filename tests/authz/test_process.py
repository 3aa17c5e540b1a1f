"""`python -m authz` as a real process: the serving event, health, signals, exit codes, workers."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.authz.support import Issuer, base_env

START_TIMEOUT = 60.0


class AuthzProcess:
    """A `python -m authz` child whose JSON log lines we read as they come."""

    def __init__(self, env: Mapping[str, str], *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "authz", *args],
            env={**os.environ, **env},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.events: list[dict[str, Any]] = []

    def wait_for(self, event: str, timeout: float = START_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        assert self.proc.stderr is not None
        while time.monotonic() < deadline:
            for seen in self.events:
                if seen.get("event") == event:
                    return seen
            ready, _, _ = select.select([self.proc.stderr], [], [], 0.2)
            if ready:
                line = self.proc.stderr.readline()
                if not line:
                    break
                self._record(line)
        raise AssertionError(f"no {event!r} event; got {self.events}")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.proc.send_signal(sig)
        code = self.proc.wait(timeout=60)
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self._record(line)
        return code

    def _record(self, line: str) -> None:
        # gRPC's C core may write its own (non-JSON) lines, e.g. when a bind fails.
        if line.startswith("{"):
            self.events.append(json.loads(line))


@pytest.fixture
def started() -> Iterator[list[AuthzProcess]]:
    processes: list[AuthzProcess] = []
    yield processes
    for process in processes:
        if process.proc.poll() is None:
            process.proc.kill()
            process.proc.wait()


def start(started: list[AuthzProcess], env: Mapping[str, str], *args: str) -> AuthzProcess:
    process = AuthzProcess(env, *args)
    started.append(process)
    return process


def check_once(address: str, token: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = CheckRequest()
        request.attributes.request.http.headers["x-request-id"] = "req-1"
        request.attributes.request.http.headers["authorization"] = f"Bearer {token}"
        response = external_auth_pb2_grpc.AuthorizationStub(channel).Check(request, timeout=30)
        return int(response.status.code)


def health(address: str) -> int:
    with grpc.insecure_channel(address) as channel:
        reply = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=30
        )
        return int(reply.status)


def test_serves_reports_health_and_exits_0_on_sigterm(
    started: list[AuthzProcess], jwks_file: Path, issuer: Issuer
) -> None:
    """`python -m authz` logs `serving` with real ports, answers health and Check, stops on TERM."""
    process = start(started, base_env(jwks_file=jwks_file))
    serving = process.wait_for("serving")
    assert serving["grpc"].startswith("127.0.0.1:") and not serving["grpc"].endswith(":0")
    assert serving["metrics"].startswith("127.0.0.1:")
    assert (serving["workers"], serving["keys_usable"]) == (1, True)
    assert health(serving["grpc"]) == health_pb2.HealthCheckResponse.SERVING
    assert check_once(serving["grpc"], issuer.token()) == 0
    assert process.stop(signal.SIGTERM) == 0
    assert process.events[-1]["event"] == "stopped"


def test_sigint_also_stops_cleanly(started: list[AuthzProcess], jwks_file: Path) -> None:
    """Ctrl-C (SIGINT) is a clean stop too."""
    process = start(started, base_env(jwks_file=jwks_file))
    process.wait_for("serving")
    assert process.stop(signal.SIGINT) == 0


def test_bad_config_exits_2_naming_every_bad_variable(started: list[AuthzProcess]) -> None:
    """One message on stderr names each bad variable; exit code 2; nothing is served."""
    env = {
        "ORRERY_A2A_JWT_ISSUER": "",
        "ORRERY_A2A_JWT_AUDIENCE": "",
        "ORRERY_CONSOLE_JWT_AUDIENCE": "",
        "ORRERY_A2A_JWKS_URL": "http://idp.example/jwks",
        "ORRERY_A2A_ASSERTION_KEYS": "",
        "ORRERY_A2A_RATE_LIMIT": "fast",
    }
    process = start(started, env)
    _, stderr = process.proc.communicate(timeout=60)
    assert process.proc.returncode == 2
    for name in (
        "ORRERY_A2A_JWT_ISSUER",
        "ORRERY_A2A_JWT_AUDIENCE",
        "ORRERY_CONSOLE_JWT_AUDIENCE",
        "ORRERY_A2A_JWKS_URL",
        "ORRERY_A2A_ASSERTION_KEYS",
        "ORRERY_A2A_RATE_LIMIT",
    ):
        assert name in stderr
    assert "Traceback" not in stderr


def test_workers_without_redis_are_refused(started: list[AuthzProcess], jwks_file: Path) -> None:
    """--workers 2 needs a shared limiter; without Redis it is a configuration error."""
    process = start(started, base_env(jwks_file=jwks_file), "--workers", "2")
    _, stderr = process.proc.communicate(timeout=60)
    assert process.proc.returncode == 2
    assert "ORRERY_A2A_REDIS_URL" in stderr


def test_address_in_use_exits_1(started: list[AuthzProcess], jwks_file: Path) -> None:
    """A port someone else holds is a clear start-up failure, not a shared port."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_AUTHZ_ADDR": f"127.0.0.1:{port}"}
        process = start(started, env)
        failure = process.wait_for("startup_failed")
        assert str(port) in failure["error"]
        assert process.proc.wait(timeout=60) == 1


def test_workers_share_one_port_and_one_metrics_endpoint(
    started: list[AuthzProcess], jwks_file: Path, issuer: Issuer, redis_url: str
) -> None:
    """--workers 2: two processes serve one port; the parent serves their merged metrics."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_REDIS_URL": redis_url}
    process = start(started, env, "--workers", "2")
    serving = process.wait_for("serving")
    assert serving["workers"] == 2
    workers = [e for e in process.events if e["event"] == "worker_serving"]
    assert len({e["pid"] for e in workers}) == 2
    assert {e["grpc"] for e in workers} == {serving["grpc"]}
    for _ in range(4):  # separate connections, so the kernel may spread them over workers
        assert check_once(serving["grpc"], issuer.token()) == 0
    url = f"http://{serving['metrics']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    assert 'orrery_authz_decisions_total{decision="allow",reason="ok"} 4.0' in body
    assert process.stop(signal.SIGTERM) == 0


def test_a_dead_worker_stops_the_service_with_exit_1(
    started: list[AuthzProcess], jwks_file: Path, redis_url: str
) -> None:
    """If a worker dies, the parent stops the rest and exits 1 for the supervisor to restart."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_REDIS_URL": redis_url}
    process = start(started, env, "--workers", "2")
    process.wait_for("serving")
    victim = next(e["pid"] for e in process.events if e["event"] == "worker_serving")
    os.kill(victim, signal.SIGKILL)
    assert process.wait_for("worker_died")["exitcode"] == -signal.SIGKILL
    assert process.proc.wait(timeout=60) == 1


def test_serving_is_logged_even_when_decisions_are_not(
    started: list[AuthzProcess], jwks_file: Path, issuer: Issuer
) -> None:
    """ORRERY_A2A_LOG_LEVEL=WARNING silences decisions, never the start and stop events."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_LOG_LEVEL": "WARNING"}
    process = start(started, env)
    serving = process.wait_for("serving")
    assert check_once(serving["grpc"], issuer.token()) == 0
    assert process.stop() == 0
    assert [e["event"] for e in process.events] == ["serving", "stopped"]
