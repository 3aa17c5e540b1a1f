"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import logging

import pytest

from tests.adapter.conftest import Server, delegated


async def test_healthz_and_readyz(server: Server) -> None:
    """Liveness is ok; readiness checks every store (memory here)."""
    async with server.http(None) as http:
        assert (await http.get("/healthz")).json() == {"status": "ok"}
        ready = await http.get("/readyz")
    assert ready.status_code == 200 and ready.json()["status"] == "ready"


async def test_request_log_event_carries_ids_but_no_credentials(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    """One a2a_request event: principal key, request id, a valid trace link; no assertion."""
    traceparent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    caplog.set_level(logging.INFO, logger="adapter.a2a")
    headers = {"x-orrery-trace-link": traceparent}
    await server.rpc(delegated(), "GetTask", {"id": "missing"}, headers=headers)
    await server.rpc(
        delegated(),
        "GetTask",
        {"id": "missing"},
        headers={"x-orrery-trace-link": "not-a-traceparent"},
    )
    events = [r for r in caplog.records if r.getMessage() == "a2a_request"]
    fields = [vars(r)["orrery_fields"] for r in events]
    assert fields[0]["principal"] == delegated().key
    assert fields[0]["trace_link"] == traceparent and fields[1]["trace_link"] is None
    assert fields[0]["outcome"] == "TASK_NOT_FOUND" and fields[0]["request_id"]
    assert all("eyJ" not in str(f) for f in fields)


async def test_metrics_count_requests_by_method_and_outcome(server: Server) -> None:
    """Requests, outcomes, turns in flight, tasks stored and approvals pending are exported."""
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
    assert "orrery_a2a_approvals_pending 0.0" in text
