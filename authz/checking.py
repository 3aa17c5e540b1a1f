"""One Check, whatever the transport: `CheckView` in, `Allow` or `Deny` out, metrics, one log.

Both transports (gRPC in `service.py`, HTTP in `http_transport.py`) turn what Envoy sent into a
`CheckView`, call `Checker.check`, and encode the result their way; everything between — the
decision, the decision metrics and the one `decision` log event — lives here, so the two cannot
drift apart. The log event carries the decision, reason code, HTTP status, surface, principal
key, request id, path without its query or fragment, and latency — never a token, a header value
other than the request id, or the assertion. A bug inside the decision is logged (`check_failed`,
by exception type only) and re-raised: each transport turns it into an error Envoy answers with
its configured fail-closed status (503).
"""

from __future__ import annotations

import logging
import re
import time

from authz.decision import Allow, CheckView, Decider, Deny
from authz.metrics import Metrics
from runtime import logs

MAX_LOGGED_PATH = 256
_QUERY_OR_FRAGMENT = re.compile(r"[?#]")

logger = logging.getLogger("authz.decision")


def logged_path(path: str) -> str:
    """The path without its query or fragment, where a client may put anything (credentials
    included), cut to `MAX_LOGGED_PATH` characters."""
    return _QUERY_OR_FRAGMENT.split(path, maxsplit=1)[0][:MAX_LOGGED_PATH]


class Checker:
    """The transport-free entry point: `await check(view)`."""

    def __init__(self, decider: Decider, metrics: Metrics) -> None:
        self._decider = decider
        self._metrics = metrics

    async def check(self, view: CheckView) -> Allow | Deny:
        started = time.perf_counter()
        try:
            result = await self._decider.decide(view)
        except Exception:
            self._metrics.decision("error", "internal_error", time.perf_counter() - started)
            logger.exception("check_failed")
            raise
        if isinstance(result, Allow):
            decision, reason, status = "allow", "ok", 200
        else:
            decision, reason, status = "deny", result.denial.reason, result.denial.status
        who = result.principal
        elapsed = time.perf_counter() - started
        self._metrics.decision(decision, reason, elapsed)
        logs.event(
            logger,
            "decision",
            decision=decision,
            reason=reason,
            status=status,
            surface=result.surface,
            principal=who.key if who is not None else None,
            request_id=result.request_id,
            path=logged_path(view.path),
            ms=round(elapsed * 1000.0, 3),
        )
        return result
