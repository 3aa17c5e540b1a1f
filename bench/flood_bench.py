"""Legitimate callers under a flood of forged tokens from one address, with and without Envoy's
per-address budget.

A token with a published `kid` and a random signature costs authz a full signature check and
Envoy a Check round trip, and it is free to make. Cases, started one after the other exactly as
`orrery-a2a up` starts the stack (`stack.up.LocalStack`), interleaved round by round:

* `unbounded` — `ORRERY_A2A_CLIENT_RATE_LIMIT=100000000/second`: the per-address budget never
  bites, which is how the edge behaved before it had one;
* `bounded` — `envoy/envoy.yaml` as shipped (100 requests a second, 200 at once per address).

Per case two phases of `--duration` seconds: `quiet` (the legitimate callers alone), then `flood`
(the same callers while `wrk` floods `POST /a2a` from 127.0.0.1 with forged tokens — a real
token's header and claims, a fresh random signature on every request, so no cache of bad
signatures can help — offering `--flood-rate` requests a second over `--flood-connections`
connections, each pausing between requests: the same flood for both cases, whatever answers
it). The legitimate callers send `ListTasks` on an open-loop schedule of `--rate` requests a
second from 127.0.0.2 — another peer address for Envoy — with eight valid tokens in turn
(authz's per-subject limit raised so it never bites), each request timing out after 5 s. A
success is a 200 with a JSON-RPC result.

Reported per case and phase: the callers' success rate and p50/p99 latency, the flood's
requests/s split by who answered (401: authz checked the signature; 429: Envoy refused it
first), and the CPU envoy and authz used per second. Nothing is asserted.

    .venv/bin/pip install -e '.[dev,bench]'           # needs wrk on the PATH
    .venv/bin/python bench/flood_bench.py [--rounds 2] [--duration 10] [--rate 20]
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
CALLER = "127.0.0.2"  # the flood comes from 127.0.0.1
TIMEOUT_SECONDS = 5.0
BODY = b'{"jsonrpc":"2.0","id":1,"method":"ListTasks","params":{}}'
CASES = {
    "unbounded": {"ORRERY_A2A_CLIENT_RATE_LIMIT": "100000000/second"},
    "bounded": {},
}
# authz's per-subject limit out of the way: the callers reuse eight tokens
BENCH_ENV = {"ORRERY_A2A_RATE_LIMIT": "100000000/second"}


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
    checked_rps: float  # answered 401 by authz: it verified the forged signature
    refused_rps: float  # answered 429 by Envoy before authz


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
    connector = aiohttp.TCPConnector(local_addr=(CALLER, 0), limit=0)
    timeout = aiohttp.ClientTimeout(total=TIMEOUT_SECONDS)
    latencies: list[float] = []
    ok = 0

    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:

        async def one(token: str) -> None:
            nonlocal ok
            started = time.perf_counter()
            headers = {
                "Content-Type": "application/json",
                "A2A-Version": "1.0",
                "Authorization": f"Bearer {token}",
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


def run_flood(port: int, signed: str, duration: float, connections: int, rate: float) -> Flood:
    """`wrk` from 127.0.0.1: a real token's `header.payload` (`signed`), a random signature on
    every request (bench/flood.lua), each connection pausing so all of them offer `rate`/s."""
    pause_ms = max(0, round(connections / rate * 1000))
    command = ["wrk", "-t1", f"-c{connections}", f"-d{int(duration)}s", "-s", str(LUA)]
    command += [f"http://127.0.0.1:{port}/a2a", "--", signed, str(pause_ms)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    counts = found(r"flood: checked=(\d+) refused=(\d+) other=(\d+)", out)
    seconds = float(found(r"requests in ([\d.]+)s", out)[1])
    checked, refused, other = (int(value) for value in counts.groups())
    total = checked + refused + other
    return Flood(total / seconds, checked / seconds, refused / seconds)


async def phase(
    state: StackState,
    pids: dict[str, int],
    tokens: list[str],
    args: argparse.Namespace,
    *,
    flood: bool,
) -> Phase:
    port = int(state.url.rsplit(":", 1)[1])
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    started = time.perf_counter()
    flooding = None
    if flood:
        flooding = asyncio.create_task(
            asyncio.to_thread(
                run_flood,
                port,
                tokens[0].rsplit(".", 1)[0],
                args.duration,
                args.flood_connections,
                args.flood_rate,
            )
        )
    callers = await call_steadily(state.url, tokens, args.rate, args.duration)
    flood_result = await flooding if flooding is not None else None
    elapsed = time.perf_counter() - started
    cpu = {name: (cpu_seconds(pid) - before[name]) / elapsed for name, pid in pids.items()}
    return Phase(callers, flood_result, cpu)


async def measure_case(name: str, state_dir: Path, args: argparse.Namespace) -> tuple[Phase, Phase]:
    """Start the stack for case `name`, measure both phases, stop it."""
    state_dir.mkdir(mode=0o700)
    env = {**os.environ, **BENCH_ENV, **CASES[name]}
    ports = dict.fromkeys(ADDRESSES, "127.0.0.1:0")
    settings = StackSettings.from_env({**env, **ports, "ORRERY_A2A_STATE_DIR": str(state_dir)})
    stack = LocalStack(settings, env, io.StringIO())
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
        quiet = await phase(state, pids, tokens, args, flood=False)
        flooded = await phase(state, pids, tokens, args, flood=True)
    finally:
        await stack.supervisor.stop()
        stack.cleanup()
    return quiet, flooded


def line(name: str, label: str, result: Phase) -> str:
    callers, flood = result.callers, result.flood
    text = (
        f"  {name:9s} {label:5s} callers {callers.success:6.1f}% ok"
        f"  p50 {callers.p50_ms:7.1f} ms  p99 {callers.p99_ms:7.1f} ms"
    )
    if flood is not None:
        text += (
            f"  | flood {flood.rps:6.0f}/s: authz checked {flood.checked_rps:6.0f}/s,"
            f" Envoy refused {flood.refused_rps:6.0f}/s"
        )
    cpu = ", ".join(f"{proc} {share * 100:3.0f}%" for proc, share in sorted(result.cpu.items()))
    return f"{text}  | CPU {cpu}"


async def run(args: argparse.Namespace, work: Path) -> dict[str, list[tuple[Phase, Phase]]]:
    results: dict[str, list[tuple[Phase, Phase]]] = {name: [] for name in CASES}
    for number in range(1, args.rounds + 1):
        print(f"round {number}", flush=True)
        for name in CASES:
            quiet, flooded = await measure_case(name, work / f"{name}-{number}", args)
            results[name].append((quiet, flooded))
            print(line(name, "quiet", quiet), flush=True)
            print(line(name, "flood", flooded), flush=True)
    return results


def report(results: dict[str, list[tuple[Phase, Phase]]]) -> None:
    print("medians over rounds (callers from 127.0.0.2; flood from 127.0.0.1):")
    for name, runs in results.items():
        for label, index in (("quiet", 0), ("flood", 1)):
            phases = [run[index] for run in runs]
            success = statistics.median(p.callers.success for p in phases)
            p99 = statistics.median(p.callers.p99_ms for p in phases)
            p50 = statistics.median(p.callers.p50_ms for p in phases)
            text = f"  {name:9s} {label:5s} ok {success:6.1f}%  p50 {p50:7.1f} ms"
            text += f"  p99 {p99:7.1f} ms"
            floods = [p.flood for p in phases if p.flood is not None]
            if floods:
                checked = statistics.median(f.checked_rps for f in floods)
                refused = statistics.median(f.refused_rps for f in floods)
                text += f"  | authz checked {checked:6.0f}/s, Envoy refused {refused:6.0f}/s"
            print(text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per phase")
    parser.add_argument("--rate", type=float, default=20.0, help="legitimate requests/s")
    parser.add_argument("--flood-connections", type=int, default=64)
    parser.add_argument("--flood-rate", type=float, default=1500.0, help="offered forged req/s")
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        parser.error("wrk is not on the PATH")
    report(run_in_scratch("flood-bench-", lambda work: run(args, work)))


if __name__ == "__main__":
    main()
