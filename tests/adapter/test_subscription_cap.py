"""The per-principal cap on open `SubscribeToTask` streams (`ORRERY_A2A_MAX_SUBSCRIPTIONS`).

A subscription to a waiting task may stay open for as long as the task waits (and, with shared
stores, polls PostgreSQL while it does), so one principal's streams are capped like its turns:
over the cap, HTTP 429 with `Retry-After` and the same JSON-RPC body shape as the in-flight
refusal (reason `TOO_MANY_SUBSCRIPTIONS`), before anything is read; shared through Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.adapter.conftest import (
    Server,
    assertion_headers,
    delegated,
    message_params,
    running,
)

ALICE_BOT = delegated("bot", "alice")
OTHER_BOT = delegated("bot-2", "alice")
CAP = {"ORRERY_A2A_MAX_SUBSCRIPTIONS": "2"}


async def waiting_task(server: Server, principal: Any = ALICE_BOT) -> str:
    """A task left input-required (its subscription stays open until it ends)."""
    response = await server.rpc(principal, "SendMessage", message_params("restart checkout"))
    return str(response.json()["result"]["task"]["id"])


@contextlib.asynccontextmanager
async def subscribed(
    server: Server, task_id: str, principal: Any = ALICE_BOT
) -> AsyncIterator[httpx.Response]:
    """An open SubscribeToTask stream, at its first event; closed on exit."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "SubscribeToTask", "params": {"id": task_id}}
    headers = {"A2A-Version": "1.0", **assertion_headers(principal)}
    async with (
        httpx.AsyncClient(base_url=server.base, timeout=60) as http,
        http.stream("POST", "/a2a", json=body, headers=headers) as response,
    ):
        assert response.status_code == 200
        lines = response.aiter_lines()
        async for line in lines:
            if line.startswith("data: "):
                break
        yield response


async def subscribe_once(server: Server, task_id: str, principal: Any = ALICE_BOT) -> Any:
    """One SubscribeToTask whose answer is not a stream (a refusal): an open stream instead
    fails the test after 10 s."""
    call = server.rpc(principal, "SubscribeToTask", {"id": task_id})
    return await asyncio.wait_for(call, timeout=10)


async def test_over_the_cap_is_429_with_retry_after_and_a_jsonrpc_body() -> None:
    """The third open subscription of one principal: 429, Retry-After, TOO_MANY_SUBSCRIPTIONS."""
    async with running(CAP) as server:
        tasks = [await waiting_task(server) for _ in range(3)]
        async with subscribed(server, tasks[0]), subscribed(server, tasks[1]):
            response = await subscribe_once(server, tasks[2])
        assert response.status_code == 429
        assert response.headers["Retry-After"] == "5"
        body = response.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["code"] == -32000
        info = body["error"]["data"][0]
        assert (info["reason"], info["domain"]) == ("TOO_MANY_SUBSCRIPTIONS", "orrery-a2a")
        assert info["metadata"] == {"limit": "2", "retry_after": "5"}


async def test_a_closed_subscription_frees_its_place() -> None:
    """Once a stream is closed by its client, another subscription fits."""
    async with running(CAP) as server:
        tasks = [await waiting_task(server) for _ in range(3)]
        async with subscribed(server, tasks[0]):
            async with subscribed(server, tasks[1]):
                pass
            for _ in range(200):  # the server notices the closed stream, then lets go
                response = await subscribe_once(server, "no-such-task")
                if response.status_code == 200:
                    break
                await asyncio.sleep(0.05)
            async with subscribed(server, tasks[2]):
                pass


async def test_the_cap_is_per_principal_and_apart_from_turns() -> None:
    """Another agent of the same user has its own cap; turns are not subscriptions."""
    async with running({**CAP, "ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        mine = [await waiting_task(server) for _ in range(2)]
        theirs = await waiting_task(server, OTHER_BOT)
        async with subscribed(server, mine[0]), subscribed(server, mine[1]):
            async with subscribed(server, theirs, OTHER_BOT):
                pass
            assert (await waiting_task(server)) != ""  # a turn still runs


async def test_a_refused_subscription_keeps_no_place() -> None:
    """Subscriptions the SDK refuses (unknown task) give their place back at once."""
    async with running({"ORRERY_A2A_MAX_SUBSCRIPTIONS": "1"}) as server:
        for _ in range(5):
            response = await subscribe_once(server, "no-such-task")
            assert json.loads(response.text)["error"]["code"] == -32001


@pytest.mark.redis
async def test_the_cap_is_shared_between_replicas_through_redis(redis_url: str) -> None:
    """With ORRERY_A2A_REDIS_URL, a subscription on one replica counts on the other."""
    env = {"ORRERY_A2A_REDIS_URL": redis_url, "ORRERY_A2A_MAX_SUBSCRIPTIONS": "1"}
    async with running(env) as one, running(env) as two:
        task = await waiting_task(one)
        other_task = await waiting_task(two)
        async with subscribed(one, task):
            response = await subscribe_once(two, other_task)
            assert response.status_code == 429
            assert response.json()["error"]["data"][0]["reason"] == "TOO_MANY_SUBSCRIPTIONS"
