"""The plumbing that lets the suite run on pytest-xdist workers (tests/conftest.py)."""

from __future__ import annotations

import pytest

from tests.conftest import redis_url_for_worker


@pytest.mark.parametrize(
    ("worker", "expected"),
    [
        (None, "redis://127.0.0.1:6379/15"),
        ("", "redis://127.0.0.1:6379/15"),
        ("gw0", "redis://127.0.0.1:6379/15"),
        ("gw1", "redis://127.0.0.1:6379/14"),
        ("gw15", "redis://127.0.0.1:6379/0"),
    ],
)
def test_each_worker_gets_a_redis_database_of_its_own(worker: str | None, expected: str) -> None:
    """No workers or the first: the URL's db; worker N: N below it (the fixture flushes it)."""
    assert redis_url_for_worker("redis://127.0.0.1:6379/15", worker) == expected


def test_a_url_without_a_database_counts_as_db_0_and_keeps_the_rest() -> None:
    """A password and options survive; only the database changes."""
    base = "redis://:secret@127.0.0.1:6380?socket_timeout=5"
    assert redis_url_for_worker(base, "gw0") == "redis://:secret@127.0.0.1:6380/0?socket_timeout=5"


def test_a_worker_below_db_0_is_a_usage_error_not_a_shared_database() -> None:
    """Too many workers for the URL's db: refused at start, never a db another worker flushes."""
    with pytest.raises(pytest.UsageError, match="no Redis database for xdist worker gw2"):
        redis_url_for_worker("redis://127.0.0.1:6379/1", "gw2")
