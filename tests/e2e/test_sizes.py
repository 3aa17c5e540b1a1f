"""Where the edge draws the size line, through the real Envoy, authz and adapter.

A message may hold 8192 characters. A JSON client may escape every non-ASCII character, and a
character outside the Basic Multilingual Plane then takes 12 bytes (`\\ud83d\\ude00`, a
surrogate pair). So the body caps, Envoy's and the adapter's (one number), are 8192 times 12
bytes plus 32 KiB for everything else in the request: every message of at most 8192 characters
is accepted however it is escaped, 8193 get the A2A "too long" error, and only a body over the
cap gets Envoy's 413.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import pytest

from adapter.messages import MAX_BODY_BYTES, MAX_CHARS
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

EMOJI = "\U0001f600"  # 12 bytes in JSON when escaped: "\ud83d\ude00"


def escaped_send(text: str, padding: int = 0) -> bytes:
    """A SendMessage body with every non-ASCII character escaped (`ensure_ascii`), as some JSON
    clients write it; `padding` adds that many bytes of message metadata."""
    message: dict[str, Any] = {
        "messageId": uuid.uuid4().hex,
        "role": "ROLE_USER",
        "parts": [{"text": text}],
    }
    if padding:
        message["metadata"] = {"padding": "x" * padding}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    return json.dumps(body, ensure_ascii=True).encode("ascii")


async def post(edge: Edge, body: bytes) -> httpx.Response:
    headers = {**JSONRPC_HEADERS, **bearer(edge.token(subject=unique("user")))}
    async with httpx.AsyncClient(timeout=60) as http:
        return await http.post(f"{edge.url}/a2a", content=body, headers=headers)


async def test_the_longest_message_escaped_in_the_worst_way_is_accepted(edge: Edge) -> None:
    """8192 emoji, each escaped as a surrogate pair (98 304 bytes of text): a task, no 413."""
    body = escaped_send(EMOJI * MAX_CHARS)
    assert len(body) > 96 * 1024  # over Envoy's old 64 KiB cap
    response = await post(edge, body)
    assert response.status_code == 200, response.text
    assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_one_character_more_is_the_a2a_too_long_error(edge: Edge) -> None:
    """8193 emoji, escaped alike: the JSON-RPC error for the message rule, not Envoy's 413."""
    response = await post(edge, escaped_send(EMOJI * (MAX_CHARS + 1)))
    assert response.status_code == 200, response.text
    error = response.json()["error"]
    assert error["code"] == -32602
    assert error["data"][0]["metadata"]["rule"] == "too_long"


async def test_a_body_at_the_cap_is_accepted_and_one_byte_more_is_413(edge: Edge) -> None:
    """The line itself: a body of exactly the cap reaches the adapter; one byte more is Envoy's
    413 body_too_large, and the adapter never sees it."""
    base = len(escaped_send(EMOJI * MAX_CHARS, padding=1)) - 1
    at_cap = escaped_send(EMOJI * MAX_CHARS, padding=MAX_BODY_BYTES - base)
    assert len(at_cap) == MAX_BODY_BYTES
    accepted = await post(edge, at_cap)
    assert accepted.status_code == 200 and "task" in accepted.json()["result"]
    before = await edge.adapter_requests()
    over = await post(edge, escaped_send(EMOJI * MAX_CHARS, padding=MAX_BODY_BYTES - base + 1))
    assert (over.status_code, over.json()["error"]) == (413, "body_too_large")
    assert await edge.adapter_requests() == before
