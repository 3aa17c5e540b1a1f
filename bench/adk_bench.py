"""A turn through the ADK gateway vs the demo gateway vs ADK's own `to_a2a()`, same run.

    .venv/bin/python bench/adk_bench.py [--duration 8] [--concurrency 4] [--rounds 3]

Three servers, each its own process on 127.0.0.1, answer the same blocking `SendMessage` ("how
is checkout?", a new conversation each time):

* `adk` — `python -m adapter` with `ORRERY_A2A_GATEWAY=gateways.adk:create` serving the example
  agent (gateways/adk/example.py) on its scripted model: ADK's Runner, a transfer to the
  investigator, its tool, the reply; principal assertions pre-minted as authz would
  (`adapter_bench.mint`);
* `demo` — the same adapter on the default demo gateway (no ADK at all): the edge's own cost;
* `to_a2a` — the same example agent served by `to_a2a()` on uvicorn (`adk_to_a2a_server.py`),
  no authentication.

The same Python client (httpx, `--concurrency` workers) drives each in turn, rounds interleaved;
the medians and the ratios adk/demo (what ADK adds to a turn) and adk/to_a2a (what the edge adds
to serving ADK) are printed.

Then memory, each in a fresh process: the ADK gateway driven directly for 1 000, 2 000 and 3 000
distinct conversations, once on ADK's own `InMemorySessionService` (which never forgets) and once on
`BoundedSessionService` bounded at 1 000 sessions; RSS after each step. Asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))  # `import adapter_bench` as a script

from adapter_bench import mint, start_adapter

from contract.assertion import AssertionKeys, new_keys_spec

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
ADK = {
    "ORRERY_A2A_GATEWAY": "gateways.adk:create",
    "ORRERY_A2A_ADK_AGENT": "gateways.adk.example:root_agent",
}
MEMORY_BOUND = 1000


@dataclass
class Server:
    process: subprocess.Popen[str]
    url: str
    keys: AssertionKeys | None  # None: the to_a2a baseline takes no assertion


def start_to_a2a() -> Server:
    process = subprocess.Popen(
        [sys.executable, str(HERE / "adk_to_a2a_server.py")],
        cwd=ROOT,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    assert process.stdout is not None
    port = json.loads(process.stdout.readline())["port"]
    return Server(process, f"http://127.0.0.1:{port}/", None)


def start(keys_spec: str, extra: dict[str, str]) -> Server:
    process, port = start_adapter(keys_spec, extra)
    return Server(process, f"http://127.0.0.1:{port}/a2a", AssertionKeys.parse(keys_spec))


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def _identities(server: Server) -> itertools.cycle[tuple[str, str]] | None:
    if server.keys is None:
        return None
    path = mint(server.keys, 2000)
    try:
        lines = [line.split("\t") for line in path.read_text().splitlines()]
    finally:
        path.unlink()
    return itertools.cycle([(rid, value) for rid, value in lines])


async def _send(
    http: httpx.AsyncClient, server: Server, identities: itertools.cycle[tuple[str, str]] | None
) -> bool:
    headers = {"A2A-Version": "1.0"}
    if identities is not None:
        rid, value = next(identities)
        headers |= {"x-request-id": rid, "x-orrery-principal": value}
    body: dict[str, Any] = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {
            "message": {
                "messageId": uuid.uuid4().hex,
                "role": "ROLE_USER",
                "parts": [{"text": "how is checkout?"}],
            }
        },
    }
    response = await http.post(server.url, json=body, headers=headers)
    task = response.json().get("result", {}).get("task", {})
    return bool(task.get("status", {}).get("state") == "TASK_STATE_COMPLETED")


async def turns_per_second(server: Server, seconds: float, concurrency: int) -> float:
    identities = _identities(server)
    done = bad = 0
    deadline = time.monotonic() + seconds

    async def worker(http: httpx.AsyncClient) -> None:
        nonlocal done, bad
        while time.monotonic() < deadline:
            if await _send(http, server, identities):
                done += 1
            else:
                bad += 1

    started = time.monotonic()
    async with httpx.AsyncClient(timeout=60) as http:
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
    if bad:
        raise SystemExit(f"{server.url}: {bad} turns did not complete")
    return done / (time.monotonic() - started)


async def session_memory(kind: str) -> list[float]:
    """RSS (MiB) of this process after each MEMORY_BOUND more conversations (3 steps) through
    the ADK gateway on `kind` sessions: `adk` (ADK's own) or `bounded`."""
    from google.adk.sessions import InMemorySessionService

    from adapter.gateway import Turn
    from adapter.stores.memory import MemoryConfirmationStore
    from contract.identity import Principal
    from gateways.adk.example import ScriptedModel, build_agent
    from gateways.adk.gateway import AdkGateway
    from gateways.adk.sessions import BoundedSessionService

    sessions = (
        InMemorySessionService()
        if kind == "adk"
        else BoundedSessionService(max_sessions=MEMORY_BOUND)
    )
    gateway = AdkGateway(
        build_agent(ScriptedModel()), sessions, MemoryConfirmationStore(), approval_ttl=900
    )
    caller = Principal(
        kind="delegated",
        subject="bench",
        client="bench",
        agent="bench",
        role="admin",
        autonomy="L3",
    )
    sizes = []
    for step in range(3):
        for number in range(MEMORY_BOUND):
            turn = Turn(
                session_id=f"a2a-{step}-{number}",
                principal=caller,
                text="how is checkout?",
                task_id=uuid.uuid4().hex,
                message_id=uuid.uuid4().hex,
                context_id=uuid.uuid4().hex,
            )
            await gateway.run_in_session(turn)
        sizes.append(rss_mib(os.getpid()))
    await gateway.aclose()
    return sizes


def memory(kind: str) -> list[float]:
    """`session_memory(kind)` in a fresh process (`--sessions KIND`)."""
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--sessions", kind],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    sizes: list[float] = json.loads(out.splitlines()[-1])
    return sizes


async def run(args: argparse.Namespace) -> None:
    keys_spec = new_keys_spec("bench")
    servers = {
        "adk": start(keys_spec, ADK),
        "demo": start(keys_spec, {}),
        "to_a2a": start_to_a2a(),
    }
    results: dict[str, list[float]] = {name: [] for name in servers}
    try:
        for server in servers.values():
            await turns_per_second(server, 2, args.concurrency)  # warm-up
        for round_number in range(1, args.rounds + 1):
            for name, server in servers.items():
                rate = await turns_per_second(server, args.duration, args.concurrency)
                results[name].append(rate)
                print(f"round {round_number} {name:7s} {rate:8.1f} turns/s", flush=True)
    finally:
        for server in servers.values():
            server.process.terminate()
            server.process.wait(timeout=30)
    median = {name: statistics.median(rates) for name, rates in results.items()}
    for name, rate in median.items():
        print(f"median {name:7s} {rate:8.1f} turns/s")
    print(f"ratio adk/demo:   {median['adk'] / median['demo']:.3f}x turns/s")
    print(f"ratio adk/to_a2a: {median['adk'] / median['to_a2a']:.3f}x turns/s")
    for kind in ("adk", "bounded"):
        sizes = memory(kind)
        steps = ", ".join(f"{(n + 1) * MEMORY_BOUND}: {size:.1f}" for n, size in enumerate(sizes))
        print(f"RSS MiB, {kind} sessions, after N conversations: {steps}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--duration", type=float, default=8, help="seconds per measured run")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sessions", choices=("adk", "bounded"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.sessions:  # the memory child
        print(json.dumps(asyncio.run(session_memory(args.sessions))))
    else:
        asyncio.run(run(args))


if __name__ == "__main__":
    main()
