"""One structured log event per decision (never a credential) and the Prometheus metrics."""

from __future__ import annotations

import asyncio
import json
import logging
import urllib.request

import pytest

from authz import logs
from tests.authz.support import Issuer, RunningAuthz, SigningKey


def decision_events(caplog: pytest.LogCaptureFixture) -> list[dict[str, object]]:
    formatter = logs.JsonFormatter()
    return [
        json.loads(formatter.format(record))
        for record in caplog.records
        if record.name == "authz.decision"
    ]


async def test_one_log_event_per_decision(
    authz: RunningAuthz, issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    """Each Check logs exactly one `decision` event with the fields operators join on."""
    token = issuer.token()
    with caplog.at_level(logging.INFO, logger="authz.decision"):
        await authz.check(token=token, request_id="rid-allow", path="/a2a?secret=1")
        await authz.check({"x-orrery-hop": "1"}, request_id="rid-deny")
    allow, deny = decision_events(caplog)
    assert allow["event"] == "decision"
    assert {k: allow[k] for k in ("decision", "reason", "status", "surface", "request_id")} == {
        "decision": "allow",
        "reason": "ok",
        "status": 200,
        "surface": "a2a",
        "request_id": "rid-allow",
    }
    assert allow["principal"] == "service:svc-reporter::svc-reporter"
    assert allow["path"] == "/a2a"
    assert isinstance(allow["ms"], float)
    assert (deny["decision"], deny["reason"], deny["status"]) == ("deny", "loop_detected", 508)
    assert deny["principal"] is None


async def test_logs_never_contain_the_token_or_the_assertion(
    authz: RunningAuthz, issuer: Issuer, caplog: pytest.LogCaptureFixture
) -> None:
    """Neither an accepted nor a refused token, nor the signed assertion, reaches the log."""
    good, expired = issuer.token(), issuer.token(exp=1)
    with caplog.at_level(logging.DEBUG):
        response = await authz.check(token=good)
        await authz.check(token=expired)
        await authz.check(token=issuer.token(key=SigningKey("nope", "ES256", issuer.key.private)))
    text = "\n".join(logs.JsonFormatter().format(record) for record in caplog.records)
    assertion = response.ok_response.headers[0].header.value
    for secret in (good, expired, assertion):
        for part in secret.split("."):
            assert part not in text


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=10) as response:  # noqa: S310 - our http URL
        return str(response.read().decode())


async def test_metrics_are_exposed(authz: RunningAuthz, issuer: Issuer) -> None:
    """/metrics shows decisions by reason, latency, cache hits and JWKS loads."""
    token = issuer.token()
    await authz.check(token=token)
    await authz.check(token=token)
    await authz.check()
    url = f"http://{authz.bound.metrics}/metrics"
    body = await asyncio.to_thread(fetch, url)
    assert 'orrery_authz_decisions_total{decision="allow",reason="ok"} 2.0' in body
    assert 'orrery_authz_decisions_total{decision="deny",reason="missing_credential"} 1.0' in body
    assert "orrery_authz_check_duration_seconds_count 3.0" in body
    assert 'orrery_authz_token_cache_total{result="hit"} 1.0' in body
    assert 'orrery_authz_token_cache_total{result="miss"} 1.0' in body
    assert 'orrery_authz_jwks_refresh_total{outcome="updated"} 1.0' in body
    assert "orrery_authz_jwks_keys 4.0" in body
    assert "orrery_authz_jwks_usable 1.0" in body
    assert "orrery_authz_ratelimit_redis_up 1.0" in body
