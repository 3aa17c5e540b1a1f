"""A turn that cannot finish ends its task FAILED with a reason, frees its slot and tells its
subscribers — nothing is left `TASK_STATE_SUBMITTED` (`adapter/endings.py`)."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from a2a.server.context import ServerCallContext
from a2a.types import a2a_pb2 as pb
from google.protobuf import timestamp_pb2

from adapter.app import METRICS
from adapter.endings import TEXTS
from adapter.metrics import Metrics
from adapter.outage import Outage
from adapter.principal import PrincipalUser
from adapter.recovery import Recovery
from adapter.stores.memory import BoundedTaskStore
from tests.adapter.conftest import Server, delegated, message_params, running, sse_events

ALICE_BOT = delegated()
DEADLINE = {"ORRERY_A2A_TURN_DEADLINE": "300ms", "ORRERY_A2A_MAX_IN_FLIGHT": "1"}


def ended(task: dict[str, Any], reason: str) -> bool:
    status = task["status"]
    return bool(
        status["state"] == "TASK_STATE_FAILED"
        and status["message"]["metadata"] == {"reason": reason}
        and status["message"]["parts"][0]["text"].startswith("The agent could not finish")
    )


def turns_ended(server: Server, reason: str) -> float | None:
    return server.app[METRICS].registry.get_sample_value(
        "orrery_a2a_turns_ended_total", {"reason": reason}
    )


async def test_a_turn_past_its_deadline_ends_its_task_failed_and_frees_its_slot() -> None:
    """A hung gateway call: at `ORRERY_A2A_TURN_DEADLINE` the blocking send answers the task FAILED
    (`turn_deadline`), and the caller's one slot is free for the next turn."""
    async with running(DEADLINE) as server:
        server.gateway.hold = asyncio.Event()
        response = await server.rpc(ALICE_BOT, "SendMessage", message_params())
        assert ended(response.json()["result"]["task"], "turn_deadline")
        server.gateway.hold = None
        for _ in range(200):  # the run lets go of its slot just after the answer
            if (await server.rpc(ALICE_BOT, "SendMessage", message_params())).status_code == 200:
                break
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("the slot was never freed")
        assert turns_ended(server, "turn_deadline") == 1


async def test_a_subscriber_hears_the_deadline_end_its_task() -> None:
    """SubscribeToTask on a task whose turn hangs: the FAILED status is its last event, then the
    stream ends."""
    async with running(DEADLINE | {"ORRERY_A2A_TURN_DEADLINE": "1s"}) as server:
        server.gateway.hold = asyncio.Event()
        params = message_params() | {"configuration": {"returnImmediately": True}}
        task = (await server.rpc(ALICE_BOT, "SendMessage", params)).json()["result"]["task"]
        assert task["status"]["state"] == "TASK_STATE_SUBMITTED"
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "SubscribeToTask",
            "params": {"id": task["id"]},
        }
        async with (
            server.http(ALICE_BOT) as http,
            http.stream("POST", "/a2a", json=body, headers={"A2A-Version": "1.0"}) as stream,
        ):
            events = await sse_events(stream)
        assert [name for name, _ in events] == ["message"] * len(events)
        assert ended(events[-1][1]["result"]["statusUpdate"], "turn_deadline")


def _context(owner: str = "k1") -> ServerCallContext:
    return ServerCallContext(user=PrincipalUser(delegated(agent=owner)))


def _submitted(task_id: str, seconds_ago: float) -> pb.Task:
    stamp = timestamp_pb2.Timestamp()
    stamp.FromNanoseconds(int((time.time() - seconds_ago) * 1e9))
    return pb.Task(
        id=task_id,
        context_id="c",
        status=pb.TaskStatus(state=pb.TASK_STATE_SUBMITTED, timestamp=stamp),
    )


async def test_the_recovery_sweep_ends_only_tasks_older_than_any_live_turn() -> None:
    """In memory: a SUBMITTED task older than the deadline + margin ends FAILED `turn_lost`; a
    younger one, and a task waiting for input, are left alone."""
    store = BoundedTaskStore()
    context = _context()
    await store.save(_submitted("lost", seconds_ago=3600), context)
    await store.save(_submitted("young", seconds_ago=1), context)
    waiting = _submitted("waiting", seconds_ago=3600)
    waiting.status.state = pb.TASK_STATE_INPUT_REQUIRED
    await store.save(waiting, context)
    metrics = Metrics()
    recovery = Recovery(store, store, Outage((), metrics), metrics, turn_deadline=60.0)
    assert await recovery.sweep() == 1
    lost = await store.get("lost", context)
    assert lost is not None and lost.status.state == pb.TASK_STATE_FAILED
    assert lost.status.message.metadata["reason"] == "turn_lost"
    assert lost.status.message.parts[0].text == TEXTS["turn_lost"]
    young, parked = await store.get("young", context), await store.get("waiting", context)
    assert young is not None and young.status.state == pb.TASK_STATE_SUBMITTED
    assert parked is not None and parked.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert await recovery.sweep() == 0  # ended once
