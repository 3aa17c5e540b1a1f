"""Per-subject rate limiting: GCRA in process, or one atomic Redis script shared by replicas.

The algorithm is GCRA (the generic cell rate algorithm, a token bucket stored as one number):
each subject has a "theoretical arrival time" (TAT). A request is allowed when
`max(TAT, now) + interval - burst * interval <= now`, and moves TAT forward by one `interval`
(`period / rate`). So `60/minute` with burst 60 allows 60 requests at once, then one a second.
One number per subject makes both stores simple:

* `LocalLimiter` keeps TATs in a dict in least-recently-used order, bounded by
  `max_subjects`. A subject whose TAT is in the past is indistinguishable from a new one, so
  those go first; only under more live subjects than the bound is a live entry evicted (that
  subject gets a fresh budget — counted in a metric, never unlimited).
* `RedisLimiter` runs the same arithmetic in a server-side Lua script: one round trip, atomic,
  on Redis's own clock (replicas with skewed clocks still agree), with the key expiring when
  its budget is full again, so Redis memory is bounded by the live subjects.

When Redis cannot answer within `redis_timeout` (refused, reset, or a server that accepts but
never replies), `Limiter` stops sending Checks to it and, by default, enforces the same limit
with the in-process limiter: each replica then enforces the limit on its own, a bound of
replicas times the limit — never unlimited, and never a wait beyond the timeout. With failure
mode `deny` it refuses with 503 `limiter_unavailable` instead. Meanwhile a background probe
PINGs Redis every `redis_retry` seconds, and the first answer puts Checks back on Redis.

Two things make the return prompt and lasting. A connection that broke while no Check used it
(Redis restarted) is retried once on a fresh connection within the same deadline, so it is never
mistaken for an outage. And when Redis does fail, every pooled connection is dropped: each is
suspect, and one left behind would fail the first Check to draw it after the recovery — which
is how the limiter used to flap back to its fallback, one dead connection per retry period,
while it reported Redis up. The `redis_up` gauge and the `ratelimit_redis_unavailable` /
`ratelimit_redis_recovered` events change exactly when the limiter switches.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from authz.errors import LimiterUnavailable, RateLimited
from authz.settings import Budget, RateLimitSettings
from runtime import logs

REDIS_PREFIX = "orrery-a2a:rl:"

logger = logging.getLogger("authz.limits")

# KEYS[1] = the subject's key; ARGV[1] = interval, ARGV[2] = burst * interval (microseconds).
# Returns {allowed, remaining, retry_after_us}.
GCRA_SCRIPT = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local interval = tonumber(ARGV[1])
local capacity = tonumber(ARGV[2])
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then tat = now end
local new_tat = tat + interval
local allow_at = new_tat - capacity
if now < allow_at then
  return {0, 0, math.ceil(allow_at - now)}
end
redis.call('SET', KEYS[1], string.format('%.0f', new_tat), 'PX', math.ceil((new_tat - now) / 1000))
return {1, math.floor((capacity - (new_tat - now)) / interval), 0}
"""


@dataclass(slots=True)  # not frozen: built on every Check, and a frozen __init__ costs 5x
class Quota:
    """The outcome of taking one request from a subject's budget."""

    allowed: bool
    remaining: int
    retry_after: float  # seconds until one more request would be allowed (0 when allowed)


class LocalLimiter:
    """GCRA over an LRU-ordered dict, in this process only: the per-subject fallback, and the
    signature-check budgets (`admission.py`)."""

    def __init__(
        self,
        settings: RateLimitSettings | Budget,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[], None] = lambda: None,
    ) -> None:
        self._interval = settings.period / settings.rate
        self._capacity = settings.burst * self._interval
        self._max = settings.max_subjects
        self._clock = clock
        self._on_evict = on_evict
        self._tat: dict[str, float] = {}

    def take(self, key: str) -> Quota:
        now = self._clock()
        tat = max(self._tat.pop(key, now), now)
        new_tat = tat + self._interval
        allow_at = new_tat - self._capacity
        if now < allow_at:
            self._tat[key] = tat  # back to the most-recently-used end, unchanged
            return Quota(False, 0, allow_at - now)
        self._make_room(now)
        self._tat[key] = new_tat
        return Quota(True, int((self._capacity - (new_tat - now)) / self._interval), 0.0)

    def _make_room(self, now: float) -> None:
        while len(self._tat) >= self._max:
            oldest = next(iter(self._tat))
            if self._tat.pop(oldest) > now:
                self._on_evict()  # a live budget is forgotten: the bound is under pressure

    def __len__(self) -> int:
        return len(self._tat)


class RedisLimiter:
    """The same GCRA as one Lua script in Redis; raises `RedisError`/`OSError` on failure."""

    def __init__(self, settings: RateLimitSettings) -> None:
        if settings.redis_url is None:
            raise ValueError("RedisLimiter needs ORRERY_A2A_REDIS_URL")
        self._timeout = settings.redis_timeout
        interval = settings.period / settings.rate * 1_000_000
        self._args = (repr(interval), repr(interval * settings.burst))
        self._redis: Any = aioredis.Redis.from_url(
            settings.redis_url,
            socket_timeout=settings.redis_timeout,
            socket_connect_timeout=settings.redis_timeout,
            # One retry on a fresh connection: a pooled one may have died with a restarted
            # Redis. The deadline in `take` bounds both attempts together.
            retry=Retry(NoBackoff(), 1),
            max_connections=256,
            health_check_interval=0,
        )
        self._script = self._redis.register_script(GCRA_SCRIPT)

    async def take(self, key: str) -> Quota:
        async with asyncio.timeout(self._timeout):  # bounds pool waits and reconnects too
            allowed, remaining, retry_us = await self._script(
                keys=[REDIS_PREFIX + key], args=self._args
            )
        return Quota(bool(allowed), int(remaining), int(retry_us) / 1_000_000)

    async def ping(self) -> None:
        """Raise unless Redis answers a PING within the timeout."""
        async with asyncio.timeout(self._timeout):
            await self._redis.ping()

    async def drop_connections(self) -> None:
        """Close every pooled connection (in use or not); the next command connects afresh."""
        await self._redis.connection_pool.disconnect()

    async def close(self) -> None:
        await self._redis.aclose()


# What a Redis that cannot answer raises (refused, reset, closed, timed out).
REDIS_FAILURES = (RedisError, OSError, TimeoutError)


class Limiter:
    """The limiter the decision uses: Redis when configured, with a bounded fallback."""

    def __init__(
        self,
        settings: RateLimitSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_evict: Callable[[], None] = lambda: None,
        on_redis: Callable[[bool], None] = lambda up: None,
    ) -> None:
        self._settings = settings
        self._local = LocalLimiter(settings, clock=clock, on_evict=on_evict)
        self._redis = RedisLimiter(settings) if settings.redis_url else None
        self._on_redis = on_redis
        self._redis_up = True
        self._probe: asyncio.Task[None] | None = None

    @property
    def in_process(self) -> bool:
        """True without Redis: `take_now` then decides, with no await."""
        return self._redis is None

    def take_now(self, key: str) -> None:
        """`check` for a limiter that is `in_process`, synchronously (a cached Check is then
        decided without a task)."""
        self._enforce(self._local.take(key))

    async def check(self, key: str) -> None:
        """Take one request from `key`'s budget or raise `RateLimited` / `LimiterUnavailable`."""
        self._enforce(await self._take(key))

    def _enforce(self, quota: Quota) -> None:
        if not quota.allowed:
            retry = max(1, math.ceil(quota.retry_after))
            raise RateLimited(
                "rate limit exceeded", retry_after=retry, policy=self._settings.policy
            )

    async def _take(self, key: str) -> Quota:
        if self._redis is None:
            return self._local.take(key)
        if self._redis_up:
            try:
                return await self._redis.take(key)
            except REDIS_FAILURES as exc:
                self._redis_failed(self._redis, exc)
        if self._settings.failure_mode == "deny":
            raise LimiterUnavailable("the shared rate limiter is unavailable")
        return self._local.take(key)

    def _redis_failed(self, redis: RedisLimiter, exc: BaseException) -> None:
        """Stop using Redis (once, however many Checks fail at once) and start probing it."""
        if not self._redis_up:
            return
        self._redis_up = False
        self._on_redis(False)
        logs.event(
            logger,
            "ratelimit_redis_unavailable",
            logging.WARNING,
            error_type=type(exc).__name__,
            fallback=self._settings.failure_mode,
            retry_in_s=self._settings.redis_retry,
        )
        self._probe = asyncio.create_task(self._probe_until_up(redis), name="ratelimit-probe")

    async def _probe_until_up(self, redis: RedisLimiter) -> None:
        """Drop the pool, then PING every `redis_retry` until Redis answers; then use it again."""
        while True:
            try:
                await redis.drop_connections()
                await redis.ping()
                break
            except REDIS_FAILURES:
                pass
            except Exception:  # a bug must not leave the limiter on its fallback for good
                logger.exception("ratelimit_probe_bug")
            await asyncio.sleep(self._settings.redis_retry)
        self._redis_up = True
        self._on_redis(True)
        logs.event(logger, "ratelimit_redis_recovered")

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe
        if self._redis is not None:
            await self._redis.close()
