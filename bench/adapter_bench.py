"""SendMessage (blocking) requests/s: this adapter vs the a2a-sdk's stock Starlette server.

Both servers wrap the same executor over the same embedded demo gateway and run as their own
processes on 127.0.0.1; the same `wrk` script drives both in the same run, alternating rounds.
The adapter is measured as it runs in production: principal assertion verified per request
(pre-minted by `contract.assertion.sign` for distinct request ids, as authz would), per-request JSON
log event (drained to /dev/null), metrics, in-flight slots (cap raised so one principal can use
every connection), bounded task store. The stock server runs with no authentication and no access
log. Also reported: server CPU milliseconds per request (from /proc).

    .venv/bin/python bench/adapter_bench.py [--duration 8] [--connections 8] [--rounds 3]

Prints the ratio; asserts nothing. Needs `wrk` and the `bench` extra (starlette, uvicorn).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from contract.assertion import AssertionKeys, new_keys_spec, sign
from contract.identity import Principal
from runtime.addresses import parse_address
from runtime.serving import serving_fields

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
LUA = HERE / "adapter_send.lua"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PRINCIPAL = Principal(
    kind="delegated", subject="bench", client="bench", agent="bench", role="admin", autonomy="L3"
)


def drain(stream: object) -> None:
    # any iterable pipe: `object` keeps callers free, iterating it is the contract
    threading.Thread(target=lambda: [None for _ in stream], daemon=True).start()  # type: ignore[attr-defined]


def start_adapter(
    keys_spec: str, extra: dict[str, str] | None = None
) -> tuple[subprocess.Popen[str], int]:
    """`python -m adapter` on a free port (`extra`: more variables, e.g. another gateway)."""
    env = {
        **os.environ,
        "ORRERY_A2A_ASSERTION_KEYS": keys_spec,
        "ORRERY_A2A_ADAPTER_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_MAX_IN_FLIGHT": "1000",
        **(extra or {}),
    }
    process = subprocess.Popen(
        [sys.executable, "-m", "adapter"],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert process.stderr is not None
    for line in process.stderr:
        event = serving_fields(line)
        if event is not None:
            drain(process.stderr)
            return process, parse_address(event["addr"])[1]
    raise RuntimeError("the adapter exited before serving")


def start_stock(otel: str) -> tuple[subprocess.Popen[str], int]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OTEL_INSTRUMENTATION_A2A_SDK_ENABLED": otel}
    process = subprocess.Popen(
        [sys.executable, str(HERE / "adapter_stock_server.py")],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    port = json.loads(process.stdout.readline())["port"]
    drain(process.stdout)
    return process, int(port)


T = TypeVar("T")


def run_in_scratch(prefix: str, run: Callable[[Path], Coroutine[Any, Any, T]]) -> T:
    """`asyncio.run(run(work))` in a fresh temporary directory, removed afterwards (the stacks
    the end-to-end benches start keep their state and logs there)."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        return asyncio.run(run(work))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def mint(keys: AssertionKeys, count: int) -> Path:
    """Assertions for `count` distinct request ids, valid for the next 30 s."""
    now = int(time.time())
    handle, name = tempfile.mkstemp(prefix="adapter-bench-", suffix=".tsv")
    with os.fdopen(handle, "w") as out:
        for _ in range(count):
            rid = uuid.uuid4().hex
            value = sign(
                keys, PRINCIPAL, surface="a2a", request_id=rid, token_expires_at=now + 3600, now=now
            )
            out.write(f"{rid}\t{value}\n")
    return Path(name)


@dataclass(frozen=True)
class WrkRun:
    rps: float
    total: int
    bad: int  # responses that were not a 200 with a completed task
    p50_ms: float
    p99_ms: float


_UNITS_MS = {"us": 0.001, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def found(pattern: str, out: str, flags: int = 0) -> re.Match[str]:
    """`pattern` in a load tool's output, which always prints it: a run without it fails here."""
    match = re.search(pattern, out, flags)
    assert match is not None, f"{pattern!r} not in the output: {out[-2000:]}"
    return match


def _percentile_ms(out: str, percent: str) -> float:
    value, unit = found(rf"^\s+{percent}%\s+([\d.]+)(us|ms|s|m)\s*$", out, re.M).groups()
    return float(value) * _UNITS_MS[unit]


def run_wrk(
    port: int,
    duration: int,
    connections: int,
    identities: Path | None,
    headers: tuple[str, ...] = (),
) -> WrkRun:
    """One `wrk` run of the SendMessage script against 127.0.0.1:port/a2a (`headers`: `-H`)."""
    command = ["wrk", "-t1", f"-c{connections}", f"-d{duration}s", "--latency", "-s", str(LUA)]
    for header in headers:
        command += ["-H", header]
    command.append(f"http://127.0.0.1:{port}/a2a")
    if identities is not None:
        command += ["--", str(identities)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return WrkRun(
        rps=float(found(r"Requests/sec:\s+([\d.]+)", out)[1]),
        total=int(found(r"(\d+) requests in", out)[1]),
        bad=int(found(r"not-completed: (\d+)", out)[1]),
        p50_ms=_percentile_ms(out, "50"),
        p99_ms=_percentile_ms(out, "99"),
    )


def measure(
    name: str,
    process: subprocess.Popen[str],
    port: int,
    args: argparse.Namespace,
    keys: AssertionKeys | None,
) -> tuple[float, float]:
    identities = mint(keys, 2000) if keys else None
    try:
        run_wrk(port, 2, args.connections, identities)  # warm-up
        if keys:
            # set whenever `keys` is (minted just above)
            identities.unlink()  # type: ignore[union-attr]
            identities = mint(keys, 2000)
        before = cpu_seconds(process.pid)
        run = run_wrk(port, args.duration, args.connections, identities)
        rps, total, bad = run.rps, run.total, run.bad
        cpu_ms = (cpu_seconds(process.pid) - before) * 1000 / max(total, 1)
    finally:
        if identities is not None:
            identities.unlink()
    print(
        f"  {name:14s} {rps:9.1f} req/s  {cpu_ms:6.3f} ms CPU/req  ({total} requests, "
        f"{bad} not completed)",
        flush=True,
    )
    if bad:
        raise SystemExit(f"{name}: {bad} responses were not completed tasks")
    return rps, cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=int, default=8, help="seconds per measured run (<25)")
    parser.add_argument("--connections", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    keys_spec = new_keys_spec("bench")
    keys = AssertionKeys.parse(keys_spec)
    servers = {
        "stock": start_stock("true"),  # as shipped: the SDK's no-op OpenTelemetry spans on
        "stock-no-otel": start_stock("false"),  # like for like with `python -m adapter`
        "adapter": start_adapter(keys_spec),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in servers}
    try:
        for round_number in range(1, args.rounds + 1):
            print(f"round {round_number}", flush=True)
            for name, (process, port) in servers.items():
                minted = keys if name == "adapter" else None
                results[name].append(measure(name, process, port, args, minted))
    finally:
        for process, _ in servers.values():
            process.terminate()
            process.wait(timeout=30)
    rps = {name: statistics.median(r for r, _ in runs) for name, runs in results.items()}
    cpu = {name: statistics.median(c for _, c in runs) for name, runs in results.items()}
    for name in servers:
        print(f"median {name:14s} {rps[name]:9.1f} req/s  {cpu[name]:6.3f} ms CPU/req")
    for baseline in ("stock", "stock-no-otel"):
        print(
            f"ratio adapter/{baseline}: {rps['adapter'] / rps[baseline]:.2f}x requests/s, "
            f"{cpu[baseline] / cpu['adapter']:.2f}x less CPU per request"
        )


if __name__ == "__main__":
    main()
