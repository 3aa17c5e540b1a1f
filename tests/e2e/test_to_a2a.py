"""D1 of docs/decisions.md made executable: the same example ADK agent served by ADK's
own `to_a2a()` and by the edge, and the four attempts D1 names, side by side.

| attempt                                | `to_a2a()`                 | the edge                   |
|----------------------------------------|----------------------------|----------------------------|
| call with no credential                | served                     | 401 `missing_credential`   |
| a second caller writes in your context | joins your ADK session     | talks to its own session   |
| call with a made-up bearer token       | served (scheme advertised) | 401 `token_invalid`        |
| reply approving the guarded tool       | the tool runs              | refused; the action waits  |

`to_a2a()` runs in this process on uvicorn (the stock way to serve it) with a runner the test
built, so the test reads ADK's sessions and the restart counter directly; the edge is the
`adk_edge` processes (tests/e2e/conftest.py). Nothing here is a fake: both sides run ADK's real
Runner, tools and confirmation flow on the example's scripted model.
"""

from __future__ import annotations

import asyncio
import socket
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
import uvicorn
from a2a.types import HTTPAuthSecurityScheme, SecurityScheme
from google.adk.a2a.utils.agent_to_a2a import to_a2a
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService

from gateways.adk import example
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, message_params, unique
from tests.waiting import eventually

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]


@dataclass
class ToA2a:
    """The example agent served by `to_a2a()`; `sessions` is its runner's session service."""

    url: str
    sessions: InMemorySessionService

    async def send(
        self, parts: list[dict[str, Any]], token: str | None = None, **fields: str
    ) -> dict[str, Any]:
        message = {"role": "ROLE_USER", "messageId": uuid.uuid4().hex, "parts": parts, **fields}
        headers = {**JSONRPC_HEADERS, **(bearer(token) if token else {})}
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                self.url, json=jsonrpc("SendMessage", {"message": message}), headers=headers
            )
        assert response.status_code == 200, response.text
        result: dict[str, Any] = response.json()["result"]["task"]
        return result


@pytest.fixture
async def stock() -> AsyncIterator[ToA2a]:
    """`to_a2a(agent, security_schemes=<bearer>)`, as its docstring shows, on uvicorn."""
    example.RESTARTS.clear()
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    agent = example.build_agent(example.ScriptedModel())
    sessions = InMemorySessionService()
    app = to_a2a(
        agent,
        host="127.0.0.1",
        port=port,
        runner=Runner(app_name=agent.name, agent=agent, session_service=sessions),
        security_schemes={
            "bearer": SecurityScheme(
                http_auth_security_scheme=HTTPAuthSecurityScheme(scheme="bearer")
            )
        },
        default_skill_security=[{"bearer": []}],
    )
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    try:

        async def started() -> bool:
            return server.started

        await eventually(started)
        yield ToA2a(f"http://127.0.0.1:{port}/", sessions)
    finally:
        server.should_exit = True
        await serving
        sock.close()
        example.RESTARTS.clear()


def _state(task: dict[str, Any]) -> str:
    return str(task["status"]["state"])


def _confirmation_request(task: dict[str, Any]) -> dict[str, Any]:
    """The `adk_request_confirmation` call `to_a2a()` shows the client at input-required."""
    (part,) = task["status"]["message"]["parts"]
    assert part["data"]["name"] == "adk_request_confirmation"
    data: dict[str, Any] = part["data"]
    return data


async def test_an_anonymous_call(stock: ToA2a, adk_edge: Edge) -> None:
    """No credential at all: `to_a2a()` runs the agent; the edge answers 401 before the adapter."""
    served = await stock.send([{"text": "how is checkout?"}])
    assert _state(served) == "TASK_STATE_COMPLETED"
    steps = [
        part["data"].get("name")
        for message in served["history"]
        for part in message["parts"]
        if "data" in part
    ]
    assert "transfer_to_agent" in steps  # and every intermediate step is shown, too
    refused = await adk_edge.rpc(None, "SendMessage", message_params("how is checkout?"))
    assert (refused.status_code, refused.json()["error"]) == (401, "missing_credential")


async def test_a_second_caller_in_your_context(stock: ToA2a, adk_edge: Edge) -> None:
    """Two callers, one `contextId`: under `to_a2a()` both run as `A2A_USER_<contextId>` in one
    ADK session (the second reads and steers the first's conversation). Through the edge the
    second caller's message reaches its own session: the first's waiting restart is untouched
    (had it reached that session, it would have superseded it) and still runs once approved."""
    context = unique("ctx")
    await stock.send([{"text": "restart checkout"}], "alice-token", contextId=context)
    await stock.send([{"text": "how is payments?"}], "mallory-token", contextId=context)
    shared = await stock.sessions.get_session(
        app_name="orrery_example", user_id=f"A2A_USER_{context}", session_id=context
    )
    assert shared is not None
    said = [
        part.text
        for event in shared.events
        if event.author == "user" and event.content
        for part in event.content.parts or []
        if part.text
    ]
    assert said == ["restart checkout", "how is payments?"]

    user = unique("user")
    alice = adk_edge.token(subject=user, agent=unique("agent"))
    mallory = adk_edge.token(subject=unique("user"), agent=unique("agent"))
    asked = await adk_edge.rpc(alice, "SendMessage", message_params("restart checkout"))
    task = asked.json()["result"]["task"]
    borrowed = message_params("how is payments?", contextId=task["contextId"])
    assert (await adk_edge.rpc(mallory, "SendMessage", borrowed)).status_code == 200
    action_id = task["status"]["message"]["parts"][1]["data"]["action_id"]
    assert (
        await adk_edge.decide(adk_edge.token("human", subject=user), action_id)
    ).status_code == 200
    resumed = await adk_edge.rpc(
        alice,
        "SendMessage",
        message_params("go ahead", taskId=task["id"], contextId=task["contextId"]),
    )
    assert resumed.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_an_advertised_scheme_with_a_made_up_token(stock: ToA2a, adk_edge: Edge) -> None:
    """Both cards advertise a bearer scheme; `to_a2a()` serves a token nobody issued, the edge
    refuses it (401 `token_invalid`)."""
    async with httpx.AsyncClient(timeout=60) as http:
        stock_card = (await http.get(stock.url + ".well-known/agent-card.json")).json()
        edge_card = (await http.get(adk_edge.url + "/.well-known/agent-card.json")).json()
    assert "bearer" in stock_card["securitySchemes"]
    assert edge_card["securitySchemes"]
    served = await stock.send([{"text": "how is checkout?"}], "made-up")
    assert _state(served) == "TASK_STATE_COMPLETED"
    refused = await adk_edge.rpc("made-up", "SendMessage", message_params("how is checkout?"))
    assert (refused.status_code, refused.json()["error"]) == (401, "token_invalid")


async def test_a_reply_approving_the_guarded_tool(stock: ToA2a, adk_edge: Edge) -> None:
    """The client answers ADK's confirmation request itself: under `to_a2a()` the restart runs
    with no person involved. Through the edge that reply is refused (a data part, -32005), the
    text "approve" leaves the task waiting, and the action stays pending for its person."""
    context = unique("ctx")
    waiting = await stock.send([{"text": "restart checkout"}], contextId=context)
    assert _state(waiting) == "TASK_STATE_INPUT_REQUIRED"
    request = _confirmation_request(waiting)
    approval = {
        "data": {
            "id": request["id"],
            "name": "adk_request_confirmation",
            "response": {"confirmed": True},
        },
        "metadata": {"adk_type": "function_response"},
    }
    ran = await stock.send([approval], taskId=waiting["id"], contextId=context)
    assert _state(ran) == "TASK_STATE_COMPLETED"
    assert example.RESTARTS["checkout"] == 1  # approved by the caller itself

    user = unique("user")
    agent = adk_edge.token(subject=user, agent=unique("agent"))
    asked = (await adk_edge.rpc(agent, "SendMessage", message_params("restart checkout"))).json()
    task = asked["result"]["task"]
    assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    action_id = task["status"]["message"]["parts"][1]["data"]["action_id"]
    on_task = {"taskId": task["id"], "contextId": task["contextId"]}
    injected = message_params("", **on_task)
    injected["message"]["parts"] = [approval]
    refused = (await adk_edge.rpc(agent, "SendMessage", injected)).json()
    assert refused["error"]["code"] == -32005
    still = (await adk_edge.rpc(agent, "SendMessage", message_params("approve", **on_task))).json()
    assert still["result"]["task"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"
    async with httpx.AsyncClient(timeout=60) as http:
        shown = await http.get(
            f"{adk_edge.url}/approvals/{action_id}",
            headers=bearer(adk_edge.token("human", subject=user)),
        )
    assert shown.json()["status"] == "pending"
