"""Unauthenticated work is bounded per client address, before authz.

A token with a published `kid` and a random signature costs authz a full signature check and
Envoy a Check round trip. Envoy gives each client address (the TCP peer: a client's own
x-forwarded-for is ignored) a token bucket in front of authz (docs/contract.md#envoys-answers),
so one address flooding forged tokens spends only its own budget: past it Envoy answers 429
`address_rate_limited` without asking authz, and a caller from another address is served
meanwhile. Each test floods from a loopback address of its own, so no other test's budget is
touched.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections import Counter

import httpx
import pytest

from tests.e2e.conftest import TUNED_CLIENT_RATE, TunedEdge
from tests.e2e.edge import JSONRPC_HEADERS, Edge, bearer, jsonrpc, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

FLOODER, CALLER = "127.0.0.3", "127.0.0.4"
LIST_TASKS = jsonrpc("ListTasks", {})


def _forged(edge: Edge) -> str:
    """A real token's header and claims (a published kid) with a random signature."""
    header, payload, _ = edge.token(subject=unique("victim")).split(".")
    signature = base64.urlsafe_b64encode(os.urandom(64)).rstrip(b"=").decode()
    return f"{header}.{payload}.{signature}"


def _client(source: str) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(local_address=source)
    return httpx.AsyncClient(transport=transport, timeout=60)


async def _flood(edge: Edge, token: str, total: int, concurrency: int) -> list[httpx.Response]:
    """`total` forged-token requests from FLOODER, `concurrency` at a time, each claiming
    another x-forwarded-for."""
    responses: list[httpx.Response] = []
    queue = iter(range(total))
    async with _client(FLOODER) as http:

        async def worker() -> None:
            for n in queue:
                headers = {
                    **JSONRPC_HEADERS,
                    **bearer(token),
                    "x-forwarded-for": f"198.51.100.{n % 250}",
                }
                responses.append(
                    await http.post(f"{edge.url}/a2a", json=LIST_TASKS, headers=headers)
                )

        await asyncio.gather(*(worker() for _ in range(concurrency)))
    return responses


async def test_a_flood_from_one_address_is_refused_before_authz_and_others_are_served(
    tuned_edge: TunedEdge,
) -> None:
    """Past its bucket (20 a second, 20 at once on this edge: ORRERY_A2A_CLIENT_RATE_LIMIT and
    _BURST through `up`) the flooding address gets Envoy's 429 (JSON, Retry-After, request id;
    authz never asked); authz sees at most the bucket plus its refill; a caller from another
    address is served throughout."""
    edge = tuned_edge.edge
    rate, burst = TUNED_CLIENT_RATE
    token = _forged(edge)
    started = time.monotonic()
    flood = asyncio.ensure_future(_flood(edge, token, total=400, concurrency=16))
    served = []
    async with _client(CALLER) as http:
        while not flood.done():
            response = await http.post(
                f"{edge.url}/a2a",
                json=LIST_TASKS,
                headers={**JSONRPC_HEADERS, **bearer(edge.token(subject=unique("user")))},
            )
            served.append(response.status_code)
            await asyncio.sleep(0.1)  # a well-behaved caller, below its own budget
    responses = await flood
    elapsed = time.monotonic() - started
    statuses = Counter(response.status_code for response in responses)
    assert set(statuses) == {401, 429}, statuses
    assert statuses[401] <= burst + rate * elapsed + 1
    assert set(served) == {200}
    refused = next(response for response in responses if response.status_code == 429)
    assert refused.json()["error"] == "address_rate_limited"
    assert refused.headers["retry-after"] == "1"
    request_id = refused.headers["x-request-id"]
    logged = await edge.access(request_id)
    assert (logged["client"], logged["details"]) == (FLOODER, "local_rate_limited")
    assert not [e for e in edge.events("authz", "decision") if e["request_id"] == request_id]
