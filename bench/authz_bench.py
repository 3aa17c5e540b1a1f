"""Cost of one Check on either transport: authz vs a do-nothing server of the same transport.

    .venv/bin/python bench/authz_bench.py [--transport grpc|http] [--requests 20000] [--rounds 3]

Every server runs as its own process and is driven the same way, by `h2load` (a C load
generator, so the client is never the bottleneck on a small machine), with the check Envoy sends
on that transport (`Load`):

* gRPC: one pre-encoded CheckRequest — the headers Envoy forwards, a bearer token, a traceparent
  — posted over 2 HTTP/2 connections with 32 concurrent streams each, like Envoy's gRPC client;
* HTTP: `GET /ext_authz/a2a` with Host, the bearer token, an x-request-id and a traceparent, over
  8 kept-alive HTTP/1.1 connections, one request at a time on each (Envoy's HTTP/1.1 pool never
  pipelines).

For each case we read the server process's CPU time (utime + stime, all threads, from
/proc/<pid>/stat) before and after the run and report CPU per request and requests per second.

Cases, on the chosen transport:
  baseline        the do-nothing server of that transport: a grpc.aio servicer returning a constant
                  OK CheckResponse (authz's server options), or an `asyncio.Protocol` that parses
                  each request with `httptools` (as authz does) and answers a constant `200`
  cached ES256    authz, token found in the verified-token cache (the steady state)
  uncached ES256  authz with ORRERY_A2A_TOKEN_CACHE_SIZE=0: full verification every request
  uncached RS256  the same with an RS256 (2048-bit) token
  (for information) cached ES256 with ORRERY_A2A_LOG_LEVEL=WARNING: what the per-decision
                  JSON log line costs

On gRPC it then measures the diagnostics address beside the Check: authz CPU per `/healthz`,
`/readyz` and `/metrics` request (200 of each, one at a time), and what a kubelet probing both
every 10 s plus a scrape every 15 s add per second.

The real service runs as configured by default except the rate limit (set high enough never to
refuse) and its decision log, which goes to a file (one JSON line per Check, as in production).
After each run the service's own metrics must show every request allowed, or the run is void.
Cases are interleaved over rounds; each round's CPU is divided by the baseline of the same round
(the machine's load drifts between rounds), and the median and range of those ratios printed.
`python -m bench` runs the cached case on both transports with this harness (P1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import grpc
import httptools
import jwt
from adapter_bench import cpu_seconds
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest, CheckResponse

from contract.assertion import new_keys_spec
from runtime import logs
from runtime.serving import log_serving, serving_fields

ISSUER = "https://issuer.bench"
AUDIENCE = "orrery-a2a"
CHECK_PATH = "/envoy.service.auth.v3.Authorization/Check"
HTTP_CHECK_PATH = "/ext_authz/a2a"
BASELINE = "baseline (do-nothing)"
Transport = Literal["grpc", "http"]
TRANSPORTS: tuple[Transport, ...] = ("grpc", "http")
GOAL_RATIO = 1.3  # P1: a cached Check ≤ 1.3x the do-nothing server of the same transport
GOAL_HTTP_CPU_US = 100.0  # and on the HTTP transport ≤ 100 µs CPU


# --- the do-nothing servers (each in its own process: `--baseline-server grpc|http`) -----------


# the generated servicer base is untyped (Any)
class NothingService(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    """Allows everything without looking: the floor any Python grpcio Check server pays."""

    def __init__(self) -> None:
        self._ok = CheckResponse()
        self._ok.status.code = 0

    # N802: the gRPC method's name is fixed by the service definition
    async def Check(self, request: CheckRequest, context: Any) -> CheckResponse:  # noqa: N802
        return self._ok


OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class NothingProtocol(asyncio.Protocol):
    """Parses each request (httptools, like authz) and allows it without looking: the floor of
    any correct Python HTTP ext_authz server."""

    def __init__(self) -> None:
        self._parser = httptools.HttpRequestParser(self)
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError:
            if self._transport is not None:
                self._transport.close()

    def on_message_complete(self) -> None:
        if self._transport is not None:
            self._transport.write(OK)


async def serve_baseline(transport: Transport) -> None:
    logger = logging.getLogger("bench.baseline")
    if transport == "http":
        loop = asyncio.get_running_loop()
        server = await loop.create_server(NothingProtocol, "127.0.0.1", 0)
        logs.configure()
        log_serving(logger, http=f"127.0.0.1:{server.sockets[0].getsockname()[1]}")
        await server.serve_forever()
        return
    from authz.server import grpc_options

    grpc_server = grpc.aio.server(options=grpc_options(reuse_port=False))
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(NothingService(), grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    await grpc_server.start()
    logs.configure()
    log_serving(logger, grpc=f"127.0.0.1:{port}")
    await grpc_server.wait_for_termination()


def baseline_command(transport: Transport) -> list[str]:
    return [sys.executable, __file__, "--baseline-server", transport]


# --- fixtures: keys, tokens, what each transport sends ------------------------------------------


def public_jwk(kid: str, key: Any, alg: str) -> dict[str, Any]:
    jwk: dict[str, Any] = json.loads(
        jwt.algorithms.get_default_algorithms()[alg].to_jwk(key.public_key())
    )
    return {**jwk, "kid": kid, "alg": alg, "use": "sig"}


def make_token(key: Any, kid: str, alg: str) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "bench-client",
        "client_id": "bench-client",
        "iat": now,
        "exp": now + 3600,
        "roles": ["operator"],
    }
    return jwt.encode(claims, key, algorithm=alg, headers={"kid": kid, "typ": "JWT"})


REQUEST_ID = "5a0f9d4e-6c1b-4f57-9a43-0d3c2b1e8f77"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def grpc_frame(token: str) -> bytes:
    """One CheckRequest as Envoy sends it (its allowed_headers), in a gRPC frame."""
    request = CheckRequest()
    http = request.attributes.request.http
    http.method, http.path, http.host, http.scheme, http.protocol = (
        "POST",
        "/a2a",
        "127.0.0.1:8080",
        "http",
        "HTTP/1.1",
    )
    http.headers.update(
        {
            ":authority": "127.0.0.1:8080",
            ":method": "POST",
            ":path": "/a2a",
            "authorization": f"Bearer {token}",
            "x-request-id": REQUEST_ID,
            "traceparent": TRACEPARENT,
        }
    )
    request.attributes.context_extensions["surface"] = "a2a"
    payload = bytes(request.SerializeToString())
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


@dataclass(frozen=True)
class Load:
    """How h2load sends one transport's check, as Envoy's client for it would."""

    transport: Transport
    flags: tuple[str, ...]
    path: str
    connections: int
    streams: int  # concurrent requests per connection


def load_for(transport: Transport, token: str, body: Path) -> Load:
    """The check carrying `token` (gRPC: its frame is written to `body`)."""
    if transport == "grpc":
        body.write_bytes(grpc_frame(token))
        frame = ("-d", str(body), "-H", "content-type: application/grpc", "-H", "te: trailers")
        return Load("grpc", frame, CHECK_PATH, connections=2, streams=32)
    headers = (
        f"authorization: Bearer {token}",
        f"x-request-id: {REQUEST_ID}",
        f"traceparent: {TRACEPARENT}",
        "content-length: 0",
    )
    flags = ("--h1", *(flag for header in headers for flag in ("-H", header)))
    return Load("http", flags, HTTP_CHECK_PATH, connections=8, streams=1)


def bench_env(jwks_file: Path) -> dict[str, str]:
    """authz's settings as configured by default, but for the rate limit, never refusing."""
    return {
        "ORRERY_A2A_JWT_ISSUER": ISSUER,
        "ORRERY_A2A_JWT_AUDIENCE": AUDIENCE,
        "ORRERY_CONSOLE_JWT_AUDIENCE": "orrery-console",
        "ORRERY_CONSOLE_CLIENTS": "console",
        "ORRERY_A2A_JWKS_FILE": str(jwks_file),
        "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("bench"),
        "ORRERY_A2A_RATE_LIMIT": "100000000/second",
    }


def authz_env(jwks_file: Path) -> dict[str, str]:
    """`bench_env` on both transports and the diagnostics address, each port chosen by the OS."""
    return {
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
        **bench_env(jwks_file),
    }


# --- processes and measurement -------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    addresses: dict[Transport, str]  # host:port
    metrics: str | None

    def address(self, transport: Transport) -> str:
        return self.addresses[transport]

    def cpu_seconds(self) -> float:
        return cpu_seconds(self.proc.pid)  # utime + stime, every thread

    def allowed(self) -> float:
        if self.metrics is None:
            return float("nan")
        with urllib.request.urlopen(f"http://{self.metrics}/metrics", timeout=10) as reply:
            body = reply.read().decode()
        match = re.search(
            r'orrery_authz_decisions_total\{decision="allow",reason="ok"\} (\S+)', body
        )
        return float(match[1]) if match else 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start(name: str, args: list[str], env: dict[str, str], log: Path) -> Server:
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            args, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=sink
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            event = serving_fields(line)
            if event is not None:
                addresses = {key: str(event[key]) for key in TRANSPORTS if event.get(key)}
                return Server(name, proc, addresses, event.get("diag"))
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise SystemExit(f"{name} did not start")


@dataclass
class Run:
    cpu_us: float
    rps: float
    mean_ms: float


def h2load(server: Server, load: Load, requests: int) -> Run:
    """`requests` checks; the server's CPU per check over the run, h2load's req/s and mean."""
    argv = ["h2load", "-n", str(requests), "-c", str(load.connections), "-m", str(load.streams)]
    argv += [*load.flags, f"http://{server.address(load.transport)}{load.path}"]
    cpu_before = server.cpu_seconds()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    cpu = server.cpu_seconds() - cpu_before
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if not (done and status and rps and mean) or {int(done[1]), int(status[1])} != {requests}:
        raise SystemExit(f"h2load run failed against {server.name}:\n{out}")
    unit = mean[1].lstrip("0123456789.")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    return Run(cpu / requests * 1e6, float(rps[1]), float(mean[1][: -len(unit)]) * scale)


def measure(server: Server, load: Load, requests: int) -> Run:
    h2load(server, load, max(1, requests // 10))  # warm up (and fill the token cache)
    allowed_before = server.allowed()
    run = h2load(server, load, requests)
    if server.metrics is not None and server.allowed() - allowed_before != requests:
        raise SystemExit(f"{server.name}: not every request was allowed; the run is void")
    return run


Case = tuple[Server, Load]


def rounds(
    cases: dict[str, Case], requests: Mapping[Transport, int], count: int
) -> dict[str, list[Run]]:
    """Every case once a round, interleaved, `count` rounds, `requests[transport]` each."""
    results: dict[str, list[Run]] = {name: [] for name in cases}
    for number in range(count):
        for name, (server, load) in cases.items():
            results[name].append(measure(server, load, requests[load.transport]))
        print(f"  round {number + 1}/{count} done", file=sys.stderr, flush=True)
    return results


def cpu_ratios(runs: list[Run], baseline: list[Run]) -> list[float]:
    """CPU per request over the same round's baseline (NaN where the baseline's run was shorter
    than a clock tick: too few requests to measure)."""
    return [
        run.cpu_us / base.cpu_us if base.cpu_us else math.nan
        for run, base in zip(runs, baseline, strict=True)
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--transport", choices=TRANSPORTS, default="grpc")
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline-server", choices=TRANSPORTS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        asyncio.run(serve_baseline(args.baseline_server))
        return
    if shutil.which("h2load") is None:
        raise SystemExit("h2load (nghttp2-client) is required")

    transport: Transport = args.transport
    work = Path(tempfile.mkdtemp(prefix="authz-bench-"))
    es_key = ec.generate_private_key(ec.SECP256R1())
    rs_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (work / "jwks.json").write_text(
        json.dumps({"keys": [public_jwk("es", es_key, "ES256"), public_jwk("rs", rs_key, "RS256")]})
    )
    es = load_for(transport, make_token(es_key, "es", "ES256"), work / "es.bin")
    rs = load_for(transport, make_token(rs_key, "rs", "RS256"), work / "rs.bin")
    env = authz_env(work / "jwks.json")
    authz = [sys.executable, "-m", "authz"]
    plans = {
        "baseline": (baseline_command(transport), {}),
        "cached": (authz, env),
        "uncached": (authz, {**env, "ORRERY_A2A_TOKEN_CACHE_SIZE": "0"}),
        "quiet": (authz, {**env, "ORRERY_A2A_LOG_LEVEL": "WARNING"}),
    }
    servers: dict[str, Server] = {}
    try:
        for name, (command, extra_env) in plans.items():
            servers[name] = start(name, command, extra_env, work / f"{name}.log")
        cases = {
            BASELINE: (servers["baseline"], es),
            "authz, cached ES256": (servers["cached"], es),
            "authz, uncached ES256": (servers["uncached"], es),
            "authz, uncached RS256": (servers["uncached"], rs),
            "  cached, no decision log": (servers["quiet"], es),
        }
        results = rounds(cases, {transport: args.requests}, args.rounds)
        diagnostics = diagnostics_cost(servers["cached"]) if transport == "grpc" else None
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args, es)
    if diagnostics is not None:
        report_diagnostics(diagnostics)


DIAGNOSTICS = ("/healthz", "/readyz", "/metrics")


def diagnostics_cost(server: Server, requests: int = 200) -> dict[str, float]:
    """authz CPU (ms) per request to each diagnostics path, off the Check's listener."""
    cost = {}
    for path in DIAGNOSTICS:
        before = server.cpu_seconds()
        for _ in range(requests):
            with urllib.request.urlopen(f"http://{server.metrics}{path}", timeout=10) as reply:
                reply.read()
        cost[path] = (server.cpu_seconds() - before) / requests * 1e3
    return cost


def report_diagnostics(cost: dict[str, float]) -> None:
    kubelet = (cost["/healthz"] + cost["/readyz"]) / 10 + cost["/metrics"] / 15
    print(
        "diagnostics address, authz CPU per request: "
        + ", ".join(f"{path} {ms:.2f} ms" for path, ms in cost.items())
    )
    print(f"  probes every 10 s and a scrape every 15 s: {kubelet:.3f} ms CPU per second")


def report(results: dict[str, list[Run]], args: argparse.Namespace, load: Load) -> None:
    """Medians, the CPU ratio to the same round's baseline (median, range), and P1's goals."""
    base_runs = results[BASELINE]
    print(
        f"{args.transport}: {args.requests} requests x {args.rounds} rounds, h2load "
        f"-c {load.connections} -m {load.streams}; medians; nproc={os.cpu_count()}"
    )
    print(
        f"{'case':<28}{'CPU us/req':>11}{'x base':>8}{'(range)':>13}"
        f"{'req/s':>8}{'x base':>8}{'mean ms':>9}"
    )
    base_rps = statistics.median(run.rps for run in base_runs)
    for name, runs in results.items():
        ratios = cpu_ratios(runs, base_runs)
        rps = statistics.median(run.rps for run in runs)
        print(
            f"{name:<28}{statistics.median(run.cpu_us for run in runs):>11.1f}"
            f"{statistics.median(ratios):>8.2f}{f'{min(ratios):.2f}-{max(ratios):.2f}':>13}"
            f"{rps:>8.0f}{rps / base_rps:>8.2f}"
            f"{statistics.median(run.mean_ms for run in runs):>9.2f}"
        )
    cached = results["authz, cached ES256"]
    ratio = statistics.median(cpu_ratios(cached, base_runs))
    goals = [f"cached <= {GOAL_RATIO}x the do-nothing server: {ratio:.2f}x ({verdict(ratio)})"]
    if args.transport == "http":
        cpu = statistics.median(run.cpu_us for run in cached)
        goals.append(
            f"<= {GOAL_HTTP_CPU_US:.0f} us CPU: {cpu:.1f} us ({verdict(cpu, GOAL_HTTP_CPU_US)})"
        )
    print("goals: " + "; ".join(goals))


def verdict(value: float, limit: float = GOAL_RATIO) -> str:
    return "met" if value <= limit else "NOT met"


if __name__ == "__main__":
    main()
