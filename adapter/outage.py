"""Storage outages: told apart from bugs, answered as retryable, logged once per incident.

When PostgreSQL is down, restarting, or cuts its connections (a failover, `pg_terminate_backend`),
every request that touches it fails the same way. Such a failure is not an internal error of the
adapter: the same request may succeed a few seconds later. So a request that failed because the
store could not be reached is answered HTTP 503 `store_unavailable` with `Retry-After`
(`errors.StoreUnavailable`) — before its stream began; after it, an `event: error` with reason
`STORE_UNAVAILABLE` (domain `orrery-a2a`) ends the stream — never HTTP 200 with JSON-RPC -32603.

One incident is one `store_unavailable` log event (WARNING) when the first request fails, and
one `store_recovered` event (INFO, with the outage's length) when the store answers a call made
after the incident began (`mark`): a slow call that got its answer before the store went away
but finishes after the first failure says nothing of the store now (counting it once split one
outage into several incidents); the
`orrery_a2a_store_up` gauge is 0 in between. The requests in between are counted under the
outcome `store_unavailable` in `orrery_a2a_requests_total` and their `a2a_request` events, with
no error event each.

Which exceptions mean "unreachable" is the store's to say (`Stores.outage_errors`: connection
errors, timeouts, a server shutting down or not yet accepting connections); an exception counts
when it, or one it was raised from or during, is one of them.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from adapter.errors import StoreUnavailable
from adapter.metrics import Metrics
from runtime import logs

logger = logging.getLogger("adapter.store")

_CHAIN_DEPTH = 8  # how far along __cause__ / __context__ an exception is looked through


class Outage:
    """Whether the store is reachable, by what the requests found."""

    def __init__(
        self,
        errors: tuple[type[BaseException], ...],
        metrics: Metrics,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._errors = errors
        self._metrics = metrics
        self._clock = clock
        self._since: float | None = None
        self.incidents = 0  # outages seen so far: a turn that overlapped one is checked after it
        self._on_down: list[Callable[[], None]] = []

    def on_down(self, callback: Callable[[], None]) -> None:
        """Call `callback` when an incident begins."""
        self._on_down.append(callback)

    @property
    def down(self) -> bool:
        return self._since is not None

    def caused(self, exc: BaseException) -> bool:
        """True when `exc` (or what it was raised from or during) means the store is
        unreachable."""
        if not self._errors:
            return False
        seen: BaseException | None = exc
        for _ in range(_CHAIN_DEPTH):
            if seen is None:
                return False
            if isinstance(seen, self._errors):
                return True
            seen = seen.__cause__ or seen.__context__
        return False

    def failed(self, exc: BaseException) -> StoreUnavailable:
        """The 503 for a request that found the store unreachable; the incident's first is
        logged."""
        if self._since is None:
            self._since = self._clock()
            self.incidents += 1
            self._metrics.store_up.set(0)
            logs.event(logger, "store_unavailable", logging.WARNING, error_type=type(exc).__name__)
            for callback in self._on_down:
                callback()
        return StoreUnavailable("the task store is unavailable; retry shortly")

    def mark(self) -> int:
        """Where the incidents stand as a call to the store begins: the call passes it to
        `answered` when the store has answered it."""
        return self.incidents

    def answered(self, mark: int) -> None:
        """The store answered a call begun at `mark`: the incident, if any, is over — unless
        the call began before the incident did."""
        if self._since is None or mark < self.incidents:
            return
        seconds = self._clock() - self._since
        self._since = None
        self._metrics.store_up.set(1)
        logs.event(logger, "store_recovered", outage_seconds=round(seconds, 3))
