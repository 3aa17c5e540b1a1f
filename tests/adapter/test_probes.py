"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

from tests.adapter.conftest import Server, delegated


async def test_healthz_and_readyz(server: Server) -> None:
    """Liveness is ok; readiness checks every store (memory here)."""
    async with server.http(None) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


async def test_metrics_count_requests_by_method_and_outcome(server: Server) -> None:
    """Requests, outcomes, turns in flight and tasks stored are exported."""
    await server.rpc(
        delegated(),
        "SendMessage",
        {"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
    )
    await server.rpc(delegated(), "GetTask", {"id": "missing"})
    await server.rpc(None, "GetTask", {"id": "missing"})
    await server.rpc(delegated(), "NoSuchMethod", {})
    async with server.http(None) as http:
        text = (await http.get("/metrics")).text
    assert 'orrery_a2a_requests_total{method="SendMessage",outcome="ok"} 1.0' in text
    assert 'orrery_a2a_requests_total{method="GetTask",outcome="TASK_NOT_FOUND"} 1.0' in text
    assert 'orrery_a2a_requests_total{method="unknown",outcome="assertion_invalid"} 1.0' in text
    assert 'orrery_a2a_requests_total{method="unknown",outcome="METHOD_NOT_FOUND"} 1.0' in text
    assert "orrery_a2a_turns_in_flight 0.0" in text
    assert "orrery_a2a_tasks_stored 1.0" in text
