"""Memory under many callers (P5): authz's RSS as distinct tokens and subjects pile up, and the
adapter's in-memory stores at their bounds.

    .venv/bin/python bench/memory_bench.py authz [--tokens 200000] [--subjects 1000000]
    .venv/bin/python bench/memory_bench.py adapter

Each mode runs in its own process and prints one JSON object: RSS (VmRSS, MiB) samples.

* authz: the real decider (`check_profile.Parts`, default bounds: 10 000 verified tokens and
  principals, 100 000 rate-limit subjects) is fed `--tokens` distinct EdDSA tokens, each for its
  own subject, through `Decider.decide` — full verification, principal, signing, limiter — then
  `--subjects` more distinct subjects straight into the limiter (a token per subject would
  spend minutes on signatures for no other effect). RSS is sampled ten times along each.
* adapter: `BoundedTaskStore` with `ORRERY_A2A_MAX_TASKS` (10 000) tasks like a finished
  blocking SendMessage (the user's message, the agent's reply, one text artifact), then as many
  again (evicting), then `MemoryMessageClaims` at its bound (4 x max tasks); RSS at each step.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


async def authz_memory(tokens: int, subjects: int) -> dict[str, Any]:
    import jwt
    from authz_bench import AUDIENCE, ISSUER, public_jwk
    from check_profile import Parts, bench_env
    from cryptography.hazmat.primitives.asymmetric import ed25519

    from authz.decision import Allow, CheckView
    from authz.settings import AuthzSettings

    work = Path(tempfile.mkdtemp(prefix="memory-bench-"))
    key = ed25519.Ed25519PrivateKey.generate()
    (work / "jwks.json").write_text(json.dumps({"keys": [public_jwk("ed", key, "EdDSA")]}))
    settings = AuthzSettings.from_env(bench_env(work / "jwks.json"))
    parts = Parts(settings)
    await parts.keys.start()
    now = int(time.time())
    samples: list[tuple[int, float]] = [(0, rss_mib())]
    step = max(1, tokens // 10)
    for number in range(1, tokens + 1):
        claims = {
            "iss": ISSUER,
            "aud": AUDIENCE,
            "sub": f"subject-{number}",
            "client_id": f"client-{number}",
            "iat": now,
            "exp": now + 3600,
            "roles": ["operator"],
        }
        token = jwt.encode(claims, key, algorithm="EdDSA", headers={"kid": "ed"})
        view = CheckView(
            headers={"authorization": f"Bearer {token}", "x-request-id": uuid.uuid4().hex},
            surface="a2a",
            path="/a2a",
        )
        result = await parts.decider.decide(view)
        if not isinstance(result, Allow):
            raise SystemExit(f"token {number} was refused: {result}")
        if number % step == 0:
            samples.append((number, rss_mib()))
    limiter_samples: list[tuple[int, float]] = [(0, rss_mib())]
    step = max(1, subjects // 10)
    for number in range(1, subjects + 1):
        await parts.limiter.check(f"a2a:service:extra-subject-{number}")
        if number % step == 0:
            limiter_samples.append((number, rss_mib()))
    await parts.keys.close()
    await parts.limiter.close()
    return {
        "tokens": samples,
        "subjects": limiter_samples,
        "cached_tokens": len(parts.verifier),
        "limiter_subjects": len(parts.limiter._local),
        "token_cache_size": settings.token_cache_size,
        "max_subjects": settings.limits.max_subjects,
    }


async def adapter_memory() -> dict[str, Any]:
    from a2a.server.context import ServerCallContext
    from a2a.types import a2a_pb2 as pb

    from adapter.principal import PrincipalUser
    from adapter.settings import AdapterSettings
    from adapter.stores.memory import BoundedTaskStore, MemoryMessageClaims
    from contract.assertion import new_keys_spec
    from contract.identity import Principal

    settings = AdapterSettings.from_env({"ORRERY_A2A_ASSERTION_KEYS": new_keys_spec("bench")})
    store = BoundedTaskStore(max_tasks=settings.max_tasks, idle_ttl=settings.task_idle_ttl)
    claims = MemoryMessageClaims(max_claims=4 * settings.max_tasks)
    before = rss_mib()
    owners = [
        ServerCallContext(
            user=PrincipalUser(
                Principal(
                    kind="delegated",
                    subject=f"user-{n}",
                    client="client",
                    agent="agent",
                    role="operator",
                    autonomy="L2",
                )
            )
        )
        for n in range(100)
    ]
    for number in range(2 * settings.max_tasks):
        task = pb.Task(
            id=str(uuid.uuid4()),
            context_id=str(uuid.uuid4()),
            status=pb.TaskStatus(state=pb.TaskState.TASK_STATE_COMPLETED),
        )
        task.history.add(
            message_id=str(uuid.uuid4()), role=pb.Role.ROLE_USER
        ).parts.add().text = "how is checkout?"
        task.history.add(
            message_id=str(uuid.uuid4()), role=pb.Role.ROLE_AGENT
        ).parts.add().text = "checkout is healthy: p99 212 ms, error rate 0.02 % over the last hour"
        artifact = task.artifacts.add(artifact_id=str(uuid.uuid4()), name="answer")
        artifact.parts.add().text = "checkout is healthy"
        await store.save(task, owners[number % len(owners)])
        if number + 1 == settings.max_tasks:
            at_bound = rss_mib()
    after_tasks = rss_mib()
    for number in range(4 * settings.max_tasks):
        await claims.claim(
            f"owner-{number % 100}", str(uuid.uuid4()), task_id=str(uuid.uuid4()), fingerprint="f"
        )
    return {
        "max_tasks": settings.max_tasks,
        "tasks": await store.count(),
        "rss_before": before,
        "rss_at_bound": at_bound,
        "rss_after_twice_the_bound": after_tasks,
        "max_claims": 4 * settings.max_tasks,
        "rss_with_claims_at_bound": rss_mib(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("mode", choices=("authz", "adapter"))
    parser.add_argument("--tokens", type=int, default=200_000)
    parser.add_argument("--subjects", type=int, default=1_000_000)
    args = parser.parse_args()
    if args.mode == "authz":
        result = asyncio.run(authz_memory(args.tokens, args.subjects))
    else:
        result = asyncio.run(adapter_memory())
    print(json.dumps(result))


if __name__ == "__main__":
    main()
