"""Shared test plumbing: real services, or a clear skip — never a fake.

Tests that need PostgreSQL or Redis use the `redis_url` / `database_url` fixtures. When the service
is not reachable they skip with the reason, except when `ORRERY_TEST_REQUIRE_SERVICES=1` (set by
`.ci/run`), where an absent service fails the test instead: CI must not go green by skipping.

The suite runs in parallel under pytest-xdist (`scripts/test` starts workers; docs/testing.md
has the rules). Each worker gets a Redis database of its own (`redis_url_for_worker`); a module
runs whole on one worker, so a module-scoped fixture is set up once, not once per worker.
"""

from __future__ import annotations

import gc
import os
import socket
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import pytest
from hypothesis import HealthCheck, settings


def redis_url_for_worker(base: str, worker: str | None) -> str:
    """The Redis URL of one xdist worker: `base`'s database for the first (and for a run without
    workers), the one below it for the next, and so on — `redis_url` flushes its database, so two
    workers never share one. With the default db 15, workers gw0…gw15 use dbs 15…0."""
    if not worker:
        return base
    index = int(worker.removeprefix("gw"))
    parts = urlsplit(base)
    path = parts.path.strip("/")
    db = (int(path) if path else 0) - index
    if db < 0:
        raise pytest.UsageError(
            f"ORRERY_TEST_REDIS_URL={base} leaves no Redis database for xdist worker {worker} "
            "(worker N uses the URL's db minus N): give a higher db or fewer workers"
        )
    return urlunsplit(parts._replace(path=f"/{db}"))


REDIS_URL = redis_url_for_worker(
    os.environ.get("ORRERY_TEST_REDIS_URL", "redis://127.0.0.1:6379/15"),
    os.environ.get("PYTEST_XDIST_WORKER"),
)
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
    """A Redis database for one test, flushed before and after (db 15 by default; one per xdist
    worker, `redis_url_for_worker`)."""
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


# Whole layers that start Envoy, the stack, containers or outside tools: `slow` without a mark.
SLOW_LAYERS = ("tests/e2e/", "tests/docker/", "tests/deploy/")
SLOW_MARKERS = ("envoy", "e2e", "docker")


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Marks what `-m 'not slow'` leaves out; on xdist workers, hands out the longest first.

    `slow`: every test of tests/e2e, tests/docker and tests/deploy, and every test marked envoy,
    e2e or docker (modules elsewhere that start processes carry the mark themselves).

    scripts/test distributes whole modules (`--dist loadfile`), so a module-scoped fixture (a
    stack, an Envoy, a compose project) starts once. With `--no-loadscope-reorder` xdist hands
    the modules out in the order the workers collected them: here, containers first, then the
    other slow modules, then the rest (a stable sort, so the order within each kind stays), and
    the long ones overlap with the many short ones instead of keeping one worker busy after the
    others are done. (Without that flag xdist sorts modules by their number of tests, which puts
    a long module of few tests last.)"""
    for item in items:
        if item.nodeid.startswith(SLOW_LAYERS) or any(
            item.get_closest_marker(name) is not None for name in SLOW_MARKERS
        ):
            item.add_marker(pytest.mark.slow)
    if hasattr(config, "workerinput"):  # an xdist worker
        items.sort(key=_longest_first)


def _longest_first(item: pytest.Item) -> int:
    if item.get_closest_marker("docker") is not None:
        return 0
    return 1 if item.get_closest_marker("slow") is not None else 2


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
