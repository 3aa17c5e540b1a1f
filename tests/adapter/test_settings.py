"""Adapter settings from the environment: defaults, every bad variable named, multi-replica."""

from __future__ import annotations

import pytest

from adapter.messages import MAX_BODY_BYTES
from adapter.settings import AdapterSettings
from runtime.errors import ConfigError
from tests.adapter.conftest import KEYS_SPEC


def test_defaults() -> None:
    """Only the assertion keys are required; the rest has the defaults of docs/contract.md."""
    settings = AdapterSettings.from_env({"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC})
    assert settings.addr == ("127.0.0.1", 8081)
    assert settings.max_in_flight == 4
    assert settings.public_url == "http://127.0.0.1:8080/a2a"
    assert settings.database_url is None and settings.redis_url is None
    assert settings.gateway is None and settings.multi_replica is False
    assert (settings.task_idle_ttl, settings.max_tasks) == (3600.0, 10000)
    assert settings.sse_keepalive == 15.0
    assert settings.diag_addr is None  # probes stay on the A2A socket unless asked


def test_keep_alive_interval_takes_a_duration_with_a_floor() -> None:
    """ORRERY_A2A_SSE_KEEPALIVE takes ms/s; below 100 ms is refused by name."""
    base = {"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC}
    settings = AdapterSettings.from_env({**base, "ORRERY_A2A_SSE_KEEPALIVE": "250ms"})
    assert settings.sse_keepalive == 0.25
    with pytest.raises(ConfigError, match="ORRERY_A2A_SSE_KEEPALIVE"):
        AdapterSettings.from_env({**base, "ORRERY_A2A_SSE_KEEPALIVE": "10ms"})


def test_every_bad_variable_is_named_together() -> None:
    """One error names each bad variable, without echoing secrets."""
    with pytest.raises(ConfigError) as caught:
        AdapterSettings.from_env(
            {
                "ORRERY_A2A_MAX_IN_FLIGHT": "0",
                "DATABASE_URL": "mysql://user:hunter2@db/x",
                "ORRERY_A2A_GATEWAY": "not a factory",
                "ORRERY_A2A_DB_SCHEMA": "Robert'); DROP",
            }
        )
    text = str(caught.value)
    for name in (
        "ORRERY_A2A_ASSERTION_KEYS",
        "ORRERY_A2A_MAX_IN_FLIGHT",
        "DATABASE_URL",
        "ORRERY_A2A_GATEWAY",
        "ORRERY_A2A_DB_SCHEMA",
    ):
        assert name in text
    assert "hunter2" not in text


def test_multi_replica_refuses_unshared_stores() -> None:
    """ORRERY_MULTI_REPLICA=true without shared stores names what is missing."""
    with pytest.raises(ConfigError) as caught:
        AdapterSettings.from_env(
            {"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC, "ORRERY_MULTI_REPLICA": "true"}
        )
    problems = " ".join(caught.value.problems)
    assert "DATABASE_URL" in problems and "ORRERY_A2A_REDIS_URL" in problems


def test_multi_replica_with_shared_stores_is_accepted() -> None:
    """With PostgreSQL and Redis configured, multi-replica starts."""
    settings = AdapterSettings.from_env(
        {
            "ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC,
            "ORRERY_MULTI_REPLICA": "true",
            "DATABASE_URL": "postgresql://postgres@127.0.0.1/test",
            "ORRERY_A2A_REDIS_URL": "redis://127.0.0.1:6379/0",
        }
    )
    assert settings.multi_replica and settings.shared_stores


def test_the_body_cap_never_refuses_a_legal_message() -> None:
    """ORRERY_A2A_MAX_BODY_BYTES defaults to, and may not go below, the body of the longest legal
    message in the worst escaping (messages.MAX_BODY_BYTES, Envoy's cap too)."""
    base = {"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC}
    assert AdapterSettings.from_env(base).max_body_bytes == MAX_BODY_BYTES
    larger = {**base, "ORRERY_A2A_MAX_BODY_BYTES": str(4 * MAX_BODY_BYTES)}
    assert AdapterSettings.from_env(larger).max_body_bytes == 4 * MAX_BODY_BYTES
    with pytest.raises(ConfigError, match="ORRERY_A2A_MAX_BODY_BYTES"):
        AdapterSettings.from_env({**base, "ORRERY_A2A_MAX_BODY_BYTES": str(MAX_BODY_BYTES - 1)})


def test_the_diagnostics_address_is_opt_in_and_never_the_a2a_address() -> None:
    """ORRERY_A2A_ADAPTER_DIAG_ADDR parses as an address; the A2A address itself is refused."""
    base = {"ORRERY_A2A_ASSERTION_KEYS": KEYS_SPEC, "ORRERY_A2A_ADAPTER_ADDR": "0.0.0.0:8081"}
    settings = AdapterSettings.from_env({**base, "ORRERY_A2A_ADAPTER_DIAG_ADDR": "0.0.0.0:9193"})
    assert settings.diag_addr == ("0.0.0.0", 9193)
    for bad in ("0.0.0.0:8081", "9193"):
        with pytest.raises(ConfigError, match="ORRERY_A2A_ADAPTER_DIAG_ADDR"):
            AdapterSettings.from_env({**base, "ORRERY_A2A_ADAPTER_DIAG_ADDR": bad})
