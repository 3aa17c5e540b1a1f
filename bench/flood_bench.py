"""Legitimate callers under a flood of forged tokens, from one address and from many, with and
without authz's bounds on what a token not verified yet may cost, per ext_authz transport.

A token with a published `kid` and a random signature costs authz a full signature check and is
free to make. Envoy's per-address bucket does not separate clients under Istio (it has none) or
behind an ingress without trusted hops (one address for everyone), so each stack here runs with
that bucket out of the way (`ORRERY_A2A_CLIENT_RATE_LIMIT=100000000/second`) and with Envoy
trusting one `x-forwarded-for` hop (`ORRERY_A2A_XFF_TRUSTED_HOPS=1`), as behind an ingress: the
address a request claims there is its client's. Cases, each a stack started exactly as
`orrery-a2a up` starts it (`stack.up.LocalStack`), interleaved round by round:

* `before` — authz's bounds off (`ORRERY_A2A_CLIENT_VERIFY_LIMIT` and `ORRERY_A2A_VERIFY_LIMIT`
  at 100000000/second): every forged token is a signature check, as before they existed;
* `after` — authz's bounds as shipped (50 a second per address, 1000 a second per process);
* `envoy-bucket` (not run unless named) — authz's bounds off, Envoy's per-address bucket as
  shipped: the edge before this change, where one address shares a bucket with everyone behind
  the same ingress;
* `after-200` (not run unless named) — as `after` with the per-process bound at 200 a second, so
  that a flood a small machine can generate beside the stack reaches it.

each with `--transports` (`grpc`, `http`: ORRERY_A2A_AUTHZ_TRANSPORT). Per stack three phases of
`--duration` seconds: `quiet` (the legitimate callers alone), `one` (the same callers while `wrk`
floods `POST /a2a` with forged tokens claiming the callers' own address: one ingress address for
everyone) and `many` (the flood claiming a random 10.x.y.z on every request). The flood: a real
token's header and claims with a fresh random signature on every request (`bench/flood.lua`, so
no memory of refusals helps), `--flood-rate` requests a second offered over `--flood-connections`
connections, each pausing between requests, whatever answers it. The callers send `ListTasks` on
an open-loop schedule of `--rate` a second with eight valid tokens in turn (authz's per-subject
limit out of the way; verified before the phases: cached), each timing out after 5 s; a success
is a 200 with a JSON-RPC result.

Reported per case, transport and phase: the callers' success rate and p50/p99 latency, the
flood's requests/s by answer (401: authz checked the signature; 429: refused by a per-address
bound; 503: authz's per-process bound) and the CPU envoy and authz used per second. Nothing is
asserted; the flood generator and the callers share the machine with the stack.

    .venv/bin/pip install -e '.[dev,bench]'           # needs wrk on the PATH
    .venv/bin/python bench/flood_bench.py [--rounds 2] [--duration 6] [--rate 20]
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import adapter_bench` as a script

from adapter_bench import cpu_seconds, found, run_in_scratch

from stack.settings import ADDRESSES, StackSettings
from stack.state import StackState
from stack.tokens import TokenRequest, mint_for_stack
from stack.up import LocalStack, generate_secrets

HERE = Path(__file__).resolve().parent
LUA = HERE / "flood.lua"
CALLERS_ADDRESS = "192.0.2.10"  # what the callers' ingress hop says (x-forwarded-for)
TIMEOUT_SECONDS = 5.0
BODY = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'
UNLIMITED = "100000000/second"
NO_ENVOY_BUCKET = {"ORRERY_A2A_CLIENT_RATE_LIMIT": UNLIMITED}
NO_AUTHZ_BOUNDS = {
    "ORRERY_A2A_CLIENT_VERIFY_LIMIT": UNLIMITED,
    "ORRERY_A2A_VERIFY_LIMIT": UNLIMITED,
}
CASES = {
    "before": {**NO_ENVOY_BUCKET, **NO_AUTHZ_BOUNDS},
    "after": NO_ENVOY_BUCKET,
    "envoy-bucket": NO_AUTHZ_BOUNDS,
    # The per-process bound within reach of a flood this machine can generate next to the stack
    "after-200": {**NO_ENVOY_BUCKET, "ORRERY_A2A_VERIFY_LIMIT": "200/second"},
}
# authz's per-subject limit out of the way: the callers reuse eight tokens; Envoy behind an
# ingress that appends the client to x-forwarded-for (one trusted hop, `stack.edge_policy`)
BENCH_ENV = {"ORRERY_A2A_RATE_LIMIT": UNLIMITED, "ORRERY_A2A_XFF_TRUSTED_HOPS": "1"}
FLOODS = {"one": CALLERS_ADDRESS, "many": "many"}  # flood.lua's address argument, per phase


@dataclass(frozen=True)
class Callers:
    sent: int
    ok: int
    p50_ms: float
    p99_ms: float

    @property
    def success(self) -> float:
        return 100.0 * self.ok / max(self.sent, 1)


@dataclass(frozen=True)
class Flood:
    rps: float
    checked_rps: float  # answered 401 by authz: it checked the forged signature
    refused_rps: float  # answered 429: a per-address bound refused it first
    busy_rps: float  # answered 503: authz's per-process bound


@dataclass(frozen=True)
class Phase:
    callers: Callers
    flood: Flood | None
    cpu: dict[str, float]  # CPU seconds per second, per process


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0.0


async def call_steadily(url: str, tokens: list[str], rate: float, duration: float) -> Callers:
    """Open loop: one request every 1/rate s, whatever the previous ones are doing."""
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    latencies: list[float] = []
    ok = 0

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), timeout=timeout
    ) as session:

        async def one(token: str) -> None:
            nonlocal ok
            started = time.perf_counter()
            headers = {
                "Content-Type": "application/json",
                "A2A-Version": "1.0",
                "Authorization": f"Bearer {token}",
                "X-Forwarded-For": CALLERS_ADDRESS,
            }
            try:
                async with session.post(f"{url}/a2a", data=BODY, headers=headers) as response:
                    body = await response.read()
                    if response.status == 200 and b'"result"' in body:
                        ok += 1
            except (aiohttp.ClientError, TimeoutError):
                pass
            latencies.append((time.perf_counter() - started) * 1000.0)

        count = int(rate * duration)
        start = time.perf_counter()
        tasks = []
        for number in range(count):
            await asyncio.sleep(max(0.0, start + number / rate - time.perf_counter()))
            tasks.append(asyncio.create_task(one(tokens[number % len(tokens)])))
        await asyncio.gather(*tasks)
    return Callers(count, ok, percentile(latencies, 0.50), percentile(latencies, 0.99))


def run_flood(port: int, signed: str, source: str, args: argparse.Namespace) -> Flood:
    """`wrk`: a real token's `header.payload` (`signed`), a random signature on every request
    and the client address `source` (bench/flood.lua), each connection pausing so all of them
    offer `--flood-rate`/s."""
    connections, rate = args.flood_connections, args.flood_rate
    pause_ms = max(0, round(connections / rate * 1000))
    command = ["wrk", "-t1", f"-c{connections}", f"-d{int(args.duration)}s", "-s", str(LUA)]
    command += [f"http://127.0.0.1:{port}/a2a", "--", signed, str(pause_ms), source]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    counts = found(r"flood: checked=(\d+) refused=(\d+) busy=(\d+) other=(\d+)", out)
    seconds = float(found(r"requests in ([\d.]+)s", out)[1])
    checked, refused, busy, other = (int(value) for value in counts.groups())
    total = checked + refused + busy + other
    return Flood(total / seconds, checked / seconds, refused / seconds, busy / seconds)


async def phase(
    state: StackState,
    pids: dict[str, int],
    tokens: list[str],
    args: argparse.Namespace,
    *,
    flood: str | None,
) -> Phase:
    port = int(state.url.rsplit(":", 1)[1])
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.perf_counter()
    flooding = None
    if flood is not None:
        flooding = asyncio.create_task(
            asyncio.to_thread(run_flood, port, tokens[0].rsplit(".", 1)[0], FLOODS[flood], args)
        )
    callers = await call_steadily(state.url, tokens, args.rate, args.duration)
    flood_result = await flooding if flooding is not None else None
    elapsed = time.perf_counter() - started
    cpu = {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}
    return Phase(callers, flood_result, cpu)


async def measure(
    case: str, transport: str, work: Path, args: argparse.Namespace
) -> dict[str, Phase]:
    """Start the stack for `case` over `transport`, measure every phase, stop it."""
    state_dir = work / f"{case}-{transport}-{time.monotonic_ns()}"
    state_dir.mkdir(mode=0o700)
    env = {
        **os.environ,
        **BENCH_ENV,
        **CASES[case],
        "ORRERY_A2A_AUTHZ_TRANSPORT": transport,
    }
    ports = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
    settings = StackSettings.from_env({**env, **ports, "ORRERY_A2A_STATE_DIR": str(state_dir)})
    stack = LocalStack(settings, env, io.StringIO())
    phases: dict[str, Phase] = {}
    try:
        state = await stack.start_all(generate_secrets(state_dir))
        pids = {
            item.name: item.pid
            for item in stack.supervisor.running
            if item.name in ("envoy", "authz")
        }
        now = int(time.time())
        tokens = [
            mint_for_stack(state, TokenRequest(kind="delegated", subject=f"caller-{n}"), now=now)
            for n in range(8)
        ]
        await call_steadily(state.url, tokens, args.rate, 2)  # warm-up: tokens cached
        phases["quiet"] = await phase(state, pids, tokens, args, flood=None)
        for flood in FLOODS:
            await asyncio.sleep(1.0)  # budgets refill between floods
            phases[flood] = await phase(state, pids, tokens, args, flood=flood)
    finally:
        await stack.supervisor.stop()
        stack.cleanup()
    return phases


def line(name: str, label: str, result: Phase) -> str:
    callers, flood = result.callers, result.flood
    text = (
        f"  {name:18s} {label:5s} callers {callers.success:6.1f}% ok"
        f"  p50 {callers.p50_ms:7.1f} ms  p99 {callers.p99_ms:7.1f} ms"
    )
    if flood is not None:
        text += (
            f"  | flood {flood.rps:5.0f}/s: 401 {flood.checked_rps:5.0f}/s,"
            f" 429 {flood.refused_rps:5.0f}/s, 503 {flood.busy_rps:5.0f}/s"
        )
    cpu = ", ".join(f"{proc} {share * 100:3.0f}%" for proc, share in sorted(result.cpu.items()))
    return f"{text}  | CPU {cpu}"


Results = dict[str, list[dict[str, Phase]]]


async def run(args: argparse.Namespace, work: Path) -> Results:
    results: Results = {}
    for number in range(1, args.rounds + 1):
        print(f"round {number}", flush=True)
        for case in args.cases:
            for transport in args.transports:
                name = f"{case}/{transport}"
                phases = await measure(case, transport, work, args)
                results.setdefault(name, []).append(phases)
                for label, result in phases.items():
                    print(line(name, label, result), flush=True)
    return results


def report(results: Results) -> None:
    print(f"medians over rounds (callers claim {CALLERS_ADDRESS}; flood `one` claims it too):")
    for name, runs in results.items():
        for label in runs[0]:
            phases = [run[label] for run in runs]
            success = statistics.median(p.callers.success for p in phases)
            p50 = statistics.median(p.callers.p50_ms for p in phases)
            p99 = statistics.median(p.callers.p99_ms for p in phases)
            text = f"  {name:18s} {label:5s} ok {success:6.1f}%  p50 {p50:7.1f} ms"
            text += f"  p99 {p99:7.1f} ms"
            floods = [p.flood for p in phases if p.flood is not None]
            if floods:
                checked = statistics.median(f.checked_rps for f in floods)
                refused = statistics.median(f.refused_rps for f in floods)
                busy = statistics.median(f.busy_rps for f in floods)
                text += f"  | flood 401 {checked:5.0f}/s, 429 {refused:5.0f}/s, 503 {busy:5.0f}/s"
            authz = statistics.median(p.cpu.get("authz", 0.0) for p in phases)
            text += f"  | authz CPU {authz * 100:3.0f}%"
            print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=6.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=20.0, help="legitimate requests/s")
    parser.add_argument("--flood-connections", type=int, default=64)
    parser.add_argument("--flood-rate", type=float, default=1500.0, help="offered forged req/s")
    parser.add_argument(
        "--cases",
        type=lambda text: text.split(","),
        default=["before", "after"],
        help=f"comma-separated, of {', '.join(CASES)}",
    )
    parser.add_argument("--transports", type=lambda text: text.split(","), default=["grpc", "http"])
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        parser.error("wrk is not on the PATH")
    unknown = [case for case in args.cases if case not in CASES]
    if unknown:
        parser.error(f"unknown case(s): {', '.join(unknown)}")
    report(run_in_scratch("flood-bench-", lambda work: run(args, work)))


if __name__ == "__main__":
    main()
