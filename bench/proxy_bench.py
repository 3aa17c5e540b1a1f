"""Envoy in front of nothing: what the token check costs at the proxy (P3) and its latency (P4).

Every case is an Envoy started from `envoy/envoy.yaml` as shipped (the client budget raised so
one address can use every connection), with the A2A routes answered by a `direct_response` (200,
`{}`) instead of the adapter, so the only work per request is Envoy's and the token check's:

| case | the token check |
|---|---|
| `authz` | ext_authz gRPC → authz (`python -m authz`, one process, as `orrery-a2a up` starts it) |
| `floor` | ext_authz gRPC → a do-nothing `grpc.aio` Check server (`authz_bench`'s baseline) |
| `jwt-authn` | Envoy's native `jwt_authn`, the JWKS inline (`e2e_bench.jwt_authn_config`) |
| `direct` | none: the ext_authz filter removed (the direct route P4 is measured against) |

P3: `wrk -t1 -c32` POSTs `/a2a` with the bearer token; requests/s per case, CPU ms per request of
Envoy and of the Check server (from /proc). P4: h2load sends 1 000 requests a second (20
connections, each paced at 50 a second) and logs every request's latency; p50/p99/p99.9 per case,
and authz's added latency is `authz` minus `direct`, percentile by percentile, round by round.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from adapter_bench import cpu_seconds
from e2e_bench import BENCH_ENV, jwt_authn_config

from runtime.addresses import parse_address
from stack import envoy_config
from stack.keys import load_signing_key, public_jwk
from stack.settings import ADDRESSES, StackSettings
from stack.state import StackState
from stack.supervisor import Supervisor
from stack.tokens import TokenRequest, mint_for_stack
from stack.up import LocalStack, envoy_component, free_port, generate_secrets

A2A_ROUTES = ("a2a", "a2a_slash")
EXT_AUTHZ = "envoy.filters.http.ext_authz"


def direct_response(config: envoy_config.Config) -> envoy_config.Config:
    """The A2A routes answer 200 `{}` themselves: no upstream, only the checks in front."""
    manager = envoy_config.listener(config)["filter_chains"][0]["filters"][0]["typed_config"]
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        if route["name"] in A2A_ROUTES:
            route.pop("route", None)
            route["direct_response"] = {"status": 200, "body": {"inline_string": "{}"}}
    return config


def without_ext_authz(config: envoy_config.Config) -> envoy_config.Config:
    manager = envoy_config.listener(config)["filter_chains"][0]["filters"][0]["typed_config"]
    manager["http_filters"] = [f for f in manager["http_filters"] if f["name"] != EXT_AUTHZ]
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        route.get("typed_per_filter_config", {}).pop(EXT_AUTHZ, None)
    return config


@dataclass
class ProxyRun:
    rps: float
    cpu_ms: dict[str, float]


@dataclass
class Latency:
    p50_ms: float
    p99_ms: float
    p999_ms: float
    errors: int


@dataclass
class ProxyResults:
    throughput: dict[str, list[ProxyRun]]
    latency: dict[str, list[Latency]]
    workers: int  # Envoy worker threads


POST_LUA = (
    'wrk.method = "POST"\nwrk.body = "{}"\nwrk.headers["Content-Type"] = "application/json"\n'
)


def wrk_rps(port: int, duration: int, connections: int, token: str, work: Path) -> float:
    script = work / "post.lua"
    script.write_text(POST_LUA)
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{connections}",
            f"-d{duration}s",
            "-s",
            str(script),
            "-H",
            f"Authorization: Bearer {token}",
            f"http://127.0.0.1:{port}/a2a",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    if "Non-2xx" in out:
        raise SystemExit(f"proxy bench: some answers were not 200:\n{out}")
    return float(out.split("Requests/sec:")[1].split()[0])


LATENCY_CLIENTS = 20  # connections, each at rate / LATENCY_CLIENTS requests a second


def paced(port: int, token: str, rate: int, seconds: float, work: Path) -> Latency:
    """`rate` POSTs a second for `seconds` by h2load (HTTP/1.1, `LATENCY_CLIENTS` connections,
    each paced with `--rps`), latency per request from its log file. A C client: a Python one
    costs as much CPU as the thing measured and delays its own timers."""
    log = work / f"h2load-{port}.tsv"
    body = work / "body.json"
    body.write_text("{}")
    out = subprocess.run(
        [
            "h2load",
            "--h1",
            "-c",
            str(LATENCY_CLIENTS),
            "--rps",
            str(rate // LATENCY_CLIENTS),
            "-D",
            str(round(seconds)),
            "-d",
            str(body),
            "--log-file",
            str(log),
            "-H",
            f"Authorization: Bearer {token}",
            "-H",
            "Content-Type: application/json",
            f"http://127.0.0.1:{port}/a2a",
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rows = [line.split("\t") for line in log.read_text().splitlines() if line]
    log.unlink()
    if not rows:
        raise SystemExit(f"h2load sent nothing:\n{out}")
    ordered = sorted(int(row[2]) / 1000 for row in rows)
    errors = sum(1 for row in rows if row[1] != "200")

    def at(fraction: float) -> float:
        return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]

    return Latency(at(0.50), at(0.99), at(0.999), errors)


async def start_envoy(
    work: Path, name: str, config: envoy_config.Config
) -> tuple[Supervisor, int, int]:
    path = work / f"envoy-{name}.yaml"
    envoy_config.write(config, path)
    supervisor = Supervisor(work / f"logs-{name}")
    await supervisor.start(
        envoy_component(f"envoy-{name}", path, work / f"envoy-{name}-admin.txt", os.environ)
    )
    running = supervisor.running[0]
    return supervisor, running.pid, 0


async def run(
    work: Path,
    *,
    rounds: int,
    duration: int,
    connections: int,
    rate: int,
    latency_seconds: float,
    start_floor: Callable[[Path], Any],
) -> ProxyResults:
    """All four Envoys at once, measured round by round (cases interleaved)."""
    state_dir = work / "state"
    state_dir.mkdir(mode=0o700)
    env = {**os.environ, **BENCH_ENV}
    ports = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
    settings = StackSettings.from_env({**env, **ports, "ORRERY_A2A_STATE_DIR": str(state_dir)})
    # SIM115, PTH123 below: a sink the stack writes to all run long; the exit closes it.
    stack = LocalStack(settings, env, open(os.devnull, "w"))  # noqa: SIM115, PTH123
    secrets = generate_secrets(state_dir)
    floor = start_floor(work)
    supervisors: list[Supervisor] = []
    results = ProxyResults({}, {}, workers=os.cpu_count() or 1)
    try:
        state: StackState = await stack.start_all(secrets)
        running = {item.name: item for item in stack.supervisor.running}
        token = mint_for_stack(
            state,
            TokenRequest(kind="delegated", subject="bench-user", agent="bench-agent"),
            now=int(time.time()),
        )
        source = envoy_config.load(envoy_config.repo_config_path())
        adapter = parse_address(str(running["adapter"].details["addr"]))

        def rendered(authz: str) -> tuple[envoy_config.Config, int]:
            port = free_port("127.0.0.1")
            config = envoy_config.render(
                source,
                listen=("127.0.0.1", port),
                admin=("127.0.0.1", 0),
                authz=parse_address(authz),
                adapter=adapter,
                policy=settings.edge,
            )
            return direct_response(config), port

        authz_config, authz_port = rendered(str(running["authz"].details["grpc"]))
        floor_config, floor_port = rendered(floor.grpc)
        direct_config, direct_port = rendered(str(running["authz"].details["grpc"]))
        jwks = {"keys": [public_jwk(load_signing_key(Path(state.key_file)))]}
        jwt_config, jwt_port = rendered(str(running["authz"].details["grpc"]))
        jwt_config = jwt_authn_config(jwt_config, state, jwks, "unused")
        for route in envoy_config.listener(jwt_config)["filter_chains"][0]["filters"][0][
            "typed_config"
        ]["route_config"]["virtual_hosts"][0]["routes"]:
            route.pop("request_headers_to_add", None)
        cases: dict[str, tuple[int, dict[str, int]]] = {}
        for name, config, port, checker in (
            ("authz", authz_config, authz_port, running["authz"].pid),
            ("floor", floor_config, floor_port, floor.proc.pid),
            ("jwt-authn", jwt_config, jwt_port, None),
            ("direct", without_ext_authz(direct_config), direct_port, None),
        ):
            supervisor, envoy_pid, _ = await start_envoy(work, name, config)
            supervisors.append(supervisor)
            pids = {"envoy": envoy_pid}
            if checker is not None:
                pids["check"] = checker
            cases[name] = (port, pids)
        for number in range(1, rounds + 1):
            print(f"  proxy round {number}/{rounds}", flush=True)
            for name, (port, pids) in cases.items():
                await asyncio.to_thread(wrk_rps, port, 1, connections, token, work)  # warm up
                before = {process: cpu_seconds(pid) for process, pid in pids.items()}
                started = time.perf_counter()
                rps = await asyncio.to_thread(wrk_rps, port, duration, connections, token, work)
                total = rps * (time.perf_counter() - started)
                cpu = {
                    process: (cpu_seconds(pid) - before[process]) * 1000 / max(total, 1)
                    for process, pid in pids.items()
                }
                results.throughput.setdefault(name, []).append(ProxyRun(rps, cpu))
            for name in ("authz", "floor", "direct"):
                latency = await asyncio.to_thread(
                    paced, cases[name][0], token, rate, latency_seconds, work
                )
                results.latency.setdefault(name, []).append(latency)
    finally:
        for supervisor in supervisors:
            await supervisor.stop()
        await stack.supervisor.stop()
        stack.cleanup()
        floor.stop()
    return results


def summary(results: ProxyResults) -> dict[str, Any]:
    """Medians per case and per-round ratios (median, min, max)."""

    def ratios(name: str, base: str) -> tuple[float, float, float]:
        values = [
            a.rps / b.rps
            for a, b in zip(results.throughput[name], results.throughput[base], strict=True)
        ]
        return statistics.median(values), min(values), max(values)

    throughput = {
        name: {
            "rps": statistics.median(run.rps for run in runs),
            "cpu_ms": {
                process: statistics.median(run.cpu_ms[process] for run in runs)
                for process in runs[0].cpu_ms
            },
        }
        for name, runs in results.throughput.items()
    }
    latency = {
        name: {
            "p50": statistics.median(run.p50_ms for run in runs),
            "p99": statistics.median(run.p99_ms for run in runs),
            "p999": statistics.median(run.p999_ms for run in runs),
            "errors": sum(run.errors for run in runs),
        }
        for name, runs in results.latency.items()
    }
    added = {
        name: {
            key: [
                getattr(a, attr) - getattr(d, attr)
                for a, d in zip(results.latency[name], results.latency["direct"], strict=True)
            ]
            for key, attr in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p999", "p999_ms"))
        }
        for name in ("authz", "floor")
    }
    return {
        "throughput": throughput,
        "latency": latency,
        "added": added,
        "authz_vs_jwt": ratios("authz", "jwt-authn"),
        "floor_vs_jwt": ratios("floor", "jwt-authn"),
        "direct_vs_jwt": ratios("direct", "jwt-authn"),
    }


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="proxy-bench-"))
