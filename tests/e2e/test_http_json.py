"""The HTTP+JSON binding through Envoy, authz and the adapter, with the real a2a-sdk client on
its HTTP+JSON transport: the same rules as JSON-RPC (ownership, approvals, text only), Envoy's
exact routes (405 with Allow, 404 for anything else) and authz's surface for every path."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb
from a2a.utils.errors import TaskNotFoundError

from tests.adapter.conftest import reply_text, send, status_data, text_message
from tests.e2e.edge import Edge, bearer, message_params, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

HTTP_JSON = "HTTP+JSON"
VERSION = {"A2A-Version": "1.0"}


def _agent(edge: Edge, user: str | None = None) -> str:
    return edge.token(subject=user or unique("user"), agent=unique("agent"))


async def _call(
    edge: Edge,
    method: str,
    path: str,
    token: str | None,
    *,
    headers: dict[str, str] | None = None,
    **kwargs: Any,
) -> httpx.Response:
    """One raw request below /a2a through Envoy."""
    sent = {**VERSION, **(bearer(token) if token else {}), **(headers or {})}
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.request(method, f"{edge.url}/a2a{path}", headers=sent, **kwargs)


async def test_the_sdk_client_speaks_http_json_through_the_edge(edge: Edge) -> None:
    """Send, get, list, the extended card and a stream on the card's HTTP+JSON interface."""
    async with edge.client(_agent(edge), binding=HTTP_JSON) as client:
        task = await send(client, text_message("How is checkout doing?"))
        fetched = await client.get_task(pb.GetTaskRequest(id=task.id))
        listed = await client.list_tasks(pb.ListTasksRequest(context_id=task.context_id))
        card = await client.get_extended_agent_card(pb.GetExtendedAgentCardRequest())
    assert task.status.state == pb.TASK_STATE_COMPLETED
    assert reply_text(task).startswith("checkout is degraded")
    assert fetched.id == task.id and [t.id for t in listed.tasks] == [task.id]
    assert card.skills
    async with edge.client(_agent(edge), streaming=True, binding=HTTP_JSON) as client:
        events = [event async for event in client.send_message(text_message("Is search up?"))]
    assert events[0].WhichOneof("payload") == "task"
    assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED


async def test_an_approval_resumes_a_task_the_agent_started_over_http_json(edge: Edge) -> None:
    """A guarded action over HTTP+JSON waits for the delegating human; after the approval the
    agent's follow-up runs it, and a reply is never an approval."""
    user = unique("user")
    async with edge.client(_agent(edge, user), binding=HTTP_JSON) as client:
        waiting = await send(client, text_message("Restart checkout"))
        action = status_data(waiting)
        assert waiting.status.state == pb.TASK_STATE_INPUT_REQUIRED
        replied = await send(client, text_message("approve", task_id=waiting.id))
        assert replied.status.state == pb.TASK_STATE_INPUT_REQUIRED
        decided = await edge.decide(edge.token("human", subject=user), str(action["action_id"]))
        assert decided.json()["status"] == "approved"
        done = await send(client, text_message("go ahead", task_id=waiting.id))
    assert done.status.state == pb.TASK_STATE_COMPLETED


async def test_another_agents_task_is_not_found_over_http_json(edge: Edge) -> None:
    """Another principal's task id: TaskNotFound through the SDK client, 404 on the wire."""
    async with edge.client(_agent(edge), binding=HTTP_JSON) as client:
        task = await send(client, text_message("Is payments healthy?"))
    other = _agent(edge)
    async with edge.client(other, binding=HTTP_JSON) as client:
        with pytest.raises(TaskNotFoundError):
            await client.get_task(pb.GetTaskRequest(id=task.id))
    response = await _call(edge, "POST", f"/tasks/{task.id}:cancel", other)
    assert response.status_code == 404
    assert response.json()["error"]["details"][0]["reason"] == "TASK_NOT_FOUND"


async def test_no_token_is_refused_by_authz_before_the_adapter(edge: Edge) -> None:
    """Every HTTP+JSON route is guarded: no bearer token is 401 from authz."""
    for method, path in (("POST", "/message:send"), ("GET", "/tasks"), ("GET", "/tasks/t-1")):
        response = await _call(edge, method, path, None, json=message_params("hi"))
        assert response.status_code == 401, path
        assert response.headers["www-authenticate"].startswith("Bearer")


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("GET", "/message:send", "POST"),
        ("PUT", "/tasks/t-1:cancel", "POST"),
        ("DELETE", "/tasks/t-1", "GET"),
        ("PATCH", "/tasks/t-1/pushNotificationConfigs", "GET, POST, DELETE"),
    ],
)
async def test_another_method_is_405_with_allow_from_envoy(
    edge: Edge, method: str, path: str, allow: str
) -> None:
    """A known HTTP+JSON path asked with another method: Envoy's 405 naming the methods."""
    response = await _call(edge, method, path, _agent(edge))
    assert response.status_code == 405
    assert response.headers["allow"] == allow
    assert response.json()["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    "path",
    ["/x", "/message", "/tasks/a.b", "/tasks/t-1:approve", "/tasks/t-1/history", "/Tasks"],
)
async def test_anything_else_below_a2a_is_404_from_envoy(edge: Edge, path: str) -> None:
    """Paths that are no HTTP+JSON operation stay Envoy's 404, nothing forwarded."""
    response = await _call(edge, "GET", path, _agent(edge))
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


async def test_an_id_authz_does_not_accept_is_forbidden(edge: Edge) -> None:
    """An id past 128 characters matches Envoy's route but not authz's surface: 403."""
    response = await _call(edge, "GET", f"/tasks/{'a' * 129}", _agent(edge))
    assert response.status_code == 403


async def test_bad_input_gets_a_status_body_through_the_edge(edge: Edge) -> None:
    """Malformed JSON, a non-text part and an unsupported version: the binding's error shapes
    (HTTP status + google.rpc.Status), never a stack trace."""
    token = _agent(edge)
    parse = await _call(
        edge,
        "POST",
        "/message:send",
        token,
        content=b"{nope",
        headers={"Content-Type": "application/json"},
    )
    params = message_params("hi", messageId=uuid.uuid4().hex)
    params["message"]["parts"] = [{"url": "https://example.com/x"}]
    media = await _call(edge, "POST", "/message:send", token, json=params)
    for response, status, reason in (
        (parse, 400, "PARSE_ERROR"),
        (media, 415, "CONTENT_TYPE_NOT_SUPPORTED"),
    ):
        assert response.status_code == status
        error = response.json()["error"]
        assert (error["code"], error["details"][0]["reason"]) == (status, reason)
        assert "Traceback" not in response.text
