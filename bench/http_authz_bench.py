"""Cost of one HTTP ext_authz check: authz's HTTP transport vs a do-nothing server on the same one.

    .venv/bin/python bench/http_authz_bench.py [--requests 20000] [--rounds 5]

The goal (issue 14): a cached check on the HTTP transport costs at most 1.3x the CPU of a
do-nothing HTTP ext_authz server on the same transport, and at most 100 us CPU. The baseline is
what any correct Python server on this path pays: an `asyncio.Protocol` that parses each request
with `httptools` (as authz does) and answers a constant `200` — nothing decided, nothing signed,
nothing logged. Both run as their own processes with the default event loop.

Each is driven the same way: `h2load --h1` (a C load generator, so the client is never the
bottleneck on a small machine) sends the check Envoy would send — `GET /ext_authz/a2a` with
Host, a bearer token (ES256, found in authz's verified-token cache after the warm-up), an
x-request-id and a traceparent — over `--connections` kept-alive HTTP/1.1 connections, one
request at a time on each (Envoy's HTTP/1.1 pool never pipelines). CPU per request is the server
process's utime + stime (/proc/<pid>/stat) over the run; authz's own metrics must show every
request allowed, or the run is void. Cases are interleaved over rounds; each round's CPU is
divided by the same round's baseline, and the median and range of those ratios are printed.

Cases:
  baseline (do-nothing)       the httptools + asyncio.Protocol server answering 200
  authz HTTP, cached ES256    `python -m authz` with ORRERY_A2A_AUTHZ_HTTP_ADDR, defaults
                              (decision log to a file, in-process limiter set never to refuse)
  (for information) the same with ORRERY_A2A_LOG_LEVEL=WARNING: what the decision log costs

`--through-envoy` measures the same checks as Envoy makes them: one Envoy per case, on
envoy/envoy.yaml rendered by the stack's renderer (1 worker thread, the per-address budget raised),
in front of another do-nothing server as the upstream; h2load sends `POST /a2a` with the token to
Envoy. Cases: ext_authz over gRPC to authz, over HTTP to authz (one authz process serves both),
and over HTTP to the do-nothing server (the floor of Envoy + a Python HTTP ext_authz service).
Reported: requests/s, and CPU per request of Envoy and of the ext_authz process.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httptools
import jwt
from cryptography.hazmat.primitives.asymmetric import ec

from contract.assertion import new_keys_spec
from runtime import logs
from runtime.serving import log_serving, serving_fields
from stack import envoy_config
from stack.edge_policy import EdgePolicy
from stack.up import free_port

ISSUER = "https://issuer.bench"
AUDIENCE = "orrery-a2a"
BASELINE = "baseline (do-nothing)"
CACHED = "authz HTTP, cached ES256"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
GOAL_RATIO = 1.3
GOAL_CPU_US = 100.0


# --- the do-nothing baseline server (runs in its own process: `--baseline-server`) -----------

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"


class NothingProtocol(asyncio.Protocol):
    """Parses each request (httptools, like authz) and allows it without looking."""

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


async def serve_baseline() -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(NothingProtocol, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    logs.configure()
    log_serving(logging.getLogger("bench.baseline"), http=f"127.0.0.1:{port}")
    await server.serve_forever()


# --- processes and measurement -------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    http: str
    diag: str | None
    grpc: str | None = None

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

    def allowed(self) -> float:
        """Allows in authz's metrics (NaN for the baseline, which has none)."""
        if self.diag is None:
            return float("nan")
        with urllib.request.urlopen(f"http://{self.diag}/metrics", timeout=10) as reply:
            body = reply.read().decode()
        match = re.search(
            r'orrery_authz_decisions_total\{decision="allow",reason="ok"\} (\S+)', body
        )
        return float(match[1]) if match else 0.0

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start(name: str, argv: list[str], env: dict[str, str], log: Path) -> Server:
    with log.open("wb") as sink:
        proc = subprocess.Popen(
            argv, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=sink
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        for line in log.read_text().splitlines():
            event = serving_fields(line)
            if event is not None:
                http, diag, grpc = str(event["http"]), event.get("diag"), event.get("grpc")
                return Server(name, proc, http, diag, grpc)
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise SystemExit(f"{name} did not start")


@dataclass
class Run:
    cpu_us: float
    rps: float
    mean_ms: float


def h2load(server: Server, headers: list[str], requests: int, connections: int) -> Run:
    argv = ["h2load", "--h1", "-n", str(requests), "-c", str(connections), "-m", "1"]
    for header in headers:
        argv += ["-H", header]
    argv.append(f"http://{server.http}/ext_authz/a2a")
    cpu_before = server.cpu_seconds()
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    cpu = server.cpu_seconds() - cpu_before
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    status = re.search(r"status codes: (\d+) 2xx", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if not (done and status and rps and mean) or int(status[1]) != requests:
        raise SystemExit(f"h2load run failed against {server.name}:\n{out}")
    unit = mean[1].lstrip("0123456789.")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]
    return Run(cpu / requests * 1e6, float(rps[1]), float(mean[1][: -len(unit)]) * scale)


def measure(server: Server, headers: list[str], args: argparse.Namespace) -> Run:
    h2load(server, headers, args.requests // 10, args.connections)  # warm up (and cache)
    allowed_before = server.allowed()
    run = h2load(server, headers, args.requests, args.connections)
    if server.diag is not None and server.allowed() - allowed_before != args.requests:
        raise SystemExit(f"{server.name}: not every request was allowed; the run is void")
    return run


def check_headers(token: str) -> list[str]:
    """What Envoy's HTTP ext_authz client sends besides the request line (h2load adds Host)."""
    return [
        f"authorization: Bearer {token}",
        "x-request-id: 5a0f9d4e-6c1b-4f57-9a43-0d3c2b1e8f77",
        "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        "content-length: 0",
    ]


def es256_token(work: Path) -> str:
    """A cached-path token and the JWKS file that verifies it."""
    key = ec.generate_private_key(ec.SECP256R1())
    algorithm = jwt.algorithms.get_default_algorithms()["ES256"]
    jwk: dict[str, Any] = json.loads(algorithm.to_jwk(key.public_key()))
    jwks = {"keys": [{**jwk, "kid": "es", "alg": "ES256", "use": "sig"}]}
    (work / "jwks.json").write_text(json.dumps(jwks))
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
    return jwt.encode(claims, key, algorithm="ES256", headers={"kid": "es", "typ": "JWT"})


def pid_cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


@dataclass
class Edge:
    """One Envoy in front of `upstream`, its ext_authz calling `authz` over `transport`."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    authz_pid: int

    @classmethod
    def start(
        cls,
        name: str,
        work: Path,
        *,
        authz: Server,
        address: str,
        transport: envoy_config.AuthzTransport,
        upstream: str,
    ) -> Edge:
        host, _, port = address.rpartition(":")
        up_host, _, up_port = upstream.rpartition(":")
        listen = ("127.0.0.1", free_port("127.0.0.1"))
        config = envoy_config.render(
            envoy_config.load(envoy_config.repo_config_path()),
            listen=listen,
            admin=("127.0.0.1", 0),
            authz=(host, int(port)),
            adapter=(up_host, int(up_port)),
            policy=EdgePolicy(client_rate=(100_000_000, 1), client_burst=100_000_000),
            authz_transport=transport,
        )
        path = work / f"{name}.yaml"
        envoy_config.write(config, path)
        argv = envoy_config.envoy_command(
            envoy_config.envoy_binary(dict(os.environ)),
            path,
            admin_address_path=work / f"{name}.admin",
            concurrency=1,
        )
        with (work / f"{name}.envoy.log").open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT)
        edge = cls(name, proc, listen[1], authz.proc.pid)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"envoy for {name} exited")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{edge.port}/none", timeout=2):
                    pass
            except urllib.error.HTTPError:
                return edge  # Envoy answers (404): ready
            except OSError:
                time.sleep(0.1)
        raise SystemExit(f"envoy for {name} did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@dataclass
class EdgeRun:
    rps: float
    envoy_us: float
    authz_us: float


def through_envoy(edge: Edge, token: str, body: Path, requests: int, connections: int) -> EdgeRun:
    argv = ["h2load", "--h1", "-n", str(requests), "-c", str(connections), "-m", "1"]
    argv += ["-d", str(body), "-H", "content-type: application/json"]
    argv += ["-H", f"authorization: Bearer {token}", f"http://127.0.0.1:{edge.port}/a2a"]
    envoy_before, authz_before = pid_cpu(edge.proc.pid), pid_cpu(edge.authz_pid)
    out = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
    envoy_cpu = pid_cpu(edge.proc.pid) - envoy_before
    authz_cpu = pid_cpu(edge.authz_pid) - authz_before
    status = re.search(r"status codes: (\d+) 2xx", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    if not (status and rps) or int(status[1]) != requests:
        raise SystemExit(f"h2load through {edge.name} failed:\n{out}")
    return EdgeRun(float(rps[1]), envoy_cpu / requests * 1e6, authz_cpu / requests * 1e6)


def run_through_envoy(
    servers: dict[str, Server], token: str, work: Path, args: argparse.Namespace
) -> dict[str, list[EdgeRun]]:
    authz, nothing = servers[CACHED], servers[BASELINE]
    assert authz.grpc is not None
    body = work / "body.json"
    body.write_bytes(b"{}")
    # The upstream is a do-nothing server of its own: its CPU is no case's.
    upstream = start("upstream", [sys.executable, __file__, "--baseline-server"], {}, work / "up")
    plans: list[tuple[str, Server, str, envoy_config.AuthzTransport]] = [
        ("Envoy + do-nothing HTTP", nothing, nothing.http, "http"),
        ("Envoy + authz HTTP", authz, authz.http, "http"),
        ("Envoy + authz gRPC", authz, authz.grpc, "grpc"),
    ]
    edges: list[Edge] = []
    results: dict[str, list[EdgeRun]] = {name: [] for name, *_ in plans}
    try:
        for name, server, address, transport in plans:
            slug = re.sub(r"\W+", "-", name)
            edge = Edge.start(
                slug,
                work,
                authz=server,
                address=address,
                transport=transport,
                upstream=upstream.http,
            )
            edges.append(edge)
            edges[-1].name = name
        for round_ in range(args.rounds):
            for edge in edges:
                through_envoy(edge, token, body, args.requests // 10, args.connections)
                run = through_envoy(edge, token, body, args.requests, args.connections)
                results[edge.name].append(run)
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for edge in edges:
            edge.stop()
        upstream.stop()
    return results


def report_through_envoy(results: dict[str, list[EdgeRun]], args: argparse.Namespace) -> None:
    print(
        f"through Envoy (1 worker): {args.requests} requests x {args.rounds} rounds, "
        f"h2load --h1 -c {args.connections} -m 1; medians"
    )
    print(f"{'case':<26}{'req/s':>8}{'Envoy us/req':>14}{'ext_authz us/req':>18}")
    for name, runs in results.items():
        print(
            f"{name:<26}{statistics.median(r.rps for r in runs):>8.0f}"
            f"{statistics.median(r.envoy_us for r in runs):>14.1f}"
            f"{statistics.median(r.authz_us for r in runs):>18.1f}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument(
        "--through-envoy", action="store_true", help="the checks as Envoy makes them (see above)"
    )
    parser.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        asyncio.run(serve_baseline())
        return
    if shutil.which("h2load") is None:
        raise SystemExit("h2load (nghttp2-client) is required")

    work = Path(tempfile.mkdtemp(prefix="http-authz-bench-"))
    token = es256_token(work)
    headers = check_headers(token)
    env = {
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_JWT_ISSUER": ISSUER,
        "ORRERY_A2A_JWT_AUDIENCE": AUDIENCE,
        "ORRERY_CONSOLE_JWT_AUDIENCE": "orrery-console",
        "ORRERY_CONSOLE_CLIENTS": "console",
        "ORRERY_A2A_JWKS_FILE": str(work / "jwks.json"),
        "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("bench"),
        "ORRERY_A2A_RATE_LIMIT": "100000000/second",
    }
    python = sys.executable
    plans = {
        BASELINE: ([python, __file__, "--baseline-server"], {}),
        CACHED: ([python, "-m", "authz"], env),
        "  cached, no decision log": (
            [python, "-m", "authz"],
            {**env, "ORRERY_A2A_LOG_LEVEL": "WARNING"},
        ),
    }
    servers: dict[str, Server] = {}
    results: dict[str, list[Run]] = {name: [] for name in plans}
    try:
        for index, (name, (argv, extra)) in enumerate(plans.items()):
            servers[name] = start(name, argv, extra, work / f"{index}.log")
        if args.through_envoy:
            report_through_envoy(run_through_envoy(servers, token, work, args), args)
            return
        for round_ in range(args.rounds):
            for name, server in servers.items():
                results[name].append(measure(server, headers, args))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args)


def report(results: dict[str, list[Run]], args: argparse.Namespace) -> None:
    """Medians, the CPU ratio to the same round's baseline (median, range), and the goals."""
    base_runs = results[BASELINE]
    print(
        f"{args.requests} requests x {args.rounds} rounds, h2load --h1 -c {args.connections} "
        f"-m 1; medians; nproc={os.cpu_count()}"
    )
    print(
        f"{'case':<28}{'CPU us/req':>11}{'x base':>8}{'(range)':>13}"
        f"{'req/s':>8}{'x base':>8}{'mean ms':>9}"
    )
    base_rps = statistics.median(run.rps for run in base_runs)
    ratios: dict[str, list[float]] = {}
    for name, runs in results.items():
        ratios[name] = [run.cpu_us / base.cpu_us for run, base in zip(runs, base_runs, strict=True)]
        rps = statistics.median(run.rps for run in runs)
        print(
            f"{name:<28}{statistics.median(run.cpu_us for run in runs):>11.1f}"
            f"{statistics.median(ratios[name]):>8.2f}"
            f"{f'{min(ratios[name]):.2f}-{max(ratios[name]):.2f}':>13}"
            f"{rps:>8.0f}{rps / base_rps:>8.2f}"
            f"{statistics.median(run.mean_ms for run in runs):>9.2f}"
        )
    ratio = statistics.median(ratios[CACHED])
    cpu = statistics.median(run.cpu_us for run in results[CACHED])
    print(
        f"goal: cached check <= {GOAL_RATIO}x the do-nothing server: {ratio:.2f}x "
        f"({'met' if ratio <= GOAL_RATIO else 'NOT met'}); <= {GOAL_CPU_US:.0f} us CPU: "
        f"{cpu:.1f} us ({'met' if cpu <= GOAL_CPU_US else 'NOT met'})"
    )


if __name__ == "__main__":
    main()
