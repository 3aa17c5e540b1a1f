"""The adapter's in-memory stores at their bounds (P5): RSS, in a process of its own.

    .venv/bin/python bench/adapter_memory.py

`BoundedTaskStore` with `ORRERY_A2A_MAX_TASKS` (10 000) tasks like a finished blocking
SendMessage (the user's message, the agent's reply, one text artifact), then as many again
(evicting), then `MemoryMessageClaims` at its bound (4 x max tasks); prints RSS (MiB) at each
step as one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from memory_bench import rss_mib

from adapter.principal import PrincipalUser
from adapter.settings import AdapterSettings
from adapter.stores.memory import BoundedTaskStore, MemoryMessageClaims
from contract.assertion import new_keys_spec
from contract.identity import Principal


async def adapter_memory() -> dict[str, Any]:
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


if __name__ == "__main__":
    print(json.dumps(asyncio.run(adapter_memory())))
