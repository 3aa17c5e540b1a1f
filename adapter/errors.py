"""The one error tree of `adapter`.

Two kinds of refusal leave the adapter:

* HTTP-level refusals (`Refusal`): a status, a stable reason code and a safe description, answered
  before any JSON-RPC processing (a bad principal assertion, a body over the cap, too many turns in
  flight or subscriptions open, a bad approval request). The reason code is the same in the
  response body, the log event and the `outcome` label of the metrics.
* JSON-RPC errors are the a2a-sdk's `A2AError` classes (spec codes -32001…-32009 and the JSON-RPC
  standard ones); `jsonrpc.error_body` renders both with `google.rpc.ErrorInfo` data.

A description never echoes a header value, a token or a library's exception message.
"""

from __future__ import annotations

from typing import ClassVar


class Refusal(Exception):
    """A request refused before A2A processing, with a reason the caller may be told."""

    status: ClassVar[int] = 400
    default_reason: ClassVar[str] = "bad_request"

    def __init__(self, description: str, *, reason: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        self.reason = reason or self.default_reason


class Unauthenticated(Refusal):
    """401: the principal assertion is absent, forged, stale or not for this request/surface."""

    status = 401
    default_reason = "assertion_invalid"


class TokenExpired(Unauthenticated):
    """401: the caller's bearer token is past its `exp` (the assertion's `tok_exp`), so no turn or
    stream starts on it."""

    default_reason = "token_expired"


class BodyTooLarge(Refusal):
    """413: the request body is over the configured cap (refused before it is parsed)."""

    status = 413
    default_reason = "body_too_large"


class OverCap(Refusal):
    """429 (unless a subclass says 503): a cap is reached — the principal already holds as many of
    something as its cap allows, or a store as much as it keeps; answered with `Retry-After`."""

    status = 429

    def __init__(self, description: str, *, retry_after: int, limit: int) -> None:
        super().__init__(description)
        self.retry_after = retry_after
        self.limit = limit


class TooManyInFlight(OverCap):
    """429: the principal already has its maximum number of turns running."""

    default_reason = "too_many_in_flight"


class TooManySubscriptions(OverCap):
    """429: the principal already has its maximum number of `SubscribeToTask` streams open."""

    default_reason = "too_many_subscriptions"


class TaskQuotaExceeded(OverCap):
    """429: a new task of the principal's would not fit its quota of kept tasks
    (`ORRERY_A2A_MAX_TASKS_PER_OWNER`, memory store), and none of its tasks is finished (only a
    finished task makes room)."""

    default_reason = "task_quota_exceeded"


class TaskStoreFull(OverCap):
    """503: the memory task store holds `ORRERY_A2A_MAX_TASKS` tasks and none is finished; no
    waiting or running task is dropped to make room."""

    status = 503
    default_reason = "task_store_full"


class ApprovalRefused(Exception):
    """A guarded action that cannot be recorded for a human's decision: the turn proposing it ends
    `TASK_STATE_REJECTED` with `reason` (a pending approval is never dropped to make room)."""

    reason: ClassVar[str]  # each subclass's stable code

    def __init__(self, description: str, *, limit: int) -> None:
        super().__init__(description)
        self.description = description
        self.limit = limit


class ApprovalQuotaExceeded(ApprovalRefused):
    """The proposing principal already has `ORRERY_A2A_MAX_PENDING_APPROVALS_PER_OWNER` actions
    waiting for a decision (or approved and not yet run)."""

    reason = "approval_quota_exceeded"

    def __init__(self, *, limit: int) -> None:
        super().__init__(
            f"this principal already has {limit} guarded actions waiting for a decision; let"
            " them be decided, or cancel their tasks, first",
            limit=limit,
        )


class ApprovalStoreFull(ApprovalRefused):
    """The memory approval store is full of actions still waiting for a decision."""

    reason = "approval_store_full"

    def __init__(self, *, limit: int) -> None:
        super().__init__(f"{limit} guarded actions already wait for a decision here", limit=limit)


class Unavailable(Refusal):
    """503 with `Retry-After`: something the request needs is down for now; the same request
    may succeed later."""

    status = 503
    retry_after: ClassVar[int] = 1


class LimiterUnavailable(Unavailable):
    """503: a shared counter (Redis: turns in flight, open subscriptions) cannot be reached; fail
    closed."""

    default_reason = "limiter_unavailable"


class StoreUnavailable(Unavailable):
    """503: the task store (PostgreSQL) cannot be reached — down, restarting, or its connections
    were cut. Nothing was answered from it; retry (a turn's retry with the same `messageId` finds
    its task if the first send made one)."""

    default_reason = "store_unavailable"
    retry_after = 2


class GatewayLoadError(Exception):
    """`ORRERY_A2A_GATEWAY` names something that cannot be imported or built."""
