"""Liveness, readiness and Prometheus metrics."""

from __future__ import annotations

import logging

import pytest

from adapter.app import PROBES
from adapter.metrics import Metrics
from tests.adapter.conftest import Server, delegated, running


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


def test_request_latency_buckets_reach_an_hour_long_stream() -> None:
    """A stream is timed until it ends (Envoy allows an hour): it lands in a bucket of its own
    size, not in +Inf with everything past 10 s."""
    metrics = Metrics()
    metrics.observe("SendStreamingMessage", "ok", 1800.0)
    text = metrics.render().decode()
    bucket = 'orrery_a2a_request_seconds_bucket{{le="{}",method="SendStreamingMessage"}}'
    assert f"{bucket.format('900.0')} 0.0" in text
    assert f"{bucket.format('3600.0')} 1.0" in text


async def test_a_stopping_adapter_is_not_ready() -> None:
    """Once a stop begins (the drain), readiness says so, so a load balancer stops sending new
    requests while open streams finish."""
    async with running() as server:
        probes = server.app[PROBES]
        assert (await probes.readiness()).ready
        await server.app.shutdown()
        readiness = await probes.readiness()
    assert not readiness.ready
    assert readiness.checks == {"serving": "stopping"}  # at once: the stores are not asked
