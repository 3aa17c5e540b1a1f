"""Envoy in front of nothing: what the token check costs at the proxy (P3) and its latency (P4).

Every case is an Envoy started from `envoy/envoy.yaml` as shipped (the client budget raised so
one address can use every connection), with the A2A routes answered by a `direct_response` (200,
`{}`) instead of the adapter, so the only work per request is Envoy's and the token check's:

| case | the token check |
|---|---|
| `authz-grpc` | ext_authz gRPC → authz (`python -m authz`, one process, as `up` starts it) |
| `authz-http` | ext_authz HTTP → the same authz process (`up --authz-transport http`) |
| `floor-grpc` | ext_authz gRPC → a do-nothing `grpc.aio` Check server (`authz_bench`'s baseline) |
| `floor-http` | ext_authz HTTP → a do-nothing `httptools` server answering 200 (`authz_bench`'s) |
| `jwt-authn` | Envoy's native `jwt_authn`, the JWKS inline (`e2e_bench.jwt_authn_config`) |
| `direct` | none: the ext_authz filter removed (the direct route P4 is measured against) |

P3: `wrk -t1 -c32` POSTs `/a2a` with the bearer token; requests/s per case, CPU ms per request of
Envoy and of the Check server (from /proc). Every process may run on every core.

P4: h2load sends 1 000 requests a second (20 connections opened 1 ms apart, each paced at 50 a
second: about one request a millisecond) and logs every request's latency; p50/p99/p99.9 per
case, and what a check adds is its case minus `direct`, percentile by percentile, round by round.
While P4 runs, the Check servers (authz and both floors) are pinned to one core and everything
else this bench started — every Envoy, the load generator, the stack's idle adapter and issuer,
this driver — to the others (`sched_setaffinity` on every thread, `pinned`), so the check has a
core of its own, as the goal ("on one core") puts it, and does not queue behind Envoy or the load
generator; and, when run as root, all of them at nice -10, so that processes this bench did not
start (other users of the machine, which may still run on either core) wait behind them rather
than the other way round. Each case gets a second of the same load first, not counted. The
direct-response route has no upstream: Envoy answers itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import operator
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import authz_bench
from adapter_bench import CLOCK_TICKS, cpu_seconds
from e2e_bench import BENCH_ENV, jwt_authn_config, start_envoy

from runtime.addresses import parse_address
from stack import envoy_config
from stack.keys import load_signing_key, public_jwk
from stack.settings import ADDRESSES, StackSettings
from stack.state import StackState
from stack.supervisor import Supervisor
from stack.tokens import TokenRequest, mint_for_stack
from stack.up import LocalStack, free_port, generate_secrets

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
    # of the Check servers' core over the run: busy with anything but them (other processes, the
    # kernel's own work such as loopback packets)
    others_share: float = float("nan")


@dataclass
class ProxyResults:
    throughput: dict[str, list[ProxyRun]]
    latency: dict[str, list[Latency]]
    workers: int  # Envoy worker threads
    pinning: str = "not measured"  # what P4's pinning did, in words


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
    costs as much CPU as the thing measured and delays its own timers.

    The connections are opened 1 ms apart (`-r 1 --rate-period 1ms`), so their timers tick 1 ms
    apart too and the requests arrive about one a millisecond; opened together, all 20 fire in
    the same millisecond every 20 ms, and each burst queues behind itself at a single-threaded
    Check server (the last of 20 waits 19 checks) — that measures the bursts, not the check."""
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
            "-r",
            "1",
            "--rate-period",
            "1ms",
            "-n",
            str(round(rate * seconds)),
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


PRIORITY = -10  # nice, while P4 runs, of every process this bench started (when root)


def place(pid: int, cores: set[int], nice: int) -> None:
    """Every thread of `pid` and of its descendants onto `cores` at `nice` (threads and processes
    started later inherit both from their parent)."""
    with contextlib.suppress(FileNotFoundError, ProcessLookupError):  # it exited meanwhile
        for task in Path(f"/proc/{pid}/task").iterdir():
            os.sched_setaffinity(int(task.name), cores)
            os.setpriority(os.PRIO_PROCESS, int(task.name), nice)  # per thread on Linux
            for child in (task / "children").read_text().split():
                place(int(child), cores, nice)


@contextlib.contextmanager
def pinned(checks: Iterable[int], others: Iterable[int]) -> Iterator[str]:
    """`checks` on the first core this process may use, `others` and this process (so the load
    generator it starts) on the rest, all at a higher priority when this process may raise it
    (root), until the block ends; yields what was done, in words."""
    everything = os.sched_getaffinity(0)
    cores = sorted(everything)
    if len(cores) < 2:
        yield "not pinned (one core)"
        return
    usual = os.getpriority(os.PRIO_PROCESS, 0)
    nice = PRIORITY if os.geteuid() == 0 else usual
    checks, others = [*checks], [*others, os.getpid()]
    try:
        for pid in others:  # first: this process's descendants include the Check servers
            place(pid, set(cores[1:]), nice)
        for pid in checks:
            place(pid, {cores[0]}, nice)
        rest = ",".join(map(str, cores[1:]))
        yield (
            f"the Check servers on core {cores[0]}, Envoy and the load generator on {rest}, "
            f"every process of this bench at nice {nice}"
        )
    finally:
        for pid in [*checks, *others]:
            place(pid, everything, usual)


def core_seconds(core: int, pids: Iterable[int]) -> tuple[float, float]:
    """CPU seconds so far that `core` spent busy (/proc/stat: all but idle and iowait), and that
    `pids` spent on any core (pinned to `core`, theirs is all on it)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{core} "):
            ticks = [int(field) for field in line.split()[1:9]]
            busy = sum(ticks) - ticks[3] - ticks[4]  # idle, iowait
            return busy / CLOCK_TICKS, sum(cpu_seconds(pid) for pid in pids)
    raise RuntimeError(f"no cpu{core} in /proc/stat")


def throughput(
    port: int, pids: dict[str, int], *, duration: int, connections: int, token: str, work: Path
) -> ProxyRun:
    """P3 for one case: wrk's req/s after a second's warm-up, CPU per request of each process."""
    wrk_rps(port, 1, connections, token, work)
    before = {process: cpu_seconds(pid) for process, pid in pids.items()}
    started = time.perf_counter()
    rps = wrk_rps(port, duration, connections, token, work)
    total = rps * (time.perf_counter() - started)
    cpu = {
        process: (cpu_seconds(pid) - before[process]) * 1000 / max(total, 1)
        for process, pid in pids.items()
    }
    return ProxyRun(rps, cpu)


async def start_cases(
    work: Path,
    running: dict[str, Any],
    state: StackState,
    settings: StackSettings,
    floors: dict[authz_bench.Transport, authz_bench.Server],
    *,
    supervisors: list[Supervisor],
) -> dict[str, tuple[int, dict[str, int]]]:
    """One Envoy per case (each added to `supervisors` once started): its port, and the pids
    whose CPU counts (`envoy`, and `check` where a Check server is called)."""
    source = envoy_config.load(envoy_config.repo_config_path())
    adapter = parse_address(str(running["adapter"].details["addr"]))
    authz = running["authz"]

    def rendered(
        address: str, transport: authz_bench.Transport = "grpc"
    ) -> tuple[envoy_config.Config, int]:
        port = free_port("127.0.0.1")
        config = envoy_config.render(
            source,
            listen=("127.0.0.1", port),
            admin=("127.0.0.1", 0),
            authz=parse_address(address),
            adapter=adapter,
            policy=settings.edge,
            authz_transport=transport,
        )
        return direct_response(config), port

    jwks = {"keys": [public_jwk(load_signing_key(Path(state.key_file)))]}
    plans: list[tuple[str, envoy_config.Config, int, int | None]] = []
    for transport in authz_bench.TRANSPORTS:
        config, port = rendered(str(authz.details[transport]), transport)
        plans.append((f"authz-{transport}", config, port, authz.pid))
    for transport, floor in floors.items():
        config, port = rendered(floor.address(transport), transport)
        plans.append((f"floor-{transport}", config, port, floor.proc.pid))
    config, port = rendered(str(authz.details["grpc"]))
    config = jwt_authn_config(config, state, jwks, "unused")
    for route in envoy_config.listener(config)["filter_chains"][0]["filters"][0]["typed_config"][
        "route_config"
    ]["virtual_hosts"][0]["routes"]:
        route.pop("request_headers_to_add", None)
    plans.append(("jwt-authn", config, port, None))
    config, port = rendered(str(authz.details["grpc"]))
    plans.append(("direct", without_ext_authz(config), port, None))
    cases: dict[str, tuple[int, dict[str, int]]] = {}
    for name, config, port, checker in plans:
        supervisor = await start_envoy(work, name, config)
        supervisors.append(supervisor)
        pids = {"envoy": supervisor.running[0].pid}
        if checker is not None:
            pids["check"] = checker
        cases[name] = (port, pids)
    return cases


CHECKS = ("authz-grpc", "authz-http", "floor-grpc", "floor-http")


async def run(
    work: Path,
    *,
    rounds: int,
    duration: int,
    connections: int,
    rate: int,
    latency_seconds: float,
) -> ProxyResults:
    """All six Envoys at once, measured round by round (cases interleaved)."""
    state_dir = work / "state"
    state_dir.mkdir(mode=0o700)
    env = {**os.environ, **BENCH_ENV}  # authz serves both transports (BENCH_ENV)
    ports = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
    settings = StackSettings.from_env({**env, **ports, "ORRERY_A2A_STATE_DIR": str(state_dir)})
    # SIM115, PTH123 below: a sink the stack writes to all run long; the exit closes it.
    stack = LocalStack(settings, env, open(os.devnull, "w"))  # noqa: SIM115, PTH123
    secrets = generate_secrets(state_dir)
    floors = {
        transport: authz_bench.start(
            f"floor-{transport}",
            authz_bench.baseline_command(transport),
            {},
            work / f"floor-{transport}.log",
        )
        for transport in authz_bench.TRANSPORTS
    }
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
        authz = running["authz"]
        cases = await start_cases(work, running, state, settings, floors, supervisors=supervisors)
        check_pids = [authz.pid, *(floor.proc.pid for floor in floors.values())]
        other_pids = [
            item.pid
            for supervisor in (stack.supervisor, *supervisors)
            for item in supervisor.running
            if item.pid not in check_pids
        ]
        for number in range(1, rounds + 1):
            print(f"  proxy round {number}/{rounds}", flush=True)
            for name, (port, pids) in cases.items():
                run = await asyncio.to_thread(
                    functools.partial(
                        throughput,
                        duration=duration,
                        connections=connections,
                        token=token,
                        work=work,
                    ),
                    port,
                    pids,
                )
                results.throughput.setdefault(name, []).append(run)
            check_core = min(os.sched_getaffinity(0))
            with pinned(check_pids, other_pids) as results.pinning:
                for name in (*CHECKS, "direct"):
                    await asyncio.to_thread(paced, cases[name][0], token, rate, 1, work)  # warm up
                    before, started = core_seconds(check_core, check_pids), time.monotonic()
                    latency = await asyncio.to_thread(
                        paced, cases[name][0], token, rate, latency_seconds, work
                    )
                    busy, ours = map(operator.sub, core_seconds(check_core, check_pids), before)
                    latency.others_share = (busy - ours) / (time.monotonic() - started)
                    results.latency.setdefault(name, []).append(latency)
    finally:
        for supervisor in supervisors:
            await supervisor.stop()
        await stack.supervisor.stop()
        stack.cleanup()
        for floor in floors.values():
            floor.stop()
    return results


def summary(results: ProxyResults) -> dict[str, Any]:
    """Medians per case, per-round req/s ratios to `jwt-authn` and latency added over `direct`
    (median, min, max)."""

    def spread(values: list[float]) -> tuple[float, float, float]:
        return statistics.median(values), min(values), max(values)

    base = results.throughput["jwt-authn"]
    throughput = {
        name: {
            "rps": statistics.median(run.rps for run in runs),
            "cpu_ms": {
                process: statistics.median(run.cpu_ms[process] for run in runs)
                for process in runs[0].cpu_ms
            },
            "vs_jwt": spread([a.rps / b.rps for a, b in zip(runs, base, strict=True)]),
        }
        for name, runs in results.throughput.items()
    }
    latency = {
        name: {
            "p50": statistics.median(run.p50_ms for run in runs),
            "p99": statistics.median(run.p99_ms for run in runs),
            "p999": statistics.median(run.p999_ms for run in runs),
            "errors": sum(run.errors for run in runs),
            "others": statistics.median(run.others_share for run in runs),
        }
        for name, runs in results.latency.items()
    }
    direct = results.latency["direct"]
    added = {
        name: {
            key: spread(
                [
                    getattr(a, attr) - getattr(d, attr)
                    for a, d in zip(results.latency[name], direct, strict=True)
                ]
            )
            for key, attr in (("p50", "p50_ms"), ("p99", "p99_ms"), ("p999", "p999_ms"))
        }
        for name in CHECKS
    }
    return {
        "throughput": throughput,
        "latency": latency,
        "added": added,
        "workers": results.workers,
        "pinning": results.pinning,
    }


def scratch() -> Path:
    return Path(tempfile.mkdtemp(prefix="proxy-bench-"))
