"""Shared test plumbing: real services, or a clear skip — never a fake.

Tests that need PostgreSQL or Redis use the `redis_url` / `database_url` fixtures. When the service
is not reachable they skip with the reason, except when `ORRERY_TEST_REQUIRE_SERVICES=1` (set by
`.ci/run`), where an absent service fails the test instead: CI must not go green by skipping.
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest
from hypothesis import HealthCheck, settings

REDIS_URL = os.environ.get("ORRERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")
DATABASE_URL = os.environ.get(
    "ORRERY_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test"
)


# Property-based tests: CI runs a bounded number of examples from a fixed seed (fast, the same
# every run); `pytest --hypothesis-profile=deep` explores many more, randomly.
settings.register_profile(
    "ci",
    max_examples=250,
    derandomize=True,
    database=None,
    deadline=None,  # signing with RSA on a shared, loaded machine has no stable timing
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep", max_examples=5000, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile("ci")


def services_required() -> bool:
    return os.environ.get("ORRERY_TEST_REQUIRE_SERVICES") == "1"


def _reachable(url: str, default_port: int) -> bool:
    parts = urlsplit(url)
    try:
        with socket.create_connection(
            (parts.hostname or "127.0.0.1", parts.port or default_port), 1
        ):
            return True
    except OSError:
        return False


def require_service(name: str, url: str, default_port: int) -> str:
    """Return `url` if the service answers; otherwise skip (or fail when services are required)."""
    if _reachable(url, default_port):
        return url
    message = f"{name} is not reachable at {url}"
    if services_required():
        pytest.fail(
            f"{message} (ORRERY_TEST_REQUIRE_SERVICES=1: service-backed tests are mandatory)"
        )
    pytest.skip(f"{message}; start it to run this test")


@pytest.fixture
def redis_url() -> Iterator[str]:
    """A Redis database for one test, flushed before and after (db 15 by default)."""
    url = require_service("Redis", REDIS_URL, 6379)
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()
    client.close()


@pytest.fixture
def database_url() -> str:
    """The PostgreSQL test database (tests create their own schema or tables and drop them)."""
    return require_service("PostgreSQL", DATABASE_URL, 5432)


@pytest.fixture(autouse=True)
def _collect_garbage() -> Iterator[None]:
    """Collect garbage after each test, so a socket or transport it left open warns (and fails)
    in that test, not in whichever later one the collector happens to run in.

    What survives is then frozen (moved out of the collector's sight), so each collection scans
    only what the last test made: a full collection over the whole session's heap after every
    test doubled the suite's time."""
    yield
    gc.collect()
    gc.freeze()
