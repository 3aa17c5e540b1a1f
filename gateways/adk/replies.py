"""What of an ADK turn leaves the edge: the final reply text, nothing else.

ADK yields every step of a turn as an event: the model's function calls and the tools' responses,
transfers between agents, confirmation requests, thoughts, streamed partials. Only the text of
the last final response of an agent may reach the caller (D1 in docs/decisions.md: "only the final
reply text is returned"); the rest stays in the ADK session.
"""

from __future__ import annotations

from collections.abc import Sequence

from google.adk.events import Event

NO_REPLY = "The agent finished without a reply."


def final_text(events: Sequence[Event]) -> str:
    """The text parts (never thoughts) of the last final, non-partial agent response."""
    for event in reversed(events):
        if event.author == "user" or event.partial or not event.is_final_response():
            continue
        if event.get_function_calls() or event.get_function_responses() or event.content is None:
            continue
        texts = [part.text for part in event.content.parts or () if part.text and not part.thought]
        if texts:
            return "".join(texts)
    return NO_REPLY


def failure(events: Sequence[Event]) -> str | None:
    """The error code of a turn the model failed (ADK reports it as an event, not an exception);
    only the code, never the message, which may carry the provider's internals."""
    for event in events:
        if event.error_code and not event.partial:
            return str(event.error_code)
    return None
