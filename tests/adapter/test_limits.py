"""The per-principal cap on turns in flight, in memory and shared through Redis."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from adapter.app import METRICS
from adapter.errors import LimiterUnavailable, TooManyInFlight
from adapter.limits import IN_FLIGHT, RedisLimiter
from tests.adapter.conftest import Server, delegated, running
from tests.waiting import eventually

ALICE_BOT = delegated("bot", "alice")
OTHER_BOT = delegated("bot-2", "alice")
VERSION = {"A2A-Version": "1.0"}


def send_params(text: str = "how is search?") -> dict[str, Any]:
    parts = [{"text": text}]
    return {"message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": parts}}


async def fill(server: Server, count: int) -> list[asyncio.Task[Any]]:
    """Start `count` turns that stay in flight until the gateway's hold is released."""
    server.gateway.hold = asyncio.Event()
    turns = [
        asyncio.create_task(server.rpc(ALICE_BOT, "SendMessage", send_params()))
        for _ in range(count)
    ]
    while len(server.gateway.turns) < count:
        await asyncio.sleep(0.02)
    return turns


async def test_over_the_cap_is_429_with_retry_after_and_a_jsonrpc_body() -> None:
    """The fifth concurrent turn of one principal gets 429, Retry-After and a JSON-RPC error."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "4"}) as server:
        turns = await fill(server, 4)
        response = await server.rpc(ALICE_BOT, "SendMessage", send_params())
        assert response.status_code == 429
        assert response.headers["Retry-After"] == "1"
        body = response.json()
        assert body["jsonrpc"] == "2.0" and body["id"] is None
        assert body["error"]["code"] == -32000
        assert body["error"]["data"][0]["reason"] == "TOO_MANY_IN_FLIGHT"
        assert body["error"]["data"][0]["metadata"] == {"limit": "4", "retry_after": "1"}
        assert len(server.gateway.turns) == 4  # the refused turn never ran
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
        await asyncio.gather(*turns)
        after = await server.rpc(ALICE_BOT, "SendMessage", send_params())
        assert after.status_code == 200 and "task" in after.json()["result"]


async def test_cap_is_per_principal() -> None:
    """Another agent of the same user has its own cap."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        turns = await fill(server, 1)
        other = asyncio.create_task(server.rpc(OTHER_BOT, "SendMessage", send_params()))
        while len(server.gateway.turns) < 2:
            await asyncio.sleep(0.02)
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
        assert (await other).status_code == 200
        await asyncio.gather(*turns)


async def test_reads_are_not_capped() -> None:
    """GetTask/ListTasks do not take a slot."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        turns = await fill(server, 1)
        assert (await server.rpc(ALICE_BOT, "ListTasks", {})).status_code == 200
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
        await asyncio.gather(*turns)


async def test_return_immediately_keeps_the_slot_until_the_turn_ends() -> None:
    """A non-blocking send answers at once but its turn still counts until it finishes."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        server.gateway.hold = asyncio.Event()
        params = send_params()
        params["configuration"] = {"returnImmediately": True}
        first = await server.rpc(ALICE_BOT, "SendMessage", params)
        assert first.status_code == 200
        assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 429
        server.gateway.hold.set()
        for _ in range(400):
            response = await server.rpc(ALICE_BOT, "SendMessage", send_params())
            if response.status_code == 200:
                break
            await asyncio.sleep(0.05)
        assert response.status_code == 200


async def test_refused_turns_release_their_slot(server: Server) -> None:
    """A turn refused by the SDK (unknown task) does not leak its slot."""
    params = send_params()
    params["message"]["taskId"] = "unknown"
    for _ in range(10):
        response = await server.rpc(ALICE_BOT, "SendMessage", params)
        assert response.json()["error"]["code"] == -32001
    assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 200


def in_flight(server: Server) -> float | None:
    return server.app[METRICS].registry.get_sample_value("orrery_a2a_turns_in_flight")


async def test_a_finished_stream_releases_its_slot() -> None:
    """A streamed turn that ran to its end frees its slot for the next turn."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        streamed = await server.rpc(ALICE_BOT, "SendStreamingMessage", send_params())
        assert "TASK_STATE_COMPLETED" in streamed.text
        assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 200


@pytest.mark.parametrize("method", ["SendMessage", "SendStreamingMessage"])
async def test_a_turn_whose_gateway_fails_releases_its_slot(method: str) -> None:
    """A turn that fails inside the gateway (its task FAILED) frees its slot."""
    async with running({"ORRERY_A2A_MAX_IN_FLIGHT": "1"}) as server:
        server.gateway.error = RuntimeError("the gateway broke")
        failed = await server.rpc(ALICE_BOT, method, send_params())
        assert '"TASK_STATE_FAILED"' in failed.text
        server.gateway.error = None
        for _ in range(400):  # the failed run lets go just after the answer
            if in_flight(server) == 0:
                break
            await asyncio.sleep(0.02)
        assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 200


async def test_a_drained_stream_ends_with_its_stopped_turn_and_frees_its_slot() -> None:
    """At shutdown, once the grace is over, the turn still running ends its task FAILED
    (`adapter_stopped`): the stream's last event says so, and the slot is free."""
    async with running({"ORRERY_A2A_SHUTDOWN_GRACE": "1s"}) as server:
        server.gateway.hold = asyncio.Event()
        call = {"jsonrpc": "2.0", "id": 1, "method": "SendStreamingMessage"}
        async with (
            server.http(ALICE_BOT) as http,
            http.stream(
                "POST", "/a2a", json={**call, "params": send_params()}, headers=VERSION
            ) as response,
        ):
            events = (line async for line in response.aiter_lines() if line.startswith("data:"))
            await anext(events)  # the Task: the turn is under way
            stopping = asyncio.create_task(server.runner.cleanup())
            rest = [json.loads(event.removeprefix("data:")) async for event in events]
            status = rest[-1]["result"]["statusUpdate"]["status"]
            assert status["state"] == "TASK_STATE_FAILED"
            assert status["message"]["metadata"] == {"reason": "adapter_stopped"}
            assert in_flight(server) == 0
        await stopping


@pytest.mark.redis
async def test_redis_cap_is_shared_between_replicas(redis_url: str) -> None:
    """Two limiters on one Redis count one principal's turns together."""
    one, two = RedisLimiter(redis_url, 2), RedisLimiter(redis_url, 2)
    try:
        first = await one.acquire("k")
        await two.acquire("k")
        with pytest.raises(TooManyInFlight):
            await one.acquire("k")
        await first.release()
        await first.release()  # idempotent: frees one slot, not two
        await two.acquire("k")
        with pytest.raises(TooManyInFlight):
            await two.acquire("k")
    finally:
        await one.close()
        await two.close()


async def lease_expiry(redis_url: str, principal_key: str) -> float:
    """When the one in-flight slot of `principal_key` lapses unless renewed (Redis's clock)."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        key = IN_FLIGHT.key_prefix + principal_key
        # redis-py types the reply as every shape zrange can take; withscores: (member, score)
        slots: Any = await client.zrange(key, 0, -1, withscores=True)
    finally:
        await client.aclose()
    ((_, expiry),) = slots
    return float(expiry)


async def redis_passed(redis_url: str, moment: float) -> bool:
    """Whether Redis's clock, the one leases lapse by, is past `moment`."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        seconds, micros = await client.time()
    finally:
        await client.aclose()
    return seconds + micros / 1e6 > moment


@pytest.mark.redis
async def test_redis_slots_of_a_crashed_replica_expire(redis_url: str) -> None:
    """A replica that dies without releasing stops renewing; its slots lapse after one lease."""
    crashed, survivor = RedisLimiter(redis_url, 1, lease=1), RedisLimiter(redis_url, 1, lease=1)
    try:
        await crashed.acquire("k")
        await crashed.close()  # the process is gone: no release, no renewal
        with pytest.raises(TooManyInFlight):
            await survivor.acquire("k")
        expiry = await lease_expiry(redis_url, "k")
        await eventually(lambda: redis_passed(redis_url, expiry))
        slot = await survivor.acquire("k")
        await slot.release()
    finally:
        await survivor.close()


@pytest.mark.redis
async def test_redis_leases_of_a_live_turn_are_renewed(redis_url: str) -> None:
    """A turn longer than the lease keeps its slot while its replica lives."""
    holder, other = RedisLimiter(redis_url, 1, lease=1), RedisLimiter(redis_url, 1, lease=1)
    try:
        slot = await holder.acquire("k")
        first = await lease_expiry(redis_url, "k")
        # A whole lease past the first one's end, on Redis's clock: only renewal keeps the slot.
        await eventually(lambda: redis_passed(redis_url, first + 1))
        with pytest.raises(TooManyInFlight):
            await other.acquire("k")
        await slot.release()
        await (await other.acquire("k")).release()
    finally:
        await holder.close()
        await other.close()


async def test_unreachable_redis_fails_turns_closed_and_keeps_reads_ready() -> None:
    """Redis down: a turn is refused 503 with `Retry-After`; reads still work, so /readyz stays
    200 and names the limiter unavailable."""
    limiter = RedisLimiter("redis://127.0.0.1:1/0", 4)
    try:
        with pytest.raises(LimiterUnavailable):
            await limiter.acquire("k")
    finally:
        await limiter.close()
    async with running({"ORRERY_A2A_REDIS_URL": "redis://127.0.0.1:1/0"}) as server:
        response = await server.rpc(ALICE_BOT, "SendMessage", send_params())
        assert response.status_code == 503
        assert response.json()["error"] == "limiter_unavailable"
        assert response.headers["Retry-After"] == "1"
        listed = await server.rpc(ALICE_BOT, "ListTasks", {})
        assert listed.status_code == 200 and "result" in listed.json()
        async with server.http(None) as http:
            ready = await http.get("/readyz")
        assert ready.status_code == 200
        assert ready.json()["checks"]["limiter"] == "unavailable"


@pytest.mark.redis
async def test_adapter_with_redis_caps_turns(redis_url: str) -> None:
    """End to end with ORRERY_A2A_REDIS_URL: the cap holds and slots come back."""
    async with running(
        {"ORRERY_A2A_REDIS_URL": redis_url, "ORRERY_A2A_MAX_IN_FLIGHT": "1"}
    ) as server:
        turns = await fill(server, 1)
        assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 429
        # the fixture's gateway is the holding fake (RecordingGateway)
        server.gateway.hold.set()  # type: ignore[union-attr]
        await asyncio.gather(*turns)
        assert (await server.rpc(ALICE_BOT, "SendMessage", send_params())).status_code == 200
