"""One Check, whatever the transport: `CheckView` in, `Allow` or `Deny` out, metrics, one log.

Both transports (gRPC in `service.py`, HTTP in `http_transport.py`) turn what Envoy sent into a
`CheckView`, call the `Checker`, and encode the result their way; everything between — the
decision, the decision metrics and the one `decision` log event (`decision_log.py`) — lives
here, so the two cannot drift apart. A bug inside the decision is logged (`check_failed`, by
exception type only) and re-raised: each transport turns it into an error Envoy answers with its
configured fail-closed status (503).

`begin` decides at once what needs no await — a cached token with the in-process limiter, the
common case — and hands back a `Pending` check otherwise, which `finish` completes; `check` is
the two together. A transport that calls `begin` first answers most Checks without a coroutine
or a task (docs/benchmarks.md). Either way the log line is written before the result is returned.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from authz.decision import Allow, CheckView, Decider, Deny, Unsettled
from authz.decision_log import DecisionLog
from authz.metrics import Metrics

logger = logging.getLogger("authz.decision")


@dataclass(slots=True)  # not frozen: see authz/decision.py
class Pending:
    """A Check `Checker.begin` could not decide without an await; `Checker.finish` does."""

    check: Unsettled
    path: str
    started: float


class Checker:
    """The transport-free entry point: `begin(view)` (+ `await finish(...)`), or `await check`."""

    def __init__(self, decider: Decider, metrics: Metrics) -> None:
        self._decider = decider
        self._metrics = metrics
        self._log = DecisionLog(logger)

    async def check(self, view: CheckView) -> Allow | Deny:
        begun = self.begin(view)
        return await self.finish(begun) if isinstance(begun, Pending) else begun

    def begin(self, view: CheckView) -> Allow | Deny | Pending:
        started = time.perf_counter()
        try:
            result = self._decider.decide_now(view)
        except Exception:
            self._failed(started)
            raise
        if isinstance(result, Unsettled):
            return Pending(result, view.path, started)
        self._record(result, view.path, started)
        return result

    async def finish(self, pending: Pending) -> Allow | Deny:
        try:
            result = await self._decider.settle(pending.check)
        except Exception:
            self._failed(pending.started)
            raise
        self._record(result, pending.path, pending.started)
        return result

    def _record(self, result: Allow | Deny, path: str, started: float) -> None:
        elapsed = time.perf_counter() - started
        if isinstance(result, Allow):
            self._metrics.decision("allow", "ok", elapsed)
        else:
            self._metrics.decision("deny", result.denial.reason, elapsed)
        self._log.write(result, path, round(elapsed * 1000.0, 3))

    def _failed(self, started: float) -> None:
        self._metrics.decision("error", "internal_error", time.perf_counter() - started)
        logger.exception("check_failed")
