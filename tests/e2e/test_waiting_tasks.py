"""A task that waits for a person, followed through the real Envoy, authz and adapters.

The demo gateway's guarded action: a delegated caller's "Restart checkout" ends input-required;
subscribers attach; the delegating person approves; the caller resumes; every subscriber hears the
completion (A2A §3.1.6) — on one adapter, and on two behind one Envoy (PostgreSQL, Redis), where
subscribers and the resume land on either replica. Then the bounds on such streams: the caller's
token expiry, and the per-principal cap on open subscriptions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from a2a.types import a2a_pb2 as pb

from tests.adapter.conftest import followed, send, sse_events, status_data, text_message
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

SUBSCRIBERS = 3


async def _follow(edge: Edge, token: str, task_id: str, attached: asyncio.Event) -> list[Any]:
    async with edge.client(token, streaming=True) as client:
        return await followed(client, task_id, attached)


async def _approve_and_resume_while_subscribed(edge: Edge) -> None:
    user, agent = unique("user"), unique("agent")
    token = edge.token(subject=user, agent=agent)
    async with edge.client(token) as client:
        waiting = await send(client, text_message("Restart checkout"))
    assert waiting.status.state == pb.TASK_STATE_INPUT_REQUIRED
    attached = [asyncio.Event() for _ in range(SUBSCRIBERS)]
    subscribers = [
        asyncio.create_task(_follow(edge, token, waiting.id, ready)) for ready in attached
    ]
    await asyncio.wait_for(asyncio.gather(*(ready.wait() for ready in attached)), timeout=60)
    await asyncio.sleep(0.5)  # the streams stay open while the task waits
    assert not any(subscriber.done() for subscriber in subscribers)

    decided = await edge.decide(
        edge.token("human", subject=user), status_data(waiting)["action_id"]
    )
    assert decided.status_code == 200
    async with edge.client(token) as client:
        resumed = await send(client, text_message("go ahead", task_id=waiting.id))
    assert resumed.status.state == pb.TASK_STATE_COMPLETED

    streams = await asyncio.wait_for(asyncio.gather(*subscribers), timeout=60)
    for events in streams:
        assert events[0].task.status.state == pb.TASK_STATE_INPUT_REQUIRED
        assert events[-1].status_update.status.state == pb.TASK_STATE_COMPLETED
        assert events == streams[0]  # the same events, in the same order, for each


async def test_subscribers_of_a_waiting_task_hear_it_complete(edge: Edge) -> None:
    """One adapter: three subscribers stay open through the approval and hear the completion."""
    await _approve_and_resume_while_subscribed(edge)


@pytest.mark.redis
@pytest.mark.postgres
async def test_subscribers_on_both_replicas_hear_a_waiting_task_complete(
    replicated_edge: Edge,
) -> None:
    """Two adapters behind one Envoy: wherever the subscribers and the resume land, every
    subscriber hears the completion."""
    await _approve_and_resume_while_subscribed(replicated_edge)


@contextlib.asynccontextmanager
async def _raw_subscription(edge: Edge, token: str, task_id: str) -> AsyncIterator[Any]:
    body = jsonrpc("SubscribeToTask", {"id": task_id})
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream(
            "POST", f"{edge.url}/a2a", json=body, headers={**JSONRPC_HEADERS, **bearer(token)}
        ) as response,
    ):
        yield response


async def test_a_subscription_ends_when_the_callers_token_expires(edge: Edge) -> None:
    """Subscribed with a token that expires in 3 s: the Task, then a final TOKEN_EXPIRED error
    event and the end of the stream, though the task still waits."""
    user, agent = unique("user"), unique("agent")
    async with edge.client(edge.token(subject=user, agent=agent)) as client:
        waiting = await send(client, text_message("Restart checkout"))
    short = edge.token(subject=user, agent=agent, lifetime_seconds=3)
    async with _raw_subscription(edge, short, waiting.id) as response:
        assert response.status_code == 200
        events = await sse_events(response)
    assert "task" in events[0][1]["result"]
    name, last = events[-1]
    assert name == "error" and last["error"]["data"][0]["reason"] == "TOKEN_EXPIRED"


async def test_open_subscriptions_are_capped_per_principal(edge: Edge) -> None:
    """Eight open subscriptions of one principal (the default cap); the ninth is a 429 with
    Retry-After and the JSON-RPC body, answered through Envoy untouched."""
    user, agent = unique("user"), unique("agent")
    token = edge.token(subject=user, agent=agent)
    async with edge.client(token) as client:
        tasks = [await send(client, text_message("Restart checkout")) for _ in range(9)]
    async with contextlib.AsyncExitStack() as stack:
        readers = []  # kept: a line reader closes its stream when it is collected
        for task in tasks[:8]:
            response = await stack.enter_async_context(_raw_subscription(edge, token, task.id))
            assert response.status_code == 200
            readers.append(response.aiter_lines())
            async for line in readers[-1]:
                if line.startswith("data: "):
                    break  # attached
        refused = await edge.rpc(token, "SubscribeToTask", {"id": tasks[8].id})
    assert refused.status_code == 429
    assert refused.headers["retry-after"] == "5"
    assert refused.json()["error"]["data"][0]["reason"] == "TOO_MANY_SUBSCRIPTIONS"
