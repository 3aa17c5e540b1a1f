"""Per-principal caps: turns in flight (`ORRERY_A2A_MAX_IN_FLIGHT`, default 4) and open
`SubscribeToTask` streams (`ORRERY_A2A_MAX_SUBSCRIPTIONS`, default 8).

A turn holds a `Slot` from the moment its request is accepted until it is over, even when it runs on
after its response (`turns.py` owns the slot); a subscription holds one while its stream is open (a
subscription to a waiting task lasts as long as the task waits, and with shared stores polls
PostgreSQL meanwhile). Over a cap the request is answered 429 with `Retry-After` before anything
runs. Each `Limiter` counts one `Cap`.

In memory by default (per replica). With `ORRERY_A2A_REDIS_URL` the count is shared: each slot is
a member of a per-principal sorted set scored by its lease deadline (Redis server time). A replica
renews the leases of its live slots every `LEASE_SECONDS / 3`; a crashed replica stops renewing,
so its slots expire after one lease and never hold a principal's cap forever. If Redis cannot be
reached the request is refused with 503 (fail closed).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from redis.exceptions import RedisError

from adapter.errors import LimiterUnavailable, OverCap, TooManyInFlight, TooManySubscriptions
from runtime import logs

logger = logging.getLogger("adapter.limits")

LEASE_SECONDS = 30
_REDIS_ERRORS = (RedisError, OSError, TimeoutError)


@dataclass(frozen=True, slots=True)
class Cap:
    """What a limiter counts, and how it refuses one too many."""

    name: str  # for logs and the unavailable message
    key_prefix: str  # of the per-principal sorted set in Redis
    retry_after: int  # seconds, in the 429's `Retry-After`
    refusal: type[OverCap]
    message: str  # with `{limit}`

    def over(self, limit: int) -> OverCap:
        return self.refusal(
            self.message.format(limit=limit), retry_after=self.retry_after, limit=limit
        )


IN_FLIGHT = Cap(
    "in-flight",
    "orrery:a2a:inflight:",
    1,
    TooManyInFlight,
    "at most {limit} turns may be in flight per principal; retry when one finishes",
)
# A subscription lasts as long as its task waits: retrying every second would only poll.
SUBSCRIPTIONS = Cap(
    "subscription",
    "orrery:a2a:subscriptions:",
    5,
    TooManySubscriptions,
    "at most {limit} SubscribeToTask streams may be open per principal; close one first",
)


class Slot:
    """One turn's place under its principal's cap; `release()` is idempotent."""

    __slots__ = ("_on_release", "released")

    def __init__(self, on_release: Callable[[], Awaitable[None]]) -> None:
        self._on_release = on_release
        self.released = False

    async def release(self) -> None:
        if not self.released:
            self.released = True
            await self._on_release()


class Limiter(Protocol):
    async def acquire(self, principal_key: str) -> Slot: ...

    def in_flight(self) -> int:
        """Turns in flight in this process (for the gauge)."""

    async def ping(self) -> None: ...

    async def close(self) -> None: ...


class MemoryLimiter:
    """Per-process counts."""

    def __init__(self, limit: int, cap: Cap = IN_FLIGHT) -> None:
        self._limit = limit
        self._cap = cap
        self._counts: dict[str, int] = {}
        self._total = 0

    async def acquire(self, principal_key: str) -> Slot:
        count = self._counts.get(principal_key, 0)
        if count >= self._limit:
            raise self._cap.over(self._limit)
        self._counts[principal_key] = count + 1
        self._total += 1

        async def release() -> None:
            self._total -= 1
            remaining = self._counts[principal_key] - 1
            if remaining:
                self._counts[principal_key] = remaining
            else:
                del self._counts[principal_key]

        return Slot(release)

    def in_flight(self) -> int:
        return self._total

    async def ping(self) -> None:
        return None

    async def close(self) -> None:
        return None


# KEYS[1] the principal's set; ARGV: limit, lease seconds, slot id. Server time, so replicas agree.
_ACQUIRE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('ZADD', KEYS[1], now + tonumber(ARGV[2]), ARGV[3])
redis.call('EXPIRE', KEYS[1], math.ceil(tonumber(ARGV[2])) + 1)
return 1
"""
# Renew: KEYS = sets, ARGV[1] = lease, ARGV[2..] = slot ids (pairwise with KEYS).
_RENEW = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
for i, key in ipairs(KEYS) do
  redis.call('ZADD', key, 'XX', now + tonumber(ARGV[1]), ARGV[i + 1])
  redis.call('EXPIRE', key, math.ceil(tonumber(ARGV[1])) + 1)
end
return #KEYS
"""


class RedisLimiter:
    """Counts shared by every replica through Redis, with leases (see the module docstring)."""

    def __init__(
        self, url: str, limit: int, cap: Cap = IN_FLIGHT, *, lease: float = LEASE_SECONDS
    ) -> None:
        import redis.asyncio as aioredis

        self._redis = aioredis.Redis.from_url(url, socket_timeout=2.0, socket_connect_timeout=2.0)
        self._limit = limit
        self._cap = cap
        self._lease = lease
        self._acquire = self._redis.register_script(_ACQUIRE)
        self._renew = self._redis.register_script(_RENEW)
        self._held: dict[str, str] = {}  # slot id -> redis key
        self._renewer: asyncio.Task[None] | None = None

    async def acquire(self, principal_key: str) -> Slot:
        key = self._cap.key_prefix + principal_key
        slot_id = secrets.token_hex(12)
        try:
            granted = await self._acquire(keys=[key], args=[self._limit, self._lease, slot_id])
        except _REDIS_ERRORS as exc:  # fail closed
            logs.event(
                logger,
                "limiter_unavailable",
                logging.ERROR,
                limiter=self._cap.name,
                error_type=type(exc).__name__,
            )
            raise LimiterUnavailable(f"the {self._cap.name} limiter is unavailable") from None
        if not granted:
            raise self._cap.over(self._limit)
        self._held[slot_id] = key
        if self._renewer is None or self._renewer.done():
            self._renewer = asyncio.create_task(self._renew_forever(), name="inflight-renew")

        async def release() -> None:
            self._held.pop(slot_id, None)
            try:
                await self._redis.zrem(key, slot_id)
            except _REDIS_ERRORS as exc:  # the lease expires it anyway
                logs.event(
                    logger, "limiter_release_failed", logging.WARNING, error_type=type(exc).__name__
                )

        return Slot(release)

    async def _renew_forever(self) -> None:
        while self._held:
            await asyncio.sleep(self._lease / 3)
            held = list(self._held.items())
            if not held:
                return
            try:
                await self._renew(
                    keys=[key for _, key in held], args=[self._lease, *[s for s, _ in held]]
                )
            except _REDIS_ERRORS as exc:  # retried next period; leases outlive two misses
                logs.event(
                    logger, "limiter_renew_failed", logging.WARNING, error_type=type(exc).__name__
                )

    def in_flight(self) -> int:
        return len(self._held)

    async def ping(self) -> None:
        await self._redis.ping()

    async def close(self) -> None:
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
        await self._redis.aclose()
