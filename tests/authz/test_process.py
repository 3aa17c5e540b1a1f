"""`python -m authz` as a real process: the serving event, health, signals, exit codes, workers."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path

import grpc
import pytest
from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tests.authz.support import Issuer, base_env
from tests.processes import EventProcess, descendants, port_free, wait_gone

pytestmark = pytest.mark.slow  # starts `python -m authz` as a process

OTHER_ADDRESS = "127.0.0.2"  # a loopback address that 127.0.0.1-only sockets do not answer


@pytest.fixture
def started() -> Iterator[list[EventProcess]]:
    processes: list[EventProcess] = []
    yield processes
    for process in processes:
        process.kill()


def start(started: list[EventProcess], env: Mapping[str, str], *args: str) -> EventProcess:
    """`python -m authz` with `env` over this process's environment."""
    process = EventProcess([sys.executable, "-m", "authz", *args], {**os.environ, **env})
    started.append(process)
    return process


def environ(pid: int) -> dict[str, str]:
    """The environment process `pid` started with."""
    raw = Path(f"/proc/{pid}/environ").read_bytes().decode()
    return dict(entry.split("=", 1) for entry in raw.split("\0") if "=" in entry)


def check_once(address: str, token: str) -> int:
    with grpc.insecure_channel(address) as channel:
        request = CheckRequest()
        request.attributes.request.http.path = "/a2a"
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
    started: list[EventProcess], jwks_file: Path, issuer: Issuer
) -> None:
    """`python -m authz` logs `serving` with real ports, answers health and Check, stops on TERM."""
    process = start(started, base_env(jwks_file=jwks_file))
    serving = process.wait_for("serving")
    assert serving["grpc"].startswith("127.0.0.1:") and not serving["grpc"].endswith(":0")
    assert serving["diag"].startswith("127.0.0.1:")
    assert (serving["workers"], serving["keys_usable"]) == (1, True)
    assert health(serving["grpc"]) == health_pb2.HealthCheckResponse.SERVING
    assert check_once(serving["grpc"], issuer.token()) == 0
    assert process.stop(signal.SIGTERM) == 0
    assert process.events[-1]["event"] == "stopped"


def test_sigint_also_stops_cleanly(started: list[EventProcess], jwks_file: Path) -> None:
    """Ctrl-C (SIGINT) is a clean stop too."""
    process = start(started, base_env(jwks_file=jwks_file))
    process.wait_for("serving")
    assert process.stop(signal.SIGINT) == 0


def test_bad_config_exits_2_naming_every_bad_variable(started: list[EventProcess]) -> None:
    """One message on stderr names each bad variable; exit code 2; nothing is served."""
    env = {
        "ORRERY_A2A_JWT_ISSUER": "",
        "ORRERY_A2A_JWT_AUDIENCE": "",
        "ORRERY_CONSOLE_JWT_AUDIENCE": "",
        "ORRERY_CONSOLE_CLIENTS": "",
        "ORRERY_A2A_JWKS_URL": "http://idp.example/jwks",
        "ORRERY_A2A_ASSERTION_KEYS": "",
        "ORRERY_A2A_RATE_LIMIT": "fast",
    }
    process = start(started, env)
    assert process.finish() == 2
    stderr = process.stderr
    for name in (
        "ORRERY_A2A_JWT_ISSUER",
        "ORRERY_A2A_JWT_AUDIENCE",
        "ORRERY_CONSOLE_JWT_AUDIENCE",
        "ORRERY_CONSOLE_CLIENTS",
        "ORRERY_A2A_JWKS_URL",
        "ORRERY_A2A_ASSERTION_KEYS",
        "ORRERY_A2A_RATE_LIMIT",
    ):
        assert name in stderr
    assert "Traceback" not in stderr


def test_workers_without_redis_are_refused(started: list[EventProcess], jwks_file: Path) -> None:
    """--workers 2 needs a shared limiter; without Redis it is a configuration error."""
    process = start(started, base_env(jwks_file=jwks_file), "--workers", "2")
    assert process.finish() == 2
    assert "ORRERY_A2A_REDIS_URL" in process.stderr


def test_address_in_use_exits_1(started: list[EventProcess], jwks_file: Path) -> None:
    """A port someone else holds is one JSON `startup_failed` naming the variable, not a shared
    port and not a traceback; exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_AUTHZ_ADDR": f"127.0.0.1:{port}"}
        process = start(started, env)
        assert process.finish() == 1
    (line,) = process.lines  # nothing else: no traceback, no line from gRPC's C core
    failure = json.loads(line)
    assert (failure["event"], failure["variable"], failure["addr"]) == (
        "startup_failed",
        "ORRERY_A2A_AUTHZ_ADDR",
        f"127.0.0.1:{port}",
    )
    assert "set ORRERY_A2A_AUTHZ_ADDR to a free address" in failure["error"]


@pytest.mark.parametrize("variable", ["ORRERY_A2A_AUTHZ_DIAG_ADDR", "ORRERY_A2A_AUTHZ_HTTP_ADDR"])
def test_a_taken_address_names_its_variable(
    started: list[EventProcess], jwks_file: Path, variable: str
) -> None:
    """The diagnostics or HTTP transport's port taken: one `startup_failed` naming its variable
    (with the system's reason), and exit 1."""
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        env = {**base_env(jwks_file=jwks_file), variable: f"127.0.0.1:{port}"}
        process = start(started, env)
        failure = process.wait_for("startup_failed")
        assert failure["variable"] == variable
        assert str(port) in failure["error"]
        assert "Address already in use" in failure["error"]
        assert process.finish() == 1


def test_workers_share_one_port_and_one_metrics_endpoint(
    started: list[EventProcess], jwks_file: Path, issuer: Issuer, redis_url: str
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
    url = f"http://{serving['diag']}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        body = response.read().decode()
    assert 'orrery_authz_decisions_total{decision="allow",reason="ok"} 4.0' in body
    assert body.count("orrery_authz_build_info{") == 1  # the workers' gauges merged into one
    assert diag_get(serving["diag"], "/readyz") == (200, {"keys": "ok", "serving": "ok"})
    assert process.stop(signal.SIGTERM) == 0


def diag_get(address: str, path: str) -> tuple[int, dict[str, str]]:
    """GET a diagnostics path; (status, the `checks` of a readiness answer, else {})."""
    try:
        with urllib.request.urlopen(f"http://{address}{path}", timeout=10) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as error:
        status, body = error.code, error.read()
    return status, dict(json.loads(body).get("checks", {}))


def test_the_diagnostics_address_answers_probes_from_any_address(
    started: list[EventProcess], jwks_file: Path
) -> None:
    """ORRERY_A2A_AUTHZ_DIAG_ADDR on every address (a pod): /healthz and /readyz answer on
    another address than 127.0.0.1 (as a kubelet reaches a pod's address), while the Check port
    stays on 127.0.0.1 alone."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_AUTHZ_DIAG_ADDR": "0.0.0.0:0"}
    process = start(started, env)
    serving = process.wait_for("serving")
    port = serving["diag"].rpartition(":")[2]
    assert diag_get(f"{OTHER_ADDRESS}:{port}", "/healthz")[0] == 200
    assert diag_get(f"{OTHER_ADDRESS}:{port}", "/readyz") == (200, {"keys": "ok", "serving": "ok"})
    grpc_port = serving["grpc"].rpartition(":")[2]
    with socket.socket() as probe, pytest.raises(OSError):
        probe.settimeout(5)
        probe.connect((OTHER_ADDRESS, int(grpc_port)))
    assert process.stop(signal.SIGTERM) == 0


def test_not_ready_while_keys_are_unusable(
    started: list[EventProcess], jwks_file: Path, tmp_path: Path
) -> None:
    """A JWKS that cannot load: alive, but /readyz is 503 naming the keys (and gRPC health
    NOT_SERVING) — the pod leaves the Service instead of answering 503 to every caller."""
    env = {**base_env(), "ORRERY_A2A_JWKS_FILE": str(tmp_path / "no-such-jwks.json")}
    process = start(started, env)
    serving = process.wait_for("serving")
    assert serving["keys_usable"] is False
    assert diag_get(serving["diag"], "/healthz")[0] == 200
    assert diag_get(serving["diag"], "/readyz") == (503, {"keys": "unusable", "serving": "ok"})
    assert health(serving["grpc"]) == health_pb2.HealthCheckResponse.NOT_SERVING
    assert process.stop(signal.SIGTERM) == 0


def test_a_dead_worker_stops_the_service_with_exit_1(
    started: list[EventProcess], jwks_file: Path, redis_url: str
) -> None:
    """If a worker dies, the parent stops the rest and exits 1 for the supervisor to restart."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_REDIS_URL": redis_url}
    process = start(started, env, "--workers", "2")
    process.wait_for("serving")
    victim = next(e["pid"] for e in process.events if e["event"] == "worker_serving")
    os.kill(victim, signal.SIGKILL)
    assert process.wait_for("worker_died")["exitcode"] == -signal.SIGKILL
    assert process.finish() == 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_workers_die_with_a_parent_killed_outright(
    started: list[EventProcess], jwks_file: Path, redis_url: str
) -> None:
    """SIGKILL gives the parent no chance to stop its workers; the kernel does, so no worker
    stays behind serving old keys on the shared port, and the ports are free again."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_REDIS_URL": redis_url}
    process = start(started, env, "--workers", "2")
    serving = process.wait_for("serving")
    tree = descendants(process.pid)
    workers = {e["pid"] for e in process.events if e["event"] == "worker_serving"}
    assert workers <= tree
    # What a killed parent cannot remove (docs/authz.md): its merged-metrics directory.
    metrics_dir = environ(next(iter(workers)))["PROMETHEUS_MULTIPROC_DIR"]
    try:
        process.proc.kill()
        assert process.finish() == -signal.SIGKILL
        assert wait_gone(tree) == set()
        assert port_free(serving["grpc"])
        assert port_free(serving["diag"])
    finally:
        shutil.rmtree(metrics_dir, ignore_errors=True)


def test_a_stop_while_a_worker_starts_is_not_held_up(
    started: list[EventProcess], redis_url: str
) -> None:
    """SIGTERM while the first worker is still loading its keys: the parent stops it and exits 0
    at once, without starting the others or logging `serving`, and leaves no process behind."""
    with socket.create_server(("127.0.0.1", 0)) as silent_jwks:  # accepts, never answers
        port = silent_jwks.getsockname()[1]
        env = {
            **base_env(jwks_url=f"http://127.0.0.1:{port}/jwks.json"),
            "ORRERY_A2A_JWKS_TIMEOUT": "120s",
            "ORRERY_A2A_REDIS_URL": redis_url,
        }
        process = start(started, env, "--workers", "2")
        silent_jwks.settimeout(60)
        fetching, _ = silent_jwks.accept()  # the first worker is starting: it asks for keys
        tree = descendants(process.pid)
        process.proc.send_signal(signal.SIGTERM)
        fetching.close()  # lets that worker's start-up end, so it can act on its SIGTERM
        assert process.finish(timeout=30) == 0
    events = [e["event"] for e in process.events]
    assert "serving" not in events
    assert events.count("worker_serving") <= 1  # the second worker was never started
    assert events[-1] == "stopped"
    assert wait_gone(tree) == set()


def test_serving_is_logged_even_when_decisions_are_not(
    started: list[EventProcess], jwks_file: Path, issuer: Issuer
) -> None:
    """ORRERY_A2A_LOG_LEVEL=WARNING silences decisions, never the start and stop events."""
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_LOG_LEVEL": "WARNING"}
    process = start(started, env)
    serving = process.wait_for("serving")
    assert check_once(serving["grpc"], issuer.token()) == 0
    assert process.stop() == 0
    assert [e["event"] for e in process.events] == ["serving", "stopped"]


def http_check(address: str, token: str | None) -> int:
    """One check as Envoy's HTTP ext_authz client sends it; the status."""
    headers = {"x-request-id": "req-1"}
    if token is not None:
        headers["authorization"] = f"Bearer {token}"
    host, _, port = address.rpartition(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        connection.request("GET", "/ext_authz/a2a", headers=headers)
        return connection.getresponse().status
    finally:
        connection.close()


def test_http_health_is_503_while_keys_are_unusable(
    started: list[EventProcess], tmp_path: Path
) -> None:
    """The HTTP transport's /healthz says what gRPC health says: not serving without keys."""
    env = {
        **base_env(),
        "ORRERY_A2A_JWKS_FILE": str(tmp_path / "no-such-jwks.json"),
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
    }
    process = start(started, env)
    serving = process.wait_for("serving")
    assert diag_get(serving["http"], "/healthz")[0] == 503
    assert process.stop(signal.SIGTERM) == 0


def test_workers_share_the_http_port_too(
    started: list[EventProcess], jwks_file: Path, issuer: Issuer, redis_url: str
) -> None:
    """--workers 2 with the HTTP transport: both serve one HTTP port beside the gRPC one."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_REDIS_URL": redis_url,
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
    }
    process = start(started, env, "--workers", "2")
    serving = process.wait_for("serving")
    workers = [e for e in process.events if e["event"] == "worker_serving"]
    assert {e["http"] for e in workers} == {serving["http"]}
    statuses = [http_check(serving["http"], issuer.token()) for _ in range(4)]
    assert statuses == [200] * 4
    assert http_check(serving["http"], None) == 401
    assert process.stop(signal.SIGTERM) == 0
