"""ADK's tool confirmation, seen from the gate: which guarded call waits, and how to answer it.

A `FunctionTool(require_confirmation=...)` (or a tool that calls
`tool_context.request_confirmation()`) does not run when the model calls it: ADK records an
`adk_request_confirmation` function call that names the original call (tool, exact arguments,
id), ends the invocation, and runs the tool only when a *user* function response to that request
says `confirmed: true`. In ADK's own A2A server that response is whatever the client sends back
(D1 in docs/decisions.md). Here the gateway alone writes it, after the confirmation store
consumed a human's approval of exactly this call (`GuardedCall.digest`); the client's text never
becomes one (`gateway.py`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from google.adk.events import Event
from google.genai import types

from adapter.gateway import action_digest

# ADK's name for the confirmation request (google.adk.utils._function_call_names; private there).
REQUEST_CONFIRMATION = "adk_request_confirmation"


@dataclass(frozen=True, slots=True)
class GuardedCall:
    """A tool call ADK holds back until it is confirmed."""

    request_id: str  # the id of ADK's `adk_request_confirmation` call: what the answer names
    tool: str
    args: Mapping[str, Any]  # exact, unredacted: what runs once confirmed

    @property
    def digest(self) -> str:
        """`action_digest` of exactly this call: a proposal records it, the gate compares it."""
        return action_digest(self.tool, self.args)


def requested(events: Iterable[Event]) -> list[GuardedCall]:
    """The confirmation requests among `events`, in order (malformed ones are not calls)."""
    calls = []
    for event in events:
        for call in event.get_function_calls():
            if call.name != REQUEST_CONFIRMATION or not call.id or not call.args:
                continue
            original = call.args.get("originalFunctionCall")
            if not isinstance(original, Mapping) or not isinstance(original.get("name"), str):
                continue
            args = original.get("args") or {}
            if isinstance(args, Mapping):
                calls.append(GuardedCall(call.id, original["name"], dict(args)))
    return calls


def unanswered(events: Sequence[Event]) -> list[GuardedCall]:
    """The confirmation requests in a session's history that no user response answered yet."""
    answered = {
        response.id
        for event in events
        if event.author == "user"
        for response in event.get_function_responses()
        if response.name == REQUEST_CONFIRMATION
    }
    return [call for call in requested(events) if call.request_id not in answered]


def answer(calls: Iterable[GuardedCall], *, confirmed: bool) -> types.Content:
    """The user message that answers ADK's confirmation requests: `confirmed` runs the tools
    (each exactly once: ADK skips a confirmation it already acted on), otherwise the model is
    told each call was rejected and the tools never run."""
    return types.Content(
        role="user",
        parts=[
            types.Part(
                function_response=types.FunctionResponse(
                    id=call.request_id,
                    name=REQUEST_CONFIRMATION,
                    response={"confirmed": confirmed},
                )
            )
            for call in calls
        ],
    )
