"""The HTTP+JSON binding (A2A 1.0 §11) under /a2a: the same handler and rules as JSON-RPC, the
binding's own paths and error shapes (HTTP status + `google.rpc.Status` body)."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from tests.adapter.conftest import (
    Server,
    assertion_headers,
    delegated,
    human,
    message_params,
    running,
    send,
    sse_events,
    text_message,
)

ALICE_BOT = delegated()
HTTP_JSON = "HTTP+JSON"
VERSION = {"A2A-Version": "1.0"}
JSON = {"Content-Type": "application/json"}


async def call(
    server: Server,
    method: str,
    path: str,
    *,
    json: Any = None,
    principal: Any = ALICE_BOT,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One raw HTTP+JSON request below /a2a."""
    async with server.http(principal) as http:
        return await http.request(
            method, "/a2a" + path, json=json, headers={**VERSION, **(headers or {})}, **kwargs
        )


def status_of(response: httpx.Response) -> dict[str, Any]:
    """The `google.rpc.Status` of an error answer, checked for its shape."""
    assert response.headers["content-type"].startswith("application/json")
    error: dict[str, Any] = response.json()["error"]
    assert set(error) == {"code", "status", "message", "details"}
    assert error["code"] == response.status_code
    assert error["details"][0]["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert "Traceback" not in response.text
    return error


def reason_of(response: httpx.Response) -> str:
    return str(status_of(response)["details"][0]["reason"])


async def test_the_sdk_client_on_http_json_sends_gets_and_lists(server: Server) -> None:
    """The a2a-sdk client, told to speak HTTP+JSON, finds it on the card and gets answers."""
    async with server.client(ALICE_BOT, binding=HTTP_JSON) as client:
        task = await send(client, text_message("how is checkout?"))
        fetched = await client.get_task(pb.GetTaskRequest(id=task.id, history_length=1))
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=task.context_id))
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert fetched.id == task.id and len(fetched.history) == 1
    assert [t.id for t in listed.tasks] == [task.id] and listed.total_size == 1
    assert card.skills
    assert [turn.text for turn in server.gateway.turns] == ["how is checkout?"]


async def test_the_sdk_client_streams_a_turn_on_http_json(server: Server) -> None:
    """message:stream through the SDK client: the Task first, the stream ends at COMPLETED."""
    async with server.client(ALICE_BOT, streaming=True, binding=HTTP_JSON) as client:
        events = [event async for event in client.send_message(text_message("how is search?"))]
    assert events[0].WhichOneof("payload") == "task"
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_an_approval_resumes_a_task_over_http_json(server: Server) -> None:
    """A guarded action waits for the human; after the approval a follow-up on
    /a2a/message:send runs it once."""
    waiting = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task = waiting.json()["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    data = next(p["data"] for p in task["status"]["message"]["parts"] if "data" in p)
    async with server.http(human("alice"), "approvals") as http:
        decided = await http.post(f"/approvals/{data['action_id']}", json={"decision": "approve"})
    assert decided.json()["status"] == "approved"
    resume = message_params("go ahead", taskId=task["id"])
    done = (await call(server, "POST", "/message:send", json=resume)).json()["task"]
    assert done["status"]["state"] == "TASK_STATE_COMPLETED"
    assert [turn.text for turn in server.gateway.turns] == ["restart checkout", "go ahead"]


async def test_a_reply_is_not_an_approval_over_http_json(server: Server) -> None:
    """ "approve" sent on the task leaves it waiting: only the human's decision approves."""
    task = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task_id = task.json()["task"]["id"]
    reply = message_params("approve", taskId=task_id)
    again = (await call(server, "POST", "/message:send", json=reply)).json()["task"]
    assert again["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_another_principals_task_is_not_found(server: Server) -> None:
    """GET, cancel and subscribe of another owner's task: 404 TASK_NOT_FOUND; the list is empty."""
    task = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task_id = task.json()["task"]["id"]
    mallory = delegated("agent-2", subject="mallory")
    for method, path in (
        ("GET", f"/tasks/{task_id}"),
        ("POST", f"/tasks/{task_id}:cancel"),
        ("POST", f"/tasks/{task_id}:subscribe"),
    ):
        response = await call(server, method, path, principal=mallory)
        assert response.status_code == 404, path
        assert reason_of(response) == "TASK_NOT_FOUND"
    listed = await call(server, "GET", "/tasks", principal=mallory)
    assert listed.json()["tasks"] == [] and listed.json()["totalSize"] == 0


async def test_cancel_withdraws_the_waiting_action(server: Server) -> None:
    """POST /tasks/{id}:cancel on a task waiting for approval: CANCELED; a second cancel is 409
    TASK_NOT_CANCELABLE (spec 5.4)."""
    task = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task_id = task.json()["task"]["id"]
    canceled = await call(server, "POST", f"/tasks/{task_id}:cancel")
    assert canceled.json()["status"]["state"] == "TASK_STATE_CANCELED"
    again = await call(server, "POST", f"/tasks/{task_id}:cancel")
    assert again.status_code == 409 and reason_of(again) == "TASK_NOT_CANCELABLE"


async def test_subscribe_follows_a_waiting_task_to_its_end(server: Server) -> None:
    """POST /tasks/{id}:subscribe: SSE of StreamResponse objects (no JSON-RPC envelope), the Task
    first, until the cancel ends the task."""
    task = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task_id = task.json()["task"]["id"]
    async with (
        server.http(ALICE_BOT) as http,
        http.stream("POST", f"/a2a/tasks/{task_id}:subscribe", headers=VERSION) as stream,
    ):
        assert stream.headers["content-type"] == "text/event-stream"
        reading = asyncio.create_task(sse_events(stream))
        await call(server, "POST", f"/tasks/{task_id}:cancel")
        events = await reading
    assert events[0] == ("message", {"task": events[0][1]["task"]})
    assert events[-1][1]["statusUpdate"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_a_retried_send_answers_the_first_task(server: Server) -> None:
    """The same message sent twice to /a2a/message:send: one task, one gateway run."""
    params = message_params("how is checkout?", messageId=uuid.uuid4().hex)
    first = (await call(server, "POST", "/message:send", json=params)).json()
    again = (await call(server, "POST", "/message:send", json=params)).json()
    assert again == first
    assert len(server.gateway.turns) == 1


async def test_a_non_text_part_is_refused_before_anything_runs(server: Server) -> None:
    """A data part: 415 CONTENT_TYPE_NOT_SUPPORTED (spec 5.4), rule non_text_part, the gateway
    not run."""
    params = message_params()
    params["message"]["parts"] = [{"data": {"tool": "x"}}]
    response = await call(server, "POST", "/message:send", json=params)
    assert response.status_code == 415
    error = status_of(response)
    assert error["status"] == "INVALID_ARGUMENT"
    assert error["details"][0]["reason"] == "CONTENT_TYPE_NOT_SUPPORTED"
    assert error["details"][0]["metadata"] == {"rule": "non_text_part"}
    assert server.gateway.turns == []


async def test_the_turn_cap_is_429_with_retry_after_and_a_status_body() -> None:
    """A second turn while the first is in flight (cap 1): 429, Retry-After, RESOURCE_EXHAUSTED
    with the edge's ErrorInfo."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        server.gateway.hold = asyncio.Event()
        first = asyncio.create_task(call(server, "POST", "/message:send", json=message_params()))
        await server.gateway.started.wait()
        refused = await call(server, "POST", "/message:send", json=message_params())
        server.gateway.hold.set()
        await first
    assert refused.status_code == 429 and refused.headers["retry-after"]
    error = status_of(refused)
    assert error["status"] == "RESOURCE_EXHAUSTED"
    assert error["details"][0]["domain"] == "orrery-a2a"
    assert error["details"][0]["reason"] == "TOO_MANY_IN_FLIGHT"


@pytest.mark.parametrize(
    "case",
    [
        ("GET", "/nothing", {}, 404, "METHOD_NOT_FOUND"),
        ("DELETE", "/tasks/t-1", {}, 404, "METHOD_NOT_FOUND"),
        ("POST", "/message:send", {"content": b"{not json", "headers": JSON}, 400, "PARSE_ERROR"),
        ("POST", "/message:send", {"json": [1]}, 400, "INVALID_REQUEST"),
        ("POST", "/message:send", {"json": {"message": 7}}, 400, "INVALID_PARAMS"),
        ("GET", "/tasks", {"params": {"pageSize": "many"}}, 400, "INVALID_PARAMS"),
        ("GET", "/tasks/t-1/pushNotificationConfigs", {}, 400, "PUSH_NOTIFICATION_NOT_SUPPORTED"),
        ("GET", "/tasks/00000000-0000-0000-0000-000000000000", {}, 404, "TASK_NOT_FOUND"),
        (
            "POST",
            "/message:send",
            {"content": b"{}", "headers": {"Content-Type": "text/plain"}},
            415,
            "CONTENT_TYPE_NOT_SUPPORTED",
        ),
    ],
)
async def test_bad_input_gets_the_bindings_error_shape(
    server: Server, case: tuple[str, str, dict[str, Any], int, str]
) -> None:
    """Every refusal of a call is its HTTP status with a google.rpc.Status body, never a trace."""
    method, path, options, status, reason = case
    kwargs = dict(options)
    headers = kwargs.pop("headers", None)
    response = await call(server, method, path, headers=headers, **kwargs)
    assert response.status_code == status
    assert reason_of(response) == reason


async def test_a_missing_version_is_version_not_supported(server: Server) -> None:
    """No A2A-Version (0.3 by the spec's default): 400 VERSION_NOT_SUPPORTED, nothing runs."""
    async with server.http(ALICE_BOT) as http:
        response = await http.post("/a2a/message:send", json=message_params())
    assert response.status_code == 400 and reason_of(response) == "VERSION_NOT_SUPPORTED"
    assert server.gateway.turns == []


@pytest.mark.parametrize("surface", [None, "approvals"])
async def test_no_a2a_assertion_is_401_before_the_body_is_read(
    server: Server, surface: str | None
) -> None:
    """No assertion, or one for another surface: 401 with a Bearer challenge, nothing runs."""
    principal = None if surface is None else human("alice")
    async with server.http(principal, "approvals") as http:
        response = await http.post("/a2a/message:send", content=b"garbage", headers=VERSION)
    assert response.status_code == 401
    assert response.headers["www-authenticate"].startswith("Bearer")
    assert response.json()["error"] in ("assertion_invalid", "assertion_expired")
    assert server.gateway.turns == []


async def test_a_stream_of_an_unknown_task_is_a_plain_404(server: Server) -> None:
    """An error before the first event is plain JSON with its status, not an SSE stream."""
    response = await call(server, "POST", "/tasks/no-such-task:subscribe")
    assert response.status_code == 404 and reason_of(response) == "TASK_NOT_FOUND"


async def test_the_sdk_client_reports_a_refusal_on_http_json(server: Server) -> None:
    """The SDK's HTTP+JSON transport reads the binding's error: GetTask of nothing raises the
    A2A error its ErrorInfo names."""
    async with server.client(ALICE_BOT, binding=HTTP_JSON) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id="00000000-0000-0000-0000-000000000000"))


async def test_a_subscription_ends_with_a_status_event_when_the_token_expires(
    server: Server,
) -> None:
    """The edge's own stream end on HTTP+JSON: `event: error` with a google.rpc.Status (401
    UNAUTHENTICATED, ErrorInfo TOKEN_EXPIRED in the orrery-a2a domain); the task waits on."""
    task = await call(server, "POST", "/message:send", json=message_params("restart checkout"))
    task_id = task.json()["task"]["id"]
    headers = {**VERSION, **assertion_headers(ALICE_BOT, token_expires_at=int(time.time()) + 2)}
    async with (
        httpx.AsyncClient(base_url=server.base, timeout=60) as http,
        http.stream("POST", f"/a2a/tasks/{task_id}:subscribe", headers=headers) as stream,
    ):
        events = await sse_events(stream)
    assert [name for name, _ in events] == ["message", "error"]
    error = events[-1][1]["error"]
    assert (error["code"], error["status"]) == (401, "UNAUTHENTICATED")
    assert (error["details"][0]["reason"], error["details"][0]["domain"]) == (
        "TOKEN_EXPIRED",
        "orrery-a2a",
    )
