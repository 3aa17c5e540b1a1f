"""A blocking `SendMessage` that starts a task, seen from other calls while its turn runs.

The client waiting on the send does not know the task's id yet, but a second client of the same
owner may (`ListTasks`, a retry of the message), and what it sees must not depend on how the turn
is run: the running task to `GetTask`, the rest of the turn to `SubscribeToTask`, a `CancelTask`
that ends the turn for both callers, a retry answered once, and a stop that ends the turn FAILED.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncGenerator
from typing import Any

import httpx
import pytest
from a2a.server.context import ServerCallContext
from a2a.server.events import Event
from a2a.types import a2a_pb2 as pb
from google.protobuf import json_format

from adapter.app import AGENT
from adapter.executor import pending_action_id
from adapter.principal import PrincipalUser
from tests.adapter.conftest import (
    Server,
    delegated,
    human,
    message_params,
    running,
    sse_events,
)
from tests.metrics import metric
from tests.waiting import eventually

ALICE_BOT = delegated("bot", "alice")


async def held_send(
    server: Server, text: str = "how is checkout?"
) -> tuple[asyncio.Task[httpx.Response], str]:
    """A blocking send whose gateway call is held, and the id of its (running) task."""
    server.gateway.hold = asyncio.Event()
    server.gateway.started.clear()
    sending = asyncio.create_task(server.rpc(ALICE_BOT, "SendMessage", message_params(text)))
    await server.gateway.started.wait()
    task_id = server.gateway.turns[-1].task_id

    async def stored() -> bool:
        return "result" in (await server.rpc(ALICE_BOT, "GetTask", {"id": task_id})).json()

    await eventually(stored)  # the turn's first write may still be on its way to the store
    return sending, task_id


def task_of(response: httpx.Response) -> dict[str, Any]:
    task: dict[str, Any] = response.json()["result"]["task"]
    return task


async def subscription(server: Server, task_id: str) -> list[dict[str, Any]]:
    """The results of a SubscribeToTask stream on `server`, until it ends."""
    body = {"jsonrpc": "2.0", "id": 2, "method": "SubscribeToTask", "params": {"id": task_id}}
    async with (
        server.http(ALICE_BOT) as http,
        http.stream("POST", "/a2a", json=body, headers={"A2A-Version": "1.0"}) as stream,
    ):
        return [event["result"] for _, event in await sse_events(stream)]


def kinds(results: list[dict[str, Any]]) -> list[str]:
    return [next(iter(result)) for result in results]


async def test_get_task_during_a_blocking_send_answers_the_running_task(server: Server) -> None:
    """GetTask while the turn runs: the task, not yet finished; after it, the completed one."""
    sending, task_id = await held_send(server)
    during = task_of_get(await server.rpc(ALICE_BOT, "GetTask", {"id": task_id}))
    assert server.gateway.hold is not None
    server.gateway.hold.set()
    answered = task_of(await sending)
    assert during["status"]["state"] in ("TASK_STATE_SUBMITTED", "TASK_STATE_WORKING")
    assert during["history"][0]["messageId"] == answered["history"][0]["messageId"]
    assert answered["status"]["state"] == "TASK_STATE_COMPLETED"
    after = task_of_get(await server.rpc(ALICE_BOT, "GetTask", {"id": task_id}))
    assert after == answered


def task_of_get(response: httpx.Response) -> dict[str, Any]:
    task: dict[str, Any] = response.json()["result"]
    return task


async def test_list_tasks_during_a_blocking_send_shows_the_running_task(server: Server) -> None:
    """ListTasks while the turn runs: the caller's task is listed, not yet finished."""
    sending, task_id = await held_send(server)
    listed = (await server.rpc(ALICE_BOT, "ListTasks", {})).json()["result"]["tasks"]
    assert server.gateway.hold is not None
    server.gateway.hold.set()
    await sending
    assert [(task["id"], task["status"]["state"]) for task in listed] in (
        [(task_id, "TASK_STATE_SUBMITTED")],
        [(task_id, "TASK_STATE_WORKING")],
    )


async def test_cancel_during_a_blocking_send_ends_the_turn_for_both_callers(
    server: Server,
) -> None:
    """CancelTask while the gateway works: CANCELED to the canceller and to the waiting sender,
    the gateway's call is stopped, and the task stays CANCELED without a reply."""
    sending, task_id = await held_send(server)
    canceled = task_of_get(await server.rpc(ALICE_BOT, "CancelTask", {"id": task_id}))
    answered = task_of(await sending)  # the held gateway call never finishes: it was stopped
    fetched = task_of_get(await server.rpc(ALICE_BOT, "GetTask", {"id": task_id}))
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert answered["status"]["state"] == "TASK_STATE_CANCELED"
    assert fetched["status"]["state"] == "TASK_STATE_CANCELED"
    assert "artifacts" not in fetched

    async def slot_freed() -> bool:
        return await metric(f"{server.base}/metrics", "orrery_a2a_turns_in_flight") == 0

    await eventually(slot_freed)


async def test_a_second_cancel_after_a_blocking_send_was_canceled_is_refused(
    server: Server,
) -> None:
    """A task canceled mid-send is terminal: cancelling it again is -32002."""
    sending, task_id = await held_send(server)
    await server.rpc(ALICE_BOT, "CancelTask", {"id": task_id})
    await sending
    again = await server.rpc(ALICE_BOT, "CancelTask", {"id": task_id})
    assert again.json()["error"]["code"] == -32002


async def test_subscribers_during_a_blocking_send_hear_the_rest_of_the_turn(
    server: Server,
) -> None:
    """Two SubscribeToTask streams while the turn runs: each the task, then the reply and
    COMPLETED, in the same order; the sender's answer is that completed task."""
    sending, task_id = await held_send(server)
    subscribers = [asyncio.create_task(subscription(server, task_id)) for _ in range(2)]

    async def attached() -> bool:
        return await metric(f"{server.base}/metrics", "orrery_a2a_subscriptions_open") == 2

    await eventually(attached)
    await asyncio.sleep(0.2)  # both streams have sent their first event and wait for the turn
    assert server.gateway.hold is not None
    server.gateway.hold.set()
    answered = task_of(await sending)
    streams = [await subscriber for subscriber in subscribers]
    for events in streams:
        assert kinds(events) == ["task", "artifactUpdate", "statusUpdate"]
        assert events[0]["task"]["id"] == task_id
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert events[1]["artifactUpdate"]["artifact"] == answered["artifacts"][0]
    assert streams[0][1:] == streams[1][1:]


async def test_a_subscriber_during_a_blocking_send_that_ends_waiting_stays_to_the_end(
    server: Server,
) -> None:
    """A blocking send whose turn ends waiting for an approval: a subscriber attached during the
    turn hears INPUT_REQUIRED, stays, and hears the approved follow-up complete the task."""
    sending, task_id = await held_send(server, "restart checkout")
    subscriber = asyncio.create_task(subscription(server, task_id))

    async def attached() -> bool:
        return await metric(f"{server.base}/metrics", "orrery_a2a_subscriptions_open") == 1

    await eventually(attached)
    assert server.gateway.hold is not None
    server.gateway.hold.set()
    waiting = task_of(await sending)
    action_id = next(
        part["data"]["action_id"]
        for part in waiting["status"]["message"]["parts"]
        if "data" in part
    )
    async with server.http(human("alice"), "approvals") as http:
        await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
    await server.rpc(ALICE_BOT, "SendMessage", message_params("go ahead", taskId=task_id))
    events = await subscriber
    states = [value.get("status", {}).get("state") for event in events for value in event.values()]
    assert kinds(events)[:2] == ["task", "statusUpdate"]
    assert states[1] == "TASK_STATE_INPUT_REQUIRED"
    assert states[-1] == "TASK_STATE_COMPLETED"
    assert kinds(events).count("task") == 1  # the task once, then its events


async def heard_waiting(server: Server) -> tuple[AsyncGenerator[Event, None], str]:
    """A subscription (read in step with the test) to a blocking send's task that has heard the
    turn end INPUT_REQUIRED, whose action has then been approved; and the task's id."""
    sending, task_id = await held_send(server, "restart checkout")
    call = ServerCallContext(user=PrincipalUser(ALICE_BOT))
    events = server.app[AGENT].on_subscribe_to_task(pb.SubscribeToTaskRequest(id=task_id), call)
    assert isinstance(await anext(events), pb.Task)
    assert server.gateway.hold is not None
    server.gateway.hold.set()
    heard = await anext(events)
    assert isinstance(heard, pb.TaskStatusUpdateEvent)
    assert heard.status.state == pb.TASK_STATE_INPUT_REQUIRED
    action_id = pending_action_id(json_format.ParseDict(task_of(await sending), pb.Task()))
    async with server.http(human("alice"), "approvals") as http:
        await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
    return events, task_id


def final_state(events: list[Event]) -> int:
    last = events[-1]
    assert isinstance(last, pb.Task | pb.TaskStatusUpdateEvent)
    return last.status.state


async def test_a_subscriber_slower_than_the_follow_up_still_hears_how_the_task_ended(
    server: Server,
) -> None:
    """A subscriber that heard INPUT_REQUIRED and reads on only after the approved follow-up
    finished the task gets the finished task, not a silent end of its stream."""
    events, task_id = await heard_waiting(server)
    await server.rpc(ALICE_BOT, "SendMessage", message_params("go ahead", taskId=task_id))
    rest = [event async for event in events]
    assert len(rest) == 1 and isinstance(rest[0], pb.Task)
    assert final_state(rest) == pb.TASK_STATE_COMPLETED


async def test_a_retry_during_a_blocking_send_is_answered_with_its_task_once_it_ends(
    server: Server,
) -> None:
    """The same message sent again while its first send runs: the gateway runs once, and both
    sends answer the same completed task."""
    params = message_params()
    server.gateway.hold = asyncio.Event()
    first = asyncio.create_task(server.rpc(ALICE_BOT, "SendMessage", params))
    await server.gateway.started.wait()
    retry = asyncio.create_task(server.rpc(ALICE_BOT, "SendMessage", params))
    await asyncio.sleep(0.2)  # the retry found the claim and waits for the turn
    server.gateway.hold.set()
    answers = [task_of(await first), task_of(await retry)]
    assert answers[0] == answers[1]
    assert answers[0]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(server.gateway.turns) == 1


async def test_a_blocking_send_running_at_shutdown_answers_its_task_failed() -> None:
    """The adapter stops while a blocking send's gateway call runs: after the grace the sender is
    answered its task FAILED (`adapter_stopped`)."""
    async with running({"ORRERY_A2A_SHUTDOWN_GRACE": "1s"}) as server:
        sending, _ = await held_send(server)
        stopping = asyncio.create_task(server.runner.cleanup())
        answered = task_of(await sending)
        await stopping
    assert answered["status"]["state"] == "TASK_STATE_FAILED"
    assert answered["status"]["message"]["metadata"] == {"reason": "adapter_stopped"}


@pytest.mark.postgres
async def test_a_cancel_on_another_replica_ends_a_blocking_send(replicas: list[Server]) -> None:
    """CancelTask on replica two while a blocking send runs on replica one: once the turn's
    gateway call returns, the sender is answered CANCELED, and the task stays so."""
    one, two = replicas
    sending, task_id = await held_send(one)
    canceled = task_of_get(await two.rpc(ALICE_BOT, "CancelTask", {"id": task_id}))
    assert one.gateway.hold is not None
    one.gateway.hold.set()  # the turn notices the cancel at its next write
    answered = task_of(await sending)
    fetched = task_of_get(await one.rpc(ALICE_BOT, "GetTask", {"id": task_id}))
    assert canceled["status"]["state"] == "TASK_STATE_CANCELED"
    assert answered["status"]["state"] == "TASK_STATE_CANCELED"
    assert fetched["status"]["state"] == "TASK_STATE_CANCELED"
    assert "artifacts" not in fetched


@pytest.mark.postgres
async def test_subscribers_on_both_replicas_hear_a_blocking_send_end(
    replicas: list[Server],
) -> None:
    """SubscribeToTask on the sender's replica and on the other one while a blocking send runs:
    both hear the task, the reply and COMPLETED."""
    one, two = replicas
    sending, task_id = await held_send(one)
    subscribers = [asyncio.create_task(subscription(server, task_id)) for server in (one, two)]

    for server in (one, two):
        await eventually(functools.partial(subscribed_once, server))
    await asyncio.sleep(0.2)  # both streams have sent their snapshot and tail the task's events
    assert one.gateway.hold is not None
    one.gateway.hold.set()
    answered = task_of(await sending)
    for events in [await subscriber for subscriber in subscribers]:
        assert kinds(events) == ["task", "artifactUpdate", "statusUpdate"]
        assert events[-1]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert events[1]["artifactUpdate"]["artifact"] == answered["artifacts"][0]


async def subscribed_once(server: Server) -> bool:
    return await metric(f"{server.base}/metrics", "orrery_a2a_subscriptions_open") == 1
