"""The gRPC glue: CheckRequest → `CheckView` → decision → CheckResponse, one log event, metrics.

This is the only module that touches the transport. The log event `decision` carries the
decision, reason code, HTTP status, surface, principal key, request id, path without its query,
and latency — never a token, a header value other than the request id, or the assertion.
A bug inside the decision is logged (`check_failed`, by exception type only) and surfaces as a
gRPC INTERNAL error, which Envoy turns into its configured fail-closed status (503).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from envoy.service.auth.v3 import external_auth_pb2_grpc
from envoy.service.auth.v3.external_auth_pb2 import CheckRequest, CheckResponse

from authz import responses
from authz.decision import Allow, CheckView, Decider
from authz.metrics import Metrics
from contract.identity import Principal
from runtime import logs

MAX_LOGGED_PATH = 256

logger = logging.getLogger("authz.decision")


def check_view(request: CheckRequest) -> CheckView:
    """The parts of an Envoy CheckRequest the decision reads.

    Envoy sends headers in `headers` (a map, repeated values comma-joined) or, with
    `encode_raw_headers`, in `header_map` (one entry per value); both become one mapping with
    repeated values joined by "," so the checks treat them the same way.
    """
    http = request.attributes.request.http
    headers: Any = http.headers
    if not headers and len(http.header_map.headers):
        joined: dict[str, str] = {}
        for entry in http.header_map.headers:
            name = entry.key.lower()
            value = entry.raw_value.decode("utf-8", "replace") if entry.raw_value else entry.value
            joined[name] = f"{joined[name]},{value}" if name in joined else value
        headers = joined
    extensions = request.attributes.context_extensions
    return CheckView(headers=headers, surface=extensions.get("surface"), path=http.path)


class AuthorizationService(external_auth_pb2_grpc.AuthorizationServicer):  # type: ignore[misc]
    """`envoy.service.auth.v3.Authorization` on grpc.aio."""

    def __init__(self, decider: Decider, metrics: Metrics) -> None:
        self._decider = decider
        self._metrics = metrics

    async def Check(self, request: CheckRequest, context: Any) -> CheckResponse:  # noqa: N802
        started = time.perf_counter()
        try:
            result = await self._decider.decide(check_view(request))
            who: Principal | None
            if isinstance(result, Allow):
                response = responses.allowed(result.assertion, result.trace_link)
                decision, reason, status, who = "allow", "ok", 200, result.principal
            else:
                denial = result.denial
                response = responses.denied(denial)
                decision, reason, status = "deny", denial.reason, denial.status
                who = result.principal
        except Exception:
            self._metrics.decision("error", "internal_error", time.perf_counter() - started)
            logger.exception("check_failed")
            raise
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
            path=request.attributes.request.http.path.partition("?")[0][:MAX_LOGGED_PATH],
            ms=round(elapsed * 1000.0, 3),
        )
        return response
