"""The ADK gateway: an `AgentGateway` (adapter/gateway.py) that runs turns through ADK's `Runner`.

Per turn:

* **Session.** The ADK session id is the adapter's derived session id (`Turn.session_id`, D4 in
  docs/decisions.md), never the client's `contextId`; the ADK user id is the principal's subject;
  the principal (kind, subject, agent, role, autonomy) is written to the session state under
  `orrery:principal` on every turn, so a tool scopes by its caller with
  `tool_context.state[PRINCIPAL_STATE]`.
* **Guarded actions.** A turn that ends at ADK's confirmation request (`bridge.py`) becomes a
  `Pending` proposal of exactly that call (tool, redacted args, level L3, digest of the exact
  args): input-required with `approve_url`, as with any gateway. At the resume the gateway asks
  the confirmation store to consume the approval with the digest of the call ADK is holding, and
  only on `approved` does it answer ADK `confirmed: true`, so the tool runs once; denied, expired,
  withdrawn or mismatched, it answers `confirmed: false` (the tool never runs and the agent is told
  it was rejected). The client's message at the resume is never sent to ADK: a reply is not an
  approval (D5).
* **Who may be asked.** A service principal is pinned to L2 and anyone below L3 cannot have a
  guarded action: its call is rejected in ADK at once and the turn is refused, so such a caller
  never reaches input-required.
* **What leaves.** Only the final reply text (`replies.py`).

A new message in a conversation whose guarded call still waits answers that call `confirmed:
false` first (it is superseded; ADK cannot start a new turn over an unanswered request), so a
later resume of the older task finds nothing to run and is told the action does not match.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any

from google.adk.agents import BaseAgent
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.events import Event
from google.adk.runners import Runner
from google.adk.sessions import BaseSessionService, Session
from google.genai import types

from adapter.gateway import (
    ConfirmationStore,
    GateOutcome,
    Pending,
    Proposal,
    Reply,
    Specialist,
    Turn,
    redact,
)
from contract.identity import Principal
from gateways.adk.bridge import GuardedCall, answer, requested, unanswered
from gateways.adk.inventory import specialists
from gateways.adk.replies import failure, final_text
from gateways.gate import not_run, settled
from runtime import logs

logger = logging.getLogger("gateways.adk")

PRINCIPAL_STATE = "orrery:principal"
GUARDED_LEVEL = "L3"
_LEVELS = {"L1": 1, "L2": 2, "L3": 3}


class AdkTurnFailed(Exception):
    """The model failed the turn (ADK reported an error event): the task ends FAILED, and the
    adapter shows the caller nothing of it."""


def principal_state(principal: Principal) -> dict[str, str]:
    """The caller as tools see it in the session state (never its token)."""
    return {
        "kind": principal.kind,
        "subject": principal.subject,
        "agent": principal.agent,
        "role": principal.role,
        "autonomy": principal.autonomy,
    }


def _refusal(principal: Principal, tool: str) -> str | None:
    """Why this caller may not have a guarded action at all, or None."""
    if principal.kind == "service":
        return (
            f"Refused: {tool} is a guarded ({GUARDED_LEVEL}) action and a service principal is "
            "limited to L2. Ask through a delegated agent so a person can approve it."
        )
    if _LEVELS[principal.autonomy] < _LEVELS[GUARDED_LEVEL]:
        return (
            f"Refused: {tool} is a guarded ({GUARDED_LEVEL}) action; your autonomy is "
            f"{principal.autonomy}."
        )
    return None


class AdkGateway:
    """The gateway (module docstring). `aclose()` closes the runner and the session service."""

    def __init__(
        self,
        agent: BaseAgent,
        sessions: BaseSessionService,
        confirmations: ConfirmationStore,
        approval_ttl: float,
    ) -> None:
        self._agent = agent
        self._sessions = sessions
        self._confirmations = confirmations
        self._approval_ttl = approval_ttl
        self._app_name = agent.name
        self._runner = Runner(app_name=agent.name, agent=agent, session_service=sessions)

    @property
    def confirmations(self) -> ConfirmationStore:
        return self._confirmations

    @property
    def sessions(self) -> BaseSessionService:
        return self._sessions

    async def inventory(self) -> Sequence[Specialist]:
        return specialists(self._agent)

    async def run_in_session(self, turn: Turn) -> Reply | Pending:
        session = await self._session(turn)
        waiting = unanswered(session.events)
        if turn.resume_action_id is not None:
            return await self._resume(turn, turn.resume_action_id, waiting)
        if waiting:
            await self._run(turn, answer(waiting, confirmed=False))
        text = types.Content(role="user", parts=[types.Part(text=turn.text)])
        return await self._end(turn, await self._run(turn, text))

    async def aclose(self) -> None:
        try:
            await self._runner.close()
        finally:
            close = getattr(self._sessions, "close", None)
            if close is not None:
                await close()

    async def _session(self, turn: Turn) -> Session:
        """The caller's ADK session for this conversation, created on its first turn."""
        where: dict[str, Any] = {
            "app_name": self._app_name,
            "user_id": turn.principal.subject,
            "session_id": turn.session_id,
        }
        session = await self._sessions.get_session(**where)
        if session is None:
            state = {PRINCIPAL_STATE: principal_state(turn.principal)}
            try:
                session = await self._sessions.create_session(**where, state=state)
            except AlreadyExistsError:  # another replica's turn created it just now
                session = await self._sessions.get_session(**where)
        if session is None:
            raise AdkTurnFailed("session_lost")
        return session

    async def _run(self, turn: Turn, message: types.Content) -> list[Event]:
        """One ADK invocation to its end. Closed explicitly: a turn the adapter cancels (its
        deadline, `CancelTask`) stops ADK's generator here, not whenever it is collected."""
        run = self._runner.run_async(
            user_id=turn.principal.subject,
            session_id=turn.session_id,
            new_message=message,
            state_delta={PRINCIPAL_STATE: principal_state(turn.principal)},
        )
        async with contextlib.aclosing(run):
            events = [event async for event in run]
        if (code := failure(events)) is not None:
            raise AdkTurnFailed(f"model_error:{code}")
        return events

    async def _end(self, turn: Turn, events: list[Event]) -> Reply | Pending:
        """A turn's events as its outcome: the reply, or the guarded call it stopped at."""
        calls = requested(events)
        if not calls:
            return Reply(final_text(events))
        refusal = _refusal(turn.principal, calls[0].tool)
        if refusal is None and len(calls) > 1:
            refusal = "Refused: one guarded action at a time; ask for each on its own."
        if refusal is not None:
            await self._run(turn, answer(calls, confirmed=False))
            logs.event(logger, "adk_guarded_refused", tool=calls[0].tool, calls=len(calls))
            return Reply(refusal, rejected=True)
        return await self._propose(turn, calls[0])

    async def _propose(self, turn: Turn, call: GuardedCall) -> Pending:
        confirmation = await self._confirmations.propose(
            Proposal(
                owner=turn.principal.key,
                subject=turn.principal.subject,
                session_id=turn.session_id,
                task_id=turn.task_id,
                tool=call.tool,
                args=redact(call.args),
                level=GUARDED_LEVEL,
                ttl=self._approval_ttl,
                digest=call.digest,
            )
        )
        logs.event(logger, "adk_proposed", action_id=confirmation.action_id, tool=call.tool)
        return Pending(
            confirmation=confirmation,
            summary=(
                f"{call.tool} is a guarded ({GUARDED_LEVEL}) action and needs approval by the "
                "person who delegated to you. Once they decide, send any message on this task "
                "to continue."
            ),
        )

    async def _resume(
        self, turn: Turn, action_id: str, waiting: list[GuardedCall]
    ) -> Reply | Pending:
        """The gate: consume the approval for the call ADK holds, then answer ADK."""
        call = waiting[-1] if waiting else None
        outcome: GateOutcome = await self._confirmations.consume(
            action_id, owner=turn.principal.key, digest=call.digest if call else ""
        )
        logs.event(logger, "adk_gate", action_id=action_id, outcome=outcome)
        if outcome == "approved" and call is not None:
            return await self._end(turn, await self._run(turn, answer([call], confirmed=True)))
        status = await settled(self._confirmations, action_id, outcome, turn.principal.subject)
        if isinstance(status, Pending):
            return status
        if call is not None and status in ("denied", "expired", "withdrawn", "mismatch"):
            await self._run(turn, answer([call], confirmed=False))
        return not_run(action_id, status)
