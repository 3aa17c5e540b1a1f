"""Long SSE streams through Envoy: silence is bounded, so a waiting stream sends keep-alives.

Envoy closes a stream that is silent for its idle timeout (300 s in envoy/envoy.yaml). On the
slow edge the same file is rendered with request and stream idle timeouts of 2 s and the adapter
sends a keep-alive comment every 200 ms: a stream waiting on a slow turn for several idle
timeouts survives, while a blocking call that is silent as long is cut by Envoy.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.e2e.conftest import SlowEdge
from tests.e2e.edge import JSONRPC_HEADERS, bearer, jsonrpc, message_params, unique

pytestmark = [pytest.mark.envoy, pytest.mark.e2e]

# 20 keep-alives at 200 ms: four seconds of a turn saying nothing, twice Envoy's idle and
# request timeouts on this edge.
KEEPALIVES = 20


async def test_a_waiting_stream_outlives_envoys_idle_timeout(slow_edge: SlowEdge) -> None:
    """SendStreamingMessage on a held turn keeps receiving `: keep-alive` past every timeout
    but max_stream_duration, then ends with the reply when the turn ends."""
    edge, hold = slow_edge.edge, unique("long")
    token = edge.token(subject=unique("user"))
    body = jsonrpc("SendStreamingMessage", message_params(f"hold {hold}"))
    lines: list[str] = []
    async with (
        httpx.AsyncClient(timeout=60) as http,
        http.stream(
            "POST", f"{edge.url}/a2a", json=body, headers={**JSONRPC_HEADERS, **bearer(token)}
        ) as response,
    ):
        assert response.status_code == 200
        async for line in response.aiter_lines():
            lines.append(line)
            if lines.count(": keep-alive") == KEEPALIVES:
                slow_edge.release(hold)
    events = [json.loads(line.removeprefix("data: ")) for line in lines if line.startswith("data:")]
    assert [next(iter(event["result"])) for event in events] == [
        "task",
        "artifactUpdate",
        "statusUpdate",
    ]
    assert events[-1]["result"]["statusUpdate"]["status"]["state"] == "TASK_STATE_COMPLETED"


async def test_a_silent_response_is_cut_at_the_idle_timeout(slow_edge: SlowEdge) -> None:
    """The control: a blocking SendMessage on a held turn sends nothing while it waits, and
    Envoy ends it at the (2 s) idle timeout — the timeouts the stream above outlived are live."""
    edge, hold = slow_edge.edge, unique("silent")
    try:
        response = await edge.rpc(
            edge.token(subject=unique("user")), "SendMessage", message_params(f"hold {hold}")
        )
    finally:
        slow_edge.release(hold)
    assert response.status_code == 504
    assert response.json()["error"] == "timeout"  # Envoy's own answer (flag SI), not the adapter's
    await edge.turns_finished()
