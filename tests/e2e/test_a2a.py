"""A2A 1.0 through Envoy, authz and the adapter with the real a2a-sdk client (ClientFactory).

Send, stream, get, list and cancel run on the edge as `orrery-a2a up` runs it; subscribe needs a
turn that is still running, so it uses the edge whose turns a test holds open.
"""

from __future__ import annotations

import json
import uuid

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from tests.adapter.conftest import reply_text, send, status_data, text_message
from tests.e2e.conftest import SlowEdge
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, message_params, unique
from tests.e2e.held_gateway import FAIL, SECRET

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

CHECKOUT = (
    "checkout is degraded: error rate 4.2%, p99 1850 ms (error rate up since the 14:05 deploy)."
)


def _agent(edge: Edge) -> str:
    return edge.token(subject=unique("user"), agent=unique("agent"))


async def test_send_message_answers_with_the_final_reply(edge: Edge) -> None:
    """Blocking SendMessage: a completed task whose one artifact is the gateway's reply."""
    async with edge.client(_agent(edge)) as client:
        task = await send(client, text_message("How is checkout doing?"))
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(task) == CHECKOUT
    assert [artifact.name for artifact in task.artifacts] == ["reply"]


async def test_send_streaming_message_streams_the_task_then_its_outcome(edge: Edge) -> None:
    """SSE through Envoy: the Task first, then the reply artifact, then COMPLETED."""
    async with edge.client(_agent(edge), streaming=True) as client:
        events = [
            event async for event in client.send_message(text_message("How is checkout doing?"))
        ]
    kinds = [event.WhichOneof("payload") for event in events]
    assert kinds == ["task", "artifact_update", "status_update"]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
    assert events[1].artifact_update.artifact.parts[0].text == CHECKOUT


async def test_get_task_returns_the_callers_task(edge: Edge) -> None:
    """GetTask by id: the same task, with the user's message in its history."""
    async with edge.client(_agent(edge)) as client:
        sent = await send(client, text_message("is payments healthy?"))
        fetched = await client.get_task(pb.GetTaskRequest(id=sent.id))
    assert (fetched.id, fetched.context_id) == (sent.id, sent.context_id)
    assert fetched.status.state == pb.TASK_STATE_COMPLETED
    assert fetched.history[0].parts[0].text == "is payments healthy?"


async def test_list_tasks_lists_exactly_the_callers_tasks(edge: Edge) -> None:
    """ListTasks: the caller's own tasks, newest first, counted in totalSize."""
    async with edge.client(_agent(edge)) as client:
        first = await send(client, text_message("is search up?"))
        second = await send(client, text_message("is inventory up?"))
        listed = await client.list_tasks(pb.ListTasksRequest())
    assert [task.id for task in listed.tasks] == [second.id, first.id]
    assert listed.total_size == 2


async def test_cancel_task_cancels_a_task_waiting_for_approval(edge: Edge) -> None:
    """CancelTask on an input-required task: CANCELED, and GetTask agrees."""
    async with edge.client(_agent(edge)) as client:
        waiting = await send(client, text_message("restart checkout"))
        assert waiting.status.state == pb.TASK_STATE_INPUT_REQUIRED
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=waiting.id))
        fetched = await client.get_task(pb.GetTaskRequest(id=waiting.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert fetched.status.state == pb.TASK_STATE_CANCELED


async def test_a_follow_up_continues_the_task_by_its_id(edge: Edge) -> None:
    """A message naming only the taskId of an input-required task resumes that task."""
    async with edge.client(_agent(edge)) as client:
        waiting = await send(client, text_message("restart checkout"))
        follow_up = await send(client, text_message("any news?", task_id=waiting.id))
    assert follow_up.id == waiting.id
    assert follow_up.context_id == waiting.context_id
    assert follow_up.status.state == pb.TASK_STATE_INPUT_REQUIRED
    assert status_data(follow_up)["action_id"] == status_data(waiting)["action_id"]


async def _start_held_turn(edge: Edge, token: str, hold: str) -> pb.Task:
    """A turn the gateway holds until `release(hold)`; returned at once (returnImmediately)."""
    async with edge.client(token) as client:
        request = text_message(f"hold {hold}")
        request.configuration.return_immediately = True
        started = await send(client, request)
    assert started.status.state in (pb.TASK_STATE_SUBMITTED, pb.TASK_STATE_WORKING)
    return started


async def test_subscribe_follows_a_running_task_to_its_end(slow_edge: SlowEdge) -> None:
    """SubscribeToTask on a running turn: the Task first, then the reply and COMPLETED."""
    edge, hold, token = slow_edge.edge, unique("subscribe"), _agent(slow_edge.edge)
    started = await _start_held_turn(edge, token, hold)
    async with edge.client(token, streaming=True) as client:
        events = []
        async for event in client.subscribe(pb.SubscribeToTaskRequest(id=started.id)):
            events.append(event)
            if len(events) == 1:
                slow_edge.release(hold)  # attached: now let the turn finish
    assert events[0].task.id == started.id
    assert [event.WhichOneof("payload") for event in events[1:]] == [
        "artifact_update",
        "status_update",
    ]
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_cancel_task_stops_a_running_turn(slow_edge: SlowEdge) -> None:
    """CancelTask while the gateway still works: CANCELED at once, and it stays CANCELED."""
    edge, hold, token = slow_edge.edge, unique("cancel"), _agent(slow_edge.edge)
    started = await _start_held_turn(edge, token, hold)
    async with edge.client(token) as client:
        canceled = await client.cancel_task(pb.CancelTaskRequest(id=started.id))
        slow_edge.release(hold)
        await edge.turns_finished()  # the gateway's late outcome is discarded, not stored
        fetched = await client.get_task(pb.GetTaskRequest(id=started.id))
    assert canceled.status.state == pb.TASK_STATE_CANCELED
    assert fetched.status.state == pb.TASK_STATE_CANCELED
    assert not fetched.artifacts


async def test_a_task_id_from_nowhere_is_not_found(edge: Edge) -> None:
    """GetTask of an id nobody created is TaskNotFound (-32001) through the SDK client."""
    async with edge.client(_agent(edge)) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id="00000000-0000-0000-0000-000000000000"))


async def test_a_retried_send_answers_the_first_task_without_running_again(edge: Edge) -> None:
    """The same SendMessage (same messageId and text) sent twice: one task, the second answer
    is the first's (A2A §3.3.1); another text under the id is another message, another task."""
    token, mid = _agent(edge), uuid.uuid4().hex
    first = await edge.rpc(token, "SendMessage", message_params("restart checkout", messageId=mid))
    again = await edge.rpc(token, "SendMessage", message_params("restart checkout", messageId=mid))
    assert again.json()["result"] == first.json()["result"]
    other = await edge.rpc(token, "SendMessage", message_params("restart search", messageId=mid))
    assert other.json()["result"]["task"]["id"] != first.json()["result"]["task"]["id"]


async def test_a_notification_through_envoy_runs_nothing_and_gets_no_body(edge: Edge) -> None:
    """A SendMessage without `id` (a JSON-RPC notification): 204, no body, no task."""
    token = _agent(edge)
    body = jsonrpc("SendMessage", message_params("restart checkout"))
    del body["id"]
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{edge.url}/a2a", json=body, headers={**JSONRPC_HEADERS, **bearer(token)}
        )
    assert (response.status_code, response.content) == (204, b"")
    listed = await edge.rpc(token, "ListTasks", {})
    assert listed.json()["result"]["totalSize"] == 0


async def test_a_utf16_body_through_envoy_is_a_parse_error(edge: Edge) -> None:
    """JSON on the wire is UTF-8 (RFC 8259 §8.1): a UTF-16 body with a BOM is -32700."""
    body = json.dumps(jsonrpc("GetTask", {"id": "x"})).encode("utf-16")
    async with httpx.AsyncClient(timeout=60) as http:
        response = await http.post(
            f"{edge.url}/a2a", content=body, headers={**JSONRPC_HEADERS, **bearer(_agent(edge))}
        )
    assert response.json()["error"]["code"] == -32700


async def test_a_failed_gateway_answers_the_failed_task_without_its_internals(
    slow_edge: SlowEdge,
) -> None:
    """A gateway that raises: the blocking send answers its task, FAILED with the adapter's fixed
    status message; the exception's text reaches neither the answer nor GetTask."""
    edge, token = slow_edge.edge, _agent(slow_edge.edge)
    response = await edge.rpc(token, "SendMessage", message_params(FAIL))
    task = response.json()["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_FAILED"
    assert task["status"]["message"]["parts"][0]["text"].startswith("The agent could not finish")
    stored = await edge.rpc(token, "GetTask", {"id": task["id"]})
    assert stored.json()["result"]["status"]["state"] == "TASK_STATE_FAILED"
    assert SECRET not in response.text and SECRET not in stored.text
