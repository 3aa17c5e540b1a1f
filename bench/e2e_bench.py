"""End-to-end blocking SendMessage: the secured edge vs Envoy's native jwt_authn vs the adapter.

Cases, all in one run, driven by the same load tool (`wrk` + `bench/adapter_send.lua`, 1 thread,
8 connections), interleaved round by round:

* `edge` — Envoy + authz + adapter, started exactly as `orrery-a2a up` starts them
  (`stack.up.LocalStack`, `envoy/envoy.yaml` as shipped, ext_authz over gRPC), one bearer token
  from the stack's dev issuer. authz's rate limit, the adapter's in-flight cap and Envoy's
  per-address budget are raised so one token from one address can use every connection;
  everything else (logs included) is as shipped.
* `edge-http` — the same with ext_authz over authz's HTTP transport: a second Envoy, rendered as
  `up --authz-transport http` renders it, in front of the same authz (which serves both transports
  here: ORRERY_A2A_AUTHZ_HTTP_ADDR is in its environment) and the same adapter.
* `jwt-authn` — a second Envoy on a bench-only rendering of the same file in which ext_authz is
  replaced by Envoy's native `jwt_authn` (the same token; the issuer's JWKS inline as
  `local_jwks`), in front of the same adapter. The adapter trusts only an assertion bound to
  `x-request-id`, which `jwt_authn` cannot make, so this config sets a static `x-request-id` and a
  pre-minted assertion with the route's `request_headers_to_add`. An assertion lives 30 s, so this
  Envoy is rendered and started afresh for each round. It measures what checking the token
  in-proxy costs; it is not a secure deployment (every request carries the same identity).
* `adapter` — the same adapter process called directly, one pre-minted assertion per request id
  (`adapter_bench`'s helpers).
* `stock` — the a2a-sdk's stock Starlette server under uvicorn, no authentication, SDK tracing as
  shipped (`adapter_bench`'s baseline, wrapping the same executor and demo gateway).

Reported per case: requests/s, p50/p99 latency (wrk), and CPU milliseconds per request of each
process on the path (from /proc), so the run says what dominates. Ratios are computed per round
against the same round's other case; the median and the range are printed. Nothing is asserted.

    .venv/bin/pip install -e '.[dev,bench]'
    .venv/bin/python bench/e2e_bench.py [--rounds 3] [--duration 8] [--connections 8]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import adapter_bench` as a script

from adapter_bench import WrkRun, cpu_seconds, mint, run_in_scratch, run_wrk, start_stock

from contract.assertion import AssertionKeys, sign
from contract.identity import Principal
from runtime.addresses import parse_address
from stack import envoy_config
from stack.edge_policy import EdgePolicy
from stack.keys import load_signing_key, public_jwk
from stack.settings import ADDRESSES, StackSettings
from stack.state import StackState
from stack.supervisor import Supervisor
from stack.tokens import TokenRequest, mint_for_stack
from stack.up import LocalStack, envoy_component, free_port, generate_secrets
from stack.wiring import DEV_AUDIENCE

WARM_UP_SECONDS = 2
CASES = ("edge", "edge-http", "jwt-authn", "adapter", "stock")
JWT_AUTHN_TYPE = "type.googleapis.com/envoy.extensions.filters.http.jwt_authn.v3.JwtAuthentication"
BENCH_REQUEST_ID = "e2e-bench-static-request-id"
SUBJECT, AGENT, CLIENT = "bench-user", "bench-agent", "dev-agent-client"  # the token's principal
BENCH_ENV = {
    "ORRERY_A2A_RATE_LIMIT": "100000000/second",
    "ORRERY_A2A_MAX_IN_FLIGHT": "1000",
    "ORRERY_A2A_CLIENT_RATE_LIMIT": "100000000/second",  # the load comes from one address
    "ORRERY_A2A_AUTHZ_HTTP_ADDR": "127.0.0.1:0",  # authz serves HTTP too (for `edge-http`)
}


@dataclass
class Case:
    """One way to reach the adapter: where wrk points, what it sends, whose CPU counts."""

    name: str
    port: int
    pids: dict[str, int]
    headers: tuple[str, ...] = ()
    identities: Callable[[], Path | None] = lambda: None  # fresh per wrk run (30 s assertions)


@dataclass
class Result:
    run: WrkRun
    cpu_ms: dict[str, float]  # per process, per request

    @property
    def total_cpu_ms(self) -> float:
        return sum(self.cpu_ms.values())


@dataclass
class Bench:
    args: argparse.Namespace
    results: dict[str, list[Result]] = field(default_factory=dict)

    async def wrk(self, case: Case, duration: int) -> WrkRun:
        identities = case.identities()
        try:
            return await asyncio.to_thread(
                run_wrk, case.port, duration, self.args.connections, identities, case.headers
            )
        finally:
            if identities is not None:
                identities.unlink()

    async def measure(self, case: Case) -> None:
        await self.wrk(case, WARM_UP_SECONDS)
        before = {name: cpu_seconds(pid) for name, pid in case.pids.items()}
        run = await self.wrk(case, self.args.duration)
        if run.bad:
            raise SystemExit(f"{case.name}: {run.bad} of {run.total} were not completed tasks")
        cpu = {
            name: (cpu_seconds(pid) - before[name]) * 1000 / max(run.total, 1)
            for name, pid in case.pids.items()
        }
        self.results.setdefault(case.name, []).append(Result(run, cpu))
        split = ", ".join(f"{name} {ms:.2f}" for name, ms in cpu.items())
        print(
            f"  {case.name:10s} {run.rps:8.1f} req/s  p50 {run.p50_ms:6.2f} ms  "
            f"p99 {run.p99_ms:6.2f} ms  CPU ms/req {sum(cpu.values()):5.2f} ({split})",
            flush=True,
        )


def jwt_authn_config(
    source: envoy_config.Config, state: StackState, jwks: Mapping[str, Any], assertion: str
) -> envoy_config.Config:
    """envoy.yaml with ext_authz swapped for jwt_authn and a static identity on the a2a routes."""
    listener = envoy_config.listener(source)
    manager = listener["filter_chains"][0]["filters"][0]["typed_config"]
    filters = manager["http_filters"]
    (index,) = [i for i, f in enumerate(filters) if f["name"] == "envoy.filters.http.ext_authz"]
    filters[index] = {
        "name": "envoy.filters.http.jwt_authn",
        "typed_config": {
            "@type": JWT_AUTHN_TYPE,
            "providers": {
                "dev": {
                    "issuer": state.issuer,
                    "audiences": [DEV_AUDIENCE],
                    "local_jwks": {"inline_string": json.dumps(jwks)},
                    "forward": False,
                }
            },
            "rules": [
                {"match": {"path": path}, "requires": {"provider_name": "dev"}}
                for path in ("/a2a", "/a2a/")
            ],
        },
    }
    for route in manager["route_config"]["virtual_hosts"][0]["routes"]:
        route.get("typed_per_filter_config", {}).pop("envoy.filters.http.ext_authz", None)
        if route["name"] in ("a2a", "a2a_slash"):
            route["request_headers_to_add"] = [
                {
                    "header": {"key": key, "value": value},
                    "append_action": "OVERWRITE_IF_EXISTS_OR_ADD",
                }
                for key, value in (
                    ("x-request-id", BENCH_REQUEST_ID),
                    ("x-orrery-principal", assertion),
                )
            ]
    return source


async def start_jwt_envoy(
    work: Path, stack: LocalStack, state: StackState, keys: AssertionKeys, token_exp: int
) -> tuple[Supervisor, int]:
    """A fresh jwt_authn Envoy (its static assertion is valid for the next 30 s)."""
    now = int(time.time())
    principal = Principal(
        kind="delegated", subject=SUBJECT, client=CLIENT, agent=AGENT, role="admin", autonomy="L3"
    )
    assertion = sign(
        keys,
        principal,
        surface="a2a",
        request_id=BENCH_REQUEST_ID,
        token_expires_at=token_exp,
        now=now,
    )
    rendered, port = render_edge(stack)
    jwks = {"keys": [public_jwk(load_signing_key(Path(state.key_file)))]}
    config = jwt_authn_config(rendered, state, jwks, assertion)
    return await start_envoy(work, "jwt-authn", config), port


def render_edge(
    stack: LocalStack,
    transport: envoy_config.AuthzTransport = "grpc",
    policy: EdgePolicy | None = None,
) -> tuple[envoy_config.Config, int]:
    """envoy.yaml in front of the stack's authz (over `transport`) and adapter, on a free port."""
    running = {item.name: item for item in stack.supervisor.running}
    port = free_port("127.0.0.1")
    rendered = envoy_config.render(
        envoy_config.load(envoy_config.repo_config_path()),
        listen=("127.0.0.1", port),
        admin=("127.0.0.1", 0),
        authz=parse_address(str(running["authz"].details[transport])),
        adapter=parse_address(str(running["adapter"].details["addr"])),
        policy=policy,
        authz_transport=transport,
    )
    return rendered, port


async def start_envoy(work: Path, name: str, config: envoy_config.Config) -> Supervisor:
    """Envoy on `config`, supervised as the stack supervises its own, ready when it returns."""
    path = work / f"envoy-{name}.yaml"
    envoy_config.write(config, path)
    supervisor = Supervisor(work / f"logs-{name}")
    await supervisor.start(
        envoy_component(f"envoy-{name}", path, work / f"envoy-{name}-admin.txt", os.environ)
    )
    return supervisor


async def start_http_edge(
    work: Path, stack: LocalStack, settings: StackSettings, edge: Case
) -> tuple[Supervisor, Case]:
    """`edge` through an Envoy rendered as `up --authz-transport http` renders it, beside the
    stack's own."""
    config, port = render_edge(stack, "http", settings.edge)
    supervisor = await start_envoy(work, "edge-http", config)
    pids = {**edge.pids, "envoy": supervisor.running[0].pid}
    return supervisor, Case("edge-http", port, pids, edge.headers)


def ratio_line(bench: Bench, name: str, baseline: str) -> str:
    """Per-round ratios of requests/s and CPU per request: median [range]."""
    pairs = list(zip(bench.results[name], bench.results[baseline], strict=True))
    rps = [a.run.rps / b.run.rps for a, b in pairs]
    cpu = [a.total_cpu_ms / b.total_cpu_ms for a, b in pairs]
    return (
        f"  {name} / {baseline}: {statistics.median(rps):.2f}x the requests/s "
        f"[{min(rps):.2f} to {max(rps):.2f}], {statistics.median(cpu):.2f}x the CPU per request "
        f"[{min(cpu):.2f} to {max(cpu):.2f}]"
    )


def report(bench: Bench) -> None:
    print("\nmedians over rounds")
    for name, results in bench.results.items():
        by_process = {
            process: statistics.median(r.cpu_ms[process] for r in results)
            for process in results[0].cpu_ms
        }
        split = ", ".join(f"{process} {ms:.2f}" for process, ms in by_process.items())
        print(
            f"  {name:10s} {statistics.median(r.run.rps for r in results):8.1f} req/s  "
            f"p50 {statistics.median(r.run.p50_ms for r in results):6.2f} ms  "
            f"p99 {statistics.median(r.run.p99_ms for r in results):6.2f} ms  "
            f"CPU ms/req {statistics.median(r.total_cpu_ms for r in results):5.2f} ({split})"
        )
    print("ratios (per round, median [range])")
    for name, baseline in (
        ("edge", "jwt-authn"),
        ("edge", "adapter"),
        ("jwt-authn", "adapter"),
        ("edge", "stock"),
        ("edge-http", "stock"),
    ):
        print(ratio_line(bench, name, baseline))


async def run(args: argparse.Namespace, work: Path) -> Bench:
    state_dir = work / "state"
    state_dir.mkdir(mode=0o700)
    env = {**os.environ, **BENCH_ENV}
    ports = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
    settings = StackSettings.from_env({**env, **ports, "ORRERY_A2A_STATE_DIR": str(state_dir)})
    stack = LocalStack(settings, env, io.StringIO())
    secrets = generate_secrets(state_dir)
    stock, stock_port = start_stock("true")
    bench = Bench(args)
    http_edge: Supervisor | None = None
    try:
        state = await stack.start_all(secrets)
        components = {item.name: item for item in stack.supervisor.running}
        pids = {name: item.pid for name, item in components.items()}
        keys = AssertionKeys.parse(secrets.assertion_keys)
        token_request = TokenRequest(kind="delegated", subject=SUBJECT, agent=AGENT)
        token = mint_for_stack(state, token_request, now=int(time.time()))
        token_exp = int(time.time()) + token_request.lifetime_seconds
        authorization = (f"Authorization: Bearer {token}",)
        edge = Case(
            "edge",
            parse_address(state.url.removeprefix("http://"))[1],
            {name: pids[name] for name in ("envoy", "authz", "adapter")},
            authorization,
        )
        direct = Case(
            "adapter",
            parse_address(str(components["adapter"].details["addr"]))[1],
            {"adapter": pids["adapter"]},
            identities=lambda: mint(keys, 2000),
        )
        baseline = Case("stock", stock_port, {"stock": stock.pid})
        cases = getattr(args, "cases", CASES)
        if "edge-http" in cases:
            http_edge, edge_http = await start_http_edge(work, stack, settings, edge)
        for number in range(1, args.rounds + 1):
            print(f"round {number}", flush=True)
            if "edge" in cases:
                await bench.measure(edge)
            if "edge-http" in cases:
                await bench.measure(edge_http)
            if "jwt-authn" in cases:
                supervisor, jwt_port = await start_jwt_envoy(work, stack, state, keys, token_exp)
                try:
                    jwt_pids = {"envoy": supervisor.running[0].pid, "adapter": pids["adapter"]}
                    await bench.measure(Case("jwt-authn", jwt_port, jwt_pids, authorization))
                finally:
                    await supervisor.stop()
            if "adapter" in cases:
                await bench.measure(direct)
            if "stock" in cases:
                await bench.measure(baseline)
    finally:
        if http_edge is not None:
            await http_edge.stop()
        await stack.supervisor.stop()
        stack.cleanup()
        stock.terminate()
        stock.wait(timeout=30)
    return bench


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per measured run (≤20)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.duration > 20:
        parser.error("--duration: at most 20 s (jwt-authn's static assertion lives 30 s)")
    report(run_in_scratch("e2e-bench-", lambda work: run(args, work)))


if __name__ == "__main__":
    main()
