"""A retried message gets the first answer, and the gateway runs once (spec 3.3.1).

A message is named by its `messageId` and its content within a scope: the task it names, or — for
a message that starts a task — the `contextId` it was sent with (none counts as one scope). The
same id with the same message in the same scope is a retry: the answer is the task that message
made, as it stands once that turn is over; the gateway does not run again, also when the
duplicates race (one process, or two replicas on PostgreSQL). The same id with a different message
is another message: it runs (docs/decisions.md, D9). The gateway sees the message id and the
task's ids.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest

from tests.adapter.conftest import Server, delegated, human

ALICE_BOT = delegated()


def message(text: str, message_id: str, **fields: Any) -> dict[str, Any]:
    return {
        "message": {
            "messageId": message_id,
            "role": "ROLE_USER",
            "parts": [{"text": text}],
            **fields,
        }
    }


async def send(server: Server, params: dict[str, Any], method: str = "SendMessage") -> Any:
    response = await server.rpc(ALICE_BOT, method, params)
    if method == "SendStreamingMessage":
        return [
            json.loads(line.removeprefix("data: "))
            for line in response.text.splitlines()
            if line.startswith("data: ")
        ]
    return response.json()


def task_of(answer: dict[str, Any]) -> dict[str, Any]:
    return dict(answer["result"]["task"])


async def approve(server: Server, task: dict[str, Any]) -> None:
    action_id = next(
        part["data"]["action_id"] for part in task["status"]["message"]["parts"] if "data" in part
    )
    async with server.http(human("alice"), "approvals") as http:
        await http.post(f"/approvals/{action_id}", json={"decision": "approve"})


async def test_the_gateway_sees_the_message_id_and_the_tasks_ids(server: Server) -> None:
    """Turn carries the caller's messageId and the task's id and contextId (never the parts)."""
    mid = uuid.uuid4().hex
    task = task_of(await send(server, message("how is checkout?", mid, contextId="ctx-1")))
    (turn,) = server.gateway.turns
    assert (turn.message_id, turn.task_id, turn.context_id) == (mid, task["id"], "ctx-1")
    assert turn.text == "how is checkout?"


async def test_a_retried_new_task_send_answers_the_same_task(server: Server) -> None:
    """The same message sent twice to start a task: one task, one gateway run."""
    mid = uuid.uuid4().hex
    first = task_of(await send(server, message("how is checkout?", mid)))
    again = task_of(await send(server, message("how is checkout?", mid)))
    assert again == first
    assert len(server.gateway.turns) == 1


async def test_a_retried_follow_up_answers_the_task_without_running_again(server: Server) -> None:
    """The resume of an approved action retried: the same completed task, the action ran once."""
    waiting = task_of(await send(server, message("restart checkout", uuid.uuid4().hex)))
    await approve(server, waiting)
    resume = message("go ahead", uuid.uuid4().hex, taskId=waiting["id"])
    first = task_of(await send(server, resume))
    again = task_of(await send(server, resume))
    assert first["status"]["state"] == again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["id"] == waiting["id"]
    assert [turn.text for turn in server.gateway.turns] == ["restart checkout", "go ahead"]


async def test_a_retry_by_stream_answers_the_task_of_the_first_send(server: Server) -> None:
    """A blocking send retried as SendStreamingMessage: its stream is the task, no new run."""
    mid = uuid.uuid4().hex
    first = task_of(await send(server, message("how is search?", mid)))
    events = await send(server, message("how is search?", mid), "SendStreamingMessage")
    assert [event["result"]["task"]["id"] for event in events] == [first["id"]]
    assert events[-1]["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert len(server.gateway.turns) == 1


async def test_a_retry_of_a_failed_turn_answers_the_failed_task(server: Server) -> None:
    """The first answer stands even when it was a failure: the gateway is not run again."""
    mid = uuid.uuid4().hex
    server.gateway.error = RuntimeError("broken")
    first = task_of(await send(server, message("how is search?", mid)))
    server.gateway.error = None
    again = task_of(await send(server, message("how is search?", mid)))
    assert again["id"] == first["id"]
    assert again["status"]["state"] == "TASK_STATE_FAILED"
    assert len(server.gateway.turns) == 1


async def test_a_used_message_id_with_another_message_starts_another_task(server: Server) -> None:
    """Same id, no task named, different text: a new message, so a new task; both ran."""
    mid = uuid.uuid4().hex
    first = task_of(await send(server, message("how is checkout?", mid)))
    other = task_of(await send(server, message("how is search?", mid)))
    assert other["id"] != first["id"]
    assert other["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [turn.text for turn in server.gateway.turns] == ["how is checkout?", "how is search?"]


async def test_a_retry_of_the_second_message_under_an_id_answers_its_own_task(
    server: Server,
) -> None:
    """Two messages under one id, each sent twice: two tasks, each retry answers its own."""
    mid = uuid.uuid4().hex
    first = task_of(await send(server, message("how is checkout?", mid)))
    other = task_of(await send(server, message("how is search?", mid)))
    assert task_of(await send(server, message("how is search?", mid)))["id"] == other["id"]
    assert task_of(await send(server, message("how is checkout?", mid)))["id"] == first["id"]
    assert len(server.gateway.turns) == 2


async def test_a_follow_up_reusing_an_id_of_the_task_for_another_message_runs(
    server: Server,
) -> None:
    """The id of the task's first message, on another text in a follow-up: the turn runs (the
    SDK keeps the first message under the id in the history), and its retry runs nothing."""
    mid = uuid.uuid4().hex
    waiting = task_of(await send(server, message("restart checkout", mid)))
    follow_up = message("is it approved yet?", mid, taskId=waiting["id"])
    answered = task_of(await send(server, follow_up))
    again = task_of(await send(server, follow_up))
    assert answered["id"] == again["id"] == waiting["id"]
    assert again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    assert [turn.text for turn in server.gateway.turns] == [
        "restart checkout",
        "is it approved yet?",
    ]


async def test_a_retry_of_a_reused_id_follow_up_that_finished_the_task_answers_it(
    server: Server,
) -> None:
    """A follow-up under a reused id ended the task: its retry gets the finished task, not
    -32004, and the resumed action ran once."""
    mid = uuid.uuid4().hex
    waiting = task_of(await send(server, message("restart checkout", mid)))
    await approve(server, waiting)
    resume = message("go ahead", mid, taskId=waiting["id"])
    finished = task_of(await send(server, resume))
    again = task_of(await send(server, resume))
    assert finished["status"]["state"] == again["status"]["state"] == "TASK_STATE_COMPLETED"
    assert again["id"] == waiting["id"]
    assert [turn.text for turn in server.gateway.turns] == ["restart checkout", "go ahead"]


async def test_a_new_message_to_a_finished_task_under_a_used_id_is_refused(
    server: Server,
) -> None:
    """A finished task takes no new message, whatever its id: -32004, nothing runs."""
    mid = uuid.uuid4().hex
    done = task_of(await send(server, message("how is checkout?", mid)))
    refused = await send(server, message("and search?", mid, taskId=done["id"]))
    assert refused["error"]["code"] == -32004
    assert len(server.gateway.turns) == 1


async def test_the_same_message_id_in_another_scope_is_another_message(server: Server) -> None:
    """Another contextId, or another principal: a new task each, every one runs."""
    mid = uuid.uuid4().hex
    first = task_of(await send(server, message("how is search?", mid, contextId="a")))
    other_context = task_of(await send(server, message("how is search?", mid, contextId="b")))
    other_agent = (
        await server.rpc(delegated("agent-2"), "SendMessage", message("how is search?", mid))
    ).json()["result"]["task"]
    assert len({first["id"], other_context["id"], other_agent["id"]}) == 3
    assert len(server.gateway.turns) == 3


async def race(servers: list[Server], params: dict[str, Any]) -> list[dict[str, Any]]:
    """Send the same params once to each server at the same time while their gateways are held;
    release them once every request is in; the answers."""
    for server in servers:
        server.gateway.hold = asyncio.Event()
    sends = [asyncio.create_task(send(server, params)) for server in servers]
    await asyncio.sleep(0.5)  # every duplicate has arrived and claimed or found its message
    for server in servers:
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
    return [task_of(answer) for answer in await asyncio.gather(*sends)]


async def test_racing_duplicates_run_the_gateway_once(server: Server) -> None:
    """Three identical sends at once: one run, three answers naming the same completed task."""
    tasks = await race([server] * 3, message("how is checkout?", uuid.uuid4().hex))
    assert len({task["id"] for task in tasks}) == 1
    assert {task["status"]["state"] for task in tasks} == {"TASK_STATE_COMPLETED"}
    assert len(server.gateway.turns) == 1


async def test_racing_duplicate_follow_ups_run_the_gateway_once(server: Server) -> None:
    """Two identical follow-ups at once on a waiting task: the gateway sees the message once;
    both answer the task, still waiting."""
    waiting = task_of(await send(server, message("restart checkout", uuid.uuid4().hex)))
    follow_up = message("is it approved yet?", uuid.uuid4().hex, taskId=waiting["id"])
    tasks = await race([server, server], follow_up)
    assert {task["status"]["state"] for task in tasks} == {"TASK_STATE_INPUT_REQUIRED"}
    assert {task["id"] for task in tasks} == {waiting["id"]}
    assert [turn.text for turn in server.gateway.turns] == [
        "restart checkout",
        "is it approved yet?",
    ]


@pytest.mark.postgres
async def test_duplicates_racing_on_two_replicas_run_the_gateway_once(
    replicas: list[Server],
) -> None:
    """The same send on both replicas at once: one gateway run in all, both answer one task."""
    tasks = await race(replicas, message("how is checkout?", uuid.uuid4().hex))
    assert len({task["id"] for task in tasks}) == 1
    assert {task["status"]["state"] for task in tasks} == {"TASK_STATE_COMPLETED"}
    assert sum(len(server.gateway.turns) for server in replicas) == 1


@pytest.mark.postgres
async def test_two_messages_under_one_id_racing_on_two_replicas_both_run(
    replicas: list[Server],
) -> None:
    """Different messages under one id, one per replica at once: two tasks, two runs; each
    retried on the other replica answers its own task and runs nothing."""
    one, two = replicas
    mid = uuid.uuid4().hex
    for server in replicas:
        server.gateway.hold = asyncio.Event()
    sends = [
        asyncio.create_task(send(one, message("how is checkout?", mid))),
        asyncio.create_task(send(two, message("how is search?", mid))),
    ]
    await asyncio.gather(*(server.gateway.started.wait() for server in replicas))
    for server in replicas:
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
    checkout, search = [task_of(answer) for answer in await asyncio.gather(*sends)]
    assert checkout["id"] != search["id"]
    assert task_of(await send(two, message("how is checkout?", mid)))["id"] == checkout["id"]
    assert task_of(await send(one, message("how is search?", mid)))["id"] == search["id"]
    assert len(one.gateway.turns) + len(two.gateway.turns) == 2


@pytest.mark.postgres
async def test_a_retry_on_the_other_replica_answers_the_first_task(replicas: list[Server]) -> None:
    """Sent on one replica, retried on the other: the same task, no second run."""
    one, two = replicas
    mid = uuid.uuid4().hex
    first = task_of(await send(one, message("how is checkout?", mid)))
    again = task_of(await send(two, message("how is checkout?", mid)))
    assert again["id"] == first["id"]
    assert len(one.gateway.turns) + len(two.gateway.turns) == 1
