"""Cost of one Check: the real authz service vs a do-nothing grpcio Check server, same run.

    .venv/bin/python bench/authz_bench.py [--requests 20000] [--rounds 3]

Every server runs as its own process and is driven the same way: `h2load` (a C HTTP/2 load
generator, so the client is never the bottleneck on a small machine) posts one pre-encoded gRPC
CheckRequest — the headers Envoy would forward, a bearer token, a traceparent — over a few
HTTP/2 connections with many concurrent streams, like Envoy's ext_authz client. For each case
we read the server process's CPU time (utime + stime, all threads, from /proc/<pid>/stat)
before and after the run and report CPU per request and requests per second.

Cases:
  baseline        a grpc.aio servicer returning a constant OK CheckResponse (same options)
  cached ES256    authz, token found in the verified-token cache (the steady state)
  uncached ES256  authz with ORRERY_A2A_TOKEN_CACHE_SIZE=0: full verification every request
  uncached RS256  the same with an RS256 (2048-bit) token
  (for information) cached ES256 with ORRERY_A2A_LOG_LEVEL=WARNING: what the per-decision
                  JSON log line costs

Then the cost of the diagnostics address beside the Check: authz CPU per `/healthz`, `/readyz`
and `/metrics` request (200 of each, one at a time), and what a kubelet probing both every 10 s
plus a scrape every 15 s add per second.

The real service runs as configured by default except the rate limit (set high enough never to
refuse) and its decision log, which goes to a file (one JSON line per Check, as in production).
After each run the service's own metrics must show every request allowed, or the run is void.
Cases are interleaved over rounds; each round's CPU is divided by the baseline of the same round
(the machine's load drifts between rounds), and the median and range of those ratios printed.
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
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest, CheckResponse

from contract.assertion import new_keys_spec
from runtime import logs
from runtime.serving import log_serving, serving_fields

ISSUER = "https://issuer.bench"
AUDIENCE = "orrery-a2a"
CHECK_PATH = "/envoy.service.auth.v3.Authorization/Check"
BASELINE = "baseline (do-nothing)"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


# --- the do-nothing baseline server (runs in its own process: `--baseline-server`) -----------


# the generated servicer base is untyped (Any)
class NothingService(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    """Allows everything without looking: the floor any Python grpcio Check server pays."""

    def __init__(self) -> None:
        self._ok = CheckResponse()
        self._ok.status.code = 0

    # N802: the gRPC method's name is fixed by the service definition
    async def Check(self, request: CheckRequest, context: Any) -> CheckResponse:  # noqa: N802
        return self._ok


async def serve_baseline() -> None:
    from authz.server import grpc_options

    server = grpc.aio.server(options=grpc_options(reuse_port=False))
    external_auth_pb2_grpc.add_AuthorizationServicer_to_server(NothingService(), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    logs.configure()
    log_serving(logging.getLogger("bench.baseline"), grpc=f"127.0.0.1:{port}")
    await server.wait_for_termination()


# --- fixtures: keys, tokens, the request body ---------------------------------------------------


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
            "x-request-id": "5a0f9d4e-6c1b-4f57-9a43-0d3c2b1e8f77",
            "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        }
    )
    request.attributes.context_extensions["surface"] = "a2a"
    payload = bytes(request.SerializeToString())
    return b"\x00" + len(payload).to_bytes(4, "big") + payload


# --- processes and measurement -------------------------------------------------------------------


@dataclass
class Server:
    name: str
    proc: subprocess.Popen[bytes]
    grpc: str
    metrics: str | None

    def cpu_seconds(self) -> float:
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime, stime

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
                return Server(name, proc, event["grpc"], event.get("diag"))
        if proc.poll() is not None:
            raise SystemExit(f"{name} exited: {log.read_text()[-2000:]}")
        time.sleep(0.05)
    raise SystemExit(f"{name} did not start")


@dataclass
class Run:
    cpu_us: float
    rps: float
    mean_ms: float


def h2load(
    server: Server, body: Path, requests: int, connections: int, streams: int
) -> tuple[float, float]:
    out = subprocess.run(
        [
            "h2load",
            "-n",
            str(requests),
            "-c",
            str(connections),
            "-m",
            str(streams),
            "-d",
            str(body),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            f"http://{server.grpc}{CHECK_PATH}",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    done = re.search(r"requests: \d+ total, \d+ started, \d+ done, (\d+) succeeded", out)
    rps = re.search(r"finished in [\d.]+\w+, ([\d.]+) req/s", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if not (done and rps and mean) or int(done[1]) != requests:
        raise SystemExit(f"h2load run failed against {server.name}:\n{out}")
    scale = {"us": 0.001, "ms": 1.0, "s": 1000.0}
    unit = mean[1].lstrip("0123456789.")
    value = mean[1][: -len(unit)]
    return float(rps[1]), float(value) * scale[unit]


def measure(server: Server, body: Path, args: argparse.Namespace) -> Run:
    h2load(server, body, args.requests // 10, args.connections, args.streams)  # warm up
    allowed_before, cpu_before = server.allowed(), server.cpu_seconds()
    rps, mean_ms = h2load(server, body, args.requests, args.connections, args.streams)
    cpu = server.cpu_seconds() - cpu_before
    if server.metrics is not None and server.allowed() - allowed_before != args.requests:
        raise SystemExit(f"{server.name}: not every request was allowed; the run is void")
    return Run(cpu / args.requests * 1e6, rps, mean_ms)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=2)
    parser.add_argument("--streams", type=int, default=32, help="concurrent streams per connection")
    parser.add_argument("--baseline-server", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.baseline_server:
        asyncio.run(serve_baseline())
        return
    if shutil.which("h2load") is None:
        raise SystemExit("h2load (nghttp2-client) is required")

    work = Path(tempfile.mkdtemp(prefix="authz-bench-"))
    es_key = ec.generate_private_key(ec.SECP256R1())
    rs_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (work / "jwks.json").write_text(
        json.dumps({"keys": [public_jwk("es", es_key, "ES256"), public_jwk("rs", rs_key, "RS256")]})
    )
    bodies = {"ES256": work / "es.bin", "RS256": work / "rs.bin"}
    bodies["ES256"].write_bytes(grpc_frame(make_token(es_key, "es", "ES256")))
    bodies["RS256"].write_bytes(grpc_frame(make_token(rs_key, "rs", "RS256")))
    env = {
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_JWT_ISSUER": ISSUER,
        "ORRERY_A2A_JWT_AUDIENCE": AUDIENCE,
        "ORRERY_CONSOLE_JWT_AUDIENCE": "orrery-console",
        "ORRERY_CONSOLE_CLIENTS": "console",
        "ORRERY_A2A_JWKS_FILE": str(work / "jwks.json"),
        "ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("bench"),
        "ORRERY_A2A_RATE_LIMIT": "100000000/second",
    }
    python = sys.executable
    authz = [python, "-m", "authz"]
    plans = {
        "baseline": ([python, __file__, "--baseline-server"], {}),
        "cached": (authz, env),
        "uncached": (authz, {**env, "ORRERY_A2A_TOKEN_CACHE_SIZE": "0"}),
        "quiet": (authz, {**env, "ORRERY_A2A_LOG_LEVEL": "WARNING"}),
    }
    servers: dict[str, Server] = {}
    results: dict[str, list[Run]] = {}
    try:
        for name, (command, extra_env) in plans.items():
            servers[name] = start(name, command, extra_env, work / f"{name}.log")
        cases = {
            BASELINE: (servers["baseline"], bodies["ES256"]),
            "authz, cached ES256": (servers["cached"], bodies["ES256"]),
            "authz, uncached ES256": (servers["uncached"], bodies["ES256"]),
            "authz, uncached RS256": (servers["uncached"], bodies["RS256"]),
            "  cached, no decision log": (servers["quiet"], bodies["ES256"]),
        }
        results = {name: [] for name in cases}
        for round_ in range(args.rounds):
            for name, (server, body) in cases.items():
                results[name].append(measure(server, body, args))
            print(f"round {round_ + 1}/{args.rounds} done", file=sys.stderr)
        diagnostics = diagnostics_cost(servers["cached"])
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    report(results, args)
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


def report(results: dict[str, list[Run]], args: argparse.Namespace) -> None:
    """Medians, and the CPU ratio to the baseline measured in the same round (median, range)."""
    base_runs = results[BASELINE]
    print(
        f"{args.requests} requests x {args.rounds} rounds, h2load -c {args.connections} "
        f"-m {args.streams}; medians; nproc={os.cpu_count()}"
    )
    print(
        f"{'case':<28}{'CPU us/req':>11}{'x base':>8}{'(range)':>13}"
        f"{'req/s':>8}{'x base':>8}{'mean ms':>9}"
    )
    base_rps = statistics.median(run.rps for run in base_runs)
    for name, runs in results.items():
        ratios = [run.cpu_us / base.cpu_us for run, base in zip(runs, base_runs, strict=True)]
        rps = statistics.median(run.rps for run in runs)
        print(
            f"{name:<28}{statistics.median(run.cpu_us for run in runs):>11.1f}"
            f"{statistics.median(ratios):>8.2f}{f'{min(ratios):.2f}-{max(ratios):.2f}':>13}"
            f"{rps:>8.0f}{rps / base_rps:>8.2f}"
            f"{statistics.median(run.mean_ms for run in runs):>9.2f}"
        )


if __name__ == "__main__":
    main()
