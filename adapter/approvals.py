"""Human approvals of guarded actions: the `/approvals/{action_id}` endpoint.

The rules (docs/contract.md#approvals and D5 in docs/decisions.md), and where each is enforced:

* Only the delegating human decides: the request must carry an assertion for the `approvals`
  surface (kind `human`, enforced by the codec), and the store only lets a human whose *subject*
  is the action's subject see or decide it. Anyone else gets 404, exactly as for an unknown id.
  The agent itself cannot decide: its assertions are for the `a2a` surface.
* A reply on the task is never a decision: nothing on `/a2a` calls `decide`; a resumed turn only
  *consumes* through the gate.
* Single use: the gate moves `approved` to `consumed` atomically, once.
* Expiry: `expires_at` bounds both the decision and the consumption; afterwards nothing runs.
* Deny is final.
* Cancelling the task withdraws its action (`CancelTask`, see `handler.py`): it never runs, and a
  decision that comes later is told so (409 withdrawn) instead of "approved; the agent continues".

Answers (JSON `{"action_id", "status", "message"}`): 200 approved/denied, 400 bad_request,
404 not_found, 409 already_decided or withdrawn, 410 expired; 401 (`{"error",
"error_description"}`) without a valid human assertion.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping

from aiohttp import web

from adapter import tracing
from adapter.envelope import loads_utf8
from adapter.errors import Refusal
from adapter.metrics import Metrics
from adapter.outage import Outage
from adapter.principal import verify_request
from adapter.responses import refusal_response
from adapter.stores.protocols import ConfirmationStore, Decision, DecisionOutcome
from contract.assertion import AssertionKeys
from contract.headers import REQUEST_ID_HEADER
from contract.identity import Principal
from runtime import logs

logger = logging.getLogger("adapter.approvals")

ACTION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_DECISION_BYTES = 1024

_ANSWERS: Mapping[DecisionOutcome, tuple[int, str]] = {
    "approved": (200, "approved; the agent continues the task to carry it out, once"),
    "denied": (200, "denied; the action will not run"),
    "not_found": (404, "no action with this id awaits your decision"),
    "expired": (410, "this action expired before a decision; nothing will run"),
    "already_decided": (409, "this action was already decided"),
    "withdrawn": (409, "the task waiting on this action was cancelled; nothing will run"),
}


def _answer(action_id: str, outcome: str, status: int, message: str) -> web.Response:
    return web.json_response(
        {"action_id": action_id, "status": outcome, "message": message}, status=status
    )


async def _read_decision(request: web.Request) -> Decision:
    if request.content_type != "application/json":
        raise Refusal("send application/json")
    if (request.content_length or 0) > MAX_DECISION_BYTES:
        raise Refusal("decision body is too large")
    body = await request.content.read(MAX_DECISION_BYTES + 1)
    if len(body) > MAX_DECISION_BYTES:
        raise Refusal("decision body is too large")
    try:
        value = loads_utf8(body)
    except (ValueError, RecursionError):
        raise Refusal("body is not JSON in UTF-8") from None
    if not isinstance(value, dict) or set(value) != {"decision"}:
        raise Refusal('expected {"decision": "approve" | "deny"}')
    decision = value["decision"]
    if decision not in ("approve", "deny"):
        raise Refusal('decision must be "approve" or "deny"')
    # the JSON value, checked just above to be one of the two literals
    return decision  # type: ignore[no-any-return]


class ApprovalsEndpoint:
    """`GET`/`POST /approvals/{action_id}` for the delegating human (approvals surface)."""

    def __init__(
        self, keys: AssertionKeys, store: ConfirmationStore, metrics: Metrics, outage: Outage
    ) -> None:
        self._keys = keys
        self._store = store
        self._metrics = metrics
        self._outage = outage

    def _unavailable(
        self, request: web.Request, action: str, principal: Principal, exc: Exception
    ) -> web.Response:
        """The store could not be reached: 503 `store_unavailable` (`outage.py`)."""
        if not self._outage.caused(exc):
            raise exc
        refusal = self._outage.failed(exc)
        self._log(request, action, refusal.reason, principal.key)
        return refusal_response(refusal)

    def _human(self, request: web.Request, action: str) -> Principal | web.Response:
        """The verified human on the approvals surface, or the 401 to answer."""
        try:
            return verify_request(self._keys, request.headers, "approvals")
        except Refusal as refusal:
            self._log(request, action, refusal.reason)
            return refusal_response(refusal)

    async def decide(self, request: web.Request) -> web.StreamResponse:
        """Approve or deny one pending action."""
        principal = self._human(request, "decide")
        if isinstance(principal, web.Response):
            return principal
        action_id = request.match_info["action_id"]
        try:
            decision = await _read_decision(request)
        except Refusal as refusal:
            return _answer(action_id, "bad_request", 400, refusal.description)
        outcome: DecisionOutcome = "not_found"
        if ACTION_ID.fullmatch(action_id) and principal.kind == "human":
            try:
                outcome = await self._store.decide(
                    action_id, subject=principal.subject, decision=decision
                )
            except Exception as exc:  # noqa: BLE001 - an outage is a 503; anything else re-raised
                return self._unavailable(request, "decide", principal, exc)
        status, message = _ANSWERS[outcome]
        self._log(request, "decide", outcome, principal.key, decision)
        return _answer(action_id, outcome, status, message)

    async def show(self, request: web.Request) -> web.StreamResponse:
        """What the action is, so the human knows what they approve (args already redacted)."""
        principal = self._human(request, "show")
        if isinstance(principal, web.Response):
            return principal
        action_id = request.match_info["action_id"]
        entry = None
        if ACTION_ID.fullmatch(action_id) and principal.kind == "human":
            try:
                entry = await self._store.get(action_id, subject=principal.subject)
            except Exception as exc:  # noqa: BLE001 - an outage is a 503; anything else re-raised
                return self._unavailable(request, "show", principal, exc)
        self._log(request, "show", "ok" if entry else "not_found", principal.key)
        if entry is None:
            status, message = _ANSWERS["not_found"]
            return _answer(action_id, "not_found", status, message)
        return web.json_response(
            {
                "action_id": entry.action_id,
                "status": entry.status,
                "tool": entry.tool,
                "args": dict(entry.args),
                "level": entry.level,
                "task_id": entry.task_id,
                "expires_at": _rfc3339(entry.expires_at),
            }
        )

    def _log(
        self,
        request: web.Request,
        action: str,
        outcome: str,
        principal: str | None = None,
        decision: str | None = None,
    ) -> None:
        self._metrics.requests.labels(f"approvals_{action}", outcome).inc()
        tracing.annotate(f"approvals {action}", {"orrery.outcome": outcome})
        logs.event(
            logger,
            "approval_request",
            action=action,
            action_id=request.match_info["action_id"][:64],
            decision=decision,
            outcome=outcome,
            principal=principal,
            request_id=request.headers.get(REQUEST_ID_HEADER),
        )


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
