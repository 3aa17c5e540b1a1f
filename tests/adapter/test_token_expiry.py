"""A stream lasts no longer than the caller's bearer token: its `exp` travels in the assertion
(`tok_exp`), and the adapter enforces it.

A `SendStreamingMessage` or `SubscribeToTask` stream still open when the token expires ends with
a final `event: error` (reason `TOKEN_EXPIRED`) and a clean end of stream; the caller subscribes
again with a fresh token. A turn or stream asked for with a token already past its `exp` never
starts (401 `token_expired`). The turn a stream watched runs on, like one whose client went away.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from tests.adapter.conftest import (
    Server,
    assertion_headers,
    delegated,
    message_params,
    sse_events,
)

ALICE_BOT = delegated()


async def stream(
    server: Server, method: str, params: dict[str, Any], token_expires_at: int
) -> list[tuple[str, dict[str, Any]]]:
    """The (SSE event name, JSON body) of every event of one streaming call, until it ends."""
    body = {"jsonrpc": "2.0", "id": 9, "method": method, "params": params}
    headers = {
        "A2A-Version": "1.0",
        **assertion_headers(ALICE_BOT, token_expires_at=token_expires_at),
    }
    async with (
        httpx.AsyncClient(base_url=server.base, timeout=60) as http,
        http.stream("POST", "/a2a", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        return await sse_events(response)


def token_expired(event: tuple[str, dict[str, Any]]) -> bool:
    name, body = event
    info = body["error"]["data"][0]
    return name == "error" and (info["reason"], info["domain"]) == ("TOKEN_EXPIRED", "orrery-a2a")


async def test_a_subscription_ends_when_the_token_expires(server: Server) -> None:
    """A subscription to a waiting task, with a token valid for 2 more seconds: the Task, then a
    final TOKEN_EXPIRED error event and the end of the stream; the task waits on."""
    task = (await server.rpc(ALICE_BOT, "SendMessage", message_params("restart checkout"))).json()
    task_id = task["result"]["task"]["id"]
    events = await stream(server, "SubscribeToTask", {"id": task_id}, int(time.time()) + 2)
    assert "task" in events[0][1]["result"]
    assert token_expired(events[-1]) and len(events) == 2
    assert events[-1][1]["id"] == 9
    still = await server.rpc(ALICE_BOT, "GetTask", {"id": task_id})
    assert still.json()["result"]["status"]["state"] == "TASK_STATE_INPUT_REQUIRED"


async def test_a_turns_stream_ends_when_the_token_expires_and_the_turn_runs_on(
    server: Server,
) -> None:
    """SendStreamingMessage on a slow turn outlives the token: TOKEN_EXPIRED ends the stream,
    the turn itself finishes (as for a client that went away)."""
    server.gateway.hold = asyncio.Event()
    events = await stream(
        server, "SendStreamingMessage", message_params("how is search?"), int(time.time()) + 2
    )
    assert "task" in events[0][1]["result"] and token_expired(events[-1])
    task_id = events[0][1]["result"]["task"]["id"]
    server.gateway.hold.set()
    for _ in range(200):
        state = (await server.rpc(ALICE_BOT, "GetTask", {"id": task_id})).json()["result"]
        if state["status"]["state"] == "TASK_STATE_COMPLETED":
            break
        await asyncio.sleep(0.05)
    assert state["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_an_expired_token_starts_no_turn_and_no_stream(server: Server) -> None:
    """A token already past its exp (authz allows 60 s of clock leeway): SendMessage,
    SendStreamingMessage and SubscribeToTask are refused 401 token_expired; nothing runs."""
    expired = int(time.time()) - 5
    for method, params in (
        ("SendMessage", message_params("how is search?")),
        ("SendStreamingMessage", message_params("how is search?")),
        ("SubscribeToTask", {"id": "any"}),
    ):
        headers = {
            "A2A-Version": "1.0",
            **assertion_headers(ALICE_BOT, token_expires_at=expired),
        }
        async with httpx.AsyncClient(base_url=server.base) as http:
            response = await http.post(
                "/a2a",
                json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
                headers=headers,
            )
        assert response.status_code == 401, method
        assert response.json()["error"] == "token_expired"
        assert response.headers["WWW-Authenticate"] == 'Bearer realm="orrery-a2a"'
    assert server.gateway.turns == []


async def test_a_read_within_the_leeway_is_still_answered(server: Server) -> None:
    """Reads are over at once: a token authz still accepts (within its leeway) may read."""
    headers = {
        "A2A-Version": "1.0",
        **assertion_headers(ALICE_BOT, token_expires_at=int(time.time()) - 5),
    }
    async with httpx.AsyncClient(base_url=server.base) as http:
        response = await http.post(
            "/a2a",
            json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
            headers=headers,
        )
    assert response.status_code == 200 and "result" in response.json()
