"""Human approvals of guarded actions: the `/approvals/{action_id}` endpoint and the memory store.

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

import dataclasses
import json
import logging
import re
import secrets
import time
from collections.abc import Callable, Mapping

from aiohttp import web

from adapter import tracing
from adapter.errors import Refusal
from adapter.gateway import (
    Confirmation,
    ConfirmationStore,
    Decision,
    DecisionOutcome,
    GateOutcome,
    Proposal,
)
from adapter.metrics import Metrics
from adapter.principal import verify_request
from adapter.responses import refusal_response
from authz import logs
from authz.assertion import AssertionKeys
from authz.principal import Principal

logger = logging.getLogger("adapter.approvals")

ACTION_ID = re.compile(r"[A-Za-z0-9_-]{16,64}")
MAX_DECISION_BYTES = 1024
_KEEP_DECIDED_SECONDS = 3600.0

_ANSWERS: Mapping[DecisionOutcome, tuple[int, str]] = {
    "approved": (200, "approved; the agent continues the task to carry it out, once"),
    "denied": (200, "denied; the action will not run"),
    "not_found": (404, "no action with this id awaits your decision"),
    "expired": (410, "this action expired before a decision; nothing will run"),
    "already_decided": (409, "this action was already decided"),
    "withdrawn": (409, "the task waiting on this action was cancelled; nothing will run"),
}


def new_action_id() -> str:
    """144 random bits, URL-safe: the id is also the approval URL, so it must be unguessable."""
    return secrets.token_urlsafe(18)


class MemoryConfirmationStore:
    """Confirmations in this process only (the default; not shared between replicas).

    Bounded: settled or expired entries are dropped an hour after they expire, and at most
    `max_entries` are kept (oldest first out).
    """

    shared = False

    def __init__(self, *, clock: Callable[[], float] = time.time, max_entries: int = 10000) -> None:
        self._clock = clock
        self._max_entries = max_entries
        self._entries: dict[str, Confirmation] = {}

    def _sweep(self, now: float) -> None:
        stale = [
            action_id
            for action_id, entry in self._entries.items()
            if entry.expires_at + _KEEP_DECIDED_SECONDS < now
        ]
        for action_id in stale:
            del self._entries[action_id]
        while len(self._entries) >= self._max_entries:
            del self._entries[next(iter(self._entries))]

    async def propose(self, proposal: Proposal) -> Confirmation:
        now = self._clock()
        self._sweep(now)
        entry = Confirmation(
            action_id=new_action_id(),
            owner=proposal.owner,
            subject=proposal.subject,
            session_id=proposal.session_id,
            task_id=proposal.task_id,
            tool=proposal.tool,
            args=dict(proposal.args),
            level=proposal.level,
            status="pending",
            created_at=now,
            expires_at=now + proposal.ttl,
        )
        self._entries[entry.action_id] = entry
        return entry

    async def get(self, action_id: str, *, subject: str) -> Confirmation | None:
        entry = self._entries.get(action_id)
        # Plain comparisons: subjects and owners are not secrets (the action id is), and a
        # subject may be any Unicode string, which compare_digest refuses with a TypeError.
        if entry is None or entry.subject != subject:
            return None
        if entry.status == "pending" and self._clock() >= entry.expires_at:
            entry = self._set(entry, "expired")
        return entry

    def _set(self, entry: Confirmation, status: str) -> Confirmation:
        updated = dataclasses.replace(entry, status=status)  # type: ignore[arg-type]
        self._entries[entry.action_id] = updated
        return updated

    async def decide(self, action_id: str, *, subject: str, decision: Decision) -> DecisionOutcome:
        entry = await self.get(action_id, subject=subject)
        if entry is None:
            return "not_found"
        if entry.status in ("expired", "withdrawn"):
            return entry.status
        if entry.status != "pending":
            return "already_decided"
        outcome: DecisionOutcome = "approved" if decision == "approve" else "denied"
        self._set(entry, outcome)
        return outcome

    async def consume(self, action_id: str, *, owner: str) -> GateOutcome:
        entry = self._entries.get(action_id)
        if entry is None or entry.owner != owner:
            return "not_found"
        if entry.status in ("pending", "approved") and self._clock() >= entry.expires_at:
            self._set(entry, "expired")
            return "expired"
        if entry.status == "approved":
            self._set(entry, "consumed")
            return "approved"
        return entry.status

    async def withdraw(self, action_id: str, *, owner: str) -> None:
        entry = self._entries.get(action_id)
        if entry is not None and entry.owner == owner and entry.status in ("pending", "approved"):
            self._set(entry, "withdrawn")

    async def ping(self) -> None:
        return None


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
        value = json.loads(body)
    except (ValueError, RecursionError):
        raise Refusal("body is not JSON") from None
    if not isinstance(value, dict) or set(value) != {"decision"}:
        raise Refusal('expected {"decision": "approve" | "deny"}')
    decision = value["decision"]
    if decision not in ("approve", "deny"):
        raise Refusal('decision must be "approve" or "deny"')
    return decision  # type: ignore[no-any-return]


class ApprovalsEndpoint:
    """`GET`/`POST /approvals/{action_id}` for the delegating human (approvals surface)."""

    def __init__(self, keys: AssertionKeys, store: ConfirmationStore, metrics: Metrics) -> None:
        self._keys = keys
        self._store = store
        self._metrics = metrics

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
            outcome = await self._store.decide(
                action_id, subject=principal.subject, decision=decision
            )
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
            entry = await self._store.get(action_id, subject=principal.subject)
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
            request_id=request.headers.get("x-request-id"),
        )


def _rfc3339(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
