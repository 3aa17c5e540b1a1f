"""Per-subject rate limits: GCRA in process, shared in real Redis, and Redis failures bounded."""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest

from authz.limits import REDIS_PREFIX, LocalLimiter
from authz.settings import RateLimitSettings
from tests.authz.support import (
    CONSOLE,
    CONSOLE_CLIENT,
    Issuer,
    RedisProxy,
    RunningAuthz,
    base_env,
    denied,
    fetch,
    ok_headers,
    running_authz,
)
from tests.conftest import services_required
from tests.metrics import metric
from tests.waiting import eventually


def limit_settings(rate: int = 3, period: int = 60, **overrides: object) -> RateLimitSettings:
    values: dict[str, object] = {
        "rate": rate,
        "period": period,
        "burst": rate,
        "max_subjects": 1000,
        "redis_url": None,
        "redis_timeout": 0.1,
        "redis_retry": 5.0,
        "failure_mode": "local",
    }
    values.update(overrides)
    # the overrides are the settings' own fields, of their own types
    return RateLimitSettings(**values)  # type: ignore[arg-type]


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# --- the algorithm (unit, explicit clock) ----------------------------------------------------


def test_burst_then_one_per_interval() -> None:
    """3/minute: three at once, the fourth waits 20 s, then one more is allowed."""
    clock = Clock()
    limiter = LocalLimiter(limit_settings(), clock=clock)
    assert [limiter.take("s").remaining for _ in range(3)] == [2, 1, 0]
    refused = limiter.take("s")
    assert not refused.allowed
    assert refused.retry_after == pytest.approx(20.0)
    clock.now += 20.0
    assert limiter.take("s").allowed
    assert not limiter.take("s").allowed


def test_subjects_have_separate_budgets() -> None:
    """One subject spending its budget does not touch another's."""
    limiter = LocalLimiter(limit_settings(rate=1), clock=Clock())
    assert limiter.take("a").allowed
    assert not limiter.take("a").allowed
    assert limiter.take("b").allowed


def test_burst_can_be_smaller_than_the_rate() -> None:
    """ORRERY_A2A_RATE_BURST=1 spreads 60/minute to one per second."""
    clock = Clock()
    limiter = LocalLimiter(limit_settings(rate=60, burst=1), clock=clock)
    assert limiter.take("s").allowed
    assert not limiter.take("s").allowed
    clock.now += 1.0
    assert limiter.take("s").allowed


def test_memory_is_bounded_and_idle_subjects_go_first() -> None:
    """Many subjects never grow the table past its bound; idle ones are dropped silently."""
    clock = Clock()
    evictions: list[None] = []
    settings = limit_settings(rate=10, period=1, max_subjects=100)
    limiter = LocalLimiter(settings, clock=clock, on_evict=lambda: evictions.append(None))
    for i in range(100):
        limiter.take(f"old-{i}")
    clock.now += 5.0  # every old budget is full again: those entries carry no state
    for i in range(10_000):
        limiter.take(f"new-{i}")
        clock.now += 0.0001
    assert len(limiter) <= 100
    assert len(evictions) == 10_000 - 100  # only live budgets count as evictions


def test_a_busy_subject_survives_a_flood_of_new_ones() -> None:
    """A subject that keeps calling stays at the recently-used end and keeps its limit."""
    clock = Clock()
    limiter = LocalLimiter(limit_settings(rate=5, max_subjects=50), clock=clock)
    for _ in range(5):
        assert limiter.take("busy").allowed
    for i in range(1000):
        limiter.take(f"other-{i}")
        if i % 10 == 0:
            assert not limiter.take("busy").allowed


# --- through the service, in process ---------------------------------------------------------


@pytest.fixture
async def limited(jwks_file: Path) -> AsyncIterator[RunningAuthz]:
    env = {**base_env(jwks_file=jwks_file), "ORRERY_A2A_RATE_LIMIT": "3/minute"}
    async with running_authz(env) as authz:
        yield authz


async def spend(authz: RunningAuthz, token: str, count: int, surface: str | None = None) -> None:
    for _ in range(count):
        assert "x-orrery-principal" in ok_headers(await authz.check(token=token, surface=surface))


async def test_over_the_limit_is_429_with_ietf_headers(
    limited: RunningAuthz, issuer: Issuer
) -> None:
    """The fourth call in a minute is 429 rate_limited with Retry-After and RateLimit fields."""
    token = issuer.token()
    await spend(limited, token, 3)
    refusal = denied(await limited.check(token=token))
    assert (refusal.status, refusal.reason) == (429, "rate_limited")
    assert 1 <= int(refusal.headers["retry-after"]) <= 20
    assert refusal.headers["ratelimit-policy"] == '"subject";q=3;w=60'
    assert refusal.headers["ratelimit"] == f'"subject";r=0;t={refusal.headers["retry-after"]}'


async def test_limit_is_per_subject(limited: RunningAuthz, issuer: Issuer) -> None:
    """Another subject still has its own budget."""
    await spend(limited, issuer.token(sub="one"), 3)
    await spend(limited, issuer.token(sub="two"), 1)


async def test_agents_of_one_user_share_the_subject_limit(
    limited: RunningAuthz, issuer: Issuer
) -> None:
    """Two agents delegated by one user draw on the user's one budget."""
    first = issuer.token(sub="alice", act={"sub": "agent-1"}, roles=["admin"])
    second = issuer.token(sub="alice", act={"sub": "agent-2"}, roles=["admin"])
    await spend(limited, first, 2)
    await spend(limited, second, 1)
    assert denied(await limited.check(token=second)).reason == "rate_limited"


async def test_a_service_named_like_a_user_has_its_own_budget(
    limited: RunningAuthz, issuer: Issuer
) -> None:
    """A service whose sub equals a person's never spends (or is starved by) that person's
    budget: the kind is part of the budget's key."""
    person = issuer.token(sub="alice", act={"sub": "agent"}, roles=["admin"])
    service = issuer.token(sub="alice", client_id="alice", roles=["operator"])
    await spend(limited, person, 3)
    assert denied(await limited.check(token=person)).reason == "rate_limited"
    await spend(limited, service, 3)


async def test_approvals_surface_has_its_own_budget(limited: RunningAuthz, issuer: Issuer) -> None:
    """A human deciding approvals is never starved by their agents' A2A traffic."""
    agent = issuer.token(sub="alice", act={"sub": "agent"}, roles=["admin"])
    human = issuer.token(sub="alice", aud=CONSOLE, client_id=CONSOLE_CLIENT, roles=["admin"])
    await spend(limited, agent, 3)
    assert denied(await limited.check(token=agent)).reason == "rate_limited"
    await spend(limited, human, 1, surface="approvals")


# --- shared in Redis ----------------------------------------------------------------------------


async def test_two_instances_share_one_redis_limit(
    redis_url: str, jwks_file: Path, issuer: Issuer
) -> None:
    """Two authz replicas on one Redis enforce one limit between them."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_RATE_LIMIT": "3/minute",
        "ORRERY_A2A_REDIS_URL": redis_url,
    }
    token = issuer.token(sub="shared")
    async with running_authz(env) as first, running_authz(env) as second:
        await spend(first, token, 2)
        await spend(second, token, 1)
        assert denied(await first.check(token=token)).reason == "rate_limited"
        assert denied(await second.check(token=token)).reason == "rate_limited"
    client = redis.Redis.from_url(redis_url)
    key = REDIS_PREFIX + "a2a:service:shared"
    assert 0 < client.pttl(key) <= 60_000  # the key expires once the budget is full again
    client.close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def with_port(url: str, port: int) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=f"127.0.0.1:{port}"))


async def test_redis_down_falls_back_to_the_local_limit(
    redis_url: str, jwks_file: Path, issuer: Issuer
) -> None:
    """With nothing listening at the Redis address, the same limit is enforced in process, and
    the Redis gauge (present because Redis is configured) says 0."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_RATE_LIMIT": "3/minute",
        "ORRERY_A2A_REDIS_URL": with_port(redis_url, free_port()),
    }
    token = issuer.token()
    async with running_authz(env) as authz:
        await spend(authz, token, 3)
        assert denied(await authz.check(token=token)).reason == "rate_limited"
        body = await asyncio.to_thread(fetch, f"http://{authz.bound.diag}/metrics")
    assert "orrery_authz_ratelimit_redis_up 0.0" in body


async def test_redis_down_with_deny_mode_is_503(
    redis_url: str, jwks_file: Path, issuer: Issuer
) -> None:
    """ORRERY_A2A_REDIS_FAILURE_MODE=deny refuses with 503 limiter_unavailable instead."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_REDIS_URL": with_port(redis_url, free_port()),
        "ORRERY_A2A_REDIS_FAILURE_MODE": "deny",
    }
    async with running_authz(env) as authz:
        refusal = denied(await authz.check(token=issuer.token()))
        assert (refusal.status, refusal.reason) == (503, "limiter_unavailable")


@pytest.fixture
async def proxy(redis_url: str) -> AsyncIterator[RedisProxy]:
    parts = urlsplit(redis_url)
    running = RedisProxy(parts.hostname or "127.0.0.1", parts.port or 6379)
    await running.start()
    yield running
    await running.close()


async def test_hung_redis_never_holds_a_check_past_the_timeout(
    redis_url: str, proxy: RedisProxy, jwks_file: Path, issuer: Issuer
) -> None:
    """A Redis that accepts but never answers costs at most the Redis timeout per breaker cycle.

    The client deadline (2 s, like a short Envoy ext_authz timeout) would fail the RPC if the
    check waited on Redis; it must instead fall back and answer.
    """
    proxy.set_mode("blackhole")
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_RATE_LIMIT": "3/minute",
        "ORRERY_A2A_REDIS_URL": with_port(redis_url, proxy.port),
        "ORRERY_A2A_REDIS_TIMEOUT": "100ms",
    }
    token = issuer.token()
    async with running_authz(env) as authz:
        for _ in range(3):
            response = await authz.stub.Check(_request(token), timeout=2.0)
            assert response.status.code == 0
        response = await authz.stub.Check(_request(token), timeout=2.0)
        assert denied(response).reason == "rate_limited"


def _request(token: str) -> CheckRequest:
    request = CheckRequest()
    request.attributes.request.http.path = "/a2a"
    headers = request.attributes.request.http.headers
    headers["x-request-id"] = "req-1"
    headers["authorization"] = f"Bearer {token}"
    return request


async def test_redis_limiter_recovers_after_the_retry_interval(
    redis_url: str, proxy: RedisProxy, jwks_file: Path, issuer: Issuer
) -> None:
    """After an outage the breaker closes again and Redis holds the budgets once more."""
    env = {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_RATE_LIMIT": "3/minute",
        "ORRERY_A2A_REDIS_URL": with_port(redis_url, proxy.port),
        "ORRERY_A2A_REDIS_RETRY": "200ms",
    }
    client = redis.Redis.from_url(redis_url)
    async with running_authz(env) as authz:
        await spend(authz, issuer.token(sub="before"), 1)
        assert client.exists(REDIS_PREFIX + "a2a:service:before")
        proxy.set_mode("refuse")
        await spend(authz, issuer.token(sub="during"), 1)
        assert not client.exists(REDIS_PREFIX + "a2a:service:during")
        proxy.set_mode("up")

        attempts = iter(range(10_000))

        async def back_on_redis() -> bool:
            subject = f"after-{next(attempts)}"
            await spend(authz, issuer.token(sub=subject), 1)
            return bool(client.exists(REDIS_PREFIX + "a2a:service:" + subject))

        await eventually(back_on_redis)
    client.close()


# --- Redis going away and coming back (a private redis-server: the shared one is never touched)


class PrivateRedis:
    """A redis-server of this test's own on a free loopback port, stopped and started at will."""

    def __init__(self, binary: str, directory: Path) -> None:
        self._binary = binary
        self._directory = directory
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        options = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self._process = subprocess.Popen(
            [self._binary, "--port", str(self.port), *options, "--dir", str(self._directory)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not self._answers():
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.02)

    def _answers(self) -> bool:
        try:
            with self.client() as client:
                return bool(client.ping())
        except redis.ConnectionError:
            return False

    def stop(self) -> None:
        """Gone at once, as a crash would leave it (its clients learn on their next use)."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
            self._process = None

    def client(self) -> redis.Redis:
        return redis.Redis.from_url(self.url, socket_timeout=5)

    def holds(self, key: str) -> bool:
        with self.client() as client:
            return bool(client.exists(REDIS_PREFIX + key))


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed; the Redis outage tests start their own"
        if services_required():
            pytest.fail(message)
        pytest.skip(message)
    server = PrivateRedis(binary, tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


async def redis_up_gauge(authz: RunningAuthz) -> float:
    return await metric(f"http://{authz.bound.diag}/metrics", "orrery_authz_ratelimit_redis_up")


def redis_events(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        record.getMessage()
        for record in caplog.records
        if record.getMessage().startswith("ratelimit_redis_")
    ]


def outage_env(jwks_file: Path, url: str) -> dict[str, str]:
    return {
        **base_env(jwks_file=jwks_file),
        "ORRERY_A2A_RATE_LIMIT": "3/minute",  # each allowed subject's key lives 20 s
        "ORRERY_A2A_REDIS_URL": url,
        # Generous on a loaded machine: what is tested is which limiter answers, not speed.
        "ORRERY_A2A_REDIS_TIMEOUT": "1s",
        "ORRERY_A2A_REDIS_RETRY": "200ms",
    }


async def warm_pool(authz: RunningAuthz, issuer: Issuer, count: int = 16) -> None:
    """Concurrent Checks, so the Redis client holds many pooled connections."""
    await asyncio.gather(
        *(spend(authz, issuer.token(sub=f"warm-{index}"), 1) for index in range(count))
    )


async def test_a_restarted_redis_is_used_from_the_first_check(
    private_redis: PrivateRedis,
    jwks_file: Path,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redis restarts while no Check runs: every pooled connection is dead, yet the first Check
    afterwards — and every one after it — is counted in Redis, and nothing says Redis was down."""
    async with running_authz(outage_env(jwks_file, private_redis.url)) as authz:
        await warm_pool(authz, issuer)
        private_redis.stop()
        private_redis.start()
        with caplog.at_level(logging.INFO, logger="authz.limits"):
            for index in range(8):
                await spend(authz, issuer.token(sub=f"after-{index}"), 1)
                assert private_redis.holds(f"a2a:service:after-{index}"), index
                assert await redis_up_gauge(authz) == 1
    assert redis_events(caplog) == []


async def test_the_shared_limit_returns_as_soon_as_redis_answers(
    private_redis: PrivateRedis,
    jwks_file: Path,
    issuer: Issuer,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """During an outage the gauge says 0 and Checks fall back; once Redis answers the limiter
    goes back to it and stays there — no flapping between the two — and the gauge and the log
    say so exactly when it happens."""
    async with running_authz(outage_env(jwks_file, private_redis.url)) as authz:
        await warm_pool(authz, issuer)
        with caplog.at_level(logging.INFO, logger="authz.limits"):
            private_redis.stop()
            await spend(authz, issuer.token(sub="during"), 1)  # the local limit answers
            assert await redis_up_gauge(authz) == 0
            private_redis.start()
            attempts = iter(range(10_000))

            async def back_on_redis() -> bool:
                # The probe may switch the limiter between a Check and the next gauge read, so
                # each statement is about one side of the switch: a gauge that said "up" before
                # the Check means the Check used Redis, and a Check that used Redis leaves it "up".
                subject = f"probe-{next(attempts)}"
                said_up = await redis_up_gauge(authz) == 1
                await spend(authz, issuer.token(sub=subject), 1)
                used_redis = private_redis.holds(f"a2a:service:{subject}")
                assert used_redis or not said_up, subject
                assert not used_redis or await redis_up_gauge(authz) == 1, subject
                return used_redis

            await eventually(back_on_redis)
            for round_ in range(3):  # concurrent traffic, as in production: many connections
                subjects = [f"after-{round_}-{index}" for index in range(16)]
                await asyncio.gather(*(spend(authz, issuer.token(sub=s), 1) for s in subjects))
                assert [s for s in subjects if not private_redis.holds(f"a2a:service:{s}")] == []
                assert await redis_up_gauge(authz) == 1
    assert redis_events(caplog) == ["ratelimit_redis_unavailable", "ratelimit_redis_recovered"]
