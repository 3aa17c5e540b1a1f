"""A client's mistake is answered, and logged as an ordinary request: never above WARNING.

Error-level log lines page people; a client that sends to a finished task or forgets a header
must not be able to cause one. Each case below is one mistake, answered with its documented
refusal; afterwards the garbage collector runs (an abandoned asyncio task is reported when it is
collected) and every log record of the process, the a2a-sdk's and asyncio's included, is at most
a warning.
"""

from __future__ import annotations

import gc
import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from tests.adapter.conftest import Server, assertion_headers, delegated
from tests.adapter.conftest import message_params as message

ALICE_BOT = delegated()

Mistake = Callable[[Server], Awaitable[httpx.Response]]


async def finished_task(server: Server) -> str:
    response = await server.rpc(ALICE_BOT, "SendMessage", message())
    return str(response.json()["result"]["task"]["id"])


async def send_to_finished(server: Server) -> httpx.Response:
    task_id = await finished_task(server)
    return await server.rpc(ALICE_BOT, "SendMessage", message("again", taskId=task_id))


async def stream_to_finished(server: Server) -> httpx.Response:
    task_id = await finished_task(server)
    return await server.rpc(ALICE_BOT, "SendStreamingMessage", message("again", taskId=task_id))


async def subscribe_to_finished(server: Server) -> httpx.Response:
    return await server.rpc(ALICE_BOT, "SubscribeToTask", {"id": await finished_task(server)})


async def cancel_finished(server: Server) -> httpx.Response:
    return await server.rpc(ALICE_BOT, "CancelTask", {"id": await finished_task(server)})


async def contradicting_context(server: Server) -> httpx.Response:
    waiting = await server.rpc(ALICE_BOT, "SendMessage", message("restart checkout"))
    task_id = waiting.json()["result"]["task"]["id"]
    return await server.rpc(
        ALICE_BOT, "SendMessage", message("x", taskId=task_id, contextId="another")
    )


async def raw(server: Server, body: bytes, headers: dict[str, str] | None = None) -> httpx.Response:
    sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **(headers or {})}
    async with server.http(ALICE_BOT) as http:
        return await http.post("/a2a", content=body, headers=sent)


def call(method: str, params: Any, **options: Any) -> Mistake:
    async def mistake(server: Server) -> httpx.Response:
        return await server.rpc(ALICE_BOT, method, params, **options)

    return mistake


def body(content: bytes, **headers: str) -> Mistake:
    async def mistake(server: Server) -> httpx.Response:
        return await raw(server, content, headers)

    return mistake


async def no_assertion(server: Server) -> httpx.Response:
    return await server.rpc(None, "GetTask", {"id": "x"})


def rest(method: str, path: str, content: bytes = b"", **headers: str) -> Mistake:
    """A mistake on the HTTP+JSON binding (below /a2a)."""

    async def mistake(server: Server) -> httpx.Response:
        sent = {"Content-Type": "application/json", "A2A-Version": "1.0", **headers}
        async with server.http(ALICE_BOT) as http:
            return await http.request(method, "/a2a" + path, content=content, headers=sent)

    return mistake


async def rest_cancel_finished(server: Server) -> httpx.Response:
    return await rest("POST", f"/tasks/{await finished_task(server)}:cancel")(server)


async def expired_token(server: Server) -> httpx.Response:
    headers = {
        "Content-Type": "application/json",
        "A2A-Version": "1.0",
        **assertion_headers(ALICE_BOT, token_expires_at=int(time.time()) - 5),
    }
    content = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": message()})
    async with httpx.AsyncClient(base_url=server.base) as http:
        return await http.post("/a2a", content=content, headers=headers)


# Each mistake and the status and JSON-RPC error code (or edge reason, or HTTP+JSON ErrorInfo
# reason) it is answered with.
MISTAKES: dict[str, tuple[Mistake, int, int | str]] = {
    "message to a finished task": (send_to_finished, 200, -32004),
    "stream to a finished task": (stream_to_finished, 200, -32004),
    "subscribe to a finished task": (subscribe_to_finished, 200, -32004),
    "cancel a finished task": (cancel_finished, 200, -32002),
    "contextId of another task": (contradicting_context, 200, -32602),
    "unknown task": (call("GetTask", {"id": "nope"}), 200, -32001),
    "message to an unknown task": (call("SendMessage", message(taskId="nope")), 200, -32001),
    "subscribe to an unknown task": (call("SubscribeToTask", {"id": "nope"}), 200, -32001),
    "cancel an unknown task": (call("CancelTask", {"id": "nope"}), 200, -32001),
    "params missing a field": (call("GetTask", {}), 200, -32602),
    "params of the wrong type": (call("GetTask", {"id": {"x": 1}}), 200, -32602),
    "params not an object": (call("GetTask", [1]), 200, -32602),
    "wrong version": (call("GetTask", {"id": "x"}, headers={"A2A-Version": "0.3"}), 200, -32009),
    "no version": (call("GetTask", {"id": "x"}, headers={"A2A-Version": ""}), 200, -32009),
    "unknown method": (call("message/send", message()), 200, -32601),
    "push method": (call("CreateTaskPushNotificationConfig", {}), 200, -32003),
    "message too long": (call("SendMessage", message("x" * 8193)), 200, -32602),
    "function shape": (call("SendMessage", message('{"functionCall": {}}')), 200, -32602),
    "data part": (
        call(
            "SendMessage",
            {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"data": {"a": 1}}]}},
        ),
        200,
        -32005,
    ),
    "bad page token": (call("ListTasks", {"pageToken": "garbage"}), 200, -32602),
    "not JSON": (body(b"{"), 200, -32700),
    "a batch": (body(b"[]"), 200, -32600),
    "not JSON-RPC 2.0": (body(json.dumps({"jsonrpc": "1.0", "id": 1}).encode()), 200, -32600),
    "wrong content type": (body(b"{}", **{"Content-Type": "text/plain"}), 200, -32005),
    "no assertion": (no_assertion, 401, "assertion_invalid"),
    "a UTF-16 body": (body(b"\xff\xfe" + '{"jsonrpc": "2.0"}'.encode("utf-16-le")), 200, -32700),
    "HTTP+JSON: not JSON": (rest("POST", "/message:send", b"{"), 400, "PARSE_ERROR"),
    "HTTP+JSON: unknown operation": (rest("GET", "/nothing"), 404, "METHOD_NOT_FOUND"),
    "HTTP+JSON: wrong content type": (
        rest("POST", "/message:send", b"{}", **{"Content-Type": "text/plain"}),
        415,
        "CONTENT_TYPE_NOT_SUPPORTED",
    ),
    "HTTP+JSON: unknown task": (rest("GET", "/tasks/nope"), 404, "TASK_NOT_FOUND"),
    "HTTP+JSON: cancel a finished task": (rest_cancel_finished, 409, "TASK_NOT_CANCELABLE"),
    "HTTP+JSON: push": (
        rest("POST", "/tasks/t/pushNotificationConfigs", b"{}"),
        400,
        "PUSH_NOTIFICATION_NOT_SUPPORTED",
    ),
    "a token past its exp": (expired_token, 401, "token_expired"),
    "a notification": (
        body(json.dumps({"jsonrpc": "2.0", "method": "SendMessage", "params": message()}).encode()),
        204,
        "",  # no body: nothing to answer
    ),
}


def answer(response: httpx.Response) -> int | str:
    if not response.content:
        return ""
    body = response.json()
    if "jsonrpc" in body:
        return int(body["error"]["code"])
    error = body["error"]  # the edge's reason, or an HTTP+JSON google.rpc.Status
    return str(error["details"][0]["reason"]) if isinstance(error, dict) else str(error)


@pytest.mark.parametrize("mistake", MISTAKES.values(), ids=MISTAKES.keys())
async def test_a_client_mistake_logs_nothing_above_warning(
    server: Server, caplog: pytest.LogCaptureFixture, mistake: tuple[Mistake, int, int | str]
) -> None:
    """The mistake gets its refusal; no log record of any logger is above WARNING."""
    send, status, expected = mistake
    caplog.set_level(logging.DEBUG)
    response = await send(server)
    assert (response.status_code, answer(response)) == (status, expected)
    gc.collect()  # an asyncio task abandoned by the request is reported when it is collected
    loud = [
        f"{record.levelname} {record.name}: {record.getMessage()[:200]}"
        for record in caplog.records
        if record.levelno > logging.WARNING
    ]
    assert loud == []
