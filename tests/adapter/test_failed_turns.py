"""A turn whose gateway fails is a task result: `TASK_STATE_FAILED` with a fixed status message.

Spec 3.2.2: a blocking send waits until the task is terminal (FAILED is terminal) and answers "the
latest task state with all artifacts and status information" — so the caller learns the id of the
task it created and why it ended, never a -32603 that names no task. The status message is the
adapter's own fixed text: the exception's message (which may carry internals) never leaves.
"""

from __future__ import annotations

import json
from typing import Any

from tests.adapter.conftest import Server, delegated, human, message_params

ALICE_BOT = delegated()
SECRET = "db password hunter2 at 10.0.0.7"  # what a gateway's exception may carry


def assert_failed(task: dict[str, Any]) -> None:
    """FAILED, with the adapter's fixed agent message and no reply artifact."""
    status = task["status"]
    assert status["state"] == "TASK_STATE_FAILED"
    assert status["message"]["role"] == "ROLE_AGENT"
    text = status["message"]["parts"][0]["text"]
    assert text.startswith("The agent could not finish this turn")
    assert "artifacts" not in task


async def test_a_blocking_send_answers_the_failed_task(server: Server) -> None:
    """SendMessage: the result is the task, FAILED, and GetTask finds it just so."""
    server.gateway.error = RuntimeError(SECRET)
    response = await server.rpc(ALICE_BOT, "SendMessage", message_params("how is checkout?"))
    assert "error" not in response.json()
    task = response.json()["result"]["task"]
    assert_failed(task)
    stored = await server.rpc(ALICE_BOT, "GetTask", {"id": task["id"]})
    assert stored.json()["result"]["status"] == task["status"]
    assert SECRET not in response.text and SECRET not in stored.text


async def test_a_stream_ends_with_the_failure_as_a_status_event(server: Server) -> None:
    """SendStreamingMessage: the Task, then a FAILED status update, then a clean end (no error
    event)."""
    server.gateway.error = RuntimeError(SECRET)
    response = await server.rpc(ALICE_BOT, "SendStreamingMessage", message_params("how is search?"))
    assert "event: error" not in response.text
    events = [
        json.loads(line.removeprefix("data: "))["result"]
        for line in response.text.splitlines()
        if line.startswith("data: ")
    ]
    assert [next(iter(event)) for event in events] == ["task", "statusUpdate"]
    assert_failed({"status": events[-1]["statusUpdate"]["status"]})
    assert SECRET not in response.text


async def test_a_resumed_turn_that_fails_answers_the_failed_task(server: Server) -> None:
    """The approved action's turn fails in the gateway: the resumed send answers the task,
    FAILED, with its id."""
    waiting = (
        await server.rpc(ALICE_BOT, "SendMessage", message_params("restart checkout"))
    ).json()
    task = waiting["result"]["task"]
    action_id = next(
        part["data"]["action_id"] for part in task["status"]["message"]["parts"] if "data" in part
    )
    async with server.http(human("alice"), "approvals") as http:
        await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
    server.gateway.error = RuntimeError(SECRET)
    response = await server.rpc(ALICE_BOT, "SendMessage", message_params("go", taskId=task["id"]))
    resumed = response.json()["result"]["task"]
    assert resumed["id"] == task["id"]
    assert_failed(resumed)
    assert SECRET not in response.text


async def test_a_failed_turn_is_logged_by_its_exception_type_only(
    server: Server, caplog: Any
) -> None:
    """One `gateway_failed` error event names the exception's type; its message is not logged."""
    server.gateway.error = RuntimeError(SECRET)
    await server.rpc(ALICE_BOT, "SendMessage", message_params("how is payments?"))
    failures = [record for record in caplog.records if record.getMessage() == "gateway_failed"]
    assert len(failures) == 1
    assert failures[0].levelname == "ERROR"
    assert failures[0].orrery_fields["error_type"] == "RuntimeError"
    assert SECRET not in caplog.text
