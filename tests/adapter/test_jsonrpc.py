"""The JSON-RPC binding on the wire: A2A traps (docs/a2a-notes.md), the dispatcher's refusals."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.client import ClientConfig, ClientFactory
from a2a.types import a2a_pb2 as pb

from adapter.messages import MAX_BODY_BYTES
from tests.adapter.conftest import (
    Server,
    assertion_headers,
    delegated,
    human,
    reply_text,
    running,
    send,
    text_message,
)
from tests.adapter.conftest import (
    message_params as message,
)
from tests.metrics import metric
from tests.waiting import eventually

ALICE_BOT = delegated()


def error_of(response: httpx.Response) -> dict[str, Any]:
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    error = body["error"]
    assert isinstance(error["data"], list)
    info = error["data"][0]
    assert info["@type"] == "type.googleapis.com/google.rpc.ErrorInfo"
    assert info["domain"] == "a2a-protocol.org"
    return dict(error)


async def new_task(server: Server, text: str = "how is checkout?") -> dict[str, Any]:
    response = await server.rpc(ALICE_BOT, "SendMessage", message(text))
    return dict(response.json()["result"]["task"])


@pytest.mark.parametrize("path", ["/a2a", "/a2a/"])
async def test_both_paths_answer(server: Server, path: str) -> None:
    """Trap 2: POST works on the URL with and without a trailing slash."""
    response = await server.rpc(ALICE_BOT, "SendMessage", message(), path=path)
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_snake_case_params_are_accepted(server: Server) -> None:
    """Trap 3: proto field names (snake_case) parse like the JSON names."""
    params = {
        "message": {"message_id": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]},
        "configuration": {"return_immediately": False},
    }
    response = await server.rpc(ALICE_BOT, "SendMessage", params)
    assert "task" in response.json()["result"]


async def test_unknown_fields_are_ignored(server: Server) -> None:
    """Trap 3: unknown members are ignored (forward compatibility)."""
    params = message()
    params["futureField"] = {"x": 1}
    params["message"]["somethingNew"] = True
    response = await server.rpc(ALICE_BOT, "SendMessage", params)
    assert "task" in response.json()["result"]


async def test_missing_required_field_is_invalid_params(server: Server) -> None:
    """Trap 3: a REQUIRED field missing (GetTask without id) is -32602."""
    assert error_of(await server.rpc(ALICE_BOT, "GetTask", {}))["code"] == -32602


async def test_error_info_metadata_is_a_string_map(server: Server) -> None:
    """ErrorInfo.metadata stays map<string,string>; field violations go in google.rpc.BadRequest."""
    error = error_of(await server.rpc(ALICE_BOT, "GetTask", {}))
    info, bad_request = error["data"]
    assert all(isinstance(value, str) for value in info["metadata"].values())
    assert bad_request["@type"] == "type.googleapis.com/google.rpc.BadRequest"
    assert bad_request["fieldViolations"][0]["field"] == "id"


async def test_wrong_param_type_is_invalid_params(server: Server) -> None:
    """A params value of the wrong JSON type is -32602, not a server error."""
    error = error_of(await server.rpc(ALICE_BOT, "GetTask", {"id": {"nested": 1}}))
    assert error["code"] == -32602


@pytest.mark.parametrize("version", ["99.0", "0.3", "2.0", "1", "1.1", "latest"])
async def test_unsupported_version_is_32009(server: Server, version: str) -> None:
    """Trap 4: an unsupported or malformed A2A-Version is -32009 with ErrorInfo."""
    response = await server.rpc(ALICE_BOT, "GetTask", {"id": "x"}, headers={"A2A-Version": version})
    error = error_of(response)
    assert error["code"] == -32009
    assert error["data"][0]["reason"] == "VERSION_NOT_SUPPORTED"


async def test_empty_version_means_0_3_and_is_refused(server: Server) -> None:
    """Trap 4: no A2A-Version means 0.3, answered with a well-formed -32009."""
    response = await server.rpc(ALICE_BOT, "GetTask", {"id": "x"}, headers={"A2A-Version": ""})
    assert error_of(response)["code"] == -32009


async def test_version_as_query_parameter_is_accepted(server: Server) -> None:
    """Spec 3.6.1: the version may come as a request parameter instead of a header."""
    response = await server.rpc(
        ALICE_BOT, "GetTask", {"id": "x"}, headers={"A2A-Version": ""}, path="/a2a?A2A-Version=1.0"
    )
    assert error_of(response)["code"] == -32001


async def test_patch_version_is_ignored(server: Server) -> None:
    """Spec 3.6: a patch number is not considered."""
    response = await server.rpc(ALICE_BOT, "GetTask", {"id": "x"}, headers={"A2A-Version": "1.0.2"})
    assert error_of(response)["code"] == -32001


async def raw_post(
    server: Server, content: bytes, content_type: str = "application/json"
) -> httpx.Response:
    async with server.http(ALICE_BOT) as http:
        return await http.post(
            "/a2a", content=content, headers={"Content-Type": content_type, "A2A-Version": "1.0"}
        )


async def test_text_plain_body_is_32005(server: Server) -> None:
    """Trap 5: a non-JSON content type is -32005."""
    assert error_of(await raw_post(server, b"hello", "text/plain"))["code"] == -32005


async def test_bad_json_is_32700(server: Server) -> None:
    """A body that is not JSON is -32700 with id null."""
    response = await raw_post(server, b'{"jsonrpc": "2.0", "id": 1,')
    assert error_of(response)["code"] == -32700
    assert response.json()["id"] is None


GET_TASK = '{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "caf\u00e9"}}'

# JSON on the wire is UTF-8 (RFC 8259 §8.1); these are the same request in other encodings.
NOT_UTF8 = {
    "UTF-16LE with a BOM": b"\xff\xfe" + GET_TASK.encode("utf-16-le"),
    "UTF-16BE with a BOM": b"\xfe\xff" + GET_TASK.encode("utf-16-be"),
    "UTF-16LE without a BOM": GET_TASK.encode("utf-16-le"),
    "UTF-32 with a BOM": GET_TASK.encode("utf-32"),
    "Latin-1": GET_TASK.encode("latin-1"),
}


@pytest.mark.parametrize("body", NOT_UTF8.values(), ids=NOT_UTF8.keys())
async def test_a_body_that_is_not_utf8_is_32700(server: Server, body: bytes) -> None:
    """RFC 8259 §8.1: JSON exchanged between systems MUST be UTF-8; any other encoding is a parse
    error (-32700, id null), never decoded by guesswork."""
    response = await raw_post(server, body)
    assert error_of(response)["code"] == -32700
    assert response.json()["id"] is None


async def test_a_utf8_byte_order_mark_is_ignored(server: Server) -> None:
    """RFC 8259 §8.1: a sender MUST NOT add a BOM, a parser MAY ignore one: this one does."""
    response = await raw_post(server, b"\xef\xbb\xbf" + GET_TASK.encode())
    assert error_of(response)["code"] == -32001  # parsed, and the task is unknown


NOTIFICATIONS = {
    "SendMessage": {"message": {"messageId": "n", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    "SendStreamingMessage": {
        "message": {"messageId": "n", "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    },
    "GetTask": {"id": "x"},
    "NoSuchMethod": {},
}


@pytest.mark.parametrize(("method", "params"), NOTIFICATIONS.items(), ids=NOTIFICATIONS.keys())
async def test_a_notification_runs_nothing_and_gets_no_reply(
    server: Server, method: str, params: dict[str, Any]
) -> None:
    """JSON-RPC 2.0 §4.1: a request without `id` is a notification, which gets no reply; every
    A2A method needs its answer, so nothing runs: HTTP 204 without a body."""
    body = {"jsonrpc": "2.0", "method": method, "params": params}
    response = await raw_post(server, json.dumps(body).encode())
    assert (response.status_code, response.content) == (204, b"")
    assert server.gateway.turns == []
    listed = await server.rpc(ALICE_BOT, "ListTasks", {})
    assert listed.json()["result"]["totalSize"] == 0


async def test_a_null_id_is_a_request_not_a_notification(server: Server) -> None:
    """`"id": null` is a request (discouraged, but one): it is answered, with id null."""
    response = await server.rpc(ALICE_BOT, "GetTask", {"id": "x"}, rpc_id=None)
    assert error_of(response)["code"] == -32001
    assert response.json()["id"] is None


@pytest.mark.parametrize("depth", [60, 900, 20000])
async def test_deeply_nested_json_is_refused_cleanly(server: Server, depth: int) -> None:
    """Nesting deeper than the parsers allow is a JSON-RPC error, never a 500."""
    metadata = '{"a":' * depth + "1" + "}" * depth
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{"message":{"messageId":"m",'
        '"role":"ROLE_USER","parts":[{"text":"hi"}],"metadata":' + metadata + "}}}"
    )
    assert error_of(await raw_post(server, body.encode()))["code"] in (-32700, -32602)
    assert server.gateway.turns == []


@pytest.mark.parametrize(
    "body",
    [
        [{"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": "x"}}],
        {"jsonrpc": "1.0", "id": 1, "method": "GetTask"},
        {"jsonrpc": "2.0", "id": True, "method": "GetTask"},
        {"jsonrpc": "2.0", "id": {"a": 1}, "method": "GetTask"},
        {"jsonrpc": "2.0", "id": 1},
        "just a string",
    ],
)
async def test_invalid_requests_are_32600(server: Server, body: object) -> None:
    """Batches, wrong version, bad ids and missing methods are -32600."""
    assert error_of(await raw_post(server, json.dumps(body).encode()))["code"] == -32600


async def test_unknown_method_is_32601(server: Server) -> None:
    """A 0.3 method name (or any unknown one) is -32601, with the request id echoed."""
    response = await server.rpc(ALICE_BOT, "message/send", message(), rpc_id="abc")
    assert error_of(response)["code"] == -32601
    assert response.json()["id"] == "abc"


@pytest.mark.parametrize(
    "method",
    [
        "CreateTaskPushNotificationConfig",
        "GetTaskPushNotificationConfig",
        "ListTaskPushNotificationConfigs",
        "DeleteTaskPushNotificationConfig",
    ],
)
async def test_push_methods_are_32003(server: Server, method: str) -> None:
    """Trap 11: push is not declared, so every push method is -32003."""
    error = error_of(await server.rpc(ALICE_BOT, method, {"taskId": "t", "url": "https://x"}))
    assert error["code"] == -32003
    assert error["data"][0]["reason"] == "PUSH_NOTIFICATION_NOT_SUPPORTED"


async def test_body_over_the_cap_is_413_before_parsing() -> None:
    """A body over ORRERY_A2A_MAX_BODY_BYTES is refused with 413 and never parsed."""
    async with running() as server:
        response = await raw_post(server, b"[" * (MAX_BODY_BYTES + 1))
        assert response.status_code == 413
        assert response.json()["error"] == "body_too_large"


async def test_chunked_body_over_the_cap_is_413() -> None:
    """Without Content-Length the cap applies to the bytes actually read."""

    async def chunks() -> Any:
        for _ in range(MAX_BODY_BYTES // 1024 + 1):
            yield b" " * 1024

    async with running() as server:
        async with server.http(ALICE_BOT) as http:
            response = await http.post(
                "/a2a", content=chunks(), headers={"Content-Type": "application/json"}
            )
        assert response.status_code == 413


@pytest.mark.parametrize("method", ["GetTask", "CancelTask"])
async def test_unknown_task_is_32001(server: Server, method: str) -> None:
    """Trap 6: an unknown task id is -32001."""
    assert error_of(await server.rpc(ALICE_BOT, method, {"id": "nope"}))["code"] == -32001


async def test_send_to_unknown_task_is_32001(server: Server) -> None:
    """Trap 6: SendMessage naming an unknown taskId is -32001 (client ids never create tasks)."""
    response = await server.rpc(ALICE_BOT, "SendMessage", message(taskId="invented"))
    assert error_of(response)["code"] == -32001


async def test_subscribe_to_unknown_task_is_plain_json_32001(server: Server) -> None:
    """Trap 6/7: a streaming method's upfront error is plain JSON, not SSE."""
    response = await server.rpc(ALICE_BOT, "SubscribeToTask", {"id": "nope"})
    assert response.headers["Content-Type"].startswith("application/json")
    assert error_of(response)["code"] == -32001


def sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.strip().split("\n\n"):
        lines = [line for line in block.splitlines() if line.startswith("data: ")]
        events.append(json.loads(lines[0][len("data: ") :]))
    return events


async def test_stream_events_are_full_responses_with_the_request_id(server: Server) -> None:
    """Trap 7: text/event-stream, each data line a JSON-RPC response with our id, Task first."""
    response = await server.rpc(ALICE_BOT, "SendStreamingMessage", message(), rpc_id="s-7")
    assert response.headers["Content-Type"].startswith("text/event-stream")
    events = sse_events(response.text)
    assert all(event["jsonrpc"] == "2.0" and event["id"] == "s-7" for event in events)
    assert "task" in events[0]["result"]
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_follow_up_stream_begins_with_the_task(server: Server) -> None:
    """Spec 3.1.2: a streamed follow-up on an existing task starts with the Task, then updates."""
    task = await new_task(server, "restart checkout")
    follow_up = message("still there?", taskId=task["id"], contextId=task["contextId"])
    response = await server.rpc(ALICE_BOT, "SendStreamingMessage", follow_up)
    events = sse_events(response.text)
    assert events[0]["result"]["task"]["id"] == task["id"]
    assert "statusUpdate" in events[-1]["result"]


async def test_stream_closes_at_input_required(server: Server) -> None:
    """Trap 7: the stream ends at an interrupted state."""
    response = await server.rpc(ALICE_BOT, "SendStreamingMessage", message("restart checkout"))
    events = sse_events(response.text)
    last = events[-1]["result"]["statusUpdate"]["status"]["state"]
    assert last == "TASK_STATE_INPUT_REQUIRED"


async def test_subscribe_to_terminal_task_is_32004(server: Server) -> None:
    """Trap 7/12: subscribing to a finished task is -32004, as plain JSON."""
    task = await new_task(server)
    response = await server.rpc(ALICE_BOT, "SubscribeToTask", {"id": task["id"]})
    assert error_of(response)["code"] == -32004


async def subscription(
    server: Server, task_id: str, attached: asyncio.Event
) -> list[dict[str, Any]]:
    """The events of a `SubscribeToTask` stream until it ends; `attached` is set at the first
    (the Task: from then on this stream receives the task's events)."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", **assertion_headers(ALICE_BOT)}
    events = []
    async with (
        httpx.AsyncClient(base_url=server.base, timeout=60) as http,
        http.stream("POST", "/a2a", json=body, headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                attached.set()
    return events


async def approve(server: Server, task: dict[str, Any]) -> None:
    """The delegating person approves the action the task waits on."""
    action_id = next(
        part["data"]["action_id"] for part in task["status"]["message"]["parts"] if "data" in part
    )
    async with server.http(human("alice"), "approvals") as http:
        decided = await http.post(f"/approvals/{action_id}", json={"decision": "approve"})
    assert decided.json()["status"] == "approved"


def states(events: list[dict[str, Any]]) -> list[str]:
    """Each event's kind, with the state of a Task or status update."""
    described = []
    for event in events:
        kind, value = next(iter(event["result"].items()))
        state = value.get("status", {}).get("state", "")
        described.append(f"{kind} {state}".strip())
    return described


async def test_subscribe_to_a_waiting_task_follows_it_to_its_end(server: Server) -> None:
    """Spec 3.1.6: SubscribeToTask on an input-required task sends the Task, stays open while the
    task waits, and ends with the task: after the approval, the resumed turn's events."""
    task = await new_task(server, "restart checkout")
    attached = asyncio.Event()
    subscriber = asyncio.create_task(subscription(server, task["id"], attached))
    await attached.wait()
    await approve(server, task)
    assert not subscriber.done()  # the decision alone is not an event of the task
    resume = message("go ahead", taskId=task["id"])
    resumed = await server.rpc(ALICE_BOT, "SendMessage", resume)
    assert resumed.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    events = await subscriber
    assert states(events) == [
        "task TASK_STATE_INPUT_REQUIRED",
        "artifactUpdate",
        "statusUpdate TASK_STATE_COMPLETED",
    ]
    assert events[1]["result"]["artifactUpdate"]["artifact"]["name"] == "reply"


async def test_every_subscriber_of_a_waiting_task_hears_the_same_events(server: Server) -> None:
    """Several subscribers on one waiting task each get the same events, in the same order."""
    task = await new_task(server, "restart checkout")
    attached = [asyncio.Event() for _ in range(3)]
    subscribers = [
        asyncio.create_task(subscription(server, task["id"], ready)) for ready in attached
    ]
    await asyncio.gather(*(ready.wait() for ready in attached))
    await approve(server, task)
    await server.rpc(ALICE_BOT, "SendMessage", message("go ahead", taskId=task["id"]))
    streams = [await subscriber for subscriber in subscribers]
    assert states(streams[0])[-1] == "statusUpdate TASK_STATE_COMPLETED"
    assert streams[1] == streams[0] and streams[2] == streams[0]


async def test_a_resumed_turn_that_waits_again_keeps_the_subscription_open(server: Server) -> None:
    """A resume before the decision leaves the task input-required: the subscriber hears that
    and stays, until a later resume ends the task."""
    task = await new_task(server, "restart checkout")
    attached = asyncio.Event()
    subscriber = asyncio.create_task(subscription(server, task["id"], attached))
    await attached.wait()
    await server.rpc(ALICE_BOT, "SendMessage", message("done yet?", taskId=task["id"]))
    await approve(server, task)
    await server.rpc(ALICE_BOT, "SendMessage", message("go ahead", taskId=task["id"]))
    described = states(await subscriber)
    assert described[0] == "task TASK_STATE_INPUT_REQUIRED"
    assert described[1] == "statusUpdate TASK_STATE_INPUT_REQUIRED"
    assert described[-1] == "statusUpdate TASK_STATE_COMPLETED"


async def test_concurrent_subscribers_see_the_same_events_in_order(server: Server) -> None:
    """Trap 7: events are broadcast to every active stream of a task, in order."""
    server.gateway.hold = asyncio.Event()
    params = message()
    params["configuration"] = {"returnImmediately": True}
    created = await server.rpc(ALICE_BOT, "SendMessage", params)
    task_id = created.json()["result"]["task"]["id"]
    await server.gateway.started.wait()
    attached = [asyncio.Event(), asyncio.Event()]
    subscribers = [asyncio.create_task(subscription(server, task_id, ready)) for ready in attached]
    await asyncio.gather(*(ready.wait() for ready in attached))
    server.gateway.hold.set()
    streams = [await s for s in subscribers]
    for events in streams:
        assert events[0]["result"]["task"]["id"] == task_id
        kinds = [next(iter(event["result"])) for event in events[1:]]
        assert kinds == ["artifactUpdate", "statusUpdate"]
    assert streams[0][1:] == streams[1][1:]


async def test_repeated_message_id_is_a_retry(server: Server) -> None:
    """Trap 8: a repeated messageId is not refused: the same message again is a retry, answered
    with the first task (spec 3.3.1), and the gateway runs once."""
    first = await server.rpc(ALICE_BOT, "SendMessage", message(messageId="m-1"))
    second = await server.rpc(ALICE_BOT, "SendMessage", message(messageId="m-1"))
    assert first.json()["result"] == second.json()["result"]
    assert len(server.gateway.turns) == 1


async def test_a_follow_up_reusing_a_message_id_for_another_message_runs(
    server: Server,
) -> None:
    """Trap 15: a follow-up reusing the first message's id for another text is another message:
    it runs (the SDK's history keeps the first message under the id)."""
    task = await new_task(server, "restart checkout")
    first_id = task["history"][0]["messageId"]
    follow_up = message("anything", taskId=task["id"], messageId=first_id)
    response = await server.rpc(ALICE_BOT, "SendMessage", follow_up)
    assert response.json()["result"]["task"]["id"] == task["id"]
    assert [turn.text for turn in server.gateway.turns] == ["restart checkout", "anything"]


async def test_list_tasks_shape(server: Server) -> None:
    """Trap 10: nextPageToken always present, pageSize/totalSize, no artifacts by default."""
    for _ in range(3):
        await new_task(server)
    page = (await server.rpc(ALICE_BOT, "ListTasks", {"pageSize": 2})).json()["result"]
    assert page["pageSize"] == 2 and page["totalSize"] == 3 and len(page["tasks"]) == 2
    assert page["nextPageToken"]
    assert all("artifacts" not in task for task in page["tasks"])
    rest = (
        await server.rpc(
            ALICE_BOT, "ListTasks", {"pageSize": 2, "pageToken": page["nextPageToken"]}
        )
    ).json()["result"]
    assert rest["nextPageToken"] == "" and len(rest["tasks"]) == 1
    stamps = [t["status"]["timestamp"] for t in page["tasks"] + rest["tasks"]]
    assert stamps == sorted(stamps, reverse=True)


async def test_list_tasks_includes_artifacts_on_request(server: Server) -> None:
    """Trap 10: includeArtifacts brings the artifacts back."""
    await new_task(server)
    page = (await server.rpc(ALICE_BOT, "ListTasks", {"includeArtifacts": True})).json()
    assert page["result"]["tasks"][0]["artifacts"][0]["name"] == "reply"


@pytest.mark.parametrize("page_size", [0, 101, -1])
async def test_list_tasks_page_size_bounds(server: Server, page_size: int) -> None:
    """pageSize outside 1..100 is -32602."""
    response = await server.rpc(ALICE_BOT, "ListTasks", {"pageSize": page_size})
    assert error_of(response)["code"] == -32602


async def test_garbage_page_token_is_32602(server: Server) -> None:
    """A page token that is not ours is -32602, whatever it names."""
    response = await server.rpc(ALICE_BOT, "ListTasks", {"pageToken": "bm90LWEtdGFzaw"})
    assert error_of(response)["code"] == -32602


async def test_mismatched_context_and_task_is_refused(server: Server) -> None:
    """Trap 12: a contextId that is not the task's is an error, and the gateway is not run."""
    task = await new_task(server, "restart checkout")
    response = await server.rpc(
        ALICE_BOT, "SendMessage", message("x", taskId=task["id"], contextId="other")
    )
    assert error_of(response)["code"] == -32602
    assert len(server.gateway.turns) == 1


async def test_message_to_terminal_task_is_32004(server: Server) -> None:
    """Trap 12: a new message on a completed task is -32004."""
    task = await new_task(server)
    response = await server.rpc(ALICE_BOT, "SendMessage", message("x", taskId=task["id"]))
    assert error_of(response)["code"] == -32004


async def test_cancel_terminal_task_is_32002(server: Server) -> None:
    """Trap 12: cancelling a completed task is -32002."""
    task = await new_task(server)
    assert error_of(await server.rpc(ALICE_BOT, "CancelTask", {"id": task["id"]}))["code"] == -32002


async def test_cancel_input_required_task(server: Server) -> None:
    """A task waiting for approval can be cancelled."""
    task = await new_task(server, "restart checkout")
    response = await server.rpc(ALICE_BOT, "CancelTask", {"id": task["id"]})
    assert response.json()["result"]["status"]["state"] == "TASK_STATE_CANCELED"


async def test_unsupported_media_type_is_32005(server: Server) -> None:
    """Trap 13: a part whose mediaType is not declared is -32005."""
    params = message()
    params["message"]["parts"] = [{"text": "x", "mediaType": "image/png"}]
    assert error_of(await server.rpc(ALICE_BOT, "SendMessage", params))["code"] == -32005


async def test_follow_up_with_only_task_id_infers_the_context(server: Server) -> None:
    """Trap 14: a follow-up naming only taskId continues in the task's context."""
    task = await new_task(server, "restart checkout")
    response = await server.rpc(ALICE_BOT, "SendMessage", message("ok?", taskId=task["id"]))
    result = response.json()["result"]["task"]
    assert result["contextId"] == task["contextId"]
    turns = server.gateway.turns
    assert turns[0].session_id == turns[1].session_id


async def test_history_length_zero_omits_history(server: Server) -> None:
    """Spec 3.2.4: historyLength 0 omits the history."""
    task = await new_task(server)
    response = await server.rpc(ALICE_BOT, "GetTask", {"id": task["id"], "historyLength": 0})
    assert "history" not in response.json()["result"]


async def test_extended_card_has_the_live_inventory(server: Server) -> None:
    """Trap 11: the declared extended card works; its skills follow the live inventory."""
    first = (await server.rpc(ALICE_BOT, "GetExtendedAgentCard", {})).json()["result"]
    assert [s["id"] for s in first["skills"]] == ["investigator", "change-planner"]
    server.gateway.specialists[1] = type(server.gateway.specialists[1])(
        name="change-planner", description="d", routing_hint="h", enabled=False
    )
    second = (await server.rpc(ALICE_BOT, "GetExtendedAgentCard", {})).json()["result"]
    assert [s["id"] for s in second["skills"]] == ["investigator"]


async def test_client_disconnect_lets_the_turn_finish_and_free_its_slot(server: Server) -> None:
    """A client that goes away mid-stream: the turn still ends and releases its in-flight slot."""
    server.gateway.hold = asyncio.Event()
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": message()}
    headers = {"A2A-Version": "1.0", **assertion_headers(ALICE_BOT)}
    async with (
        httpx.AsyncClient(base_url=server.base) as http,
        http.stream("POST", "/a2a", json=body, headers=headers) as response,
    ):
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                break
    server.gateway.hold.set()

    async def slot_freed() -> bool:
        return await metric(f"{server.base}/metrics", "orrery_a2a_turns_in_flight") == 0

    await eventually(slot_freed)


async def test_a_waiting_stream_sends_keep_alive_comments() -> None:
    """While a turn runs, a `: keep-alive` comment goes out each ORRERY_A2A_SSE_KEEPALIVE; the
    events around them are unchanged."""
    async with running({"ORRERY_A2A_SSE_KEEPALIVE": "100ms"}) as server:
        server.gateway.hold = asyncio.Event()
        body = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage", "params": message()}
        headers = {"A2A-Version": "1.0", **assertion_headers(ALICE_BOT)}
        lines: list[str] = []
        async with (
            httpx.AsyncClient(base_url=server.base, timeout=60) as http,
            http.stream("POST", "/a2a", json=body, headers=headers) as response,
        ):
            async for line in response.aiter_lines():
                lines.append(line)
                if lines.count(": keep-alive") == 2:
                    server.gateway.hold.set()
        first_comment = lines.index(": keep-alive")
        assert lines[0].startswith("data: ")  # the Task event first: the comments only fill waits
        assert lines[first_comment - 1] == lines[first_comment + 1] == ""  # a block of its own
        events = [json.loads(line[len("data: ") :]) for line in lines if line.startswith("data: ")]
        assert [next(iter(event["result"])) for event in events] == [
            "task",
            "artifactUpdate",
            "statusUpdate",
        ]


class _Tap(httpx.AsyncBaseTransport):
    """A transport that keeps a copy of every response byte the client reads."""

    def __init__(self) -> None:
        self._inner = httpx.AsyncHTTPTransport()
        self.seen = bytearray()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self._inner.handle_async_request(request)
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            # httpx wants its own stream types; the tap is a duck of them
            stream=_TapStream(response.stream, self.seen),  # type: ignore[arg-type]
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()


class _TapStream(httpx.AsyncByteStream):
    def __init__(self, inner: httpx.AsyncByteStream, seen: bytearray) -> None:
        self._inner = inner
        self._seen = seen

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._seen.extend(chunk)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


async def test_the_sdk_client_ignores_keep_alive_comments() -> None:
    """The a2a-sdk's own SSE reader skips the comments: a streamed turn ends completed."""
    async with running({"ORRERY_A2A_SSE_KEEPALIVE": "100ms"}) as server:
        server.gateway.hold = asyncio.Event()
        tap = _Tap()
        async with server.http(ALICE_BOT, transport=tap) as http:
            factory = ClientFactory(ClientConfig(httpx_client=http, streaming=True))
            client = await factory.create_from_url(server.base)
            turn = asyncio.create_task(send(client, text_message("how is checkout?")))
            while tap.seen.count(b": keep-alive") < 2:
                await asyncio.sleep(0.02)
            server.gateway.hold.set()
            task = await turn
            await client.close()
        assert task.status.state == pb.TASK_STATE_COMPLETED
        assert "checkout is degraded" in reply_text(task)
