"""One structured log event per decision (never a credential) and the Prometheus metrics."""

from __future__ import annotations

import asyncio
import io
import json
import logging

import pytest

from runtime import logs
from runtime.version import version
from tests.authz.support import Issuer, RunningAuthz, SigningKey, fetch


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


@pytest.mark.parametrize(
    ("label", "logged"), [(None, "a2a"), ("approvals", "approvals"), ("admin", "admin")]
)
async def test_the_decision_names_the_surface_it_decided_for(
    authz: RunningAuthz,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
    label: str | None,
    logged: str,
) -> None:
    """An unlabelled route is the A2A surface; a label we do not know is logged as given."""
    with caplog.at_level(logging.INFO, logger="authz.decision"):
        await authz.check(token=issuer.token(), surface=label)
    assert [event["surface"] for event in decision_events(caplog)] == [logged]


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


async def test_metrics_are_exposed(authz: RunningAuthz, issuer: Issuer) -> None:
    """/metrics on the diagnostics address shows decisions by reason, latency, cache hits, JWKS
    loads, the build and the process; no Redis gauge without Redis, no `_created` series."""
    token = issuer.token()
    await authz.check(token=token)
    await authz.check(token=token)
    await authz.check()
    url = f"http://{authz.bound.diag}/metrics"
    body = await asyncio.to_thread(fetch, url)
    assert 'orrery_authz_decisions_total{decision="allow",reason="ok"} 2.0' in body
    assert 'orrery_authz_decisions_total{decision="deny",reason="missing_credential"} 1.0' in body
    assert "orrery_authz_check_duration_seconds_count 3.0" in body
    assert 'orrery_authz_token_cache_total{result="hit"} 1.0' in body
    assert 'orrery_authz_token_cache_total{result="miss"} 1.0' in body
    assert 'orrery_authz_jwks_refresh_total{outcome="updated"} 1.0' in body
    assert "orrery_authz_jwks_keys 4.0" in body
    assert "orrery_authz_jwks_usable 1.0" in body
    assert "orrery_authz_ratelimit_redis_up" not in body
    assert f'orrery_authz_build_info{{version="{version()}"}} 1.0' in body
    assert "process_resident_memory_bytes " in body
    assert "_created" not in body


def isolated_logger(name: str) -> tuple[logging.Logger, io.StringIO]:
    """A logger outside the global tree whose only destination is a JsonLinesHandler."""
    stream = io.StringIO()
    logger = logging.Logger(name, logging.INFO)
    logger.propagate = False
    logger.addHandler(logs.JsonLinesHandler(stream))
    return logger, stream


def test_direct_event_line_is_the_formatter_line() -> None:
    """The fast path writes exactly what JsonFormatter would, member for member, in order."""
    logger, stream = isolated_logger("t.direct")
    logs.event(logger, "decision", reason="ok", ms=0.5, principal=None)
    direct = json.loads(stream.getvalue())
    record = logger.makeRecord(
        logger.name,
        logging.INFO,
        "",
        0,
        "decision",
        (),
        None,
        extra={"orrery_fields": {"reason": "ok", "ms": 0.5, "principal": None}},
    )
    formatted = json.loads(logs.JsonFormatter().format(record))
    assert list(direct) == list(formatted)
    assert {k: v for k, v in direct.items() if k != "ts"} == {
        k: v for k, v in formatted.items() if k != "ts"
    }


def test_any_other_destination_takes_the_ordinary_path() -> None:
    """With a second handler (or a filter) every handler still receives the event."""
    logger, stream = isolated_logger("t.ordinary")
    seen: list[logging.LogRecord] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    logger.addHandler(Collect())
    logs.event(logger, "decision", reason="ok")
    assert json.loads(stream.getvalue())["reason"] == "ok"
    assert [record.getMessage() for record in seen] == ["decision"]


def test_levels_still_apply_on_the_direct_path() -> None:
    """An event below the logger's level is not written."""
    logger, stream = isolated_logger("t.level")
    logger.setLevel(logging.WARNING)
    logs.event(logger, "decision", reason="ok")
    assert stream.getvalue() == ""
